//! rsocket's iomap on tokio streams.

use super::{current_thread, Fixture};
use rdmasock::SocketOptions;
use std::io;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The accepted end maps a 256 KiB window; the client iowrites 200,000 patterned bytes into
/// it (in several pieces while its send ring is smaller than that), then a stream
/// byte; once that byte is read the window holds the pattern, ordered with the stream. An
/// iowrite past the window's end and one at no window are refused with nothing written, and
/// the stream goes on.
pub(crate) fn iomap_and_iowrite_on_streams_land_in_order_with_the_stream(f: &Fixture) {
    current_thread(async {
        const AREA: usize = 256 * 1024;
        let opts = SocketOptions::builder().iomap_size(2).build().unwrap();
        let (mut owner, mut writer) = f.pair_with(&opts).await;
        assert_eq!((owner.iomap_slots(), writer.iomap_slots()), (2, 2));
        let window = owner.iomap(AREA, Some(1 << 40)).await.expect("iomap");
        owner.write_all(b"m").await.unwrap();
        let mut mark = [0u8; 1];
        writer.read_exact(&mut mark).await.unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let (mut at, mut rest) = ((1u64 << 40) + 64, &data[..]);
        while !rest.is_empty() {
            let n = writer.iowrite(rest, at).await.expect("iowrite");
            assert!(n > 0, "an iowrite took nothing");
            rest = &rest[n..];
            at += n as u64;
        }
        writer.write_all(b"d").await.unwrap();
        owner.read_exact(&mut mark).await.unwrap();
        let mut got = vec![0u8; AREA];
        window.read_at(0, &mut got).unwrap();
        assert!(
            got[64..64 + data.len()] == data[..],
            "the window holds the bytes"
        );
        for (offset, says) in [
            ((1u64 << 40) + AREA as u64 - 2, "runs past the end"),
            (7, "no window"),
        ] {
            let e = writer.iowrite(&[9; 4], offset).await.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
            assert!(e.to_string().contains(says), "{e}");
        }
        let mut after = vec![0u8; AREA];
        window.read_at(0, &mut after).unwrap();
        assert!(after == got, "a refused iowrite writes nothing");
        writer.write_all(b"after").await.unwrap();
        let mut tail = [0u8; 5];
        owner.read_exact(&mut tail).await.unwrap();
        assert_eq!(&tail, b"after");
        window.unmap().expect("unmap");
    });
}

/// Zero-copy iowrites by value: the accepted end maps a 512 KiB window; the client writes
/// buffers of 1 B to 300,000 B, each into a region of its own, with `iowrite_registered`
/// (the last through `iowrite_registered_range`, from the middle of its buffer), each
/// followed by one stream byte. When the owner reads byte k, regions 0..=k hold their
/// buffers' bytes: each iowrite landed before the stream byte written after it. Each buffer
/// comes back (the same memory, its bytes untouched) with its length written. A range past
/// the window's end comes back refused (`InvalidInput`), nothing written; a future dropped
/// right after its first poll leaves the stream usable, and what it posted lands in order.
pub(crate) fn zero_copy_iowrites_land_in_order_with_the_stream_and_hand_the_buffer_back(
    f: &Fixture,
) {
    use rdmasock::RegisteredBuf;
    use std::time::Duration;
    const AREA: usize = 512 * 1024;
    const BASE: u64 = 1 << 40;
    const SIZES: [usize; 5] = [1, 64, 4096, 65536, 300_000];
    let fill = |buf: &mut [u8], k: usize| {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i % 251) as u8 ^ (k as u8).wrapping_mul(37) ^ 0x5a;
        }
    };
    current_thread(async {
        let opts = SocketOptions::builder().iomap_size(1).build().unwrap();
        let (mut owner, mut writer) = f.pair_with(&opts).await;
        let window = owner.iomap(AREA, Some(BASE)).await.expect("iomap");
        owner.write_all(b"m").await.unwrap();
        let mut mark = [0u8; 1];
        writer.read_exact(&mut mark).await.unwrap();
        // Region k: where buffer k lands, and the bytes it must hold.
        let mut regions: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut at = 0usize;
        for (k, &size) in SIZES.iter().enumerate() {
            let ranged = k + 1 == SIZES.len();
            // The ranged write sends the middle of a longer buffer.
            let range = if ranged { 50..50 + size } else { 0..size };
            let mut buf = RegisteredBuf::new(range.end + if ranged { 50 } else { 0 }).unwrap();
            fill(&mut buf, k);
            let expected = buf.to_vec();
            let identity = buf.as_ptr();
            let place = BASE + at as u64;
            let (written, back) = if ranged {
                writer
                    .iowrite_registered_range(buf, range.clone(), place)
                    .await
            } else {
                writer.iowrite_registered(buf, place).await
            };
            assert_eq!(written.expect("zero-copy iowrite"), size, "buffer {k}");
            assert_eq!(back.as_ptr(), identity, "buffer {k} came back");
            assert!(back[..] == expected[..], "buffer {k} came back untouched");
            regions.push((at, expected[range].to_vec()));
            writer.write_all(&[k as u8]).await.unwrap();
            at += size;
        }
        for k in 0..SIZES.len() {
            owner.read_exact(&mut mark).await.unwrap();
            assert_eq!(mark[0], k as u8);
            for (j, (offset, bytes)) in regions[..=k].iter().enumerate() {
                let mut got = vec![0u8; bytes.len()];
                window.read_at(*offset, &mut got).unwrap();
                assert!(
                    got == *bytes,
                    "region {j} holds its buffer once stream byte {k} is read"
                );
            }
        }
        // Past the window's end: refused, the buffer back, nothing written.
        let mut before = vec![0u8; AREA];
        window.read_at(0, &mut before).unwrap();
        let buf = RegisteredBuf::new(4096).unwrap();
        let identity = buf.as_ptr();
        let (refused, back) = writer
            .iowrite_registered(buf, BASE + AREA as u64 - 100)
            .await;
        let e = refused.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("runs past the end"), "{e}");
        assert_eq!(back.as_ptr(), identity, "a refused buffer comes back");
        // A future dropped after its first poll (which posts what fits): the stream goes on.
        let mut last = RegisteredBuf::new(8192).unwrap();
        fill(&mut last, 99);
        let expected = last.to_vec();
        let offset = AREA - 8192;
        let dropped = tokio::time::timeout(
            Duration::ZERO,
            writer.iowrite_registered(last, BASE + offset as u64),
        )
        .await;
        // Completed in its first poll, or posted and then dropped with the socket holding
        // the buffer, or (its first poll made no attempt) nothing posted.
        let posted = match dropped {
            Ok((written, _)) => {
                assert_eq!(written.expect("zero-copy iowrite"), 8192);
                true
            }
            Err(_) => writer.registered_in_flight() == 1,
        };
        writer.write_all(b"after").await.unwrap();
        let mut tail = [0u8; 5];
        owner.read_exact(&mut tail).await.unwrap();
        assert_eq!(&tail, b"after");
        let mut after = vec![0u8; AREA];
        window.read_at(0, &mut after).unwrap();
        assert!(
            after[..offset] == before[..offset],
            "a refused iowrite writes nothing"
        );
        // Posted: landed before "after"; the dropped future's buffer is let go, not handed
        // to `completed_registered`, once the device is done with it.
        let landed = if posted {
            &expected[..]
        } else {
            &before[offset..]
        };
        assert!(
            after[offset..] == *landed,
            "the dropped future's bytes landed (posted: {posted})"
        );
        assert!(writer.completed_registered().await.unwrap().is_none());
        assert_eq!(writer.registered_in_flight(), 0);
        window.unmap().expect("unmap");
    });
}
