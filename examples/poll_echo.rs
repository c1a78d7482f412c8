//! poll_echo: an echo server on a plain poll(2) loop (no mio, no async runtime), watching
//! the listener's fd and every connection's fd for POLLIN only, and clients driven the same
//! way from one thread.
//!
//! ```text
//! poll_echo server ADDRESS:PORT             serve until killed
//! poll_echo clients ADDRESS:PORT N BYTES    N concurrent clients on one poll(2) loop, each
//!                                           sends BYTES and checks the echo
//! poll_echo local [N] [BYTES]               both in this process on the first RDMA device
//!                                           (on loopback over uiwarp where the kernel has none)
//! ```
//!
//! An `RdmaSocket`'s fd is readable while a read would not block, and after a write returned
//! `WouldBlock` from when writing can go on until the next write: so each connection reads
//! and writes on every wakeup until both would block. It reads whenever bytes wait (keeping
//! them unread would leave the fd readable and poll(2) returning at once).
#[path = "common/address.rs"]
#[allow(dead_code)]
mod address;
#[path = "common/echo_main.rs"]
#[allow(dead_code)]
mod echo_main;

use nix::poll::{PollFd, PollFlags, PollTimeout};
use rdmasock::{RdmaListener, RdmaSocket};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Waits until at least one of `sockets`' fds (or `first`, when given) is readable; returns
/// whether `first` was, and which sockets were.
fn wait(
    first: Option<&RdmaListener>,
    sockets: &[&RdmaSocket],
    timeout: PollTimeout,
) -> io::Result<(bool, Vec<usize>)> {
    let mut fds: Vec<PollFd<'_>> = first
        .map(|l| PollFd::new(l.as_fd(), PollFlags::POLLIN))
        .into_iter()
        .chain(
            sockets
                .iter()
                .map(|s| PollFd::new(s.as_fd(), PollFlags::POLLIN)),
        )
        .collect();
    match nix::poll::poll(&mut fds, timeout) {
        Ok(_) => {}
        Err(nix::errno::Errno::EINTR) => return Ok((false, Vec::new())),
        Err(e) => return Err(io::Error::other(format!("poll: {e}"))),
    }
    let ready = |fd: &PollFd<'_>| fd.revents().is_some_and(|r| !r.is_empty());
    let skip = usize::from(first.is_some());
    let listener = first.is_some() && ready(&fds[0]);
    let sockets = fds[skip..]
        .iter()
        .enumerate()
        .filter(|(_, fd)| ready(fd))
        .map(|(i, _)| i)
        .collect();
    Ok((listener, sockets))
}

/// One connection of the server.
struct Echo {
    socket: RdmaSocket,
    /// Received and not yet echoed.
    pending: Vec<u8>,
    read_closed: bool,
}

impl Echo {
    /// Reads what is there and writes back what it can, until both would block; true when
    /// the client is finished (end of stream read and everything echoed).
    fn service(&mut self) -> io::Result<bool> {
        let mut buf = [0u8; 65536];
        loop {
            let mut progress = false;
            if !self.read_closed {
                match self.socket.read(&mut buf) {
                    Ok(0) => {
                        self.read_closed = true;
                        progress = true;
                    }
                    Ok(n) => {
                        self.pending.extend_from_slice(&buf[..n]);
                        progress = true;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            if !self.pending.is_empty() {
                match self.socket.write(&self.pending) {
                    Ok(n) => {
                        self.pending.drain(..n);
                        progress = true;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            if self.read_closed && self.pending.is_empty() {
                return Ok(true);
            }
            if !progress {
                return Ok(false);
            }
        }
    }
}

/// Serves until `stop_after` clients have finished (forever with `None`).
pub(crate) fn serve(listener: RdmaListener, stop_after: Option<usize>) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut echoes: Vec<Echo> = Vec::new();
    let mut finished = 0;
    while stop_after.is_none_or(|n| finished < n) {
        let sockets: Vec<&RdmaSocket> = echoes.iter().map(|e| &e.socket).collect();
        let (accept, ready) = wait(Some(&listener), &sockets, PollTimeout::NONE)?;
        // Highest first, so that removing one leaves the others' indices alone.
        for i in ready.into_iter().rev() {
            let done = echoes[i].service().unwrap_or_else(|e| {
                eprintln!("client {i}: {e}");
                true
            });
            if done {
                echoes.swap_remove(i);
                finished += 1;
            }
        }
        if accept {
            loop {
                match listener.accept() {
                    Ok((socket, _)) => {
                        socket.set_nonblocking(true)?;
                        echoes.push(Echo {
                            socket,
                            pending: Vec::new(),
                            read_closed: false,
                        });
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(())
}

/// One client: what it sends and what came back.
struct Client {
    socket: RdmaSocket,
    data: Vec<u8>,
    sent: usize,
    back: Vec<u8>,
    done: bool,
}

impl Client {
    /// Writes and reads until both would block; true once the whole echo is back.
    fn step(&mut self, i: usize) -> Result<bool, String> {
        let mut buf = [0u8; 65536];
        loop {
            let mut progress = false;
            if self.sent < self.data.len() {
                match self.socket.write(&self.data[self.sent..]) {
                    Ok(n) => {
                        self.sent += n;
                        progress = true;
                        if self.sent == self.data.len() {
                            self.socket
                                .shutdown(Shutdown::Write)
                                .map_err(|e| format!("client {i} shutdown: {e}"))?;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => return Err(format!("client {i} write: {e}")),
                }
            }
            match self.socket.read(&mut buf) {
                Ok(0) => {
                    if self.back != self.data {
                        return Err(format!(
                            "client {i}: the echo differs ({} of {} bytes back)",
                            self.back.len(),
                            self.data.len()
                        ));
                    }
                    return Ok(true);
                }
                Ok(n) => {
                    self.back.extend_from_slice(&buf[..n]);
                    progress = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(format!("client {i} read: {e}")),
            }
            if !progress {
                return Ok(false);
            }
        }
    }
}

/// `n` nonblocking clients on one poll(2) loop: all connect first (one after the other, so
/// the handshakes do not race each other's timeouts), then each sends `bytes`, half-closes
/// and reads the echo to its end, and checks it. Gives up after `limit` without progress.
pub(crate) fn clients(addr: SocketAddr, n: usize, bytes: usize) -> Result<(), String> {
    let limit = Duration::from_secs(60);
    let start = Instant::now();
    let mut all = Vec::with_capacity(n);
    for i in 0..n {
        let socket = RdmaSocket::connect(addr).map_err(|e| format!("client {i}: {e}"))?;
        socket
            .set_nonblocking(true)
            .map_err(|e| format!("client {i}: {e}"))?;
        all.push(Client {
            socket,
            data: (0..bytes).map(|b| (b * 7 + i) as u8).collect(),
            sent: 0,
            back: Vec::with_capacity(bytes),
            done: false,
        });
    }
    let connected = start.elapsed();
    // The first step needs no wakeup.
    let mut ready: Vec<usize> = (0..n).collect();
    let mut left = n;
    while left > 0 {
        for i in ready.drain(..) {
            let c = &mut all[i];
            if !c.done && c.step(i)? {
                c.done = true;
                left -= 1;
            }
        }
        if left == 0 {
            break;
        }
        let open: Vec<usize> = (0..n).filter(|&i| !all[i].done).collect();
        let sockets: Vec<&RdmaSocket> = open.iter().map(|&i| &all[i].socket).collect();
        let timeout = PollTimeout::try_from(limit.as_millis() as i32).expect("in range");
        let (_, woken) = wait(None, &sockets, timeout).map_err(|e| e.to_string())?;
        if woken.is_empty() {
            return Err(format!(
                "no client's fd turned readable within {} s ({left} of {n} clients unfinished)",
                limit.as_secs()
            ));
        }
        ready = woken.into_iter().map(|k| open[k]).collect();
    }
    println!(
        "{n} clients connected in {:.2} s and echoed {bytes} bytes each in {:.2} s",
        connected.as_secs_f64(),
        (start.elapsed() - connected).as_secs_f64()
    );
    Ok(())
}

#[allow(dead_code)] // also compiled into the socket tests (tests/conformance/fd.rs), which have their own main
fn main() -> ExitCode {
    echo_main::main("poll_echo", serve, clients)
}
