//! Connecting and accepting: a port nobody listens on, a listener cloned across two
//! accepting threads, and a program written for `TcpStream` run over `RdmaSocket`.

use super::{vm_support, Fixture};
use rdmasock::{RdmaListener, RdmaSocket};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

/// Connecting to a port of the provider's address where nothing listens fails at once with
/// `ConnectionRefused`, and the error names the address in the provider's words
/// ([`Fixture::refused_words`]).
pub(crate) fn connection_refused_without_listener(f: &Fixture) {
    let port = f.unused_port();
    let addr = SocketAddr::new(f.ip, port);
    let err = RdmaSocket::connect(addr).expect_err("nothing listens");
    eprintln!("error text: {err}");
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err}");
    let words = f.refused_words(addr);
    assert!(
        err.to_string().contains(&words),
        "expected {words:?}: {err}"
    );
}

/// `try_clone`: the clones share nonblocking mode, and two threads accepting from one port
/// take each request exactly once.
pub(crate) fn a_cloned_listener_accepts_from_two_threads(f: &Fixture) {
    let (l, addr) = f.listener();
    let l2 = l.try_clone().expect("try_clone");
    l2.set_nonblocking(true).unwrap();
    let err = l
        .accept()
        .expect_err("nothing waits, and the clone made both nonblocking");
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
    l.set_nonblocking(false).unwrap();
    // Each thread echoes one byte per connection and stops at the byte 0xff.
    let serve = |l: RdmaListener| {
        thread::spawn(move || {
            let mut served = Vec::new();
            loop {
                let (mut s, _) = l.accept().expect("accept");
                let mut b = [0u8; 1];
                s.read_exact(&mut b).expect("read the client's byte");
                if b[0] == 0xff {
                    return served;
                }
                s.write_all(&b).expect("echo");
                served.push(b[0]);
            }
        })
    };
    let (a, b) = (serve(l), serve(l2));
    for i in 0..8u8 {
        let mut c = RdmaSocket::connect(addr).expect("connect");
        c.write_all(&[i]).unwrap();
        let mut back = [0u8; 1];
        c.read_exact(&mut back).expect("echo back");
        assert_eq!(back, [i]);
    }
    // One stop each: a thread that stopped accepts no more, so the second goes to the other.
    for _ in 0..2 {
        let mut c = RdmaSocket::connect(addr).expect("connect");
        c.write_all(&[0xff]).unwrap();
        // The acceptor closes once it read the stop: its close (an end of stream, or the
        // connection reset when it tore down first) says the byte arrived.
        let mut rest = Vec::new();
        let _ended = c.read_to_end(&mut rest);
        assert!(rest.is_empty(), "nothing is echoed to a stop: {rest:?}");
    }
    let mut all = a.join().expect("first acceptor");
    all.extend(b.join().expect("second acceptor"));
    all.sort_unstable();
    assert_eq!(
        all,
        (0..8).collect::<Vec<u8>>(),
        "each request accepted exactly once"
    );
}

/// A blocking `accept` waiting in one thread leaves a clone's nonblocking `accept` in
/// another free: it returns `WouldBlock` at once (the wait holds no lock the clone needs),
/// time and again while the first waits, and the first still takes the next connection.
pub(crate) fn a_blocking_accept_leaves_a_clone_s_nonblocking_accept_free(f: &Fixture) {
    let (l, addr) = f.listener();
    let clone = l.try_clone().expect("try_clone");
    // The clones share nonblocking mode: the waiting thread goes back to its wait when it
    // finds the clone's mode on.
    let waiting = thread::spawn(move || loop {
        match l.accept() {
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::yield_now(),
            other => return other.map(|(s, _)| s),
        }
    });
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        for _ in 0..20 {
            // Leave the waiting thread time to be back in its blocking wait.
            thread::sleep(Duration::from_millis(10));
            clone.set_nonblocking(true).unwrap();
            let started = Instant::now();
            let result = clone.accept().map(|_| ());
            clone.set_nonblocking(false).unwrap();
            if tx.send((result, started.elapsed())).is_err() {
                return;
            }
        }
    });
    for round in 0..20 {
        let (result, took) = rx.recv_timeout(Duration::from_secs(5)).unwrap_or_else(|_| {
            panic!("round {round}: the clone's nonblocking accept did not return within 5 s")
        });
        let err = result.expect_err("nothing connected yet");
        assert_eq!(err.kind(), ErrorKind::WouldBlock, "round {round}: {err}");
        assert!(
            took < Duration::from_secs(1),
            "round {round}: the nonblocking accept took {took:?}"
        );
    }
    let mut client = RdmaSocket::connect(addr).expect("connect");
    let mut accepted = waiting
        .join()
        .expect("the waiting thread")
        .expect("the blocking accept takes the connection");
    client.write_all(b"x").unwrap();
    let mut b = [0u8; 1];
    accepted.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"x");
}

/// `examples/tcp_swap.rs` (one program over `TcpStream` and over `RdmaSocket`) round-trips
/// its three lines on a kernel device's address, served there without the userspace
/// provider (no word of uiwarp on its stderr).
pub(crate) fn tcp_swap_example_runs_on_the_device(f: &Fixture) {
    let stderr = run_tcp_swap(f.ip);
    assert!(
        !stderr.contains("uiwarp"),
        "a kernel device serves {}: {stderr}",
        f.ip
    );
}

/// Runs `examples/tcp_swap.rs` on `ip`, checks that it round-trips its three lines, and
/// returns its stderr.
pub(crate) fn run_tcp_swap(ip: IpAddr) -> String {
    let out = std::process::Command::new(vm_support::example("tcp_swap"))
        .arg(ip.to_string())
        .output()
        .expect("run the tcp_swap example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("ok: 3 lines round-tripped"),
        "tcp_swap {ip} ({}): {stdout}{stderr}",
        out.status
    );
    stderr.into_owned()
}
