//! Zero-copy writes on `RdmaStream`: the buffer goes in by value and comes back with the
//! result, interleaved with copying writes, checked by hash; a write dropped half-way
//! leaves the stream usable and loses no byte of the writes after it.

use super::{current_thread, Fixture};
use rdmasock::RegisteredBuf;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// FNV-1a over a stream, whatever pieces it comes in.
fn add(hash: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *hash = (*hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
}

const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// Zero-copy writes of 1 B to 1 MiB between copying writes, each buffer refilled as soon as
/// it comes back; the reader's hash is the writer's.
pub(crate) fn zero_copy_writes_hand_the_buffer_back(f: &Fixture) {
    current_thread(async {
        let (mut s, mut c) = f.pair().await;
        let reader = tokio::spawn(async move {
            let (mut total, mut hash) = (0usize, FNV_START);
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = s.read(&mut buf).await.expect("read");
                if n == 0 {
                    return (total, hash);
                }
                add(&mut hash, &buf[..n]);
                total += n;
            }
        });
        let (mut total, mut hash) = (0usize, FNV_START);
        for (i, size) in [1usize, 4 << 10, 64 << 10, 1 << 20].into_iter().enumerate() {
            let mut buf = RegisteredBuf::new(size).unwrap();
            for round in 0..3u8 {
                buf.fill(i as u8 * 16 + round);
                c.write_all(b"copied").await.unwrap();
                let (written, back) = c.write_registered(buf).await;
                assert_eq!(written.expect("zero-copy write"), size);
                add(&mut hash, b"copied");
                add(&mut hash, &back);
                total += 6 + size;
                buf = back;
            }
        }
        c.shutdown().await.unwrap();
        drop(c);
        assert_eq!(reader.await.unwrap(), (total, hash));
    });
}

/// The asynchronous submit/complete pair through a 16 KiB receive ring whose reader stalls
/// at first: a 64 KiB buffer goes out in part and comes back with what it sent; its rest,
/// refused for room, waits; that wait dropped (a timeout) leaves the buffer, unsent, to
/// `completed_registered`. Sixteen buffers then go, each rest before the next buffer, and
/// the reader's hash is that of every buffer whole and in order.
pub(crate) fn submitted_buffers_come_back_asynchronously_and_a_dropped_submit_loses_none(
    f: &Fixture,
) {
    use rdmasock::SocketOptions;
    use std::time::Duration;
    const LEN: usize = 64 << 10;
    const COUNT: usize = 16;
    let contents = |buf: &mut [u8], k: usize| {
        buf.fill(k as u8 ^ 0x3c);
        buf[k % LEN] = k as u8;
    };
    current_thread(async {
        let opts = SocketOptions::builder()
            .recv_ring(16 << 10)
            .build()
            .unwrap();
        let (mut s, mut c) = f.pair_with(&opts).await;
        let (go, start) = tokio::sync::oneshot::channel::<()>();
        let reader = tokio::spawn(async move {
            let _ = start.await;
            let (mut total, mut hash) = (0usize, FNV_START);
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = s.read(&mut buf).await.expect("read");
                if n == 0 {
                    return (total, hash);
                }
                add(&mut hash, &buf[..n]);
                total += n;
            }
        });
        let mut first = RegisteredBuf::new(LEN).unwrap();
        contents(&mut first, 0);
        let identity = first.as_ptr();
        // Parts of it go until the ring is full (it is advertised in halves).
        let (mut buf, mut n) = (first, 0);
        loop {
            let submit = c.submit_registered_range(buf, n..);
            let Ok(submitted) = tokio::time::timeout(Duration::from_millis(200), submit).await
            else {
                break;
            };
            let sent = submitted.expect("room for part of it");
            assert!(
                n + sent < LEN,
                "a 64 KiB buffer through a 16 KiB ring: {sent} bytes"
            );
            assert_eq!(c.registered_in_flight(), 1);
            let back = c.completed_registered().await.unwrap().expect("in flight");
            assert_eq!((back.buf.as_ptr(), back.sent), (identity, n + sent));
            back.result.expect("its sends completed");
            (buf, n) = (back.buf, back.sent);
        }
        assert!(n > 0, "part of the buffer went before the ring was full");
        assert_eq!(c.registered_in_flight(), 1, "the dropped submit left it");
        let unsent = c
            .completed_registered()
            .await
            .unwrap()
            .expect("left unsent");
        assert_eq!((unsent.buf.as_ptr(), unsent.sent), (identity, n));
        unsent.result.expect("nothing failed");
        assert!(c.completed_registered().await.unwrap().is_none());
        go.send(()).unwrap();

        // What is left of buffer 0, then buffers 1.., each rest before the next buffer.
        let mut free = vec![
            RegisteredBuf::new(LEN).unwrap(),
            RegisteredBuf::new(LEN).unwrap(),
        ];
        let mut pending = Some((unsent.buf, n));
        let mut fresh = 1;
        while pending.is_some() || fresh < COUNT || c.registered_in_flight() > 0 {
            if let Some((buf, from)) = pending.take() {
                let sent = c
                    .submit_registered_range(buf, from..)
                    .await
                    .expect("submit");
                if from + sent < LEN {
                    // Its rest goes next: wait for the buffer (the older ones come first).
                    loop {
                        let done = c.completed_registered().await.unwrap().expect("held");
                        done.result.expect("its sends completed");
                        if done.sent < LEN {
                            pending = Some((done.buf, done.sent));
                            break;
                        }
                        free.push(done.buf);
                    }
                    continue;
                }
            }
            if fresh < COUNT {
                if let Some(mut buf) = free.pop() {
                    contents(&mut buf, fresh);
                    fresh += 1;
                    pending = Some((buf, 0));
                    continue;
                }
            }
            let done = c.completed_registered().await.unwrap().expect("in flight");
            done.result.expect("its sends completed");
            assert_eq!(done.sent, LEN, "only whole buffers are in flight here");
            free.push(done.buf);
        }
        c.shutdown().await.unwrap();
        drop(c);
        let mut expected = FNV_START;
        let mut buf = vec![0u8; LEN];
        for k in 0..COUNT {
            contents(&mut buf, k);
            add(&mut expected, &buf);
        }
        assert_eq!(reader.await.unwrap(), (COUNT * LEN, expected));
    });
}

/// A `write_registered` made while `submit_registered` buffers are in flight gets its own
/// buffer back and leaves theirs to `completed_registered`, in submission order; the
/// reader gets the three buffers in the order they were given.
pub(crate) fn a_write_registered_among_submissions_leaves_theirs_in_order(f: &Fixture) {
    use rdmasock::SocketOptions;
    const LEN: usize = 64 << 10;
    current_thread(async {
        // Room for all three at once: each submission takes its whole buffer.
        let opts = SocketOptions::builder().recv_ring(1 << 20).build().unwrap();
        let (mut s, mut c) = f.pair_with(&opts).await;
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            s.read_to_end(&mut all).await.expect("read");
            all
        });
        let mut bufs: Vec<RegisteredBuf> = (0..3u8)
            .map(|k| {
                let mut b = RegisteredBuf::new(LEN).unwrap();
                b.fill(k + 1);
                b
            })
            .collect();
        let own = bufs.pop().unwrap();
        let (own_at, mut order) = (own.as_ptr(), Vec::new());
        for buf in bufs {
            order.push(buf.as_ptr());
            assert_eq!(c.submit_registered(buf).await.expect("submit"), LEN);
        }
        let (written, own) = c.write_registered(own).await;
        assert_eq!(written.expect("zero-copy write"), LEN);
        assert_eq!(own.as_ptr(), own_at, "the write's own buffer");
        for at in order {
            let done = c
                .completed_registered()
                .await
                .unwrap()
                .expect("theirs wait");
            assert_eq!((done.buf.as_ptr(), done.sent), (at, LEN), "in order");
            done.result.expect("its sends completed");
        }
        assert!(c.completed_registered().await.unwrap().is_none());
        assert_eq!(c.registered_in_flight(), 0);
        c.shutdown().await.unwrap();
        drop(c);
        let all = reader.await.unwrap();
        assert_eq!(all.len(), 3 * LEN);
        for (k, piece) in all.chunks(LEN).enumerate() {
            assert!(
                piece.iter().all(|&b| b == k as u8 + 1),
                "buffer {k} in its place"
            );
        }
    });
}
