//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz), also run as seeded random-input
//! smoke tests in this crate's tests so that a stable toolchain exercises them.
//!
//! Each function takes arbitrary bytes and must never panic; the invariants it checks are
//! asserted (an assertion failure is a bug the fuzzer reports).

use crate::protocol::{
    connected_pair, Config, Connection, Event, LocalSegment, MemoryTable, RecvWork, RegionTable,
    Segments,
};
use crate::wire::ddp::{Segment, SegmentRepr};
use crate::wire::fpdu::{self, Fpdu};
use crate::wire::mpa::{MpaFrame, MpaRepr};
use crate::wire::rdmap::{ReadRequestRepr, TerminateRepr};
use rdmasock_verbs::{AccessFlags, LocalKey, QpState, RegisteredMemory};
use std::sync::Arc;
use std::time::Instant;

mod chunking;
mod transmit;

pub use chunking::chunking;
pub use transmit::transmit;

/// Reads the fuzzer's bytes front to back; past the end every read gives zeros.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

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

/// The byte every guarded memory of [`established`] starts with.
const FILL: u8 = 0x5a;

/// Splits off the first byte of `data`: the size of the pieces the rest is fed in.
fn cut_and_rest(data: &[u8]) -> (usize, &[u8]) {
    match data.split_first() {
        Some((c, r)) => (usize::from(*c).max(1), r),
        None => (1, data),
    }
}

/// Feeds `data` (in pieces whose size comes from its first byte) to a responder already in
/// RTS, as if the initiator had sent it: FPDUs past the handshake, where a frame's contents
/// decide (CRC is off on both ends, so the fuzzer need not forge checksums). The responder
/// has a region registered for remote write and read in the middle of a guarded buffer and
/// one receive posted inside another; it must never panic, must be in error whenever it
/// emitted a TERMINATE, and must leave every byte outside the two registrations as it was.
pub fn established(data: &[u8]) {
    let (cut, rest) = cut_and_rest(data);
    established_stream(false, cut, rest);
}

/// [`established`] with CRC on both ends. After the first byte (the piece size) `data` is a
/// list of records, each a control byte, a little-endian 16-bit length and that many bytes:
/// a ULPDU that is framed as an FPDU with its checksum, or with the checksum broken (control
/// bit 0), or bytes that go on the wire as they are (both low control bits), so that the
/// fuzzer reaches the data path through valid checksums and still tries invalid ones.
/// Returns how many work requests the responder completed successfully (the smoke test
/// checks that valid frames get through).
pub fn established_crc(data: &[u8]) -> usize {
    let (cut, mut rest) = cut_and_rest(data);
    let mut stream = Vec::new();
    while let Some((&control, tail)) = rest.split_first() {
        let (len, tail) = match tail {
            [a, b, tail @ ..] => (usize::from(u16::from_le_bytes([*a, *b])), tail),
            _ => (tail.len(), &[][..]),
        };
        let len = len.min(tail.len()).min(fpdu::MAX_ULPDU);
        let (body, tail) = tail.split_at(len);
        rest = tail;
        if control & 3 == 3 {
            stream.extend_from_slice(body);
            continue;
        }
        let start = fpdu::begin(&mut stream);
        stream.extend_from_slice(body);
        fpdu::finish(&mut stream, start, true);
        if control & 1 != 0 {
            let last = stream.len() - 1;
            stream[last] ^= 0x01;
        }
    }
    established_stream(true, cut, &stream)
}

/// Brings a responder to RTS (with CRC on both ends when `crc`) and feeds it `stream` in
/// `cut`-byte pieces; see [`established`] for what it checks. Returns how many work requests
/// the responder completed successfully.
fn established_stream(crc: bool, cut: usize, stream: &[u8]) -> usize {
    let mut completions = 0;
    let config = Config {
        crc,
        ..Config::default()
    };
    let initiator_table = RegionTable::new();
    let mut table = RegionTable::new();
    let memory = Arc::new(RegisteredMemory::allocate(4096).expect("4 KiB"));
    memory.write_at(0, &[FILL; 4096]).expect("fill");
    let _remote = table.register_range(
        memory.clone(),
        1024,
        1024,
        AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    );
    let receive = Arc::new(RegisteredMemory::allocate(256).expect("256 B"));
    receive.write_at(0, &[FILL; 256]).expect("fill");
    let local = table.register_range(receive.clone(), 64, 128, AccessFlags::LOCAL_WRITE);
    let (_initiator, mut responder) = connected_pair(config, &initiator_table, &table);
    let mut segments = Segments::new();
    segments.push(LocalSegment {
        addr: receive.addr() + 64,
        length: 128,
        lkey: LocalKey(local),
    });
    responder
        .post_recv(RecvWork { wr_id: 1, segments })
        .expect("one receive");
    let mut wire = Vec::new();
    for piece in stream.chunks(cut) {
        responder.handle_input(piece, &table);
        while let Some(e) = responder.poll_event() {
            if let Event::Terminated(_) = e {
                assert_eq!(responder.qp_state(), QpState::Error);
            }
        }
        wire.clear();
        responder.poll_transmit(&table, &mut wire, 1 << 16);
        while let Some(c) = responder.poll_completion() {
            completions += usize::from(c.completion.status().is_success());
        }
    }
    let mut bytes = vec![0u8; 4096];
    memory.read_at(0, &mut bytes).expect("read back");
    assert!(
        bytes[..1024]
            .iter()
            .chain(&bytes[2048..])
            .all(|&b| b == FILL),
        "wrote outside the region"
    );
    let mut bytes = vec![0u8; 256];
    receive.read_at(0, &mut bytes).expect("read back");
    assert!(
        bytes[..64].iter().chain(&bytes[192..]).all(|&b| b == FILL),
        "wrote outside the receive"
    );
    completions
}
