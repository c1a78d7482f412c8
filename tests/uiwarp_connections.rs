//! Many connections in one process, on the userspace provider over loopback: thousands at
//! once against peer processes whose one mio thread each serves their share, each echoing a
//! few checked messages, then all closed with nothing left behind; and a process that runs
//! out of fds midway gets an error naming the limit and the connections held, while those
//! keep working.
//!
//! Each test re-runs itself as a child process (its own fd limit, its own fd and thread
//! counts) and as the peer processes, chosen by the environment variable `ROLE`.
mod connections_support;

use connections_support::{assert_all_released, count, echo_all};
use rdmasock::RdmaSocket;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

/// Which part a re-run of this binary plays: `peer` or `client`.
const ROLE: &str = "RDMASOCK_CONNECTIONS_ROLE";
/// Connections held at once by `eight_thousand_connections`, in one process under
/// [`FD_LIMIT`], with the fds a uiwarp connection costs in the client (see
/// [`MOST_FDS_PER_CONNECTION`]).
const EIGHT_THOUSAND: usize = 8_000;
/// The most fds one client connection may cost: a connection that holds more fails the
/// tests (the TCP socket, and the completion channel's eventfd, which is the QP's notice fd
/// and the blocking sleeper's waker too).
const MOST_FDS_PER_CONNECTION: f64 = 2.0;
/// The fd limit that test's client runs under.
const FD_LIMIT: u64 = 20_000;
/// Connections one peer process serves at most: a peer registers its sockets with mio, which
/// costs it about 11 fds a connection, and its hard fd limit may be 20,000 too.
const PEER_SHARE: usize = 1_500;
/// The fd limit of `running_out_of_fds_names_the_limit_and_keeps_the_held_connections`.
const LOW_FD_LIMIT: u64 = 256;

fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// Re-runs this binary's test `name` as `role`.
fn rerun(name: &str, role: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("the test binary"));
    c.args([
        "--exact",
        name,
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ])
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
    connections_support::serve("127.0.0.1:0");
}

/// Sets this process's fd limit (soft and hard).
fn limit_fds(n: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, n.min(hard), n.min(hard)).expect("lower the fd limit");
}

/// Runs test `name` as the client (in a child process) and checks that it finished.
fn run_client(name: &str) {
    let start = Instant::now();
    let out = rerun(name, "client").output().expect("run the client");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the client failed:\n{text}");
    assert!(text.contains("client: done"), "{text}");
    for line in text.lines().filter(|l| l.contains("client: ")) {
        println!("{line}");
    }
    println!("{name} in {:?}", start.elapsed());
}

/// The client of test `name`: `many` connections at once under `fd_limit`, spread over as
/// many peers as serve [`PEER_SHARE`] each; each echoes a few messages, then all close and
/// every fd and thread they held is released.
fn hold_many(name: &str, many: usize, fd_limit: u64) {
    let peers: Vec<Peer> = (0..many.div_ceil(PEER_SHARE))
        .map(|_| start_peer(name))
        .collect();
    limit_fds(fd_limit);
    // The provider's engine thread and the first connection's lazily made state come with
    // the first connection: the baseline is taken with one open and closed.
    drop(RdmaSocket::connect(peers[0].1).expect("the first connection"));
    assert_all_released(usize::MAX, usize::MAX);
    let (fds, threads) = (count("/proc/self/fd"), count("/proc/self/task"));
    let mut conns = Vec::with_capacity(many);
    for i in 0..many {
        let peer = peers[i % peers.len()].1;
        conns.push(RdmaSocket::connect(peer).unwrap_or_else(|e| panic!("connection {i}: {e}")));
    }
    assert_eq!(rdmasock::census().connections, many as u64);
    let held = count("/proc/self/task");
    assert_eq!(held, threads, "threads do not grow with the connections");
    echo_all(&mut conns, 4);
    let added = count("/proc/self/fd") - fds;
    let each = added as f64 / many as f64;
    println!("client: {many} connections, {each} fds each");
    // A few fds the process shares may come with the connections too.
    assert!(
        added as f64 <= MOST_FDS_PER_CONNECTION * many as f64 + 16.0,
        "{each} fds per connection (at most {MOST_FDS_PER_CONNECTION})"
    );
    drop(conns);
    assert_all_released(fds, threads);
    println!("client: done");
}

const EIGHT_THOUSAND_TEST: &str = "eight_thousand_connections";

/// 8,000 connections at once under [`FD_LIMIT`], at most [`MOST_FDS_PER_CONNECTION`] each.
#[test]
fn eight_thousand_connections() {
    match role().as_deref() {
        Some("peer") => serve(),
        Some("client") => hold_many(EIGHT_THOUSAND_TEST, EIGHT_THOUSAND, FD_LIMIT),
        _ => run_client(EIGHT_THOUSAND_TEST),
    }
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
