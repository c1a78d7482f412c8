//! Zero-copy writes from registered buffers (`RdmaSocket::write_registered`): bytes of every
//! size arrive intact and in stream order with copying writes, a buffer may be overwritten
//! the moment its write returns, and one buffer serves several connections and devices.

use super::socket_support::Rng;
use super::Fixture;
use rdmasock::{BufferPool, RdmaSocket, RegisteredBuf, SocketOptions};
use std::io::{Read, Write};
use std::thread;

/// FNV-1a over a stream, whatever pieces it comes in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StreamHash(u64);

impl StreamHash {
    pub(crate) fn new() -> StreamHash {
        StreamHash(0xcbf2_9ce4_8422_2325)
    }

    pub(crate) fn add(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Reads `s` to end of stream on a thread of its own; the count and hash of what came.
pub(crate) fn drain(mut s: RdmaSocket) -> thread::JoinHandle<(usize, u64)> {
    thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 20];
        let (mut total, mut hash) = (0, StreamHash::new());
        loop {
            let n = s.read(&mut buf).expect("the reader's read");
            if n == 0 {
                return (total, hash.0);
            }
            hash.add(&buf[..n]);
            total += n;
        }
    })
}

/// `buf` filled with bytes from `seed`.
fn fill(buf: &mut [u8], seed: u64) {
    let mut rng = Rng(seed);
    for chunk in buf.chunks_mut(8) {
        let word = rng.next().to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

/// Zero-copy writes of 1 B, 4 KiB, 64 KiB, 1 MiB and 64 MiB, each between two copying
/// writes, then two ranges of one buffer: the reader's hash is the writer's, so every byte
/// arrived once and in stream order.
pub(crate) fn zero_copy_writes_of_each_size_interleaved_with_copying_writes(f: &Fixture) {
    let (s, mut c) = f.pair();
    let reader = drain(s);
    let mut sent = StreamHash::new();
    let mut total = 0;
    for (i, size) in [1, 4 << 10, 64 << 10, 1 << 20, 64 << 20]
        .into_iter()
        .enumerate()
    {
        let mut buf = RegisteredBuf::new(size).expect("a registered buffer");
        fill(&mut buf, 7 + i as u64);
        let head = vec![i as u8; 100 + i];
        c.write_all(&head).expect("copying write before");
        assert_eq!(
            c.write_registered(&buf).expect("zero-copy write"),
            size,
            "a blocking zero-copy write sends it all"
        );
        c.write_all(b"tail").expect("copying write after");
        for piece in [&head[..], &buf[..], b"tail"] {
            sent.add(piece);
            total += piece.len();
        }
    }
    let mut buf = RegisteredBuf::from_vec((0..=255u8).cycle().take(300_000).collect())
        .expect("a buffer of the caller's vector");
    for range in [1000..1001, 5..250_000] {
        assert_eq!(
            c.write_registered_range(&buf, range.clone()).unwrap(),
            range.len()
        );
        sent.add(&buf[range.clone()]);
        total += range.len();
    }
    assert_eq!(c.write_registered_range(&buf, 10..10).unwrap(), 0);
    let outside = c
        .write_registered_range(&buf, 299_000..300_001)
        .unwrap_err();
    assert_eq!(outside.kind(), std::io::ErrorKind::InvalidInput);
    buf[0] = 1;
    c.close()
        .expect("the close finishes: the peer has every byte");
    let (got, hash) = reader.join().expect("reader");
    assert_eq!(got, total, "the reader got every byte");
    assert_eq!(hash, sent.0, "the reader got the bytes in stream order");
}

/// A buffer overwritten as soon as `write_registered` returns: the peer sees what the buffer
/// held during the write, each time (the write returned only after the device read it).
/// Rings and transfers big enough that each write is one message posted at once, which the
/// device is still reading when a write that did not wait would return.
pub(crate) fn a_registered_buffer_may_be_overwritten_when_its_write_returns(f: &Fixture) {
    const LEN: usize = 8 << 20;
    const ROUNDS: u8 = 6;
    let opts = SocketOptions::builder()
        .recv_ring(2 * LEN)
        .max_transfer(LEN as u32)
        .build()
        .unwrap();
    let (mut s, c) = f.pair_with(&opts);
    let reader = thread::spawn(move || {
        let mut round = vec![0u8; LEN];
        for r in 0..ROUNDS {
            s.read_exact(&mut round).expect("read a round");
            let wrong = round.iter().position(|&b| b != r);
            assert_eq!(wrong, None, "round {r}: a byte of a later round arrived");
        }
    });
    let mut buf = RegisteredBuf::new(LEN).unwrap();
    for r in 0..ROUNDS {
        buf.fill(r);
        c.write_registered(&buf).expect("zero-copy write");
    }
    buf.fill(u8::MAX);
    reader.join().expect("reader");
}

/// One buffer written on two connections of the same device is registered with it once;
/// where the fixture has a second device, a connection there registers it again. A pooled
/// buffer keeps its registration across uses.
pub(crate) fn a_registered_buffer_serves_several_connections_and_devices(f: &Fixture) {
    let mut buf = RegisteredBuf::new(256 << 10).unwrap();
    fill(&mut buf, 3);
    let mut expected = StreamHash::new();
    expected.add(&buf);
    let check = |pair: (RdmaSocket, RdmaSocket), buf: &RegisteredBuf| {
        let reader = drain(pair.0);
        pair.1.write_registered(buf).expect("zero-copy write");
        drop(pair.1);
        let (got, hash) = reader.join().expect("reader");
        assert_eq!((got, hash), (buf.len(), expected.0));
    };
    assert_eq!(buf.registrations(), 0, "registration waits for a write");
    // Held open throughout: the device stays open (its last connection would close it, and
    // a registration with a closed device is dropped at the next look).
    let held = f.pair();
    check(f.pair(), &buf);
    assert_eq!(buf.registrations(), 1);
    check(f.pair(), &buf);
    assert_eq!(
        buf.registrations(),
        1,
        "the device's registration is reused"
    );
    if let Some(other) = f.other_device() {
        check(other.pair(), &buf);
        assert_eq!(
            buf.registrations(),
            2,
            "{}: a second device",
            other.provider.name()
        );
    }
    drop(held);

    let pool = BufferPool::new(2, 64 << 10).unwrap();
    let (s, c) = f.pair();
    let reader = drain(s);
    let mut sent = StreamHash::new();
    for round in 0..6u8 {
        let mut a = pool.get();
        let mut b = pool.try_get().expect("the second buffer is free");
        assert!(pool.try_get().is_none(), "two buffers, both out");
        a.fill(round);
        b.fill(!round);
        c.write_registered(&a).unwrap();
        c.write_registered(&b).unwrap();
        sent.add(&a);
        sent.add(&b);
        assert_eq!((a.registrations(), b.registrations()), (1, 1));
    }
    assert_eq!(pool.available(), 2);
    drop(c);
    let (got, hash) = reader.join().expect("reader");
    assert_eq!((got, hash), (12 * (64 << 10), sent.0));
}

/// The owned form on a nonblocking socket driven by mio: buffers submitted as room allows
/// come back in order once the device has read them (a writable event says when), each is
/// overwritten and submitted again at once, and the peer sees every buffer's bytes as they
/// were when submitted.
pub(crate) fn submitted_buffers_come_back_in_order_on_mio_events(f: &Fixture) {
    use mio::{Events, Interest, Poll, Token};
    use std::collections::VecDeque;
    use std::time::Duration;
    const LEN: usize = 256 << 10;
    const SUBMISSIONS: usize = 24;
    // A close timeout that a slow emulated device cannot run out: a close torn down
    // halfway would end the reader's stream early.
    let opts = SocketOptions::builder()
        .close_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let (s, mut c) = f.pair_with(&opts);
    let reader = drain(s);
    c.set_nonblocking(true).unwrap();
    let mut poll = Poll::new().unwrap();
    poll.registry()
        .register(&mut c, Token(0), Interest::WRITABLE)
        .unwrap();
    let mut events = Events::with_capacity(4);
    let mut free: Vec<RegisteredBuf> = (0..3).map(|_| RegisteredBuf::new(LEN).unwrap()).collect();
    // What each submission in flight sent, oldest first: (first byte's identity, range).
    let mut in_flight: VecDeque<(*const u8, std::ops::Range<usize>)> = VecDeque::new();
    // Buffers whose rest waits to be submitted, with where it starts, in the order their
    // first parts went: more than one buffer may come back partly sent, and a refused
    // remainder may wait with nothing in flight (the peer's credits are out until its
    // reader frees room).
    let mut pending: VecDeque<(RegisteredBuf, usize)> = VecDeque::new();
    let (mut sent, mut total, mut submissions) = (StreamHash::new(), 0, 0);
    while submissions < SUBMISSIONS || !in_flight.is_empty() || !pending.is_empty() {
        let mut progressed = false;
        while let Some(done) = c.completed_registered() {
            let (identity, range) = in_flight.pop_front().expect("a buffer comes back once");
            assert_eq!(done.buf.as_ptr(), identity, "buffers come back in order");
            assert_eq!(done.sent, range.end);
            done.result.expect("its sends completed");
            sent.add(&done.buf[range.clone()]);
            total += range.len();
            if range.end < LEN {
                pending.push_back((done.buf, range.end));
            } else {
                free.push(done.buf);
            }
            progressed = true;
        }
        if pending.is_empty() && submissions < SUBMISSIONS {
            if let Some(mut buf) = free.pop() {
                buf.fill(submissions as u8);
                submissions += 1;
                pending.push_back((buf, 0));
            }
        }
        if let Some((buf, from)) = pending.pop_front() {
            let identity = buf.as_ptr();
            match c.submit_registered_range(buf, from..) {
                Ok(n) => {
                    assert!(n > 0);
                    in_flight.push_back((identity, from..from + n));
                    progressed = true;
                }
                Err(refused) => {
                    assert_eq!(refused.error.kind(), std::io::ErrorKind::WouldBlock);
                    pending.push_front((refused.buf, from));
                }
            }
        }
        assert_eq!(c.registered_in_flight(), in_flight.len());
        if !progressed {
            poll.poll(&mut events, Some(Duration::from_secs(20)))
                .unwrap();
            assert!(!events.is_empty(), "an event came within 20 s");
        }
    }
    poll.registry().deregister(&mut c).unwrap();
    c.close()
        .expect("the close finishes: the peer has every byte");
    let (got, hash) = reader.join().expect("reader");
    assert_eq!(total, SUBMISSIONS * LEN);
    assert_eq!((got, hash), (total, sent.0));
}

/// A pool on huge pages (`BufferPool::with_huge_pages`): with `Prefer` its buffers carry a
/// checked stream whatever backs them; with `Require`, where the hugetlb pool has the pages
/// the buffers are on 2 MiB pages and carry a checked stream, and where it has none the pool
/// is refused with what to reserve.
pub(crate) fn a_pool_on_huge_pages_carries_a_checked_stream_or_says_what_to_reserve(f: &Fixture) {
    use rdmasock::verbs::{HugePages, Pages};
    const LEN: usize = 2 << 20;
    let free = std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut pools = vec![BufferPool::with_huge_pages(2, LEN, HugePages::Prefer).expect("Prefer")];
    match BufferPool::with_huge_pages(2, LEN, HugePages::Require) {
        Ok(pool) => {
            let buf = pool.get();
            assert_eq!(buf.pages(), Pages::Huge2MiB, "Require gave hugetlb pages");
            drop(buf);
            pools.push(pool);
        }
        Err(e) => {
            assert!(free < 2, "{free} free huge pages, yet Require failed: {e}");
            assert_eq!(e.kind(), std::io::ErrorKind::OutOfMemory, "{e}");
            assert!(e.to_string().contains("/proc/sys/vm/nr_hugepages"), "{e}");
        }
    }
    let (s, c) = f.pair();
    let reader = drain(s);
    let (mut sent, mut total) = (StreamHash::new(), 0);
    for (i, pool) in pools.iter().enumerate() {
        for round in 0..3u64 {
            let mut buf = pool.get();
            fill(&mut buf, 100 + 10 * i as u64 + round);
            assert_eq!(c.write_registered(&buf).expect("zero-copy write"), LEN);
            sent.add(&buf);
            total += LEN;
        }
    }
    c.close()
        .expect("the close finishes: the peer has every byte");
    let (got, hash) = reader.join().expect("reader");
    assert_eq!(
        (got, hash),
        (total, sent.0),
        "the reader got every byte in order"
    );
}
