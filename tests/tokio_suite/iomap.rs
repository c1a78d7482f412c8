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
