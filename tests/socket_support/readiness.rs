//! mio readiness per direction, on any provider: writable from ring space, credits and
//! target buffers (never readable without data), readable when data arrived, and once a
//! write returned WouldBlock, a writable event as soon as the peer's reads free room.

use rdmasock::{RdmaSocket, SocketOptions};
use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

/// Small rings and queues, so that the writer blocks after a few KiB.
pub(crate) fn options() -> SocketOptions {
    SocketOptions::builder()
        .send_ring(4096)
        .recv_ring(8192)
        .send_queue_depth(16)
        .recv_queue_depth(16)
        .signal_interval(4)
        .build()
        .unwrap()
}

/// What mio reported for `token` within `wait`: (readable, writable).
fn mio_flags(
    poll: &mut mio::Poll,
    events: &mut mio::Events,
    token: mio::Token,
    wait: Duration,
) -> (bool, bool) {
    let (mut r, mut w) = (false, false);
    let end = Instant::now() + wait;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        poll.poll(events, Some(left)).expect("mio poll");
        for e in events.iter().filter(|e| e.token() == token) {
            r |= e.is_readable();
            w |= e.is_writable();
        }
        if r || w || left.is_zero() {
            return (r, w);
        }
    }
}

/// The checks, on a connected pair made with [`options`]: `client` is driven by mio,
/// `server` blocks.
pub(crate) fn per_direction(mut server: RdmaSocket, mut client: RdmaSocket) {
    use mio::{Events, Interest, Poll, Token};
    client.set_nonblocking(true).unwrap();
    let mut poll = Poll::new().unwrap();
    let mut events = Events::with_capacity(16);
    const T: Token = Token(7);
    poll.registry()
        .register(&mut client, T, Interest::READABLE | Interest::WRITABLE)
        .unwrap();
    let second = Duration::from_secs(5);
    let (r, w) = mio_flags(&mut poll, &mut events, T, second);
    assert!(
        w && !r,
        "first event: writable only (readable {r}, writable {w})"
    );
    // Write until the peer's ring is full; every writable event must let a write through.
    let chunk = [0x42u8; 1000];
    let mut written = 0;
    loop {
        loop {
            match client.write(&chunk) {
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("write: {e}"),
            }
        }
        let (r, w) = mio_flags(&mut poll, &mut events, T, Duration::from_millis(300));
        assert!(!r, "readable without data");
        if !w {
            break;
        }
        match client.write(&chunk) {
            Ok(n) => written += n,
            Err(e) => panic!("a writable event, then the write failed: {e}"),
        }
        assert!(written < 1 << 20, "the writes never blocked");
    }
    // The peer reads: room and credits come back, and the writer hears of it.
    let mut got = vec![0u8; written];
    server.read_exact(&mut got).expect("server read");
    assert!(got.iter().all(|&b| b == 0x42), "the bytes written");
    let (r, w) = mio_flags(&mut poll, &mut events, T, second);
    assert!(w, "no writable event after the peer freed its ring");
    assert!(!r, "readable without data");
    let n = client
        .write(&chunk)
        .expect("write after the writable event");
    assert!(n > 0);
    // Data arriving is a readable event.
    let mut buf = [0u8; 16];
    assert_eq!(
        client.read(&mut buf).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    server.write_all(b"hello").unwrap();
    let (r, _) = mio_flags(&mut poll, &mut events, T, second);
    assert!(r, "no readable event after data arrived");
    assert_eq!(client.read(&mut buf).unwrap(), 5);
    assert_eq!(&buf[..5], b"hello");
}
