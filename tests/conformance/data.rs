//! Bytes arrive, in order and intact: an echo, streams both ways at once checked by hash
//! (large, vectored, in small pieces, through small rings), IPv6, and writes that arrive with
//! the writer idle or nonblocking.

use super::socket_support::{both_ways, both_ways_with, Calls};
use super::Fixture;
use rdmasock::{RdmaSocket, SocketOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown};
use std::thread;
use std::time::Duration;

/// An echo of three sizes (one message, a few, many); both ends report the right addresses,
/// the peer is an rdmasock, and half-closing our side ends the echo with end-of-stream.
pub(crate) fn connect_accept_echo(f: &Fixture) {
    echo_on(f, f.ip);
}

/// [`connect_accept_echo`] on `ip`.
fn echo_on(f: &Fixture, ip: IpAddr) {
    let (l, addr) = f.listener_on(ip, &SocketOptions::default());
    let server = thread::spawn(move || {
        let (mut s, peer) = l.accept().expect("accept");
        assert_eq!(peer.ip(), addr.ip());
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).expect("server read");
            if n == 0 {
                break;
            }
            s.write_all(&buf[..n]).expect("server write");
        }
    });
    let mut c = RdmaSocket::connect(addr).expect("connect");
    assert_eq!(c.peer_addr().unwrap(), addr);
    assert_eq!(c.local_addr().unwrap().ip(), addr.ip());
    assert!(c.peer_is_rdmasock());
    for msg in [&b"hello"[..], &[7u8; 3000][..], &[1u8; 70_000][..]] {
        c.write_all(msg).expect("write");
        let mut back = vec![0u8; msg.len()];
        c.read_exact(&mut back).expect("read back");
        assert_eq!(back, msg);
    }
    c.shutdown(Shutdown::Write).expect("shutdown write");
    let mut rest = Vec::new();
    c.read_to_end(&mut rest)
        .expect("EOF after the server closes");
    assert!(rest.is_empty());
    server.join().expect("server thread");
}

/// IPv6: the echo on the provider's IPv6 address (which checks both ends' addresses), then a
/// pair whose ends report each other's IPv6 addresses, and 8 MiB each way intact.
pub(crate) fn ipv6_connect_accept_echo_and_stream(f: &Fixture) {
    let ip = f.ipv6();
    echo_on(f, ip);
    let (l, addr) = f.listener_on(ip, &SocketOptions::default());
    assert!(addr.is_ipv6(), "{addr}");
    let t = thread::spawn(move || l.accept().expect("accept on IPv6"));
    let c = RdmaSocket::connect(addr).expect("connect over IPv6");
    let (s, peer) = t.join().expect("accept thread");
    assert_eq!(c.peer_addr().unwrap(), addr);
    assert_eq!(c.local_addr().unwrap().ip(), ip);
    assert_eq!(
        peer,
        c.local_addr().unwrap(),
        "the server sees the client's address"
    );
    assert_eq!(s.local_addr().unwrap().ip(), ip);
    assert_eq!(s.peer_addr().unwrap(), peer);
    both_ways(s, c, 8 << 20, 64 << 10);
}

/// The fixture's large stream (1 GiB on the host, 64 MiB in the VM) both ways at once, in
/// random piece sizes, checked by hash.
pub(crate) fn large_stream_each_way_at_once_checked_by_hash(f: &Fixture) {
    let (s, c) = f.pair();
    both_ways(s, c, f.large_stream_bytes(), f.max_piece());
}

/// Pieces of at most 300 bytes both ways at once, with and without nodelay: many messages,
/// so the credit windows run out while each side writes without feeding its completions, and
/// the peer's credit updates must still find a receive posted (on siw0 there is no RNR retry
/// to hide it); coalescing reorders nothing.
pub(crate) fn small_pieces_both_ways_with_and_without_nodelay(f: &Fixture) {
    for nodelay in [false, true] {
        let (s, c) = f.pair();
        s.set_nodelay(nodelay).unwrap();
        c.set_nodelay(nodelay).unwrap();
        both_ways(s, c, f.small_pieces_bytes(), 300);
    }
}

/// Gathering writes and scattering reads, cut at random points, across the ring's wrap.
pub(crate) fn vectored_reads_and_writes_each_way_checked_by_hash(f: &Fixture) {
    let (s, c) = f.pair();
    both_ways_with(
        s,
        c,
        f.vectored_stream_bytes(),
        f.max_piece(),
        Calls::Vectored,
    );
}

/// Small rings and queues, selective signalling and event mode. Once a lost wakeup: an
/// unsignalled last write was never retired, so flush waited forever (the stream engine's
/// flush now queues a signalled zero-length WRITE; `stream_sim.rs`:
/// flush_after_unsignalled_sends_gets_a_completion).
pub(crate) fn small_rings_selective_signalling_and_event_mode(f: &Fixture) {
    let opts = SocketOptions::builder()
        .send_ring(4096)
        .recv_ring(8192)
        .send_queue_depth(16)
        .recv_queue_depth(16)
        .inline_threshold(0)
        .signal_interval(4)
        .event_mode()
        .build()
        .unwrap();
    let (s, c) = f.pair_with(&opts);
    both_ways(s, c, f.small_rings_bytes(), f.max_piece());
}

/// `set_nodelay` reads back, and small writes in quick succession arrive though the writing
/// socket is never touched again (with the userspace provider's doorbell coalescing on, the
/// default, its backstop writes what it held). The reading thread polls only its own
/// connection's queue, so nothing else can.
pub(crate) fn writes_held_for_coalescing_arrive_with_the_writer_idle(f: &Fixture) {
    let (mut s, mut c) = f.pair();
    assert!(
        !c.nodelay().unwrap(),
        "nodelay is off by default, as on TcpStream"
    );
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for round in 0..20u8 {
        let msgs: Vec<Vec<u8>> = (0..8u8)
            .map(|i| vec![round ^ i; 100 + i as usize])
            .collect();
        for m in &msgs {
            c.write_all(m).unwrap();
        }
        for m in &msgs {
            let mut got = vec![0u8; m.len()];
            s.read_exact(&mut got)
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert_eq!(&got, m, "round {round}");
        }
    }
    c.set_nodelay(true).unwrap();
    assert!(c.nodelay().unwrap());
    c.write_all(b"at once").unwrap();
    let mut got = [0u8; 7];
    s.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"at once");
}

/// On a nonblocking socket `flush` neither waits nor fails, like `TcpStream`'s: it returns
/// `Ok` with writes in flight and with the peer's ring full, and the bytes arrive.
pub(crate) fn flush_on_a_nonblocking_socket_returns_ok(f: &Fixture) {
    let (mut s, mut c) = f.pair();
    c.set_nonblocking(true).unwrap();
    let data = vec![7u8; 256 << 10];
    let mut sent = 0;
    // The peer does not read: writes stop when its ring is full.
    loop {
        match c.write(&data) {
            Ok(n) => {
                sent += n;
                c.flush()
                    .expect("a nonblocking flush with writes in flight");
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("nonblocking write: {e}"),
        }
    }
    assert!(sent > 0, "nothing could be written");
    c.flush()
        .expect("a nonblocking flush with the peer's ring full");
    c.set_nonblocking(false).unwrap();
    c.flush().expect("a blocking flush");
    let mut got = vec![0u8; sent];
    s.read_exact(&mut got).expect("read what was written");
    assert!(got.iter().all(|&b| b == 7));
}

/// A nonblocking read with nothing there is `WouldBlock`; a blocking `peek` waits for data
/// and leaves it to be read.
pub(crate) fn nonblocking_read_and_peek(f: &Fixture) {
    let (mut s, mut c) = f.pair();
    c.set_nonblocking(true).unwrap();
    let err = c.read(&mut [0u8; 4]).expect_err("nothing to read");
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    s.write_all(b"peekaboo").unwrap();
    c.set_nonblocking(false).unwrap();
    let mut b = [0u8; 4];
    let n = c.peek(&mut b).unwrap();
    assert_eq!(&b[..n], &b"peek"[..n]);
    let mut all = [0u8; 8];
    c.read_exact(&mut all).unwrap();
    assert_eq!(&all, b"peekaboo");
}
