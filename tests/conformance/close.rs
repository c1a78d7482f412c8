//! Each direction's end: half-close from either side, `shutdown(Read)` and `shutdown(Both)`
//! as `TcpStream` has them, both ends shut down and dropped by one thread, and a close after
//! the peer's (a peer that vanishes is in `vanish.rs`).

use super::socket_support;
use super::{Fixture, Provider};
use rdmasock::{RdmaSocket, SocketOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::thread;
use std::time::{Duration, Instant};

/// Half-close, client first (`socket_support::half_close_client_first`).
pub(crate) fn half_close_client_first(f: &Fixture) {
    let (l, addr) = f.listener();
    socket_support::half_close_client_first(l, addr);
}

/// Half-close, server first (`socket_support::half_close_server_first`).
pub(crate) fn half_close_server_first(f: &Fixture) {
    let (l, addr) = f.listener();
    socket_support::half_close_server_first(l, addr);
}

/// Read and write timeouts of 10 s, so that a call that should return at once but waits
/// fails the test instead of hanging it.
fn bound_blocking_calls(sockets: &[&RdmaSocket]) {
    for s in sockets {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    }
}

/// `shutdown(Read)` behaves like `TcpStream`'s on Linux: a read that finds nothing received
/// returns `Ok(0)` at once (a blocking socket does not wait), but nothing is discarded and the
/// peer is not told. Bytes received before the shutdown are still read; the peer's writes
/// after it succeed, are held back by flow control while we do not read (a nonblocking
/// writer gets `WouldBlock`, never an error), and are delivered: reads return them, and 0
/// whenever nothing is queued. Our write side stays open. (The write-side half-closes are in
/// `half_close_client_first` / `half_close_server_first`.)
pub(crate) fn shutdown_read_reads_eof_but_keeps_what_the_peer_sends(f: &Fixture) {
    let (mut s, mut c) = f.pair();
    bound_blocking_calls(&[&s, &c]);
    s.write_all(b"before").unwrap();
    let mut buf = vec![0u8; 64 << 10];
    // A blocking peek waits until the message is here; it arrives whole.
    assert_eq!(c.peek(&mut buf).unwrap(), 6);
    c.shutdown(Shutdown::Read).unwrap();
    let n = c.read(&mut buf).unwrap();
    assert_eq!(
        &buf[..n],
        b"before",
        "received before the shutdown: still readable"
    );
    assert_eq!(
        c.read(&mut buf).unwrap(),
        0,
        "then end-of-stream, without waiting"
    );
    assert_eq!(c.peek(&mut buf).unwrap(), 0, "peek too");
    assert_eq!(c.read(&mut buf).unwrap(), 0, "and it stays");

    c.write_all(b"still writing").unwrap();
    let mut got = [0u8; 13];
    s.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"still writing", "our write side is open");
    // The peer was not told (it read our later bytes, so it would have read a message sent
    // by the shutdown): it sees no end-of-stream.
    s.set_nonblocking(true).unwrap();
    let err = s.read(&mut got).expect_err("the peer has nothing to read");
    assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");

    // The peer writes a counting pattern until flow control stops it.
    let byte = |i: usize| (i % 251) as u8;
    let mut sent = 0;
    loop {
        let chunk: Vec<u8> = (sent..sent + 4096).map(byte).collect();
        match s.write(&chunk) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("the peer's write after our shutdown(Read): {e}"),
        }
        assert!(sent < 64 << 20, "the peer's writes were never held back");
    }
    assert!(sent > 0, "the peer could write nothing");
    // A blocking flush returns once every byte written is in our memory.
    s.set_nonblocking(false).unwrap();
    s.flush().expect("the peer's flush");
    // A read that runs before the arrivals are processed returns 0: read until all are here.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut received = Vec::with_capacity(sent);
    while received.len() < sent {
        let n = c.read(&mut buf).expect("read after shutdown(Read)");
        received.extend_from_slice(&buf[..n]);
        if n == 0 {
            assert!(
                Instant::now() < deadline,
                "{} of the peer's {sent} bytes arrived in 30 s",
                received.len()
            );
            thread::yield_now();
        }
    }
    assert_eq!(received.len(), sent, "no more than the peer wrote");
    assert!(
        received.iter().enumerate().all(|(i, &b)| b == byte(i)),
        "the peer's bytes arrive in order"
    );
    assert_eq!(c.read(&mut buf).unwrap(), 0, "drained: end-of-stream again");
    // Our reads returned the credits: the peer, blocking now, writes on.
    s.write_all(&buf[..sent.min(buf.len())])
        .expect("the peer writes after we read");
}

/// `shutdown(Both)`, like `TcpStream`'s: our writes fail with `BrokenPipe`, our reads return
/// what was received before and then 0. The peer reads what we wrote before the shutdown,
/// then end-of-stream, and from then on its writes fail with `BrokenPipe` as well: our
/// DISCONNECT message closed both its directions (a `TcpStream` peer's first write may still
/// succeed until our RST comes back).
pub(crate) fn shutdown_both_closes_each_direction_at_both_ends(f: &Fixture) {
    let (mut s, mut c) = f.pair();
    bound_blocking_calls(&[&s, &c]);
    s.write_all(b"to you").unwrap();
    let mut buf = [0u8; 64];
    // A blocking peek waits until the message is here; it arrives whole.
    assert_eq!(c.peek(&mut buf).unwrap(), 6);
    c.write_all(b"last words").unwrap();
    c.shutdown(Shutdown::Both).unwrap();
    let err = c.write(b"x").expect_err("writing after shutdown(Both)");
    assert_eq!(err.kind(), ErrorKind::BrokenPipe, "{err}");
    let n = c.read(&mut buf).unwrap();
    assert_eq!(
        &buf[..n],
        b"to you",
        "received before the shutdown: still readable"
    );
    assert_eq!(c.read(&mut buf).unwrap(), 0, "then end-of-stream");

    let mut got = Vec::new();
    s.read_to_end(&mut got)
        .expect("the peer reads to end-of-stream");
    assert_eq!(got, b"last words", "written before the shutdown: delivered");
    let err = s
        .write(b"x")
        .expect_err("the peer writing after our shutdown(Both)");
    assert_eq!(err.kind(), ErrorKind::BrokenPipe, "{err}");
    assert_eq!(
        s.read(&mut buf).unwrap(),
        0,
        "the peer's end-of-stream stays"
    );

    // However far the disconnect has gone by now, our side answers the same.
    let err = c
        .write(b"x")
        .expect_err("writing after shutdown(Both), again");
    assert_eq!(err.kind(), ErrorKind::BrokenPipe, "{err}");
    assert_eq!(c.read(&mut buf).unwrap(), 0);
}

/// On iWARP the side that closes first waits for the peer's close (see `RdmaSocket`'s
/// documentation): a thread that holds both ends shuts both down before it drops either,
/// and then neither drop waits out the close timeout (30 s here), while each end still
/// reads what the other wrote and it received before. (Elsewhere a drop does not wait for
/// the peer at all.)
pub(crate) fn one_thread_shuts_down_both_ends_then_drops_them_without_waiting(f: &Fixture) {
    let opts = SocketOptions::builder()
        .close_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let (mut s, mut c) = f.pair_with(&opts);
    c.write_all(b"from the client").unwrap();
    s.write_all(b"from the server").unwrap();
    // A read after shutdown(Read) returns 0 at once when nothing has arrived: each end waits
    // (a blocking peek, which leaves the bytes) until the other's message is here, so that
    // what it reads after the shutdown does not depend on how fast the bytes travel.
    let mut arrived = [0u8; 15];
    assert_eq!(
        c.peek(&mut arrived).unwrap(),
        15,
        "one message arrives whole"
    );
    assert_eq!(
        s.peek(&mut arrived).unwrap(),
        15,
        "one message arrives whole"
    );
    c.shutdown(Shutdown::Both).unwrap();
    s.shutdown(Shutdown::Both).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"from the client");
    got.clear();
    c.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"from the server");
    let start = Instant::now();
    drop(c);
    drop(s);
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "dropping both took {took:?}: a drop waited out the close timeout"
    );
}

/// The plain end of an exchange: the ends echo 64 KiB (the answer in 100-byte writes), both
/// flush, the client closes, then the server closes, and both closes return `Ok`: the
/// client read every byte, so nothing was lost. Two orders for the server: it closes without
/// another call, the client's DISCONNECT unread in its queue (where the client's close
/// does not wait for the server's, every provider but siw), and it reads end-of-stream
/// first, then closes (on siw the client's close waits for the server's, in a thread).
pub(crate) fn peer_closes_after_echo_and_flush_then_close_is_ok(f: &Fixture) {
    let data: Vec<u8> = (0..64 * 1024).map(|i| (i * 7 % 251) as u8).collect();
    let echo = |s: &mut RdmaSocket, c: &mut RdmaSocket| {
        bound_blocking_calls(&[&*s, &*c]);
        let server = {
            let mut s = s.try_clone().unwrap();
            let len = data.len();
            thread::spawn(move || {
                let mut buf = vec![0u8; len];
                s.read_exact(&mut buf).unwrap();
                for chunk in buf.chunks(100) {
                    s.write_all(chunk).unwrap();
                }
                s.flush().expect("the server's flush");
            })
        };
        c.write_all(&data).unwrap();
        let mut back = vec![0u8; data.len()];
        c.read_exact(&mut back).unwrap();
        assert!(back == data, "the echo differs");
        server.join().unwrap();
        c.flush().expect("the client's flush");
    };
    let provider = f.provider.name();
    if f.provider != Provider::Siw {
        let (mut s, mut c) = f.pair();
        echo(&mut s, &mut c);
        c.close()
            .unwrap_or_else(|e| panic!("the client's close ({provider}): {e}"));
        s.close().unwrap_or_else(|e| {
            panic!("the server's close after the client's, no call between ({provider}): {e}")
        });
    }
    let (mut s, mut c) = f.pair();
    echo(&mut s, &mut c);
    let client = thread::spawn(move || c.close());
    let mut buf = [0u8; 16];
    assert_eq!(s.read(&mut buf).unwrap(), 0, "the client's end-of-stream");
    s.close()
        .unwrap_or_else(|e| panic!("the server's close after end-of-stream ({provider}): {e}"));
    client
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("the client's close ({provider}): {e}"));
}
