//! The readiness fd (`AsFd`) of sockets and listeners under poll(2) and epoll, level and
//! edge: readable while a read would not block, after a write's `WouldBlock` from when
//! writing can go on until the next write, no wakeup lost when both directions block, the
//! listener's while `accept` may go on; the fd agreeing with mio; mio's own `tcp_server`
//! loop; and `examples/poll_echo.rs` end to end.

use super::socket_support::readiness;
use super::Fixture;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use rdmasock::{RdmaListener, RdmaSocket};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::thread;
use std::time::{Duration, Instant};

// Both examples include examples/common/address.rs.
#[allow(clippy::duplicate_mod)]
#[path = "../../examples/poll_echo.rs"]
mod poll_echo;

/// Whether `fd` turns readable within `ms` milliseconds (poll(2), POLLIN only).
fn readable_within(fd: &impl AsFd, ms: u16) -> bool {
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    let n = nix::poll::poll(&mut fds, PollTimeout::from(ms)).expect("poll");
    n == 1
        && fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLIN))
}

/// How long a wakeup may take before it counts as lost.
const LOST: u16 = 10_000;
/// How long a quiet fd is watched to stay quiet.
const QUIET: u16 = 200;

/// Writes until `WouldBlock`; how many bytes went. One `WouldBlock` can pass in a moment
/// (sends still completing, a credit update on its way), so this does not say the socket
/// stays blocked: see [`fill_until_stuck`].
fn fill(s: &mut RdmaSocket) -> usize {
    let chunk = [0x5au8; 1024];
    let mut total = 0;
    loop {
        match s.write(&chunk) {
            Ok(n) => total += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return total,
            Err(e) => panic!("write: {e}"),
        }
        assert!(total < 64 << 20, "writes never blocked");
    }
}

/// Writes until a write returns `WouldBlock` and the fd then stays quiet for [`QUIET`]
/// milliseconds (no write notice: the peer's room is used up, not only the send slots);
/// how many bytes went. Nothing may be in flight towards `s` meanwhile.
fn fill_until_stuck(s: &mut RdmaSocket) -> usize {
    let mut total = 0;
    loop {
        total += fill(s);
        if !readable_within(s, QUIET) {
            return total;
        }
        assert!(total < 64 << 20, "the write notice never ended");
    }
}

/// Reads until `WouldBlock`; how many bytes came.
fn drain(s: &mut RdmaSocket) -> usize {
    let mut buf = [0u8; 4096];
    let mut total = 0;
    loop {
        match s.read(&mut buf) {
            Ok(0) => panic!("end of stream"),
            Ok(n) => total += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return total,
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// A socket's fd under poll(2): quiet when idle, readable while bytes wait and quiet once
/// they are read, quiet while a write waits for room, readable when the peer frees it, and
/// quiet again after the next write call.
pub(crate) fn socket_fd_is_level_triggered_per_direction(f: &Fixture) {
    let (mut s, mut c) = f.pair_with(&readiness::options());
    c.set_nonblocking(true).unwrap();
    assert!(!readable_within(&c, QUIET), "an idle socket's fd is quiet");
    s.write_all(b"0123456789").unwrap();
    assert!(readable_within(&c, LOST), "readable once bytes came");
    assert!(readable_within(&c, 0), "still readable: the bytes wait");
    let mut buf = [0u8; 4];
    assert_eq!(c.read(&mut buf).unwrap(), 4);
    assert!(readable_within(&c, 0), "readable while 6 bytes wait");
    assert_eq!(c.read(&mut [0u8; 64]).unwrap(), 6);
    assert!(!readable_within(&c, QUIET), "quiet once everything is read");
    // Quiet while the write waits for room (fill_until_stuck ends on a quiet fd).
    let sent = fill_until_stuck(&mut c);
    let mut got = vec![0u8; sent];
    s.read_exact(&mut got).unwrap();
    assert!(readable_within(&c, LOST), "readable once writing can go on");
    assert!(
        readable_within(&c, 0),
        "still readable until the next write call"
    );
    assert!(c.write(b"x").unwrap() == 1);
    assert!(!readable_within(&c, QUIET), "quiet after the next write");
    let mut one = [0u8; 1];
    s.read_exact(&mut one).unwrap();
    // End of stream makes it readable, and stays so.
    s.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(readable_within(&c, LOST), "readable at end of stream");
    assert_eq!(c.read(&mut buf).unwrap(), 0);
    assert!(
        readable_within(&c, 0),
        "a read at end of stream does not block"
    );
}

/// Both directions block at once; the peer then makes both possible. A read's `WouldBlock`
/// keeps the write's notification, and a write's `WouldBlock` keeps the bytes' readability.
pub(crate) fn socket_fd_loses_no_wakeup_when_both_directions_block(f: &Fixture) {
    let (mut s, mut c) = f.pair_with(&readiness::options());
    c.set_nonblocking(true).unwrap();
    for round in 0..20 {
        // Both block.
        let sent = fill_until_stuck(&mut c);
        assert_eq!(drain(&mut c), 0);
        assert!(
            !readable_within(&c, 0),
            "round {round}: quiet with both blocked"
        );
        // The peer frees the room, then sends bytes.
        let mut got = vec![0u8; sent];
        s.read_exact(&mut got).unwrap();
        assert!(
            readable_within(&c, LOST),
            "round {round}: readable once room came"
        );
        s.write_all(&[round as u8; 100]).unwrap();
        // Reading to WouldBlock keeps the write's notification.
        let mut back = 0;
        let deadline = Instant::now() + Duration::from_millis(u64::from(LOST));
        while back < 100 {
            assert!(readable_within(&c, LOST), "round {round}: bytes came");
            back += drain(&mut c);
            assert!(
                Instant::now() < deadline,
                "round {round}: {back} of 100 bytes"
            );
        }
        assert!(
            readable_within(&c, 0),
            "round {round}: a read's WouldBlock swallowed the write's notification"
        );
        // The reverse: the peer sends while the write blocks again.
        let mut sent = fill_until_stuck(&mut c);
        s.write_all(&[round as u8; 50]).unwrap();
        assert!(
            readable_within(&c, LOST),
            "round {round}: readable once bytes came"
        );
        // The peer's message may carry a credit update, so write until a write blocks.
        sent += fill(&mut c);
        assert!(
            readable_within(&c, 0),
            "round {round}: a write's WouldBlock hid the bytes"
        );
        assert_eq!(drain(&mut c), 50);
        let mut got = vec![0u8; sent];
        s.read_exact(&mut got).unwrap();
        assert!(readable_within(&c, LOST), "round {round}: room again");
        assert_eq!(c.write(b"z").unwrap(), 1);
        s.read_exact(&mut [0u8; 1]).unwrap();
    }
}

/// A listener's fd: quiet with no request, readable while `accept` may go on, quiet again
/// once `accept` returned `WouldBlock` (no busy loop while a handshake runs).
pub(crate) fn listener_fd_is_readable_while_accept_may_go_on(f: &Fixture) {
    let (l, addr) = f.listener();
    l.set_nonblocking(true).unwrap();
    assert!(!readable_within(&l, QUIET), "quiet with no request");
    for round in 0..4 {
        let client = thread::spawn(move || RdmaSocket::connect(addr));
        let mut wakeups = 0;
        let deadline = Instant::now() + Duration::from_millis(u64::from(LOST));
        let server = loop {
            assert!(readable_within(&l, LOST), "round {round}: no wakeup (lost)");
            wakeups += 1;
            match l.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("round {round}: accept: {e}"),
            }
            assert!(Instant::now() < deadline, "round {round}: no connection");
        };
        // A handshake takes a few steps (the request, ESTABLISHED, on iWARP the first
        // frame), each a wakeup; a readable fd that accept cannot use would be hundreds.
        assert!(
            wakeups < 20,
            "round {round}: {wakeups} wakeups for one accept"
        );
        let mut c = client.join().unwrap().expect("connect");
        assert!(matches!(l.accept(), Err(e) if e.kind() == ErrorKind::WouldBlock));
        assert!(!readable_within(&l, QUIET), "round {round}: quiet again");
        c.write_all(b"hi").unwrap();
        let mut s = server;
        let mut two = [0u8; 2];
        s.read_exact(&mut two).unwrap();
    }
}

/// 64 connections echo 20 rounds each, both ends on one epoll instance apiece (level- or
/// edge-triggered), every socket's fd registered for EPOLLIN only.
fn sixty_four_under_epoll(f: &Fixture, edge: bool) {
    const N: usize = 64;
    const ROUNDS: usize = 20;
    let (l, addr) = f.listener();
    let mut conns: Vec<(RdmaSocket, RdmaSocket)> = Vec::with_capacity(N);
    for _ in 0..N {
        let t = thread::spawn(move || RdmaSocket::connect(addr).expect("connect"));
        let s = l.accept().expect("accept").0;
        conns.push((s, t.join().unwrap()));
    }
    let flags = if edge {
        EpollFlags::EPOLLIN | EpollFlags::EPOLLET
    } else {
        EpollFlags::EPOLLIN
    };
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).unwrap();
    for (i, (s, c)) in conns.iter().enumerate() {
        s.set_nonblocking(true).unwrap();
        c.set_nonblocking(true).unwrap();
        // Server ends count from 0, clients from N.
        epoll.add(s, EpollEvent::new(flags, i as u64)).unwrap();
        epoll
            .add(c, EpollEvent::new(flags, (N + i) as u64))
            .unwrap();
    }
    let msg =
        |i: usize, r: usize| -> Vec<u8> { (0..100).map(|k| (i * 7 + r * 13 + k) as u8).collect() };
    let mut round = [0usize; N];
    let mut got: Vec<Vec<u8>> = vec![Vec::new(); N];
    let mut echo: Vec<Vec<u8>> = vec![Vec::new(); N];
    for (i, (_, c)) in conns.iter_mut().enumerate() {
        assert_eq!(c.write(&msg(i, 0)).unwrap(), 100);
    }
    let mut events = vec![EpollEvent::empty(); 2 * N];
    let deadline = Instant::now() + Duration::from_secs(60);
    while round.iter().any(|&r| r < ROUNDS) {
        assert!(Instant::now() < deadline, "stalled at rounds {round:?}");
        let n = epoll
            .wait(&mut events, EpollTimeout::from(LOST))
            .expect("epoll_wait");
        assert!(n > 0, "no wakeup within {LOST} ms (lost): rounds {round:?}");
        for ev in &events[..n] {
            let key = ev.data() as usize;
            let mut buf = [0u8; 4096];
            if key < N {
                // Server end: echo everything (reads and writes until both block).
                let s = &mut conns[key].0;
                loop {
                    let read = match s.read(&mut buf) {
                        Ok(0) => 0,
                        Ok(n) => {
                            echo[key].extend_from_slice(&buf[..n]);
                            n
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => 0,
                        Err(e) => panic!("server read: {e}"),
                    };
                    let wrote = match echo[key].is_empty() {
                        true => 0,
                        false => match s.write(&echo[key]) {
                            Ok(n) => n,
                            Err(e) if e.kind() == ErrorKind::WouldBlock => 0,
                            Err(e) => panic!("server write: {e}"),
                        },
                    };
                    echo[key].drain(..wrote);
                    if read == 0 && wrote == 0 {
                        break;
                    }
                }
            } else {
                let i = key - N;
                let c = &mut conns[i].1;
                loop {
                    match c.read(&mut buf) {
                        Ok(0) => panic!("server closed early"),
                        Ok(n) => got[i].extend_from_slice(&buf[..n]),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => panic!("client read: {e}"),
                    }
                }
                while got[i].len() >= 100 {
                    assert_eq!(
                        got[i][..100],
                        msg(i, round[i])[..],
                        "echo of connection {i}"
                    );
                    got[i].drain(..100);
                    round[i] += 1;
                    if round[i] < ROUNDS {
                        assert_eq!(c.write(&msg(i, round[i])).unwrap(), 100);
                    }
                }
            }
        }
    }
}

/// 64 connections on a level-triggered epoll.
pub(crate) fn sixty_four_socket_fds_under_level_triggered_epoll(f: &Fixture) {
    sixty_four_under_epoll(f, false);
}

/// 64 connections on an edge-triggered epoll (EPOLLET): each call that returned
/// `WouldBlock` gets its event.
pub(crate) fn sixty_four_socket_fds_under_edge_triggered_epoll(f: &Fixture) {
    sixty_four_under_epoll(f, true);
}

/// A socket registered with mio whose fd is watched too: both report the same arrivals,
/// and the fd goes on after mio's registration is gone.
pub(crate) fn socket_fd_and_mio_agree(f: &Fixture) {
    use mio::{Events, Interest, Poll, Token};
    let (mut s, mut c) = f.pair();
    c.set_nonblocking(true).unwrap();
    let mut poll = Poll::new().unwrap();
    poll.registry()
        .register(&mut c, Token(3), Interest::READABLE)
        .unwrap();
    let mut events = Events::with_capacity(8);
    for round in 0..10u8 {
        assert_eq!(drain(&mut c), 0);
        // Whatever the registration reported is taken first.
        poll.poll(&mut events, Some(Duration::ZERO)).unwrap();
        assert!(
            !readable_within(&c, 0),
            "round {round}: quiet after WouldBlock"
        );
        s.write_all(&[round; 30]).unwrap();
        assert!(
            readable_within(&c, LOST),
            "round {round}: the fd saw the bytes"
        );
        let end = Instant::now() + Duration::from_millis(u64::from(LOST));
        let mut seen = false;
        while !seen && Instant::now() < end {
            poll.poll(&mut events, Some(Duration::from_millis(100)))
                .unwrap();
            seen = events
                .iter()
                .any(|e| e.token() == Token(3) && e.is_readable());
        }
        assert!(seen, "round {round}: mio saw no readable event");
        let mut got = 0;
        while got < 30 {
            assert!(
                readable_within(&c, LOST),
                "round {round}: {got} of 30 bytes"
            );
            got += drain(&mut c);
        }
    }
    poll.registry().deregister(&mut c).unwrap();
    s.write_all(b"after").unwrap();
    assert!(
        readable_within(&c, LOST),
        "the fd outlives mio's registration"
    );
    assert_eq!(drain(&mut c), 5);
}

/// mio's own `tcp_server` example's loop, unchanged but for the types: register an accepted
/// connection for both directions, greet it on its first writable event and re-register it
/// for reads only, then read on readable events until `WouldBlock`, echoing what came.
pub(crate) fn mio_tcp_server_example_loop(f: &Fixture) {
    use mio::{Events, Interest, Poll, Token};
    const SERVER: Token = Token(0);
    const GREETING: &[u8] = b"Hello world\n";
    let (mut l, addr) = f.listener();
    let client = thread::spawn(move || -> std::io::Result<Vec<u8>> {
        let mut c = RdmaSocket::connect(addr)?;
        let mut greeting = vec![0u8; GREETING.len()];
        c.read_exact(&mut greeting)?;
        c.write_all(b"ping")?;
        let mut echo = [0u8; 4];
        c.read_exact(&mut echo)?;
        greeting.extend_from_slice(&echo);
        Ok(greeting)
    });
    l.set_nonblocking(true).unwrap();
    let mut poll = Poll::new().unwrap();
    let mut events = Events::with_capacity(128);
    poll.registry()
        .register(&mut l, SERVER, Interest::READABLE)
        .unwrap();
    let mut connection: Option<RdmaSocket> = None;
    let mut echoed = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while echoed < 4 {
        assert!(Instant::now() < deadline, "the loop stalled");
        poll.poll(&mut events, Some(Duration::from_secs(1)))
            .unwrap();
        for event in events.iter() {
            match event.token() {
                SERVER => loop {
                    let (mut c, _) = match l.accept() {
                        Ok(x) => x,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => panic!("accept: {e}"),
                    };
                    c.set_nonblocking(true).unwrap();
                    poll.registry()
                        .register(&mut c, Token(1), Interest::READABLE.add(Interest::WRITABLE))
                        .unwrap();
                    connection = Some(c);
                },
                Token(1) => {
                    let c = connection.as_mut().expect("accepted");
                    if event.is_writable() {
                        match c.write(GREETING) {
                            Ok(n) if n == GREETING.len() => poll
                                .registry()
                                .reregister(c, Token(1), Interest::READABLE)
                                .unwrap(),
                            Ok(n) => panic!("short greeting of {n}"),
                            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                            Err(e) => panic!("write: {e}"),
                        }
                    }
                    if event.is_readable() {
                        let mut buf = [0u8; 64];
                        loop {
                            match c.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) => {
                                    c.write_all(&buf[..n]).unwrap();
                                    echoed += n;
                                }
                                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                                Err(e) => panic!("read: {e}"),
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }
    assert_eq!(client.join().unwrap().unwrap(), b"Hello world\nping");
}

/// `examples/poll_echo.rs`'s server (a poll(2) loop over the listener's fd and 64
/// connections' fds) with its 64 clients on one poll(2) loop, 100 000 bytes each.
pub(crate) fn poll_echo_server_with_64_clients_on_one_poll_loop(f: &Fixture) {
    let (l, addr): (RdmaListener, _) = f.listener();
    let server = thread::spawn(move || poll_echo::serve(l, Some(64)));
    if let Err(e) = poll_echo::clients(addr, 64, 100_000) {
        let server_result = match server.is_finished() {
            true => format!("{:?}", server.join()),
            false => "still serving".to_string(),
        };
        panic!("the clients failed: {e}; the poll(2) server: {server_result}");
    }
    server
        .join()
        .unwrap()
        .expect("the poll(2) server ends after 64 clients");
}
