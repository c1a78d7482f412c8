//! The measuring process: spawns its peer, opens N connections through the blocking API,
//! echoes on each, and reads the process at each step.
use crate::measure::{self, Reading};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

/// A connection the client echoes on.
pub(crate) trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

/// What one measuring run found.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Run {
    pub(crate) n: u64,
    /// Before the first connection.
    pub(crate) base: Reading,
    /// With every connection open and quiet after a few short messages each.
    pub(crate) idle: Reading,
    /// After every connection moved `busy` bytes each way.
    pub(crate) busy: Reading,
    /// After every connection closed.
    pub(crate) closed: Reading,
    /// Seconds for the N sequential connects.
    pub(crate) connect_secs: f64,
}

/// The peer process, killed when dropped.
struct Peer(Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns this program as the peer for `stack` on `bind` and reads the address it listens on.
fn spawn_peer(stack: &str, bind: &str) -> Result<(Peer, SocketAddr), String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
    let mut child = Command::new(exe)
        .args(["--peer", stack, bind])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the peer: {e}"))?;
    let stdout = child.stdout.take().expect("piped");
    let peer = Peer(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| format!("reading the peer's address: {e}"))?;
    let addr = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("the peer did not say where it listens ({line:?})"))?;
    Ok((peer, addr))
}

fn connect(stack: &str, addr: SocketAddr) -> std::io::Result<Box<dyn Stream>> {
    if let Some(opts) = crate::rdma_options(stack) {
        Ok(Box::new(rdmasock::RdmaSocket::connect_with(addr, &opts)?))
    } else {
        // A plain `SOCK_STREAM` socket (no close-on-exec flag), which rsocket's preload
        // library turns into an rsocket.
        let raw = socket2::Socket::new_raw(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            None,
        )?;
        raw.connect(&addr.into())?;
        let s = TcpStream::from(raw);
        s.set_nodelay(true)?;
        Ok(Box::new(s))
    }
}

/// The bytes of message `k` on connection `i`.
fn message(i: usize, k: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|b| (b.wrapping_mul(31) ^ i.wrapping_mul(7) ^ k) as u8)
        .collect()
}

/// Sends `data` on `s` in pieces and checks that the same bytes come back.
fn echo(s: &mut dyn Stream, data: &[u8]) -> std::io::Result<bool> {
    let mut back = vec![0u8; 16 * 1024];
    for piece in data.chunks(back.len()) {
        s.write_all(piece)?;
        s.read_exact(&mut back[..piece.len()])?;
        if back[..piece.len()] != *piece {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Runs the measurement of `n` connections of `stack` against a peer on `bind`.
pub(crate) fn run(
    stack: &str,
    n: usize,
    bind: &str,
    messages: usize,
    busy: usize,
) -> Result<Run, String> {
    let (_peer, addr) = spawn_peer(stack, bind)?;
    let mut run = Run {
        n: n as u64,
        base: measure::now(),
        ..Run::default()
    };
    let start = Instant::now();
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let c =
            connect(stack, addr).map_err(|e| format!("connection {i} of {n} ({stack}): {e}"))?;
        conns.push(c);
    }
    run.connect_secs = start.elapsed().as_secs_f64();
    for k in 0..messages {
        for (i, c) in conns.iter_mut().enumerate() {
            match echo(c.as_mut(), &message(i, k, 64)) {
                Ok(true) => {}
                Ok(false) => return Err(format!("connection {i}: the echo came back wrong")),
                Err(e) => return Err(format!("connection {i}: echo: {e}")),
            }
        }
    }
    run.idle = measure::now();
    if busy > 0 {
        for (i, c) in conns.iter_mut().enumerate() {
            match echo(c.as_mut(), &message(i, messages, busy)) {
                Ok(true) => {}
                Ok(false) => return Err(format!("connection {i}: the echo came back wrong")),
                Err(e) => return Err(format!("connection {i}: echo: {e}")),
            }
        }
    }
    run.busy = measure::now();
    drop(conns);
    if crate::rdma_options(stack).is_some() {
        // A close finishes on the socket's driver after the drop: read what is left once
        // every connection is gone (its verbs objects and fds released).
        let end = Instant::now() + CLOSE_WAIT;
        while rdmasock::census().connections > 0 {
            if Instant::now() > end {
                return Err(format!(
                    "{} of {n} connections still open {CLOSE_WAIT:?} after they were dropped",
                    rdmasock::census().connections
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // The userspace provider's engine finishes each TCP close after the connection is
        // gone (the peer's FIN): read once the fd count has stayed put for 200 ms.
        let (mut fds, mut still) = (measure::now().fds, 0);
        while still < 4 && Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(50));
            let now = measure::now().fds;
            still = if now == fds { still + 1 } else { 0 };
            fds = now;
        }
    }
    run.closed = measure::now();
    Ok(run)
}

/// How long the closes of dropped connections may take to finish.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);
