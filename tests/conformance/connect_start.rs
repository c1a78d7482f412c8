//! The nonblocking connect, [`RdmaSocket::connect_start`]: a [`Connecting`] moved on by
//! `poll_connect` whenever poll(2) finds its fd readable, until it gives a socket or an error
//! (the same error as the blocking connect), within its deadline; dropped at any stage it
//! leaves nothing behind; and many of them run at once on one thread.

use super::socket_support::{echo_one_byte_each, open_fds};
use super::{Fixture, Provider};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use rdmasock::{Connecting, RdmaListener, RdmaSocket, SocketOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::thread;
use std::time::{Duration, Instant};

/// How many times a connect's `poll_connect` may say "not yet": each follows a readable fd or
/// the deadline, so a few dozen at most; more means the fd is readable without progress.
const POLLS_MAX: usize = 200;

/// Waits until `c`'s fd is readable or its deadline passes.
fn wait(c: &Connecting) {
    let left = c
        .deadline()
        .saturating_duration_since(Instant::now())
        .as_millis()
        .saturating_add(1);
    let mut fds = [PollFd::new(c.as_fd(), PollFlags::POLLIN)];
    nix::poll::poll(
        &mut fds,
        PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX),
    )
    .expect("poll on the connect's fd");
}

/// Drives `c` with poll(2) until it is over; the outcome and how many polls said "not yet".
fn drive(c: Connecting) -> (std::io::Result<RdmaSocket>, usize) {
    let (result, not_yet, _) = drive_keeping(c);
    (result, not_yet)
}

/// [`drive`], giving the `Connecting` back too.
fn drive_keeping(mut c: Connecting) -> (std::io::Result<RdmaSocket>, usize, Connecting) {
    let mut not_yet = 0;
    loop {
        match c.poll_connect() {
            Ok(Some(s)) => return (Ok(s), not_yet, c),
            Err(e) => return (Err(e), not_yet, c),
            Ok(None) => not_yet += 1,
        }
        assert!(
            not_yet <= POLLS_MAX,
            "{not_yet} polls without progress: {c:?}"
        );
        wait(&c);
    }
}

/// `connect_start`, then `poll_connect` each time poll(2) says the fd is readable, until
/// connected; then bytes both ways, and the socket's addresses are the connect's.
pub(crate) fn connect_start_polled_until_connected_then_data_both_ways(f: &Fixture) {
    let (l, addr) = f.listener();
    let server = thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        let mut b = [0u8; 5];
        s.read_exact(&mut b).expect("the client's bytes");
        assert_eq!(&b, b"hello");
        s.write_all(b"world").expect("answer");
        s
    });
    let c = RdmaSocket::connect_start(addr, &SocketOptions::default()).expect("connect_start");
    assert_eq!(c.peer_addr(), addr);
    let started = Instant::now();
    assert!(c.deadline() > started && c.deadline() <= started + Duration::from_secs(10));
    let (result, not_yet, mut c) = drive_keeping(c);
    let mut s = result.expect("connected");
    eprintln!("connected after {not_yet} polls that said not yet");
    let fd_after = c
        .as_fd()
        .try_clone_to_owned()
        .expect("dup the connect's fd");
    assert_eq!(s.peer_addr().unwrap(), addr);
    s.write_all(b"hello").unwrap();
    let mut b = [0u8; 5];
    s.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"world");
    let server_end = server.join().unwrap();
    assert_eq!(server_end.peer_addr().unwrap(), s.local_addr().unwrap());
    // Over: the fd no longer turns readable, not even when the connection closes (the
    // connection manager's disconnect event comes within the second it is watched here).
    s.shutdown(std::net::Shutdown::Write).unwrap();
    drop(server_end);
    let mut fds = [PollFd::new(fd_after.as_fd(), PollFlags::POLLIN)];
    let ready = nix::poll::poll(&mut fds, PollTimeout::from(1000u16)).expect("poll");
    assert_eq!(
        ready, 0,
        "the connect's fd is readable after the connect was over"
    );
    assert_eq!(
        s.read(&mut b).unwrap(),
        0,
        "end of stream after the server's drop"
    );
    let again = c.poll_connect().expect_err("the connect is over");
    assert_eq!(again.kind(), ErrorKind::NotConnected, "{again}");
}

/// Nothing listens: `poll_connect` fails with `ConnectionRefused`, in the same words as the
/// blocking connect to the same address.
pub(crate) fn connect_start_refused_says_what_connect_says(f: &Fixture) {
    let addr = SocketAddr::new(f.ip, f.unused_port());
    let (result, _) =
        drive(RdmaSocket::connect_start(addr, &SocketOptions::default()).expect("connect_start"));
    let err = result.expect_err("nothing listens");
    eprintln!("error text: {err}");
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err}");
    let words = f.refused_words(addr);
    assert!(
        err.to_string().contains(&words),
        "expected {words:?}: {err}"
    );
    let blocking = RdmaSocket::connect(addr).expect_err("nothing listens");
    assert_eq!(err.to_string(), blocking.to_string());
}

/// An address that never answers: `poll_connect` fails with `TimedOut` naming it once the
/// deadline has passed, and not much later.
pub(crate) fn connect_start_to_a_black_hole_times_out_at_the_deadline(f: &Fixture) {
    let (addr, _hole) = f.black_hole();
    let timeout = Duration::from_millis(1500);
    let opts = SocketOptions::builder()
        .connect_timeout(timeout)
        .build()
        .unwrap();
    let start = Instant::now();
    let c = RdmaSocket::connect_start(addr, &opts).expect("connect_start");
    let deadline = c.deadline();
    let (result, not_yet) = drive(c);
    let waited = start.elapsed();
    let err = result.expect_err("nobody answers");
    eprintln!("after {waited:?} and {not_yet} polls: {err}");
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
    assert!(err.to_string().contains(&addr.ip().to_string()), "{err}");
    assert!(Instant::now() >= deadline, "failed before the deadline");
    assert!(
        waited >= timeout && waited < timeout + Duration::from_secs(1),
        "{waited:?}"
    );
}

/// Lines of `rdma resource show KIND` (the VM's kernel objects of every process: this test's
/// alone there); 0 for the userspace provider, which makes none.
fn kernel_objects(f: &Fixture, kind: &str) -> usize {
    if !f.provider.is_kernel_device() {
        return 0;
    }
    let out = std::process::Command::new("rdma")
        .args(["resource", "show", kind])
        .output()
        .expect("rdma (iproute2) runs");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// What this process holds: (fds, rdma_cm ids, queue pairs, memory regions).
fn holdings(f: &Fixture) -> (usize, usize, usize, usize) {
    (
        open_fds(),
        kernel_objects(f, "cm_id"),
        kernel_objects(f, "qp"),
        kernel_objects(f, "mr"),
    )
}

/// [`holdings`] once they stay the same for 200 ms (at most 5 s): what the last connection
/// left closing (on the userspace provider's engine thread, on the server) is gone.
fn settled_holdings(f: &Fixture) -> (usize, usize, usize, usize) {
    let until = Instant::now() + Duration::from_secs(5);
    let mut last = holdings(f);
    let mut steady_since = Instant::now();
    while Instant::now() < until && steady_since.elapsed() < Duration::from_millis(200) {
        thread::sleep(Duration::from_millis(20));
        let now = holdings(f);
        if now != last {
            last = now;
            steady_since = Instant::now();
        }
    }
    last
}

/// How many times each stage is dropped.
const DROPS: usize = 200;

/// The environment variable that makes [`dropping_connect_start_at_each_stage_leaks_nothing`]
/// run its body: set in the child process it runs the body in.
const DROPS_CHILD: &str = "RDMASOCK_CONNECT_DROPS_CHILD";

/// A `Connecting` dropped right after `connect_start`, after its first `poll_connect`, and
/// once its handshake runs, 200 times each: afterwards the process holds no more fds (nor,
/// on a kernel device, rdma_cm ids, queue pairs or memory regions) than before, no drop took
/// long, and the listener serves a good client. The process's fds are counted, so the body
/// runs in a child process (this test binary again, for this one test), where no other test
/// opens any meanwhile.
pub(crate) fn dropping_connect_start_at_each_stage_leaks_nothing(f: &Fixture) {
    if std::env::var_os(DROPS_CHILD).is_some() {
        return drops_leak_nothing(f);
    }
    let name = f.test_name("dropping_connect_start_at_each_stage_leaks_nothing");
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--include-ignored", "--exact", &name, "--nocapture"])
        .args(["--test-threads", "1"])
        .env(DROPS_CHILD, "1")
        .status()
        .expect("run the child");
    assert!(status.success(), "the child's drops: {status}");
}

/// The body of [`dropping_connect_start_at_each_stage_leaks_nothing`], in its child.
fn drops_leak_nothing(f: &Fixture) {
    // Connections the drops left half-made end soon on the server side.
    let opts = SocketOptions::builder()
        .connect_timeout(Duration::from_secs(1))
        .close_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let (l, addr) = f.listener_with(&opts);
    let server = serve_until_stop(l);
    // A whole connection first: whatever the provider starts once (its engine) is counted.
    good_client(addr, 1);
    let before = settled_holdings(f);
    // The slowest drop of each stage: right after the start, after one poll, in the handshake.
    let mut slowest = [Duration::ZERO; 3];
    let mut timed_drop = |stage: usize, c: Connecting| {
        let t = Instant::now();
        drop(c);
        slowest[stage] = slowest[stage].max(t.elapsed());
    };
    let start = || RdmaSocket::connect_start(addr, &SocketOptions::default()).expect("start");
    let mut handshakes = 0;
    for _ in 0..DROPS {
        timed_drop(0, start());
        let mut c = start();
        let _ = c.poll_connect().expect("first poll");
        timed_drop(1, c);
        let mut c = start();
        loop {
            if format!("{c:?}").contains("handshake") {
                handshakes += 1;
                break;
            }
            match c.poll_connect() {
                Ok(None) => wait(&c),
                // Connected before a poll saw the handshake: the drop is a close then.
                Ok(Some(_)) | Err(_) => break,
            }
        }
        timed_drop(2, c);
    }
    eprintln!(
        "{handshakes} of {DROPS} dropped during the handshake; slowest drops (started, \
         polled once, handshake): {slowest:?}"
    );
    assert!(
        handshakes > DROPS / 2,
        "only {handshakes} reached the handshake stage"
    );
    // No drop waits for the peer (a disconnect handshake takes a round trip to a peer that is
    // busy elsewhere, a whole close timeout when it does not answer). Destroying the kernel's
    // objects takes CPU time, much of it under the VM's emulation (siw0 there: up to about
    // 0.8 s now and then).
    let worst = slowest.iter().max().unwrap();
    assert!(
        *worst < Duration::from_millis(1500),
        "a drop took {worst:?}"
    );
    good_client(addr, 2);
    // The server drops what the drops left (handshakes bounded by its connect timeout, the
    // userspace provider's TCP connections closing on its engine thread): a bounded wait.
    let until = Instant::now() + Duration::from_secs(20);
    let mut after = holdings(f);
    while after > before && Instant::now() < until {
        thread::sleep(Duration::from_millis(50));
        after = holdings(f);
    }
    eprintln!("(fds, cm ids, QPs, MRs): {before:?} -> {after:?}");
    assert!(after.0 <= before.0, "fd leak: {before:?} -> {after:?}");
    assert!(after.1 <= before.1, "cm id leak: {before:?} -> {after:?}");
    assert!(after.2 <= before.2, "QP leak: {before:?} -> {after:?}");
    assert!(after.3 <= before.3, "MR leak: {before:?} -> {after:?}");
    good_client(addr, 0xff);
    server.join().unwrap();
}

/// Serves one byte of echo per accepted connection until the byte 0xff; connections that
/// fail (the drops') are skipped.
fn serve_until_stop(l: RdmaListener) -> thread::JoinHandle<()> {
    thread::spawn(move || loop {
        let Ok((mut s, _)) = l.accept() else { continue };
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 1];
        if s.read_exact(&mut b).is_err() {
            continue;
        }
        let _ = s.write_all(&b);
        if b[0] == 0xff {
            let _ = s.flush();
            return;
        }
    })
}

/// A client that connects with `connect_start` and gets `byte` echoed.
fn good_client(addr: SocketAddr, byte: u8) {
    let (result, _) =
        drive(RdmaSocket::connect_start(addr, &SocketOptions::default()).expect("start"));
    let mut s = result.expect("a good client connects");
    s.write_all(&[byte]).unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).expect("echo");
    assert_eq!(b, [byte]);
}

/// 64 connects in flight at once, all driven by one thread's poll(2) over their fds; each
/// sends a byte once connected and gets it back.
pub(crate) fn sixty_four_connect_starts_on_one_thread_driven_by_poll(f: &Fixture) {
    const N: usize = 64;
    let (l, addr) = f.listener();
    let server = echo_one_byte_each(l, N);
    let mut pending: Vec<(usize, Connecting)> = (0..N)
        .map(|i| {
            let c = RdmaSocket::connect_start(addr, &SocketOptions::default())
                .unwrap_or_else(|e| panic!("connect_start {i}: {e}"));
            (i, c)
        })
        .collect();
    let mut connected: Vec<Option<RdmaSocket>> = (0..N).map(|_| None).collect();
    let mut rounds = 0;
    while !pending.is_empty() {
        rounds += 1;
        assert!(rounds <= N * POLLS_MAX, "{rounds} rounds: {pending:?}");
        let mut still = Vec::new();
        for (i, mut c) in pending {
            match c.poll_connect() {
                Ok(Some(mut s)) => {
                    s.write_all(&[i as u8]).unwrap();
                    connected[i] = Some(s);
                }
                Ok(None) => still.push((i, c)),
                Err(e) => panic!("connect {i}: {e}"),
            }
        }
        pending = still;
        if pending.is_empty() {
            break;
        }
        let nearest = pending.iter().map(|(_, c)| c.deadline()).min().unwrap();
        let left = nearest
            .saturating_duration_since(Instant::now())
            .as_millis()
            .saturating_add(1);
        let mut fds: Vec<PollFd> = pending
            .iter()
            .map(|(_, c)| PollFd::new(c.as_fd(), PollFlags::POLLIN))
            .collect();
        nix::poll::poll(
            &mut fds,
            PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX),
        )
        .expect("poll over the connects");
    }
    eprintln!("{N} connects in {rounds} rounds of poll(2)");
    for (i, s) in connected.iter_mut().enumerate() {
        let s = s.as_mut().expect("connected");
        let mut b = [0u8; 1];
        s.read_exact(&mut b).expect("echo");
        assert_eq!(b, [i as u8]);
    }
    server.join().unwrap();
}

/// A `Connecting` can move to another thread and be shared (an async task holds it across
/// awaits).
const _: fn() = || {
    fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<Connecting>();
};

impl Fixture {
    /// An address that never answers a connect, and what keeps it so while it lives. Kernel
    /// devices: an address of the device's subnet that no host has (address resolution gets
    /// no ARP answer). The userspace provider on loopback: a TCP listener whose accept queue
    /// is full, so that the kernel drops further SYNs.
    pub(crate) fn black_hole(&self) -> (SocketAddr, Box<dyn std::any::Any>) {
        match self.provider {
            Provider::Rxe => ("10.99.0.77:7304".parse().unwrap(), Box::new(())),
            Provider::Siw => ("10.99.1.77:7304".parse().unwrap(), Box::new(())),
            Provider::Uiwarp => super::socket_support::tcp_black_hole(self.ip),
        }
    }
}
