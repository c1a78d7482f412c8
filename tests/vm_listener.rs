//! Hostile and stalled rdma_cm peers on the kernel's rxe0 in the VM (`tests/vm/run.sh`, which
//! runs these with `--ignored --test-threads=1`): the listener rejects a bad hello with a
//! reason, a client stalled in its handshake holds up no other, the handshakes under way are
//! bounded by the listen backlog, and a client answered with a bad hello fails clearly. Each
//! test panics when rxe0 or the VM's address is missing.

use rdmasock::{RdmaListener, RdmaSocket, SocketOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

#[path = "socket_support/mod.rs"]
mod socket_support;
#[path = "vm_support/mod.rs"]
mod vm_support;

/// A listener on rxe0's address with the default options, on an ephemeral port.
fn listener() -> (RdmaListener, SocketAddr) {
    let l = RdmaListener::bind(SocketAddr::new(vm_support::device_ip("rxe0"), 0))
        .expect("bind on rxe0's address");
    let addr = l.local_addr().expect("listener address");
    (l, addr)
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn hostile_hello_is_rejected_with_a_reason_and_the_listener_goes_on() {
    use rdmasock::cm::{CmId, ConnectionParameters, Error, EventChannel};
    let (l, addr) = listener();
    let server = thread::spawn(move || {
        let (mut s, _) = l.accept().expect("the good client after the hostile ones");
        let mut b = [0u8; 2];
        s.read_exact(&mut b).unwrap();
        b
    });
    let channel = EventChannel::open().unwrap();
    for (what, data) in [
        ("HTTP", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("short", vec![1u8; 10]),
        ("zero credits", {
            let mut h = vec![0u8; 40];
            h[0] = 1;
            h
        }),
    ] {
        let id = CmId::new(&channel).unwrap();
        id.resolve(None, addr, Duration::from_secs(5)).unwrap();
        let param = ConnectionParameters {
            private_data: data,
            ..ConnectionParameters::default()
        };
        let err = id
            .connect_blocking(None, &param, Duration::from_secs(5))
            .expect_err("the listener rejects a hostile hello");
        match err {
            Error::Rejected { private_data, .. } => {
                let text = String::from_utf8_lossy(&private_data);
                eprintln!("{what}: rejected with {text:?}");
                assert!(text.starts_with("rdmasock: "), "{text}");
            }
            other => panic!("{what}: expected a rejection, got {other}"),
        }
    }
    let mut c = RdmaSocket::connect(addr).expect("a good client still gets in");
    c.write_all(b"ok").unwrap();
    assert_eq!(&server.join().unwrap(), b"ok");
}

/// A client that stalls half-way through its handshake holds up no other: its rdma_cm
/// connect (a good hello, no QP) gets the listener's reply and never sends the RTU that would
/// establish the connection. The listener's connect timeout is 60 s and the good client's
/// 10 s: a listener that answered one request at a time would wait for the staller, and the
/// good client would give up.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn a_stalled_handshake_holds_up_no_other_client() {
    let (addr, server) = serve_a_good_client(128);
    let staller = rxe_staller(addr);
    let mut c = RdmaSocket::connect(addr).expect("the good client is not held up");
    c.write_all(b"ok").unwrap();
    assert_eq!(&server.join().expect("accept thread"), b"ok");
    drop(staller);
}

/// A listener on rxe0 with a 60 s connect timeout and `backlog`, and a thread that accepts
/// one connection, checks that it is an rdmasock client (not a staller) and returns the two
/// bytes it sends.
fn serve_a_good_client(backlog: u32) -> (SocketAddr, thread::JoinHandle<[u8; 2]>) {
    let opts = SocketOptions::builder()
        .connect_timeout(Duration::from_secs(60))
        .backlog(backlog)
        .build()
        .unwrap();
    let l = RdmaListener::bind_with(SocketAddr::new(vm_support::device_ip("rxe0"), 0), &opts)
        .expect("bind on rxe0");
    let addr = l.local_addr().unwrap();
    let server = thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept the good client");
        assert!(s.peer_is_rdmasock(), "the good client, not the staller");
        let mut b = [0u8; 2];
        s.read_exact(&mut b).expect("the good client's bytes");
        b
    });
    (addr, server)
}

/// A client stalled in its handshake with the listener at `addr`: an rdma_cm id with a good
/// hello and no QP that got the listener's reply (so the listener took its request) and
/// never sends its RTU. Dropping it (the id, then its channel) ends the handshake.
fn rxe_staller(addr: SocketAddr) -> (rdmasock::cm::CmId, rdmasock::cm::EventChannel) {
    use rdmasock::cm::{CmEvent, CmId, ConnectionParameters, EventChannel};
    let channel = EventChannel::open().unwrap();
    let staller = CmId::new(&channel).unwrap();
    staller.resolve(None, addr, Duration::from_secs(5)).unwrap();
    // A QP number of its own for each staller (it has no QP): the passive side's CM rejects
    // a second request from the same QP number as a stale connection.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let qp_num = 0x80_0000 | (std::process::id() & 0x3FF) << 12 | (n & 0xFFF);
    staller
        .connect(&ConnectionParameters {
            qp_num: rdmasock::verbs::QpNumber(qp_num),
            private_data: socket_support::fake_hello().to_bytes().to_vec(),
            ..ConnectionParameters::default()
        })
        .expect("the staller's CONNECT");
    let reply = loop {
        let ev = channel
            .get_event(Some(Duration::from_secs(10)))
            .expect("the staller's channel")
            .expect("an answer to the staller within 10 s");
        if ev.id == staller.token() {
            break ev.event;
        }
    };
    assert!(
        matches!(reply, CmEvent::ConnectResponse { .. }),
        "the staller got {reply:?}"
    );
    (staller, channel)
}

/// Handshakes under way are bounded by the listen backlog on the kernel path too: with a
/// backlog of 1 held by a staller, the next client is refused at once (a reject carrying
/// the reason, not a request left to time out); once the staller is gone, a client gets in.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn handshakes_under_way_are_bounded_by_the_backlog() {
    let (addr, server) = serve_a_good_client(1);
    let staller = rxe_staller(addr);
    let start = Instant::now();
    let err = RdmaSocket::connect_timeout(&addr, Duration::from_secs(60))
        .expect_err("no room for a second handshake while the staller holds the backlog");
    let waited = start.elapsed();
    eprintln!("while the staller holds the backlog, after {waited:?}: {err}");
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err}");
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    assert!(
        err.to_string()
            .contains("the listener's backlog (1) is full"),
        "{err}"
    );
    drop(staller);
    let end = Instant::now() + Duration::from_secs(60);
    let mut c = loop {
        match RdmaSocket::connect(addr) {
            Ok(c) => break c,
            Err(e) if Instant::now() < end => eprintln!("retrying after: {e}"),
            Err(e) => panic!("no client got in after the staller left: {e}"),
        }
    };
    c.write_all(b"ok").unwrap();
    assert_eq!(&server.join().expect("accept thread"), b"ok");
}

/// A server that answers with something other than an rsocket hello (here an rdma_cm
/// ACCEPT carrying an HTTP status line) makes `connect` fail with InvalidData naming the
/// address, and nothing hangs or panics.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn a_server_answering_with_a_bad_hello_fails_the_connect_clearly() {
    use rdmasock::cm::{CmEvent, CmId, ConnectionParameters, EventChannel};
    let channel = EventChannel::open().unwrap();
    let server = CmId::new(&channel).unwrap();
    server
        .bind(SocketAddr::new(vm_support::device_ip("rxe0"), 0))
        .unwrap();
    server.listen(4).unwrap();
    let addr = server.local_addr().unwrap().expect("the bound address");
    let answer = thread::spawn(move || {
        let ev = channel
            .get_event(Some(Duration::from_secs(20)))
            .expect("the server's channel")
            .expect("a request within 20 s");
        let CmEvent::ConnectRequest(request) = ev.event else {
            panic!("expected a request, got {:?}", ev.event);
        };
        request
            .id
            .accept(&ConnectionParameters {
                qp_num: rdmasock::verbs::QpNumber(0x80_1234),
                private_data: b"HTTP/1.1 200 OK\r\n\r\n".to_vec(),
                ..ConnectionParameters::default()
            })
            .expect("ACCEPT with a bad hello");
        // The ids live until the client has its answer.
        (server, request.id, channel)
    });
    let start = Instant::now();
    let err = RdmaSocket::connect(addr).expect_err("a bad hello is no connection");
    eprintln!("after {:?}: {err}", start.elapsed());
    assert_eq!(err.kind(), ErrorKind::InvalidData, "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("{addr} answered with an unusable hello")),
        "{text}"
    );
    drop(answer.join().expect("the answering thread"));
}
