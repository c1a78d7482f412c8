//! mio drives the sockets: many connections from one thread (our own loop and
//! `examples/mio_echo.rs`), an event after every `WouldBlock`, and readiness per direction.

use super::socket_support::readiness;
use super::Fixture;
use rdmasock::RdmaSocket;
use std::io::{ErrorKind, Read, Write};
use std::thread;
use std::time::{Duration, Instant};

#[path = "../../examples/mio_echo.rs"]
mod mio_echo;

/// mio readiness per direction (`socket_support::readiness`): writable from ring space,
/// credits and target buffers, never readable without data, readable when data arrived, and
/// a writable event as soon as the peer's reads free room after a write's `WouldBlock`.
pub(crate) fn mio_readiness_is_truthful_per_direction(f: &Fixture) {
    let (s, c) = f.pair_with(&readiness::options());
    readiness::per_direction(s, c);
}

/// `examples/mio_echo.rs`'s server with 64 concurrent nonblocking clients, 100 000 bytes each.
pub(crate) fn mio_echo_server_with_64_concurrent_nonblocking_connections(f: &Fixture) {
    let (l, addr) = f.listener();
    let server = thread::spawn(move || mio_echo::serve(l, Some(64)));
    if let Err(e) = mio_echo::clients(addr, 64, 100_000) {
        // A server that stopped early drops every connection: its error is the first cause.
        let server_result = match server.is_finished() {
            true => format!("{:?}", server.join()),
            false => "still serving".to_string(),
        };
        panic!("a client failed: {e}; the mio server: {server_result}");
    }
    server
        .join()
        .unwrap()
        .expect("the mio server ends after 64 clients");
}

/// After a read's `WouldBlock`, an event follows the data's arrival, 50 rounds over (a lost
/// wakeup fails within 10 s).
pub(crate) fn mio_event_follows_would_block(f: &Fixture) {
    use mio::{Events, Interest, Poll, Token};
    let (mut s, mut c) = f.pair();
    c.set_nonblocking(true).unwrap();
    let mut poll = Poll::new().unwrap();
    poll.registry()
        .register(&mut c, Token(7), Interest::READABLE | Interest::WRITABLE)
        .unwrap();
    let mut events = Events::with_capacity(8);
    // Registration of a writable socket yields an event at once.
    poll.poll(&mut events, Some(Duration::from_secs(5)))
        .unwrap();
    assert!(
        events.iter().any(|e| e.token() == Token(7)),
        "an event on registration"
    );
    for round in 0..50 {
        // Drain: read until WouldBlock.
        let mut buf = [0u8; 64];
        loop {
            match c.read(&mut buf) {
                Ok(n) => assert!(n > 0, "no EOF yet"),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        s.write_all(&[round as u8; 10]).unwrap();
        // After WouldBlock, an event must follow the data's arrival.
        let mut got = 0;
        let deadline = Instant::now() + Duration::from_secs(10);
        while got < 10 {
            poll.poll(&mut events, Some(Duration::from_secs(10)))
                .unwrap();
            assert!(
                events.iter().any(|e| e.token() == Token(7)),
                "round {round}: no event within 10 s after WouldBlock (lost wakeup)"
            );
            loop {
                match c.read(&mut buf) {
                    Ok(n) => {
                        assert!(buf[..n].iter().all(|&b| b == round as u8));
                        got += n;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e}"),
                }
            }
            assert!(Instant::now() < deadline);
        }
    }
}

/// One thread drives 64 connections with mio: an echo server on the accepted ends, 20 rounds
/// of 100 bytes on each client.
pub(crate) fn mio_drives_sixty_four_connections(f: &Fixture) {
    use mio::{Events, Interest, Poll, Token};
    const N: usize = 64;
    const ROUNDS: usize = 20;
    let (l, addr) = f.listener();
    // Echo server: one thread, blocking per connection is not needed: clones echo in turn.
    let server = thread::spawn(move || {
        let mut conns = Vec::new();
        for _ in 0..N {
            conns.push(l.accept().expect("accept").0);
        }
        let mut poll = Poll::new().unwrap();
        for (i, s) in conns.iter_mut().enumerate() {
            s.set_nonblocking(true).unwrap();
            poll.registry()
                .register(s, Token(i), Interest::READABLE | Interest::WRITABLE)
                .unwrap();
        }
        let mut echoed = vec![0usize; N];
        let mut pending: Vec<Vec<u8>> = vec![Vec::new(); N];
        let mut events = Events::with_capacity(128);
        let deadline = Instant::now() + Duration::from_secs(60);
        while echoed.iter().any(|&e| e < ROUNDS * 100) {
            assert!(Instant::now() < deadline, "server stalled: {echoed:?}");
            poll.poll(&mut events, Some(Duration::from_secs(5)))
                .unwrap();
            for ev in events.iter() {
                let i = ev.token().0;
                let s = &mut conns[i];
                let mut buf = [0u8; 4096];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => pending[i].extend_from_slice(&buf[..n]),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => panic!("server read: {e}"),
                    }
                }
                while !pending[i].is_empty() {
                    match s.write(&pending[i]) {
                        Ok(n) => {
                            echoed[i] += n;
                            pending[i].drain(..n);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => panic!("server write: {e}"),
                    }
                }
            }
        }
        conns
    });
    let mut clients: Vec<RdmaSocket> = (0..N)
        .map(|_| RdmaSocket::connect(addr).expect("connect"))
        .collect();
    let mut poll = Poll::new().unwrap();
    for (i, c) in clients.iter_mut().enumerate() {
        c.set_nonblocking(true).unwrap();
        poll.registry()
            .register(c, Token(i), Interest::READABLE | Interest::WRITABLE)
            .unwrap();
    }
    let msg =
        |i: usize, r: usize| -> Vec<u8> { (0..100).map(|k| (i * 7 + r * 13 + k) as u8).collect() };
    let mut round = vec![0usize; N];
    let mut sent_round = [false; N];
    let mut got: Vec<Vec<u8>> = vec![Vec::new(); N];
    let mut events = Events::with_capacity(128);
    let deadline = Instant::now() + Duration::from_secs(60);
    // Kick every connection once: the first write needs no event.
    let mut ready: Vec<usize> = (0..N).collect();
    while round.iter().any(|&r| r < ROUNDS) {
        assert!(
            Instant::now() < deadline,
            "clients stalled at rounds {round:?}"
        );
        if ready.is_empty() {
            poll.poll(&mut events, Some(Duration::from_secs(5)))
                .unwrap();
            ready = events.iter().map(|e| e.token().0).collect();
        }
        for i in ready.drain(..) {
            let c = &mut clients[i];
            if round[i] >= ROUNDS {
                continue;
            }
            if !sent_round[i] {
                match c.write(&msg(i, round[i])) {
                    Ok(100) => sent_round[i] = true,
                    Ok(n) => panic!("short write of {n}"),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => panic!("client write: {e}"),
                }
            }
            let mut buf = [0u8; 256];
            loop {
                match c.read(&mut buf) {
                    Ok(0) => panic!("server closed early"),
                    Ok(n) => got[i].extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => panic!("client read: {e}"),
                }
            }
            if got[i].len() >= 100 {
                assert_eq!(got[i][..100], msg(i, round[i])[..], "echo of conn {i}");
                got[i].drain(..100);
                round[i] += 1;
                sent_round[i] = false;
                if round[i] < ROUNDS {
                    match c.write(&msg(i, round[i])) {
                        Ok(100) => sent_round[i] = true,
                        Ok(n) => panic!("short write of {n}"),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(e) => panic!("client write: {e}"),
                    }
                }
            }
        }
    }
    drop(clients);
    drop(server.join().unwrap());
}
