//! What a uiwarp listener and client do with bad input, on this host (no kernel RDMA, so
//! every connection goes through the userspace iWARP provider on loopback TCP): a refused
//! port, a rejected hello, a peer that is not an iWARP peer, and hostile clients that must
//! not stop a listener.

use rdmasock::{RdmaSocket, SocketOptions};
use rdmasock_uiwarp::UiwarpCm;
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

#[path = "socket_support/mod.rs"]
mod socket_support;
use socket_support::{listener_with, loopback};
use std::thread::JoinHandle;

#[test]
fn rejected_hello_and_refused_port_say_why() {
    // Nothing listens: the userspace path says so.
    let port = std::net::TcpListener::bind(loopback())
        .unwrap()
        .local_addr()
        .unwrap();
    let err = RdmaSocket::connect_via(&UiwarpCm, port, &SocketOptions::default())
        .expect_err("nothing listens");
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err}");
    assert!(err.to_string().contains(&port.to_string()), "{err}");
    // A plain TCP server that closes at once: the MPA exchange fails with a reason.
    let tcp = std::net::TcpListener::bind(loopback()).unwrap();
    let addr = tcp.local_addr().unwrap();
    let t = thread::spawn(move || drop(tcp.accept().unwrap()));
    let err = RdmaSocket::connect_via(
        rdmasock::connection_manager(),
        addr,
        &SocketOptions::default(),
    )
    .expect_err("not an iWARP peer");
    eprintln!("error text: {err}");
    assert!(
        err.to_string().contains("closed") || err.to_string().contains("reset"),
        "{err}"
    );
    t.join().unwrap();
    // Another service on the port (a web server): the error quotes what it answered.
    let tcp = std::net::TcpListener::bind(loopback()).unwrap();
    let addr = tcp.local_addr().unwrap();
    let t = thread::spawn(move || {
        let (mut s, _) = tcp.accept().unwrap();
        let mut request = [0u8; 16];
        s.read_exact(&mut request).unwrap();
        s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap();
        // Open until the client gives up: closing with its request unread would reset the
        // connection, which may reach the client before the answer.
        let _ = s.read_to_end(&mut Vec::new());
        request
    });
    let err = RdmaSocket::connect_via(
        rdmasock::connection_manager(),
        addr,
        &SocketOptions::default(),
    )
    .expect_err("not an iWARP peer");
    eprintln!("error text: {err}");
    assert_eq!(&t.join().unwrap(), b"MPA ID Req Frame");
    let text = err.to_string();
    assert!(
        text.contains(r#"it sent "HTTP/1.1 400 Bad Request\r\n\r\n""#),
        "{err}"
    );
    assert!(text.contains(&addr.to_string()), "{err}");
}

/// The services that stage the connect failures on the kernel's siw in the VM
/// (`vm_siw_services.rs`), against the userspace provider: the same kinds of error. An echo
/// service answers the MPA request with itself (siw: CONNECT_ERROR, ConnectionAborted), and
/// a silent one lets the connect time out (siw: UNREACHABLE, TimedOut).
#[test]
fn echo_and_silent_services_fail_the_connect_as_on_siw() {
    let tcp = std::net::TcpListener::bind(loopback()).unwrap();
    let addr = tcp.local_addr().unwrap();
    let t = thread::spawn(move || {
        let (mut s, _) = tcp.accept().unwrap();
        let _ = std::io::copy(&mut s.try_clone().unwrap(), &mut s);
    });
    let err = RdmaSocket::connect_via(&UiwarpCm, addr, &SocketOptions::default())
        .expect_err("an echo service is no iWARP listener");
    eprintln!("echo: {err}");
    assert_eq!(err.kind(), ErrorKind::ConnectionAborted, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("the peer sent an MPA request, not a reply"),
        "{err}"
    );
    assert!(text.contains(&addr.to_string()), "{err}");
    t.join().unwrap();

    let tcp = std::net::TcpListener::bind(loopback()).unwrap();
    let addr = tcp.local_addr().unwrap();
    let t = thread::spawn(move || {
        let (mut s, _) = tcp.accept().unwrap();
        let _ = s.read_to_end(&mut Vec::new());
    });
    let opts = SocketOptions::builder()
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let start = Instant::now();
    let err = RdmaSocket::connect_via(&UiwarpCm, addr, &opts)
        .expect_err("a silent service never answers");
    let waited = start.elapsed();
    eprintln!("silent, after {waited:?}: {err}");
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    assert!(
        err.to_string().contains("did not answer the MPA request"),
        "{err}"
    );
    assert!(waited >= Duration::from_millis(500), "{waited:?}");
    t.join().unwrap();
}

/// What a raw TCP client gets back before the listener closes on it (bounded).
fn answer_to(addr: SocketAddr, send: &[u8]) -> Vec<u8> {
    let mut tcp = std::net::TcpStream::connect(addr).expect("TCP connect to the listener");
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    tcp.write_all(send).expect("send to the listener");
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer)
        .expect("the listener answers and closes");
    answer
}

/// The MPA frame at the start of `answer`: (flags, private data without IRD/ORD).
fn mpa_reply(answer: &[u8]) -> (u8, Vec<u8>) {
    use rdmasock_uiwarp::wire::mpa::{MpaFrame, MpaRepr, REPLY_KEY};
    let frame = MpaFrame::new_checked(answer)
        .unwrap_or_else(|e| panic!("not an MPA frame ({e:?}): {:?}", answer.escape_ascii()));
    assert_eq!(frame.key(), REPLY_KEY, "{:?}", answer.escape_ascii());
    let repr = MpaRepr::parse(&frame).expect("a well-formed MPA reply");
    (frame.flags(), repr.private_data.to_vec())
}

/// A listener on the userspace provider goes on after hostile clients: plain TCP speaking
/// HTTP, a client that leaves at once, one that stalls half-way through its MPA request,
/// and an MPA request whose private data is not an rsocket hello. Each that sent something
/// gets an MPA reject (the bad hello's with the reason), none reaches `accept`, and a good
/// client is served while the staller still holds its connection.
#[test]
fn a_listener_goes_on_after_hostile_clients() {
    use rdmasock_uiwarp::protocol::{Config, Connection, RegionTable};
    use rdmasock_uiwarp::wire::mpa::flags;
    let (l, addr) = listener_with(&SocketOptions::default());
    let server = thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept the good client");
        let mut b = [0u8; 4];
        s.read_exact(&mut b).expect("the good client's bytes");
        s.write_all(&b).expect("echo");
        b
    });
    let (reply_flags, _) = mpa_reply(&answer_to(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    assert_ne!(reply_flags & flags::REJECT, 0, "HTTP gets a reject");
    drop(std::net::TcpStream::connect(addr).expect("connect and leave"));
    let mut staller = std::net::TcpStream::connect(addr).expect("the staller connects");
    staller.write_all(b"MPA ID Req").unwrap();
    // A real MPA request, from the protocol core, carrying a web request as private data.
    let mut core =
        Connection::initiator(Config::default(), b"GET / HTTP/1.1\r\n\r\n", Instant::now())
            .expect("an initiator");
    let mut request = Vec::new();
    core.poll_transmit(&RegionTable::new(), &mut request, usize::MAX);
    let (reply_flags, reason) = mpa_reply(&answer_to(addr, &request));
    assert_ne!(reply_flags & flags::REJECT, 0, "a bad hello gets a reject");
    let reason = String::from_utf8_lossy(&reason).into_owned();
    eprintln!("a bad hello is rejected with {reason:?}");
    assert!(reason.starts_with("rdmasock: "), "{reason:?}");
    assert!(reason.len() <= 148, "fits IB's REJECT too: {reason:?}");
    let mut good = RdmaSocket::connect(addr).expect("a good client still gets in");
    good.write_all(b"ping").unwrap();
    let mut echo = [0u8; 4];
    good.read_exact(&mut echo).unwrap();
    assert_eq!(&echo, b"ping");
    assert_eq!(&server.join().unwrap(), b"ping");
    drop(staller);
}

/// What `TcpStream` refuses is refused here too, with `InvalidInput`: a zero connect, read or
/// write timeout; and a keepalive interval under 1 ms (as the options builder does). A
/// listener has no pending error.
#[test]
fn zero_and_too_short_durations_are_refused() {
    let nowhere: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let err = RdmaSocket::connect_timeout(&nowhere, Duration::ZERO).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    let (l, addr) = listener_with(&SocketOptions::default());
    assert!(l.take_error().expect("take_error").is_none());
    let server = thread::spawn(move || l.accept().expect("accept").0);
    let c = RdmaSocket::connect_timeout(&addr, Duration::from_secs(10)).expect("connect");
    let zero = Some(Duration::ZERO);
    for (what, err) in [
        ("read timeout", c.set_read_timeout(zero).unwrap_err()),
        ("write timeout", c.set_write_timeout(zero).unwrap_err()),
        ("keepalive 0", c.set_keepalive(zero).unwrap_err()),
        (
            "keepalive 500 µs",
            c.set_keepalive(Some(Duration::from_micros(500)))
                .unwrap_err(),
        ),
    ] {
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{what}: {err}");
    }
    c.set_keepalive(Some(Duration::from_millis(1)))
        .expect("a 1 ms keepalive");
    assert_eq!(c.keepalive().unwrap(), Some(Duration::from_millis(1)));
    drop(server.join().expect("accept thread"));
}

/// A raw iWARP initiator (the protocol core over a plain TCP socket) whose MPA request
/// carries a well-formed rsocket hello, and the request's bytes.
fn initiator_with_a_good_hello() -> (rdmasock_uiwarp::protocol::Connection, Vec<u8>) {
    use rdmasock_uiwarp::protocol::{Config, Connection, RegionTable};
    let hello = socket_support::fake_hello();
    let mut core = Connection::initiator(Config::default(), &hello.to_bytes(), Instant::now())
        .expect("an initiator");
    let mut request = Vec::new();
    core.poll_transmit(&RegionTable::new(), &mut request, usize::MAX);
    (core, request)
}

/// The MPA request of a client whose private data is a well-formed rsocket hello: the
/// listener takes it and answers, and then waits for the client's ready-to-receive.
fn request_with_a_good_hello() -> Vec<u8> {
    initiator_with_a_good_hello().1
}

/// A client that completes the iWARP handshake (request, reply, its ready-to-receive) and
/// then says nothing: the listener waits for its first frame, up to its bound.
fn silent_initiator(addr: SocketAddr) -> std::net::TcpStream {
    use rdmasock_uiwarp::protocol::{Event, RegionTable};
    let (mut core, request) = initiator_with_a_good_hello();
    let mut tcp = std::net::TcpStream::connect(addr).expect("the silent client connects");
    tcp.write_all(&request).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let memory = RegionTable::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tcp.read(&mut buf).expect("the listener's MPA reply");
        assert_ne!(n, 0, "the listener closed on the silent client");
        core.handle_input(&buf[..n], &memory);
        match core.poll_event() {
            Some(Event::Established(_)) => break,
            None => {}
            Some(other) => panic!("the silent client's handshake: {other:?}"),
        }
    }
    let mut rtr = Vec::new();
    core.poll_transmit(&memory, &mut rtr, usize::MAX);
    assert!(!rtr.is_empty(), "a ready-to-receive to send");
    tcp.write_all(&rtr).unwrap();
    tcp
}

/// A client that sends a good request and then goes away, and one that stalls after it
/// (no ready-to-receive), fail their handshakes: `accept` skips both, as a TCP listener never
/// shows such connections, and returns the good client; `take_error` tells a failure once.
#[test]
fn accept_skips_clients_that_leave_or_stall_mid_handshake() {
    let opts = SocketOptions::builder()
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let (l, addr) = listener_with(&opts);
    let server = thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept goes on to the good client");
        let mut b = [0u8; 4];
        s.read_exact(&mut b).expect("the good client's bytes");
        s.write_all(&b).unwrap();
        l
    });
    let request = request_with_a_good_hello();
    let mut leaver = std::net::TcpStream::connect(addr).expect("the leaver connects");
    leaver.write_all(&request).unwrap();
    // The leaver goes once it has the listener's reply (accept took its request).
    leaver
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut reply = [0u8; 20];
    leaver
        .read_exact(&mut reply)
        .expect("the listener's MPA reply");
    drop(leaver);
    let mut staller = std::net::TcpStream::connect(addr).expect("the staller connects");
    staller.write_all(&request).unwrap();
    let mut c = RdmaSocket::connect(addr).expect("the good client connects");
    c.write_all(b"ping").unwrap();
    let mut b = [0u8; 4];
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ping");
    let l = server.join().expect("accept thread");
    // Handshakes move on inside accept: call it (nonblocking) until a failure is told. The
    // staller's comes within its 300 ms, the leaver's sooner.
    l.set_nonblocking(true).unwrap();
    let end = Instant::now() + Duration::from_secs(30);
    let err = loop {
        match l.accept() {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Ok((_, from)) => panic!("only the good client gets in, not {from}"),
            Err(e) => panic!("accept: {e}"),
        }
        if let Some(e) = l.take_error().unwrap() {
            break e;
        }
        assert!(Instant::now() < end, "no failed handshake told within 30 s");
        thread::sleep(Duration::from_millis(10));
    };
    eprintln!("take_error: {err}");
    assert!(err.to_string().contains("accepting 127.0.0.1:"), "{err}");
    assert!(l.take_error().unwrap().is_none(), "told once");
    drop(staller);
}

/// A client that sends a good request and leaves before `accept` answers it is skipped:
/// `accept` returns the good client that comes next (it returned the client's departure as
/// its own error), and `take_error` tells.
#[test]
fn a_client_gone_before_the_answer_is_skipped() {
    let (l, addr) = listener_with(&SocketOptions::default());
    let mut leaver = std::net::TcpStream::connect(addr).expect("the leaver connects");
    leaver.write_all(&request_with_a_good_hello()).unwrap();
    leaver.shutdown(std::net::Shutdown::Write).unwrap();
    // The listener closes its side once it has seen ours: the request is queued and its
    // client gone before accept is called.
    leaver
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut rest = Vec::new();
    leaver
        .read_to_end(&mut rest)
        .expect("the listener closes on the leaver");
    drop(leaver);
    let good = good_client(addr);
    let (mut s, _) = l.accept().expect("accept skips the leaver");
    echo_four(&mut s);
    assert_eq!(&good.join().expect("good client"), b"ping");
    let err = l
        .take_error()
        .unwrap()
        .expect("the leaver's departure is told");
    assert!(err.to_string().contains("accepting 127.0.0.1:"), "{err}");
}

/// Handshakes under way are bounded by the listen backlog: with a backlog of 1 and a
/// staller taking it, the next client is refused at once, told why; once the staller
/// leaves, a client gets in.
#[test]
fn handshakes_under_way_are_bounded_by_the_backlog() {
    let opts = SocketOptions::builder()
        .connect_timeout(Duration::from_secs(120))
        .backlog(1)
        .build()
        .unwrap();
    let (l, addr) = listener_with(&opts);
    let mut staller = std::net::TcpStream::connect(addr).expect("the staller connects");
    staller.write_all(&request_with_a_good_hello()).unwrap();
    staller
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let server = thread::spawn(move || {
        let (mut s, _) = l
            .accept()
            .expect("accept the client after the staller left");
        echo_four(&mut s);
    });
    let mut reply = [0u8; 20];
    staller
        .read_exact(&mut reply)
        .expect("the staller's request is answered");
    let err = RdmaSocket::connect_timeout(&addr, Duration::from_secs(60))
        .expect_err("no room for a second handshake while the staller holds the backlog");
    eprintln!("while the staller holds the backlog: {err}");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    assert!(
        err.to_string()
            .contains("the listener's backlog (1) is full"),
        "{err}"
    );
    drop(staller);
    let end = Instant::now() + Duration::from_secs(30);
    let good = loop {
        match RdmaSocket::connect(addr) {
            Ok(c) => break c,
            // The listener may refuse while the gone client's request still fills its queue.
            Err(e) if Instant::now() < end => eprintln!("retrying after: {e}"),
            Err(e) => panic!("no client got in after the staller left: {e}"),
        }
    };
    let mut good = good;
    good.write_all(b"ping").unwrap();
    let mut b = [0u8; 4];
    good.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ping");
    server.join().expect("accept thread");
}

/// A listener answers requests whether or not anyone calls `accept`, as a TCP listener's
/// queue takes connections: its backlog's worth of clients connect and write before any
/// `accept`, the next client is refused at once with the reason, and `accept` then returns
/// the waiting connections in the order they came, their bytes intact, after which there
/// is room again.
#[test]
fn a_listener_answers_its_backlog_before_accept_and_refuses_beyond_it() {
    let opts = SocketOptions::builder()
        .connect_timeout(Duration::from_secs(60))
        .backlog(2)
        .build()
        .unwrap();
    let (l, addr) = listener_with(&opts);
    let mut clients = Vec::new();
    for i in 0..2u8 {
        let mut c = RdmaSocket::connect(addr)
            .unwrap_or_else(|e| panic!("client {i}, within the backlog, before any accept: {e}"));
        c.write_all(&[i; 4]).unwrap();
        clients.push(c);
    }
    let start = Instant::now();
    let err = RdmaSocket::connect(addr).expect_err("the backlog is full");
    eprintln!(
        "a client beyond the backlog, after {:?}: {err}",
        start.elapsed()
    );
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err}");
    assert!(
        err.to_string()
            .contains("the listener's backlog (2) is full"),
        "{err}"
    );
    for i in 0..2u8 {
        let (mut s, _) = l.accept().expect("a waiting connection");
        let mut b = [0u8; 4];
        s.read_exact(&mut b).expect("its bytes");
        assert_eq!(b, [i; 4], "the connections come in the order they came");
        s.write_all(&b).unwrap();
    }
    for (i, c) in clients.iter_mut().enumerate() {
        let mut b = [0u8; 4];
        c.read_exact(&mut b).expect("the echo");
        assert_eq!(b, [i as u8; 4]);
    }
    let _room = RdmaSocket::connect(addr).expect("room again once accept took them");
}

/// `accept` answers every request as it comes: a client that stalls before its
/// ready-to-receive holds up no other. The listener's connect timeout is 120 s and the good
/// client's 10 s: answering one request at a time, the listener would wait for the staller
/// and the good client would give up.
#[test]
fn a_stalled_handshake_holds_up_no_other_client() {
    let (l, addr, staller) = listener_with_a_staller();
    let server = thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept the good client");
        assert!(s.peer_is_rdmasock(), "the good client, not the staller");
        echo_four(&mut s);
    });
    assert_eq!(&good_client(addr).join().expect("good client"), b"ping");
    server.join().expect("accept thread");
    drop(staller);
}

/// A listener with a 120 s connect timeout, its address, and a client that has sent a good
/// request to it and stalls.
fn listener_with_a_staller() -> (rdmasock::RdmaListener, SocketAddr, std::net::TcpStream) {
    let opts = SocketOptions::builder()
        .connect_timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let (l, addr) = listener_with(&opts);
    let mut staller = std::net::TcpStream::connect(addr).expect("the staller connects");
    staller.write_all(&request_with_a_good_hello()).unwrap();
    (l, addr, staller)
}

/// A client (10 s connect timeout) that sends "ping" and returns what comes back.
fn good_client(addr: SocketAddr) -> JoinHandle<[u8; 4]> {
    thread::spawn(move || {
        let mut c = RdmaSocket::connect(addr).expect("the good client is not held up");
        c.write_all(b"ping").unwrap();
        let mut b = [0u8; 4];
        c.read_exact(&mut b).unwrap();
        b
    })
}

/// Reads four bytes from `s` and writes them back.
fn echo_four(s: &mut RdmaSocket) {
    let mut b = [0u8; 4];
    s.read_exact(&mut b).expect("the good client's bytes");
    s.write_all(&b).unwrap();
}

/// A nonblocking listener on a mio loop: `accept` never waits for a handshake, and an event
/// follows whenever it can go on. A staller (120 s connect timeout on the listener) must not
/// hold up a good client, and a client that finishes its handshake but sends nothing is
/// accepted once the first-frame bound (2 s) passes: the listener's timer wakes the loop
/// (each poll may wait 30 s; a poll that ends with no event fails the test).
#[test]
fn a_nonblocking_accept_never_waits_for_a_handshake() {
    use mio::{Events, Interest, Poll, Token};
    let (mut l, addr, staller) = listener_with_a_staller();
    l.set_nonblocking(true).unwrap();
    let mut poll = Poll::new().unwrap();
    poll.registry()
        .register(&mut l, Token(0), Interest::READABLE)
        .unwrap();
    let silent = thread::spawn(move || silent_initiator(addr));
    let good = good_client(addr);
    let mut events = Events::with_capacity(8);
    let mut accepted = Vec::new();
    while accepted.len() < 2 {
        poll.poll(&mut events, Some(Duration::from_secs(30)))
            .unwrap();
        assert!(
            !events.is_empty(),
            "no event within 30 s with {} accepted: a lost wakeup",
            accepted.len()
        );
        loop {
            match l.accept() {
                Ok((s, _)) => accepted.push(s),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("accept: {e}"),
            }
        }
    }
    let (mut rdmasock, plain): (Vec<_>, Vec<_>) =
        accepted.into_iter().partition(RdmaSocket::peer_is_rdmasock);
    assert_eq!(
        (rdmasock.len(), plain.len()),
        (1, 1),
        "the good and the silent client"
    );
    echo_four(&mut rdmasock[0]);
    assert_eq!(&good.join().expect("good client"), b"ping");
    drop(silent.join().expect("silent client"));
    drop(staller);
}

/// Under tokio as well: a client stalled in its handshake never stalls `accept().await` for
/// another. The listener's connect timeout is 120 s and the good client's connect is given
/// 10 s; all of it runs on one current-thread runtime, so a wait inside `accept` would hold
/// up the good client's connect too.
#[cfg(feature = "tokio")]
#[test]
fn a_stalled_handshake_never_stalls_an_async_accept() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let opts = SocketOptions::builder()
            .connect_timeout(Duration::from_secs(120))
            .build()
            .unwrap();
        let l = rdmasock::tokio::RdmaListener::bind_with("127.0.0.1:0", &opts)
            .await
            .expect("bind");
        let addr = l.local_addr().unwrap();
        let mut staller = std::net::TcpStream::connect(addr).expect("the staller connects");
        staller.write_all(&request_with_a_good_hello()).unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.expect("accept the good client");
            let mut b = [0u8; 4];
            s.read_exact(&mut b).await.expect("the good client's bytes");
            s.write_all(&b).await.unwrap();
            s.flush().await.unwrap();
            s
        });
        let connect = rdmasock::tokio::RdmaStream::connect(addr);
        let mut c = tokio::time::timeout(Duration::from_secs(10), connect)
            .await
            .expect("the good client is not held up")
            .expect("the good client connects");
        c.write_all(b"ping").await.unwrap();
        let mut b = [0u8; 4];
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"ping");
        let accepted = server.await.expect("accept task");
        drop((accepted, c, staller));
    });
}
