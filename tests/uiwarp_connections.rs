//! Many connections in one process, on the userspace provider over loopback: thousands at
//! once against a peer process whose one mio thread serves them all, each echoing a few
//! checked messages, then all closed with nothing left behind; and a process that runs out
//! of fds midway gets an error naming the limit and the connections held, while those keep
//! working.
//!
//! Each test re-runs itself as a child process (its own fd limit, its own fd and thread
//! counts) and as the peer process, chosen by the environment variable `ROLE`.
use mio::{Events, Interest, Poll, Token};
use rdmasock::{RdmaListener, RdmaSocket};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Which part a re-run of this binary plays: `peer` or `client`.
const ROLE: &str = "RDMASOCK_CONNECTIONS_ROLE";
/// Connections held at once by `many_connections_fit_under_20000_fds`: as many as the peer
/// process also holds where the hard fd limit is 20,000, with the fds a uiwarp connection
/// costs (about 7 in the client, 11 in a peer that registers them with mio).
const MANY: usize = 1_500;
/// The fd limit that test's client runs under.
const FD_LIMIT: u64 = 20_000;
/// The fd limit of `running_out_of_fds_names_the_limit_and_keeps_the_held_connections`.
const LOW_FD_LIMIT: u64 = 256;

fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// Re-runs this binary's test `name` as `role`.
fn rerun(name: &str, role: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("the test binary"));
    c.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(ROLE, role);
    c
}

/// The peer process, killed when dropped.
struct Peer(Child, SocketAddr);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the peer (test `name` re-run as `peer`) and reads where it listens.
fn start_peer(name: &str) -> Peer {
    let mut child = rerun(name, "peer")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the peer");
    let out = child.stdout.take().expect("piped");
    let mut lines = BufReader::new(out).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("the peer says where it listens")
            .expect("the peer's output");
        // The harness may have begun the line with the test's name.
        if let Some((_, a)) = line.split_once("listening ") {
            break a.trim().parse().expect("an address");
        }
    };
    Peer(child, addr)
}

/// The peer: one mio thread accepting and echoing every connection, until stdin closes.
/// Its fd limit is the hard one (it holds the sockets' readiness fds too).
fn serve() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).expect("raise the fd limit");
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(0);
    });
    let mut listener = RdmaListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).unwrap();
    println!("listening {}", listener.local_addr().unwrap());
    let mut poll = Poll::new().unwrap();
    poll.registry()
        .register(&mut listener, Token(0), Interest::READABLE)
        .unwrap();
    let mut clients: HashMap<Token, (RdmaSocket, Vec<u8>)> = HashMap::new();
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 65536];
    let mut next = 1;
    loop {
        poll.poll(&mut events, None).unwrap();
        for ev in events.iter() {
            if ev.token() == Token(0) {
                loop {
                    match listener.accept() {
                        Ok((mut s, _)) => {
                            s.set_nonblocking(true).unwrap();
                            let t = Token(next);
                            next += 1;
                            let both = Interest::READABLE | Interest::WRITABLE;
                            poll.registry().register(&mut s, t, both).unwrap();
                            clients.insert(t, (s, Vec::new()));
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => panic!("the peer's accept: {e}"),
                    }
                }
                continue;
            }
            let Some((s, pending)) = clients.get_mut(&ev.token()) else {
                continue;
            };
            let mut closed = false;
            loop {
                let mut moved = false;
                match s.read(&mut buf) {
                    Ok(0) => closed = true,
                    Ok(n) => {
                        pending.extend_from_slice(&buf[..n]);
                        moved = true;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => closed = true,
                }
                if !pending.is_empty() {
                    match s.write(pending) {
                        Ok(n) => {
                            pending.drain(..n);
                            moved = true;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(_) => closed = true,
                    }
                }
                if closed || !moved {
                    break;
                }
            }
            if closed {
                let (mut s, _) = clients.remove(&ev.token()).expect("present");
                poll.registry().deregister(&mut s).unwrap();
            }
        }
    }
}

/// Sets this process's fd limit (soft and hard).
fn limit_fds(n: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, n.min(hard), n.min(hard)).expect("lower the fd limit");
}

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).expect(dir).count()
}

/// A 64-byte message for connection `i`, round `k`, and its hash.
fn message(i: usize, k: usize) -> Vec<u8> {
    (0..64u64)
        .map(|b| (b.wrapping_mul(0x9e37_79b9) ^ (i as u64 * 131 + k as u64)) as u8)
        .collect()
}

fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Echoes `rounds` messages on every connection, checking each by its hash.
fn echo_all(conns: &mut [RdmaSocket], rounds: usize) {
    let mut back = [0u8; 64];
    for k in 0..rounds {
        for (i, c) in conns.iter_mut().enumerate() {
            let m = message(i, k);
            c.write_all(&m)
                .unwrap_or_else(|e| panic!("connection {i}: write: {e}"));
            c.read_exact(&mut back)
                .unwrap_or_else(|e| panic!("connection {i}: read: {e}"));
            assert_eq!(hash(&back), hash(&m), "connection {i}, message {k}");
        }
    }
}

/// Waits (up to a bound) until every connection is gone and the fds and threads are back
/// to `fds` and `threads`: a close finishes on the provider's engine after the drop.
fn assert_all_released(fds: usize, threads: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = (
            rdmasock::census(),
            count("/proc/self/fd"),
            count("/proc/self/task"),
        );
        if now.0.connections == 0 && now.1 <= fds && now.2 <= threads {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "after closing: {:?}, {} fds (before: {fds}), {} threads (before: {threads})",
            now.0,
            now.1,
            now.2
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

const MANY_TEST: &str = "many_connections_fit_under_20000_fds";

#[test]
fn many_connections_fit_under_20000_fds() {
    match role().as_deref() {
        Some("peer") => return serve(),
        Some("client") => {}
        _ => {
            let start = Instant::now();
            let out = rerun(MANY_TEST, "client").output().expect("run the client");
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "the client failed:\n{text}");
            assert!(text.contains("client: done"), "{text}");
            println!("{MANY} connections in {:?}", start.elapsed());
            return;
        }
    }
    let peer = start_peer(MANY_TEST);
    limit_fds(FD_LIMIT);
    // The provider's engine thread and the first connection's lazily made state come with
    // the first connection: the baseline is taken with one open and closed.
    drop(RdmaSocket::connect(peer.1).expect("the first connection"));
    assert_all_released(usize::MAX, usize::MAX);
    let (fds, threads) = (count("/proc/self/fd"), count("/proc/self/task"));
    let mut conns = Vec::with_capacity(MANY);
    for i in 0..MANY {
        conns.push(RdmaSocket::connect(peer.1).unwrap_or_else(|e| panic!("connection {i}: {e}")));
    }
    assert_eq!(rdmasock::census().connections, MANY as u64);
    let held = count("/proc/self/task");
    assert_eq!(held, threads, "threads do not grow with the connections");
    echo_all(&mut conns, 4);
    println!(
        "client: {MANY} connections, {} fds each",
        (count("/proc/self/fd") - fds) as f64 / MANY as f64
    );
    drop(conns);
    assert_all_released(fds, threads);
    println!("client: done");
}

const LOW_TEST: &str = "running_out_of_fds_names_the_limit_and_keeps_the_held_connections";

#[test]
fn running_out_of_fds_names_the_limit_and_keeps_the_held_connections() {
    match role().as_deref() {
        Some("peer") => return serve(),
        Some("client") => {}
        _ => {
            let out = rerun(LOW_TEST, "client").output().expect("run the client");
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "the client failed:\n{text}");
            assert!(text.contains("client: done"), "{text}");
            return;
        }
    }
    let peer = start_peer(LOW_TEST);
    limit_fds(LOW_FD_LIMIT);
    let mut conns = Vec::new();
    let err = loop {
        match RdmaSocket::connect(peer.1) {
            Ok(c) => conns.push(c),
            Err(e) => break e,
        }
        assert!(
            conns.len() < LOW_FD_LIMIT as usize,
            "the fd limit never hit"
        );
    };
    let text = err.to_string();
    println!("client: connection {} failed: {text}", conns.len() + 1);
    assert!(!conns.is_empty(), "some connections fit: {text}");
    assert!(
        text.contains(&format!("RLIMIT_NOFILE is {LOW_FD_LIMIT}")),
        "names the limit: {text}"
    );
    assert!(
        text.contains(&format!("with {} RDMA connections held", conns.len())),
        "names the connections held: {text}"
    );
    assert!(text.contains("ulimit -n"), "says what to do: {text}");
    // The held ones keep working.
    echo_all(&mut conns, 2);
    println!("client: done");
}
