//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz), also run as seeded random-input
//! smoke tests in this crate's tests so that a stable toolchain exercises them.
//!
//! Each function takes arbitrary bytes and must never panic; the invariants it checks are
//! asserted (an assertion failure is a bug the fuzzer reports).

use crate::core::{Config, Connection, Event, MemoryTable, RecvWork, RegionTable, Segments};
use crate::wire::ddp::{Segment, SegmentRepr};
use crate::wire::fpdu::Fpdu;
use crate::wire::mpa::{MpaFrame, MpaRepr};
use crate::wire::rdmap::{ReadRequestRepr, TerminateRepr};
use rdmasock_verbs::QpState;
use std::time::Instant;

/// Parses `data` as an MPA request/reply and as an FPDU; what parses must re-emit to the
/// same bytes.
pub fn mpa_frame(data: &[u8]) {
    if let Ok(frame) = MpaFrame::new_checked(data) {
        if let Ok(repr) = MpaRepr::parse(&frame) {
            let len = MpaFrame::<&[u8]>::frame_len(data).unwrap_or(0);
            let again = repr.to_vec();
            assert_eq!(again.len(), repr.buffer_len());
            // Reserved flag bits and IRD/ORD-less enhanced bits are not kept; compare the
            // parts the representation carries.
            let back = MpaFrame::new_checked(&again[..]).expect("own frame is complete");
            assert_eq!(MpaRepr::parse(&back).expect("own frame parses"), repr);
            assert!(len >= repr.private_data.len());
        }
    }
    if let Ok(f) = Fpdu::new_checked(data) {
        let _ = f.crc_is_valid();
        let _ = f.ulpdu();
    }
}

/// Parses `data` as a DDP segment with its RDMAP body.
pub fn ddp_rdmap(data: &[u8]) {
    let Ok(seg) = Segment::new_checked(data) else {
        return;
    };
    let _ = (seg.header(), seg.payload(), seg.stag(), seg.msn());
    if let Ok(repr) = SegmentRepr::parse(&seg) {
        let mut again = Vec::new();
        repr.append(&mut again);
        assert_eq!(again.len(), seg.header_len());
        let back = Segment::new_checked(&again[..]).expect("own header is complete");
        assert_eq!(SegmentRepr::parse(&back).expect("own header parses"), repr);
    }
    if let Ok(r) = ReadRequestRepr::parse(seg.payload()) {
        let mut b = Vec::new();
        r.append(&mut b);
        assert_eq!(ReadRequestRepr::parse(&b), Ok(r));
    }
    if let Ok(t) = TerminateRepr::parse(seg.payload()) {
        let _ = t.code.description();
    }
}

/// Feeds `data` to a responder and to an initiator (after its request), in pieces whose
/// sizes come from the first bytes; the connections must end up in a consistent state:
/// never panicking, and in error whenever they emitted a TERMINATE event.
pub fn handshake(data: &[u8]) {
    let now = Instant::now();
    let table = RegionTable::new();
    let (cut, rest) = match data.split_first() {
        Some((c, r)) => (usize::from(*c).max(1), r),
        None => (1, data),
    };
    let mut responder = Connection::responder(Config::default(), now);
    let _ = responder.post_recv(RecvWork {
        wr_id: 1,
        segments: Segments::new(),
    });
    drive(&mut responder, rest, cut, &table, true);
    let mut initiator = Connection::initiator(Config::default(), b"fuzz", now)
        .expect("short private data is accepted");
    let mut sink = Vec::new();
    initiator.poll_transmit(&table, &mut sink, usize::MAX);
    drive(&mut initiator, rest, cut, &table, false);
}

fn drive(c: &mut Connection, data: &[u8], cut: usize, table: &dyn MemoryTable, accept: bool) {
    let mut out = Vec::new();
    for piece in data.chunks(cut) {
        c.handle_input(piece, table);
        while let Some(e) = c.poll_event() {
            match e {
                Event::ConnectRequest(_) if accept => {
                    let _ = c.accept(b"ok", Instant::now());
                }
                Event::Terminated(_) => assert_eq!(c.qp_state(), QpState::Error),
                _ => {}
            }
        }
        out.clear();
        c.poll_transmit(table, &mut out, 1 << 16);
        while c.poll_completion().is_some() {}
    }
    c.handle_peer_closed(true);
    assert_eq!(c.qp_state(), QpState::Error);
}
