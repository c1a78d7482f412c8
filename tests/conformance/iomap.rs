//! rsocket's iomap between two rdmasock sockets: windows mapped both ways, iowrites of
//! rsocket's test sizes checked byte for byte, and each refusal (past a window's end, an
//! unmapped offset, a window the peer unmapped, a closed peer, a peer without a table).

use super::Fixture;
use rdmasock::{MappedWindow, RdmaSocket, RegisteredBuf, SocketOptions};
use std::io::{self, Read, Write};
use std::thread;

const WINDOW: usize = 64 * 1024;

fn iomap_options(entries: u16) -> SocketOptions {
    SocketOptions::builder()
        .iomap_size(entries)
        .build()
        .unwrap()
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn window_bytes(w: &MappedWindow) -> Vec<u8> {
    let mut out = vec![0u8; w.len()];
    w.read_at(0, &mut out).expect("read the window");
    out
}

/// Writes all of `buf` at `offset` (iowrite may take less than all, like write).
fn iowrite_all(s: &RdmaSocket, mut buf: &[u8], mut offset: u64) {
    while !buf.is_empty() {
        let n = s.iowrite(buf, offset).expect("iowrite");
        assert!(n > 0, "iowrite took nothing");
        buf = &buf[n..];
        offset += n as u64;
    }
}

/// Each side maps a 64 KiB window (one at offset 0, as riostream maps, one at its address,
/// as rsocket's offset -1 chooses), and writes 64 B, 4 KiB and 64 KiB into the other's; a
/// stream byte after the iowrites tells the owner they are in (iowrites are ordered with
/// the stream), and the window's bytes are compared with what was written.
pub(crate) fn iomap_iowrite_both_ways_checked_by_hash(f: &Fixture) {
    let opts = iomap_options(4);
    let (server, client) = f.pair_with(&opts);
    assert_eq!(server.iomap_slots(), 4);
    assert_eq!(client.iomap_slots(), 4);
    let run = |s: RdmaSocket, mapped_at: Option<u64>, seed: u64| {
        thread::spawn(move || {
            let mut s = s;
            let window = s.iomap(WINDOW, mapped_at).expect("iomap");
            assert_eq!(window.len(), WINDOW);
            if let Some(at) = mapped_at {
                assert_eq!(window.offset(), at);
            }
            // Tell the peer where ours is (its entry went before these bytes).
            s.write_all(&window.offset().to_le_bytes()).unwrap();
            let mut peer_at = [0u8; 8];
            s.read_exact(&mut peer_at).unwrap();
            let peer_at = u64::from_le_bytes(peer_at);
            for (round, size) in [64usize, 4096, WINDOW].into_iter().enumerate() {
                let data = pattern(seed ^ round as u64, size);
                let at = (WINDOW - size) / 2;
                iowrite_all(&s, &data, peer_at + at as u64);
                s.write_all(&[round as u8]).unwrap();
                let mut mark = [0u8; 1];
                s.read_exact(&mut mark).unwrap();
                assert_eq!(mark[0], round as u8);
                // The peer's writes of this round are in our window now.
                let peer_data = pattern(seed ^ 0xff00 ^ round as u64, size);
                let got = window_bytes(&window);
                assert_eq!(
                    &got[at..at + size],
                    &peer_data[..],
                    "round {round} ({size} bytes): the window holds what the peer wrote"
                );
                s.write_all(&[0xa0 | round as u8]).unwrap();
                s.read_exact(&mut mark).unwrap();
            }
            window.unmap().expect("unmap");
        })
    };
    let a = run(server, Some(0), 0x1000);
    let b = run(client, None, 0x1000 ^ 0xff00);
    a.join().expect("server side");
    b.join().expect("client side");
}

fn assert_refused(e: io::Error, says: &str) {
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains(says), "{e}");
}

/// Past the window's end, at an unmapped offset, into a window the peer unmapped: each
/// refused at the writer with what was wrong, nothing written (the owner's window keeps its
/// bytes), and the stream goes on. A peer that offers no table cannot be mapped into, and
/// after the peer closed neither mapping nor writing is possible.
pub(crate) fn iowrite_outside_a_window_is_refused_and_the_connection_stays(f: &Fixture) {
    let (mut owner, mut writer) = f.pair_with(&iomap_options(2));
    let window = owner.iomap(4096, Some(1 << 20)).expect("iomap");
    owner.write_all(b"m").unwrap();
    let mut b = [0u8; 1];
    writer.read_exact(&mut b).unwrap();

    iowrite_all(&writer, &[7u8; 100], (1 << 20) + 10);
    let refused = writer.iowrite(&[9u8; 64], (1 << 20) + 4096 - 32);
    assert_refused(refused.unwrap_err(), "runs past the end");
    assert_refused(
        writer.iowrite(&[9u8; 8], (1 << 20) - 1).unwrap_err(),
        "no window",
    );
    assert_refused(writer.iowrite(&[9u8; 8], 0).unwrap_err(), "no window");
    writer.write_all(b"w").unwrap();
    owner.read_exact(&mut b).unwrap();
    let got = window_bytes(&window);
    assert!(
        got[10..110].iter().all(|&x| x == 7),
        "the write inside arrived"
    );
    assert!(
        got[..10].iter().chain(&got[110..]).all(|&x| x == 0),
        "nothing else was written"
    );

    // The owner unmaps; once the stream byte after it arrives, the writer knows.
    window.unmap().expect("unmap");
    owner.write_all(b"u").unwrap();
    writer.read_exact(&mut b).unwrap();
    assert_refused(
        writer.iowrite(&[1u8; 8], (1 << 20) + 10).unwrap_err(),
        "no window",
    );

    // The writer's own peer table: the owner asked for 2 entries too, so the writer may map.
    assert_eq!(writer.iomap_slots(), 2);
    // Windows fill the peer's table; the third is refused.
    let w1 = writer.iomap(128, None).expect("first window");
    let w2 = writer.iomap(128, None).expect("second window");
    assert_refused(writer.iomap(128, None).unwrap_err(), "all 2 entries");
    drop(w1);
    let w3 = writer
        .iomap(128, None)
        .expect("a dropped window's slot is free again");
    drop((w2, w3));

    // The peer closes: nothing more can be mapped or written.
    drop(owner);
    assert_eq!(writer.read(&mut b).unwrap(), 0, "end of stream");
    let e = writer.iowrite(&[1u8; 8], 1 << 20).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "{e}");
    let e = writer.iomap(128, None).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "{e}");
}

/// Without `iomap_size` (the default) no table is offered: the peer's `iomap` says so, and
/// an iowrite finds no window.
pub(crate) fn iomap_is_off_unless_the_peer_asks(f: &Fixture) {
    let (a, b) = f.pair_with(&SocketOptions::default());
    assert_eq!(a.iomap_slots(), 0);
    assert_refused(a.iomap(4096, None).unwrap_err(), "RDMA_IOMAPSIZE");
    assert_refused(b.iowrite(&[0u8; 4], 0).unwrap_err(), "no window");
    assert_refused(a.iomap(0, None).unwrap_err(), "1 to");
}

/// Zero-copy iowrites from a registered buffer: a range of several transfers and a single
/// byte land where they were aimed in the peer's window, in order with the stream; the
/// buffer is overwritten as soon as the call returns and the window still holds the old
/// bytes (the call returned only after the device was done with them); ranges past a
/// window's end or at no window are refused with nothing written, and the stream goes on.
pub(crate) fn registered_iowrite_lands_in_the_window_and_frees_the_buffer_on_return(f: &Fixture) {
    const LEN: usize = 200_000;
    const AREA: usize = 256 * 1024;
    let (mut owner, mut writer) = f.pair_with(&iomap_options(2));
    let window = owner.iomap(AREA, Some(1 << 30)).expect("iomap");
    owner.write_all(b"m").unwrap();
    let mut mark = [0u8; 1];
    writer.read_exact(&mut mark).unwrap();
    let first = pattern(0x5eed, LEN);
    let mut buf = RegisteredBuf::new(LEN).expect("a registered buffer");
    buf.copy_from_slice(&first);
    let at = (1u64 << 30) + 100;
    assert_eq!(writer.iowrite_registered(&buf, at).expect("iowrite"), LEN);
    // Free on return: the window must keep the bytes written before this.
    buf.fill(0xee);
    assert_eq!(
        writer
            .iowrite_registered_range(&buf, 7..8, 1 << 30)
            .expect("one byte"),
        1
    );
    writer.write_all(b"d").unwrap();
    owner.read_exact(&mut mark).unwrap();
    let got = window_bytes(&window);
    assert_eq!(
        got[0], 0xee,
        "the one-byte range landed at the window's start"
    );
    assert!(
        got[100..100 + LEN] == first[..],
        "the window holds the buffer's bytes as they were during the call"
    );
    assert!(
        got[1..100].iter().all(|&b| b == 0),
        "nothing else was written"
    );
    assert_refused(
        writer
            .iowrite_registered(&buf, (1 << 30) + (AREA - LEN) as u64 + 1)
            .unwrap_err(),
        "runs past the end",
    );
    assert_refused(writer.iowrite_registered(&buf, 0).unwrap_err(), "no window");
    assert_eq!(
        window_bytes(&window)[..],
        got[..],
        "a refused iowrite writes nothing"
    );
    writer.write_all(b"after").unwrap();
    let mut after = [0u8; 5];
    owner.read_exact(&mut after).unwrap();
    assert_eq!(&after, b"after", "the stream goes on");
    window.unmap().expect("unmap");
}
