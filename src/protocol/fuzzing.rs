//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz), also run on seeded random input
//! by `tests/stream_fuzz_smoke.rs`, so that a stable toolchain exercises them.
//!
//! Each function takes arbitrary bytes and must never panic; the invariants it checks are
//! asserted (an assertion failure is a bug the fuzzer reports). The peer is hostile: it
//! chooses the hello, every immediate value and message word, and what it RDMA-writes into
//! our target list, and the driver feeds completions in any order RC allows.
#![forbid(unsafe_code)]

use super::{
    ByteOrder, CopySpan, Hello, HelloError, InlineMessage, LocalRegions, Message, Op, Payload,
    Received, RemoteSge, RingChange, StreamConfig, StreamEngine, WrId, CONTROL_SLOTS,
    FENCE_READ_LEN, HELLO_LEN, SGE_LEN, TARGET_LIST_LEN,
};
use std::collections::VecDeque;
use std::net::Shutdown;

/// Parses `data` as a hello: what parses re-emits to the same 40 bytes (the reserved bytes
/// aside, which are sent as zero) and parses again to the same value; what fails says why.
pub fn hello(data: &[u8]) {
    match Hello::parse(data) {
        Ok(h) => {
            let bytes = h.to_bytes();
            assert_eq!(bytes[..4], data[..4]);
            assert_eq!(bytes[7..], data[7..HELLO_LEN]);
            assert_eq!(Hello::parse(&bytes), Ok(h));
        }
        Err(HelloError::TooShort { len }) => assert!(len < HELLO_LEN && len == data.len()),
        Err(HelloError::UnsupportedVersion { version }) => assert_ne!(version, 1),
        Err(HelloError::Malformed { reason }) => assert!(!reason.is_empty()),
    }
}

/// Reads the fuzzer's bytes front to back; past the end every read gives zeros.
pub(crate) struct Input<'a>(pub(crate) &'a [u8]);

impl Input<'_> {
    pub(crate) fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }
    pub(crate) fn bytes4(&mut self) -> [u8; 4] {
        [self.byte(), self.byte(), self.byte(), self.byte()]
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The configuration picked by one byte: mode, byte order, ring sizes, depths and signalling
/// (signalling pick 3: every send, with rings that start at 4 KiB and grow to the ring size;
/// write+send mode in big-endian order asks for a placement fence).
pub(crate) fn config(pick: u8) -> StreamConfig {
    let ring = [4096usize, 8192, 65536, 131072][usize::from(pick >> 4 & 3)];
    let depth = [16u16, 17, 64, 384][usize::from(pick >> 6)];
    let signal = [1u16, 2, 8][usize::from(pick >> 2 & 3) % 3];
    let adaptive = pick >> 2 & 3 == 3;
    let builder = StreamConfig::builder()
        .write_with_send(pick & 1 != 0)
        .placement_fence(pick & 3 == 3)
        .byte_order(if pick & 2 != 0 {
            ByteOrder::Big
        } else {
            ByteOrder::Little
        })
        .send_ring(ring)
        .recv_ring(ring)
        .send_queue_depth(depth)
        .recv_queue_depth(depth)
        .signal_interval(signal)
        .max_transfer((ring / 4).max(SGE_LEN) as u32);
    let builder = if adaptive {
        builder
            .send_ring_range(4096, ring)
            .recv_ring_range(4096, ring)
    } else {
        builder
    };
    builder
        .build()
        .expect("every pick is a valid configuration")
}

/// Our receive ring as the driver registered it, and what happened in it: the bytes of
/// ring we advertised (the hello's half and each buffer update) and the data bytes the
/// engine accepted. A ring may be given back only when the two are equal: then no entry the
/// peer holds points into it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OurRing {
    pub(crate) addr: u64,
    pub(crate) key: u32,
    pub(crate) len: usize,
    pub(crate) advertised: u64,
    pub(crate) written: u64,
}

/// What the driver has posted and not yet seen complete.
pub(crate) struct Driver {
    pub(crate) cfg: StreamConfig,
    /// Posted receives, oldest first (RC consumes them in order).
    pub(crate) receives: VecDeque<WrId>,
    /// Posted sends, oldest first, with whether each was signalled.
    pub(crate) sends: VecDeque<(WrId, bool)>,
    /// Our target list, which the peer writes.
    pub(crate) target_list: [u8; TARGET_LIST_LEN],
    /// Every buffer the peer has advertised for our writes: its hello's data buffer, its
    /// target list (for our ring updates) and each entry it wrote into our target list.
    advertised: Vec<RemoteSge>,
    /// Our receive ring now.
    pub(crate) ring: OurRing,
    /// The byte order the peer reads our buffer updates in.
    pub(crate) peer_order: ByteOrder,
    /// Receive rings replaced.
    pub(crate) ring_changes: usize,
    /// Whether every message fed goes through [`fed`](Self::fed), so that `ring` counts the
    /// bytes written (a driver that feeds completions another way checks less).
    pub(crate) counts_written: bool,
}

impl Driver {
    /// Nothing posted yet, nothing advertised.
    pub(crate) fn new(cfg: StreamConfig, local: &LocalRegions) -> Driver {
        Driver {
            ring: OurRing {
                addr: local.recv_ring_addr,
                key: local.recv_ring_rkey,
                len: cfg.recv_ring_min(),
                advertised: cfg.recv_ring_min() as u64 / 2,
                written: 0,
            },
            peer_order: ByteOrder::native(),
            ring_changes: 0,
            counts_written: true,
            cfg,
            receives: VecDeque::new(),
            sends: VecDeque::new(),
            target_list: [0; TARGET_LIST_LEN],
            advertised: Vec::new(),
        }
    }

    /// Notes the buffers of the peer's hello: its data buffer and its target list.
    pub(crate) fn advertise_hello(&mut self, peer: &Hello) {
        self.peer_order = ByteOrder::from_big_endian_flag(peer.big_endian());
        self.advertised.push(peer.data_buf);
        let sgl = peer.target_sgl;
        let len = u64::from(sgl.length) * SGE_LEN as u64;
        self.advertised.push(RemoteSge::new(
            sgl.addr,
            sgl.key,
            len.min(u64::from(u32::MAX)) as u32,
        ));
    }

    /// Notes the entries of our target list (`list`, as the peer wrote it) as advertised.
    pub(crate) fn advertise_targets(&mut self, list: &[u8; TARGET_LIST_LEN]) {
        for entry in list.chunks(SGE_LEN) {
            if let Some(sge) = RemoteSge::decode(entry, self.cfg.byte_order()) {
                if sge.length != 0 && !self.advertised.contains(&sge) {
                    self.advertised.push(sge);
                }
            }
        }
    }

    /// Asserts that `len` bytes written at `addr` with `rkey` land inside one buffer the
    /// peer advertised.
    pub(crate) fn check_remote(&self, addr: u64, rkey: u32, len: usize) {
        if len == 0 {
            return;
        }
        let end = u128::from(addr) + len as u128;
        assert!(
            self.advertised.iter().any(|b| b.key == rkey
                && b.addr <= addr
                && end <= u128::from(b.addr) + u128::from(b.length)),
            "a {len}-byte write at {addr:#x} (key {rkey:#x}) is outside every buffer the peer \
             advertised: {:?}",
            self.advertised
        );
    }

    /// A message the peer sent was fed: counts the data bytes the engine accepted.
    pub(crate) fn fed(&mut self, e: &StreamEngine, word: u32, failed_before: bool) {
        if let (Message::Data(len), false, None) = (Message::decode(word), failed_before, e.error())
        {
            self.ring.written += u64::from(len);
            assert!(
                !self.counts_written || self.ring.written <= self.ring.advertised,
                "the engine accepted {} bytes in a ring it advertised {} bytes of",
                self.ring.written,
                self.ring.advertised
            );
        }
    }

    /// A buffer update we send: it lies inside our current ring.
    fn check_advertisement(&mut self, payload: Payload) {
        let Some(bytes) = payload.small_bytes().filter(|b| b.len() == SGE_LEN) else {
            return;
        };
        let sge = RemoteSge::decode(bytes, self.peer_order).expect("16 bytes");
        let r = self.ring;
        assert!(
            sge.key == r.key
                && sge.addr >= r.addr
                && sge.addr + u64::from(sge.length) <= r.addr + r.len as u64,
            "we advertised {sge:?} outside our ring {r:?}"
        );
        self.ring.advertised += u64::from(sge.length);
    }

    /// Carries out the ring changes the engine asks for: a receive ring is given back only
    /// once the peer wrote every byte we advertised in it (the new one gets a new key).
    pub(crate) fn change_rings(&mut self, e: &mut StreamEngine) {
        while let Some(change) = e.ring_change() {
            match change {
                RingChange::Receive(len) => {
                    assert!(
                        !self.counts_written || self.ring.advertised == self.ring.written,
                        "a receive ring was given back with advertised bytes unwritten: {:?}",
                        self.ring
                    );
                    assert!(len >= self.cfg.recv_ring_min() && len <= self.cfg.recv_ring());
                    self.ring_changes += 1;
                    self.ring = OurRing {
                        addr: self.ring.addr + 0x100_0000,
                        key: self.ring.key.wrapping_add(0x100),
                        len,
                        advertised: 0,
                        written: 0,
                    };
                    e.install_recv_ring(self.ring.addr, self.ring.key, len);
                }
                RingChange::Send(len) => {
                    assert!(
                        self.sends.is_empty(),
                        "a send ring changed under posted sends"
                    );
                    assert!(len >= self.cfg.send_ring_min() && len <= self.cfg.send_ring());
                    e.install_send_ring(len);
                }
            }
            assert!(e.error().is_none(), "{:?}", e.error());
            self.take_ops(e);
        }
    }

    /// Carries out the engine's ops, checking each against the configuration.
    pub(crate) fn take_ops(&mut self, e: &mut StreamEngine) {
        let send_ring = e.send_ring_len();
        while let Some(op) = e.pop_op() {
            match op {
                Op::PostRecv {
                    wr_id,
                    message_slot,
                } => {
                    assert!(wr_id.is_receive(), "{op:?}");
                    if let Some(slot) = message_slot {
                        assert!(self.cfg.write_with_send() && slot < self.cfg.recv_posted());
                    }
                    self.receives.push_back(wr_id);
                    assert!(
                        self.receives.len() <= self.cfg.recv_posted() as usize,
                        "more receives posted than the queue holds"
                    );
                }
                Op::ClearTargetEntry { offset } => {
                    assert!(offset + SGE_LEN <= TARGET_LIST_LEN, "{op:?}");
                    self.target_list[offset..offset + SGE_LEN].fill(0);
                }
                Op::WriteWithImm {
                    wr_id,
                    payload,
                    signaled,
                    remote_addr,
                    rkey,
                    ..
                }
                | Op::Write {
                    wr_id,
                    payload,
                    signaled,
                    remote_addr,
                    rkey,
                    ..
                } => {
                    assert!(!wr_id.is_receive(), "{op:?}");
                    self.check_payload(payload, send_ring);
                    self.check_remote(remote_addr, rkey, payload.len());
                    self.check_advertisement(payload);
                    self.sends.push_back((wr_id, signaled));
                    assert!(
                        self.sends.len() <= usize::from(self.cfg.send_queue_depth()),
                        "more sends posted than the send queue holds"
                    );
                }
                Op::Read {
                    wr_id,
                    remote_addr,
                    rkey,
                } => {
                    assert!(!wr_id.is_receive(), "{op:?}");
                    // It reads memory the peer advertised (its target list).
                    self.check_remote(remote_addr, rkey, FENCE_READ_LEN as usize);
                    assert!(
                        e.proves_placement_by_read(),
                        "a fence where WRITEs prove placement"
                    );
                    self.sends.push_back((wr_id, true));
                    assert!(
                        self.sends.len() <= usize::from(self.cfg.send_queue_depth()),
                        "more sends posted than the send queue holds"
                    );
                }
                Op::Send {
                    wr_id,
                    payload,
                    signaled,
                    ..
                } => {
                    assert!(!wr_id.is_receive(), "{op:?}");
                    self.check_payload(payload, send_ring);
                    self.sends.push_back((wr_id, signaled));
                    assert!(
                        self.sends.len() <= usize::from(self.cfg.send_queue_depth()),
                        "more sends posted than the send queue holds"
                    );
                }
            }
        }
        assert_eq!(
            e.queued_receives, 0,
            "the count of queued receive reposts is off once the queue is empty"
        );
        if e.ring_change_pending() {
            self.change_rings(e);
        }
    }

    fn check_payload(&self, payload: Payload, ring: usize) {
        match payload {
            Payload::Empty => {}
            Payload::SendRing { first, second } => {
                assert!(first.offset + first.len <= ring, "{payload:?}");
                if let Some(s) = second {
                    assert!(s.offset == 0 && s.len <= first.offset, "{payload:?}");
                }
            }
            Payload::Registered { .. } => {
                panic!("the fuzzed driver makes no zero-copy writes: {payload:?}")
            }
            Payload::Small {
                len, control_slot, ..
            } => {
                assert!(usize::from(len) <= SGE_LEN, "{payload:?}");
                assert!(u32::from(control_slot) < CONTROL_SLOTS, "{payload:?}");
            }
        }
    }

    /// RC completes sends in order: the unsignalled ones before the next signalled one
    /// complete silently with it (a failure flushes each with an error of its own).
    /// Returns how many completions it fed (0 or 1).
    fn complete_send(&mut self, e: &mut StreamEngine, success: bool) -> usize {
        while let Some((wr_id, signaled)) = self.sends.pop_front() {
            if signaled || !success {
                e.on_send_completion(wr_id, success);
                return 1;
            }
        }
        0
    }
}

/// Checks a copy the engine asks for: inside the ring and inside the caller's `len` bytes.
pub(crate) fn check_span(span: CopySpan, ring: usize, len: usize, total: &mut usize) {
    assert!(
        span.ring_offset + span.len <= ring,
        "{span:?} in a {ring}-byte ring"
    );
    assert!(
        span.data_offset + span.len <= len,
        "{span:?} for {len} bytes"
    );
    *total += span.len;
}

/// How far one [`engine`] run got: the smoke test checks that its scripts reach deep states.
#[derive(Debug, Default, Clone, Copy)]
pub struct Reached {
    /// The peer's hello was accepted.
    pub connected: bool,
    /// Bytes the application read.
    pub bytes_read: usize,
    /// Bytes the application wrote.
    pub bytes_written: usize,
    /// Send completions fed.
    pub sends_completed: usize,
    /// The engine failed (a protocol violation or a failed completion).
    pub failed: bool,
}

/// Drives one engine with a hostile peer. The first byte picks the configuration, then the
/// peer's hello: either the next 40 bytes as they are, or a well-formed one whose fields come
/// from the input. The rest is a script of peer messages, target-list writes, completions and
/// application calls, each followed by the driver carrying out the queued ops.
pub fn engine(data: &[u8]) -> Reached {
    let mut reached = Reached::default();
    let mut input = Input(data);
    let cfg = config(input.byte());
    let local = LocalRegions {
        recv_ring_addr: 0x10_0000,
        recv_ring_rkey: 0x11,
        target_list_addr: 0x20_0000,
        target_list_rkey: 0x22,
    };
    let mut e = StreamEngine::new(cfg.clone(), local);
    let mut d = Driver::new(cfg, &local);
    d.take_ops(&mut e);
    let peer = if input.byte() & 1 == 0 {
        let mut raw = [0u8; HELLO_LEN];
        raw.iter_mut().for_each(|b| *b = input.byte());
        match Hello::parse(&raw) {
            Ok(h) => h,
            Err(_) => return reached,
        }
    } else {
        let mut h = e.hello();
        h.flags = input.byte();
        h.credits = input.u16().max(1);
        h.data_buf.length = u32::from(input.u16()).max(1);
        h.data_buf.addr = u64::from(input.u16()) << 12;
        h
    };
    if e.on_connected(&peer).is_err() {
        return reached;
    }
    reached.connected = true;
    d.advertise_hello(&peer);
    assert!(e.on_connected(&peer).is_err(), "a second hello is refused");
    d.take_ops(&mut e);
    let mut buf_len;
    while !input.is_empty() {
        match input.byte() % 12 {
            0 | 1 => {
                // A message from the peer consumes the oldest posted receive.
                let Some(wr_id) = d.receives.pop_front() else {
                    continue;
                };
                let word = input.bytes4();
                let list = d.target_list;
                d.advertise_targets(&list);
                let (received, host_word) = if d.cfg.write_with_send() {
                    (Received::Message(word), d.cfg.byte_order().word_from(word))
                } else {
                    let imm = u32::from_le_bytes(word);
                    (Received::Immediate(imm), imm)
                };
                let failed = e.error().is_some();
                e.on_receive(wr_id, received, &d.target_list);
                d.fed(&e, host_word, failed);
            }
            2 => {
                // The peer RDMA-writes part of our target list.
                let at = usize::from(input.byte()) % TARGET_LIST_LEN;
                let n = usize::from(input.byte()) % (TARGET_LIST_LEN - at + 1);
                for b in &mut d.target_list[at..at + n] {
                    *b = input.byte();
                }
            }
            3 => reached.sends_completed += d.complete_send(&mut e, true),
            4 => reached.sends_completed += d.complete_send(&mut e, false),
            5 => {
                if let Some(wr_id) = d.receives.pop_front() {
                    e.on_receive_failed(wr_id, Some("fuzzed"));
                }
            }
            6 | 7 => {
                buf_len = usize::from(input.u16());
                let mut total = 0;
                let ring = if e.reads_old_recv_ring() {
                    e.old_ring.0
                } else {
                    e.recv_ring_len()
                };
                let peek = input.byte() & 1 != 0;
                let copy = |s: CopySpan| check_span(s, ring, buf_len, &mut total);
                let got = if peek {
                    e.peek(buf_len, copy)
                } else {
                    e.read(buf_len, copy)
                };
                if let Ok(n) = got {
                    assert!(
                        n <= buf_len && n == total,
                        "read {n} of {buf_len}, copied {total}"
                    );
                    reached.bytes_read += n;
                }
            }
            8 if input.byte() & 1 == 0 => {
                // A small write the socket posts the short way, when the engine allows it.
                buf_len = usize::from(input.byte());
                if let Some(w) = e.write_inline(buf_len) {
                    assert!(
                        buf_len > 0 && buf_len <= d.cfg.inline_threshold() as usize,
                        "{buf_len} bytes went inline"
                    );
                    assert!(!w.wr_id.is_receive(), "{w:?}");
                    d.check_remote(w.remote_addr, w.rkey, buf_len);
                    match w.message {
                        InlineMessage::Immediate(_) => d.sends.push_back((w.wr_id, w.signaled)),
                        InlineMessage::Send { wr_id, word } => {
                            assert!(d.cfg.write_with_send() && !wr_id.is_receive(), "{w:?}");
                            assert_eq!(wr_id.seq(), w.wr_id.seq() + 1, "{w:?}");
                            let data = Message::Data(buf_len as u32).encode();
                            assert_eq!(word, d.peer_order.word_bytes(data), "{w:?}");
                            d.sends.push_back((w.wr_id, false));
                            d.sends.push_back((wr_id, w.signaled));
                        }
                    }
                    assert!(
                        d.sends.len() <= usize::from(d.cfg.send_queue_depth()),
                        "more sends posted than the send queue holds"
                    );
                    reached.bytes_written += buf_len;
                }
            }
            8 | 9 => {
                buf_len = usize::from(input.u16());
                let mut total = 0;
                let ring = e.send_ring_len();
                let got = e.write(buf_len, |s| check_span(s, ring, buf_len, &mut total));
                if let Ok(n) = got {
                    assert!(
                        n <= buf_len && n == total,
                        "wrote {n} of {buf_len}, copied {total}"
                    );
                    reached.bytes_written += n;
                }
            }
            10 => match input.byte() % 4 {
                0 => e.shutdown(Shutdown::Read),
                1 => e.shutdown(Shutdown::Write),
                2 => e.shutdown(Shutdown::Both),
                _ => {
                    let _ = e.flush();
                }
            },
            _ => match input.byte() % 3 {
                0 => {
                    e.keepalive();
                }
                1 => {
                    e.on_idle_tick();
                }
                _ => e.on_cm_disconnected(),
            },
        }
        d.take_ops(&mut e);
        let r = e.readiness();
        if e.error().is_some() {
            assert!(
                r.readable && r.writable,
                "an error is reported to both directions"
            );
        }
        let _ = (e.finished(), e.all_sends_done(), e.readable_bytes());
    }
    reached.failed = e.error().is_some();
    reached
}
