//! Unit tests of the iomap engine side (`iomap.rs`).

use super::*;
use crate::protocol::{LocalRegions, Received, StreamConfig, WrId, FLAG_IOMAP};
use std::net::Shutdown;

fn engine(entries: u16, side: u64) -> StreamEngine {
    let cfg = StreamConfig::builder().iomap_size(entries).build().unwrap();
    let local = LocalRegions {
        recv_ring_addr: side << 32,
        recv_ring_rkey: side as u32 * 10 + 1,
        target_list_addr: (side << 32) + 0x1000_0000,
        target_list_rkey: side as u32 * 10 + 2,
    };
    let mut e = StreamEngine::new(cfg, local);
    while e.pop_op().is_some() {}
    e
}

/// Two connected engines with tables of `a` and `b` entries.
fn pair(a: u16, b: u16) -> (StreamEngine, StreamEngine) {
    let (mut x, mut y) = (engine(a, 1), engine(b, 2));
    let (hx, hy) = (x.hello(), y.hello());
    x.on_connected(&Hello::parse(&hy.to_bytes()).unwrap())
        .unwrap();
    y.on_connected(&Hello::parse(&hx.to_bytes()).unwrap())
        .unwrap();
    while x.pop_op().is_some() {}
    while y.pop_op().is_some() {}
    (x, y)
}

/// Maps a window of `len` bytes at `offset` from `from` into `to`'s table: returns the
/// slot; the entry is delivered and adopted.
fn map(from: &mut StreamEngine, to: &mut StreamEngine, offset: u64, addr: u64, len: u32) -> u16 {
    let slot = from.iomap_reserve().unwrap();
    let entry = IomapEntry {
        offset,
        window: RemoteSge::new(addr, 0x77, len),
    };
    let bytes = from.iomap_entry_bytes(&entry);
    from.iomap_send(slot, |_| {}).unwrap();
    let Some(Op::WriteWithImm {
        imm,
        remote_addr,
        rkey,
        payload,
        inline,
        ..
    }) = from.pop_op()
    else {
        panic!("an entry goes as a WRITE WITH IMM");
    };
    assert_eq!(imm, Message::IomapSgl(u32::from(slot)).encode());
    assert_eq!(rkey, to.local.target_list_rkey);
    assert_eq!(
        remote_addr,
        to.local.target_list_addr + 32 + 24 * u64::from(slot)
    );
    assert_eq!(payload.len(), IOMAP_ENTRY_LEN);
    assert!(
        inline,
        "24 bytes go inline under the default 64-byte threshold"
    );
    to.on_receive(WrId::recv(0), Received::Immediate(imm), &[0; 32]);
    let index = to.take_iomap_update().expect("the slot to read");
    assert_eq!(index, slot);
    to.on_iomap_entry(index, &bytes);
    assert_eq!(to.error(), None);
    slot
}

#[test]
fn sizes_scale_as_rsocket_scales_them() {
    for (value, scale, back) in [
        (0u16, 0u8, 0u16),
        (1, 1, 1),
        (128, 128, 128),
        (129, 128, 128),
        (256, 129, 256),
        (300, 129, 256),
        (32512, 255, 32512),
        (u16::MAX, 255, 32512),
    ] {
        assert_eq!(iomap_scale(value), scale, "{value}");
        assert_eq!(iomap_size_from_scale(scale), back, "{value}");
    }
    let cfg = StreamConfig::builder().iomap_size(300).build().unwrap();
    assert_eq!(cfg.iomap_size(), 256);
    assert_eq!(cfg.target_area_len(), 32 + 24 * 256);
}

#[test]
fn entry_layout_in_both_orders() {
    let e = IomapEntry {
        offset: 0x0102_0304_0506_0708,
        window: RemoteSge::new(0x1112_1314_1516_1718, 0x2122_2324, 0x3132_3334),
    };
    let le = e.encode(ByteOrder::Little);
    assert_eq!(le[..8], 0x0102_0304_0506_0708u64.to_le_bytes());
    assert_eq!(le[8..16], 0x1112_1314_1516_1718u64.to_le_bytes());
    assert_eq!(le[16..20], 0x2122_2324u32.to_le_bytes());
    assert_eq!(le[20..], 0x3132_3334u32.to_le_bytes());
    let be = e.encode(ByteOrder::Big);
    assert_eq!(be[..8], 0x0102_0304_0506_0708u64.to_be_bytes());
    assert_eq!(IomapEntry::decode(&le, ByteOrder::Little), Some(e));
    assert_eq!(IomapEntry::decode(&be, ByteOrder::Big), Some(e));
    assert_eq!(IomapEntry::decode(&be[..23], ByteOrder::Big), None);
}

#[test]
fn the_hello_offers_a_table_only_when_asked() {
    let plain = engine(0, 1).hello();
    assert_eq!(plain.flags & FLAG_IOMAP, 0);
    assert_eq!(plain.target_iomap_size, 0);
    let asked = engine(4, 1).hello();
    assert_ne!(asked.flags & FLAG_IOMAP, 0);
    assert_eq!(asked.target_iomap_size, 4);
    let (a, b) = pair(4, 0);
    assert_eq!((a.iomap_peer_size(), b.iomap_peer_size()), (0, 4));
    // A size without the flag is no table.
    let mut x = engine(0, 1);
    let mut h = engine(4, 2).hello();
    h.flags &= !FLAG_IOMAP;
    x.on_connected(&h).unwrap();
    assert_eq!(x.iomap_peer_size(), 0);
}

#[test]
fn iowrite_lands_inside_the_window_in_order_with_the_stream() {
    let (mut writer, mut owner) = pair(2, 2);
    let (sseq, rseq) = (owner.sseq_no, writer.rseq_no);
    map(&mut owner, &mut writer, 0x1_0000, 0xabc_0000, 4096);
    assert_eq!(
        owner.sseq_no,
        sseq.wrapping_add(1),
        "the entry took a credit"
    );
    assert_eq!(
        writer.rseq_no,
        rseq.wrapping_add(1),
        "and the receiver gives it back"
    );
    let window = writer.iomap_window(0x1_0100, 16).unwrap();
    assert_eq!(window.window.addr, 0xabc_0000);
    let mut copied = 0;
    let n = writer.iowrite(0x1_0100, 3000, |s| copied += s.len).unwrap();
    assert_eq!((n, copied), (3000, 3000));
    let sends = std::iter::from_fn(|| writer.pop_op()).find(Op::is_send);
    let Some(Op::Write {
        remote_addr,
        rkey,
        payload,
        ..
    }) = sends
    else {
        panic!("an iowrite is a plain WRITE");
    };
    assert_eq!((remote_addr, rkey, payload.len()), (0xabc_0100, 0x77, 3000));
    // The last byte of the window, and the whole window, are in; one byte more is not.
    assert_eq!(writer.iowrite(0x1_0fff, 1, |_| {}), Ok(1));
    assert_eq!(writer.iowrite(0x1_0000, 4096, |_| {}), Ok(4096));
    while writer.pop_op().is_some() {}
    let e = writer.iowrite(0x1_0001, 4096, |_| {}).unwrap_err();
    assert!(e.to_string().contains("runs past the end"), "{e}");
    assert!(!writer.has_ops(), "nothing was queued");
    let e = writer.iowrite(0xffff, 1, |_| {}).unwrap_err();
    assert!(e.to_string().contains("no window"), "{e}");
    assert!(writer.error().is_none(), "the connection stays");
    assert_eq!(writer.iowrite(0x1_0000, 0, |_| {}), Ok(0));
}

#[test]
fn a_small_iowrite_goes_inline_at_once_and_accounts_as_a_copying_one() {
    let (mut writer, mut owner) = pair(2, 2);
    map(&mut owner, &mut writer, 0x1_0000, 0xabc_0000, 4096);
    while writer.pop_op().is_some() {}
    let (sbuf, sqe) = (writer.sbuf_avail, writer.sqe_avail);
    let w = writer
        .iowrite_inline(0x1_0ff0, 16)
        .expect("a lone small iowrite");
    assert_eq!((w.remote_addr, w.rkey), (0xabc_0ff0, 0x77));
    assert!(
        !w.signaled,
        "an iowrite asks for a completion once in several"
    );
    assert!(!writer.has_ops(), "posted by the driver, not queued");
    assert_eq!((writer.sbuf_avail, writer.sqe_avail), (sbuf - 16, sqe - 1));
    // A later work request's completion retires it.
    let last = writer.iowrite_inline(0x1_0ff0, 16).expect("a second one");
    assert_eq!((writer.sbuf_avail, writer.sqe_avail), (sbuf - 32, sqe - 2));
    writer.on_send_completion(last.wr_id, true);
    assert_eq!((writer.sbuf_avail, writer.sqe_avail), (sbuf, sqe));
    // Past the window, at no window, above the inline threshold, or behind a queued send:
    // nothing changes, and `iowrite` decides.
    let threshold = writer.cfg.inline_threshold as usize;
    assert_eq!(writer.iowrite_inline(0x1_0ff1, 16), None);
    assert_eq!(writer.iowrite_inline(0xffff, 1), None);
    assert_eq!(writer.iowrite_inline(0x1_0000, threshold + 1), None);
    assert_eq!(writer.iowrite_inline(0x1_0000, 0), None);
    assert_eq!(writer.iowrite(0x1_0000, 100, |_| {}), Ok(100));
    assert_eq!(writer.iowrite_inline(0x1_0000, 16), None);
    assert_eq!(
        (writer.sbuf_avail, writer.sqe_avail),
        (sbuf - 100, sqe - 1),
        "the refusals took nothing"
    );
    while writer.pop_op().is_some() {}
    assert!(writer.iowrite_inline(0x1_0000, threshold).is_some());
    // A closed write side refuses it, as `iowrite` does.
    writer.shutdown(Shutdown::Write);
    assert_eq!(writer.iowrite_inline(0x1_0000, 16), None);
}

#[test]
fn iowrites_ask_for_a_completion_once_in_an_interval_and_a_failed_one_fails_the_stream() {
    let (mut writer, mut owner) = pair(2, 2);
    map(&mut owner, &mut writer, 0x1_0000, 0xabc_0000, 4096);
    while writer.pop_op().is_some() {}
    let (sbuf, sqe) = (writer.sbuf_avail, writer.sqe_avail);
    let interval = usize::from(IOWRITE_SIGNAL_INTERVAL);
    let take = |writer: &mut StreamEngine, i: usize| {
        let at = 0x1_0000 + 16 * (i as u64 % 64);
        match writer.iowrite_inline(at, 16) {
            Some(w) => (w.wr_id, w.signaled),
            None => {
                // A staged one (behind a queued op) counts the same way.
                assert_eq!(writer.iowrite(at, 16, |_| {}), Ok(16));
                match writer.pop_op() {
                    Some(Op::Write {
                        wr_id, signaled, ..
                    }) => (wr_id, signaled),
                    other => panic!("an iowrite is a WRITE, not {other:?}"),
                }
            }
        }
    };
    let writes: Vec<_> = (0..2 * interval).map(|i| take(&mut writer, i)).collect();
    let signaled: Vec<usize> = (0..writes.len()).filter(|&i| writes[i].1).collect();
    assert_eq!(signaled, [interval - 1, 2 * interval - 1]);
    let used = 2 * interval;
    assert_eq!(
        (writer.sbuf_avail, writer.sqe_avail),
        (sbuf - 16 * used, sqe - used as u32)
    );
    // One completion gives back the send queue and the ring of every write before it.
    writer.on_send_completion(writes[interval - 1].0, true);
    assert_eq!(
        (writer.sbuf_avail, writer.sqe_avail),
        (sbuf - 16 * interval, sqe - interval as u32)
    );
    writer.on_send_completion(writes[2 * interval - 1].0, true);
    assert_eq!((writer.sbuf_avail, writer.sqe_avail), (sbuf, sqe));
    // A flush after unsignalled ones asks for a completion (nothing else would come).
    let (quiet, signaled) = take(&mut writer, 0);
    assert!(!signaled);
    assert_eq!(writer.flush(), Err(StreamError::WouldBlock));
    let Some(Op::Write {
        wr_id: probe,
        signaled: true,
        ..
    }) = writer.pop_op()
    else {
        panic!("a flush behind an unsignalled iowrite posts a signalled zero-length WRITE");
    };
    writer.on_send_completion(probe, true);
    assert_eq!(writer.flush(), Ok(()));
    assert_eq!((writer.sbuf_avail, writer.sqe_avail), (sbuf, sqe));
    // An unsignalled iowrite that fails completes with its error all the same: the
    // connection fails and says so.
    let (failed, signaled) = take(&mut writer, 1);
    assert!(!signaled);
    assert_ne!(failed, quiet);
    writer.on_send_completion(failed, false);
    assert!(
        matches!(writer.error(), Some(StreamError::ConnectionReset(_))),
        "{:?}",
        writer.error()
    );
    assert_eq!((writer.sbuf_avail, writer.sqe_avail), (sbuf, sqe));
}

#[test]
fn a_run_of_unsignalled_iowrites_is_one_entry_and_a_failure_inside_it_fails_the_stream() {
    let (mut writer, mut owner) = pair(2, 2);
    map(&mut owner, &mut writer, 0x1_0000, 0xabc_0000, 4096);
    while writer.pop_op().is_some() {}
    let (sbuf, sqe, entries) = (
        writer.sbuf_avail,
        writer.sqe_avail,
        writer.sends_outstanding(),
    );
    let writes: Vec<_> = (0..5)
        .map(|i| {
            writer
                .iowrite_inline(0x1_0000 + 16 * i, 16)
                .expect("a small iowrite")
        })
        .collect();
    assert!(writes.iter().all(|w| !w.signaled));
    assert_eq!(
        writer.sends_outstanding(),
        entries + 1,
        "the unsignalled run is kept as one entry"
    );
    assert_eq!((writer.sbuf_avail, writer.sqe_avail), (sbuf - 80, sqe - 5));
    assert!(
        !writer.send_completed(writes[0].wr_id),
        "the run's first write is outstanding"
    );
    // The third fails: the run is retired with it, and the connection fails.
    writer.on_send_completion(writes[2].wr_id, false);
    assert!(
        matches!(writer.error(), Some(StreamError::ConnectionReset(_))),
        "{:?}",
        writer.error()
    );
    assert_eq!((writer.sbuf_avail, writer.sqe_avail), (sbuf, sqe));
    assert_eq!(
        writer.sends_outstanding(),
        0,
        "everything posted up to the failed write is retired"
    );
    assert!(writer.send_completed(writes[4].wr_id));
    // The writes after it complete flushed: nothing is left to retire twice.
    for w in &writes[3..] {
        writer.on_send_completion(w.wr_id, false);
    }
    assert_eq!((writer.sbuf_avail, writer.sqe_avail), (sbuf, sqe));
}

#[test]
fn a_registered_iowrite_posts_from_the_buffer_and_signals_its_last_write() {
    let (mut writer, mut owner) = pair(2, 2);
    map(&mut owner, &mut writer, 0x1_0000, 0xabc_0000, 256 * 1024);
    let ring = writer.sbuf_avail;
    let max = writer.cfg.max_transfer as usize;
    let w = writer
        .iowrite_registered(0x1_0100, 64, 2 * max + 10)
        .unwrap();
    assert_eq!(w.accepted, 2 * max + 10);
    assert_eq!(writer.sbuf_avail, ring, "no send ring is taken");
    let writes: Vec<_> = std::iter::from_fn(|| writer.pop_op())
        .filter_map(|op| match op {
            Op::Write {
                wr_id,
                payload,
                remote_addr,
                rkey,
                signaled,
                ..
            } => Some((wr_id, payload, remote_addr, rkey, signaled)),
            _ => None,
        })
        .collect();
    let pieces: Vec<_> = writes.iter().map(|w| (w.1, w.2, w.3)).collect();
    assert_eq!(
        pieces,
        [
            (
                Payload::Registered {
                    offset: 64,
                    len: max
                },
                0xabc_0100,
                0x77
            ),
            (
                Payload::Registered {
                    offset: 64 + max,
                    len: max
                },
                0xabc_0100 + max as u64,
                0x77
            ),
            (
                Payload::Registered {
                    offset: 64 + 2 * max,
                    len: 10
                },
                0xabc_0100 + 2 * max as u64,
                0x77
            ),
        ]
    );
    let (last, _, _, _, signaled) = writes[2];
    assert!(signaled, "the call's last WRITE is signalled");
    assert_eq!(last, w.last);
    assert!(!writer.send_completed(w.last));
    writer.on_send_completion(w.last, true);
    assert!(writer.send_completed(w.last));
    // The window's bounds hold as for a copying iowrite, and a refusal queues nothing.
    let e = writer
        .iowrite_registered(0x1_0000 + 256 * 1024 - 4, 0, 5)
        .unwrap_err();
    assert!(e.to_string().contains("runs past the end"), "{e}");
    let e = writer.iowrite_registered(0x9_0000, 0, 1).unwrap_err();
    assert!(e.to_string().contains("no window"), "{e}");
    assert!(!writer.has_ops(), "nothing was queued");
    assert!(writer.error().is_none(), "the connection stays");
}

#[test]
fn an_unmapped_window_is_gone_at_the_writer() {
    let (mut writer, mut owner) = pair(1, 1);
    let slot = map(&mut owner, &mut writer, 0, 0x5000, 100);
    assert!(writer.iomap_window(0, 100).is_some());
    assert!(matches!(owner.iomap_reserve(), Err(StreamError::Iomap(m)) if m.contains("all 1")));
    owner.iomap_unmap(slot, |_| {}).unwrap();
    let sends = std::iter::from_fn(|| owner.pop_op()).find(Op::is_send);
    let Some(Op::WriteWithImm { imm, .. }) = sends else {
        panic!("the cleared entry goes to the peer");
    };
    writer.on_receive(WrId::recv(0), Received::Immediate(imm), &[0; 32]);
    let index = writer.take_iomap_update().unwrap();
    writer.on_iomap_entry(index, &[0; IOMAP_ENTRY_LEN]);
    assert!(writer.iomap_window(0, 1).is_none());
    assert!(writer.iowrite(0, 1, |_| {}).is_err());
    assert_eq!(owner.iomap_reserve(), Ok(slot), "the slot is free again");
}

#[test]
fn hostile_entries_fail_the_connection() {
    let (mut writer, _) = pair(2, 2);
    // A slot beyond our table.
    writer.on_receive(
        WrId::recv(0),
        Received::Immediate(Message::IomapSgl(2).encode()),
        &[0; 32],
    );
    assert!(matches!(writer.error(), Some(StreamError::Protocol(m)) if m.contains("entry 2")));
    // An entry whose range overflows.
    for (offset, addr) in [(u64::MAX - 10, 0x1000), (0, u64::MAX - 10)] {
        let (mut writer, _) = pair(2, 2);
        let entry = IomapEntry {
            offset,
            window: RemoteSge::new(addr, 1, 100),
        };
        writer.on_iomap_entry(1, &entry.encode(ByteOrder::native()));
        assert!(
            matches!(writer.error(), Some(StreamError::Protocol(m)) if m.contains("overflows"))
        );
    }
}

#[test]
fn no_table_closed_or_shut_down_are_refused() {
    let (mut a, _) = pair(0, 0);
    let e = a.iomap_reserve().unwrap_err();
    assert!(e.to_string().contains("RDMA_IOMAPSIZE"), "{e}");
    let (mut writer, mut owner) = pair(1, 1);
    map(&mut owner, &mut writer, 0, 0x5000, 100);
    writer.shutdown(Shutdown::Write);
    assert_eq!(writer.iowrite(0, 1, |_| {}), Err(StreamError::WriteClosed));
    assert_eq!(writer.iomap_reserve(), Err(StreamError::WriteClosed));
    let mut opening = engine(1, 3);
    assert_eq!(
        opening.iowrite(0, 1, |_| {}),
        Err(StreamError::NotConnected)
    );
}
