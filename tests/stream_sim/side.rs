//! One end of the simulated connection: its stream engine, its "registered memory" as
//! plain vectors (send ring, control area, receive ring, target list, iomap windows), its
//! send, receive and completion queues, and the application that writes and reads through it.

use super::{base, Completion, Fnv, Kind, Posted, Source, Stream, RECV_KEY, TARGET_KEY};
use rdmasock::protocol::{
    CopySpan, InlineMessage, LocalRegions, Op, Payload, Received, RingChange, StreamConfig,
    StreamEngine, StreamError, WrId, RECV_DEFER_MAX, SGE_LEN,
};
use std::collections::VecDeque;

pub(crate) struct Side {
    pub engine: StreamEngine,
    pub send_ring: Vec<u8>,
    pub control: Vec<u8>,
    pub recv_ring: Vec<u8>,
    /// The receive ring's key and address: a new ring gets a new key, and a write with an
    /// old one (into a ring given back) fails the test.
    pub recv_key: u32,
    pub recv_base: u64,
    /// The receive ring replaced last, for reading the bytes left in it (no write may land
    /// there: its key is gone).
    pub old_recv_ring: Vec<u8>,
    /// Ring changes carried out: (receive, send).
    pub ring_changes: (usize, usize),
    /// The largest receive and send rings this side had.
    pub largest_rings: (usize, usize),
    /// Refuse every bigger ring (as a driver out of memory does); counted in `refused`.
    pub refuse_growth: bool,
    pub refused: (usize, usize),
    /// The target list, and the iomap table after it.
    pub target: Vec<u8>,
    /// Iomap windows this side mapped: (rkey, address, bytes).
    pub windows: Vec<(u32, u64, Vec<u8>)>,
    pub messages: Vec<u8>,
    pub sq: VecDeque<Posted>,
    pub rq: VecDeque<(WrId, Option<u32>)>,
    pub cq: VecDeque<Completion>,
    // Application.
    pub to_send: usize,
    pub sent: usize,
    pub unsent: Vec<u8>,
    pub unsent_start: usize,
    pub gen: Stream,
    pub expect_gen: Stream,
    pub expected: Vec<u8>,
    pub received: usize,
    pub sent_hash: Fnv,
    pub recv_hash: Fnv,
    pub eof: bool,
    pub shut: bool,
    /// Post receive reposts as the socket layer does: up to `RECV_DEFER_MAX` of them, when
    /// nothing else is queued, wait for the next drain, and they go after the sends queued
    /// with them; a completion poll first posts what waits (the socket's progress pass).
    pub defer_receives: bool,
    /// With `defer_receives`: the reposts of the last post, which the socket layer makes
    /// after that post's sends, so the peer may act between the two (they reach `rq` at this
    /// side's next call).
    pub late_receives: Vec<(WrId, Option<u32>)>,
    /// Write as the socket layer does: a write the engine can send inline at once
    /// (`StreamEngine::write_inline`) goes straight to the send queue with the caller's
    /// bytes, ahead of the queued receive reposts, and the send ring is left unwritten.
    pub inline_writes: bool,
    /// Writes that went the inline way.
    pub inline_written: usize,
}

impl Side {
    pub(crate) fn new(side: usize, cfg: StreamConfig, to_send: usize, seed: u64) -> Self {
        let local = LocalRegions {
            recv_ring_addr: base(side),
            recv_ring_rkey: RECV_KEY[side],
            target_list_addr: base(side) + 0x1_0000_0000,
            target_list_rkey: TARGET_KEY[side],
        };
        Side {
            send_ring: vec![0; cfg.send_ring_min()],
            control: vec![0; cfg.control_area_len()],
            recv_ring: vec![0; cfg.recv_ring_min()],
            recv_key: RECV_KEY[side],
            recv_base: base(side),
            old_recv_ring: Vec::new(),
            ring_changes: (0, 0),
            largest_rings: (cfg.recv_ring_min(), cfg.send_ring_min()),
            refuse_growth: false,
            refused: (0, 0),
            target: vec![0; cfg.target_area_len()],
            windows: Vec::new(),
            messages: vec![0; cfg.message_area_len()],
            engine: StreamEngine::new(cfg, local),
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            cq: VecDeque::new(),
            to_send,
            sent: 0,
            unsent: Vec::new(),
            unsent_start: 0,
            gen: Stream::new(seed),
            expect_gen: Stream::new(0),
            expected: Vec::new(),
            received: 0,
            sent_hash: Fnv::new(),
            recv_hash: Fnv::new(),
            eof: false,
            shut: false,
            defer_receives: false,
            late_receives: Vec::new(),
            inline_writes: false,
            inline_written: 0,
        }
    }

    /// Posts the queued ops as a driver must: in order, or with `defer_receives` as the
    /// socket layer does (see the field).
    pub(crate) fn drain_ops(&mut self) {
        self.rq.extend(self.late_receives.drain(..));
        if self.defer_receives
            && self.engine.only_receives_queued(RECV_DEFER_MAX)
            && !self.engine.ring_change_pending()
        {
            return;
        }
        self.post_all_ops();
    }

    /// Carries out the ring changes the engine asks for, as the socket layer does after
    /// posting: a new receive ring under a new key (the old one is dropped at once: a later
    /// write into it fails the test), a new send ring.
    pub(crate) fn change_rings(&mut self) {
        while let Some(change) = self.engine.ring_change() {
            match change {
                RingChange::Receive(len) if self.refuse_growth && len > self.recv_ring.len() => {
                    self.refused.0 += 1;
                    self.engine.refuse_ring_change(change);
                }
                RingChange::Send(len) if self.refuse_growth && len > self.send_ring.len() => {
                    self.refused.1 += 1;
                    self.engine.refuse_ring_change(change);
                }
                RingChange::Receive(len) => {
                    self.ring_changes.0 += 1;
                    self.recv_key += 0x1_0000;
                    self.recv_base += 0x1000_0000;
                    self.old_recv_ring = std::mem::replace(&mut self.recv_ring, vec![0xEE; len]);
                    self.largest_rings.0 = self.largest_rings.0.max(len);
                    self.engine
                        .install_recv_ring(self.recv_base, self.recv_key, len);
                }
                RingChange::Send(len) => {
                    self.ring_changes.1 += 1;
                    self.send_ring = vec![0xDD; len];
                    self.control.fill(0xDD);
                    self.largest_rings.1 = self.largest_rings.1.max(len);
                    self.engine.install_send_ring(len);
                }
            }
            assert_eq!(self.engine.error(), None);
            self.post_all_ops();
        }
    }

    /// Posts every queued op now (with `defer_receives`, the receives after the rest).
    pub(crate) fn post_all_ops(&mut self) {
        self.rq.extend(self.late_receives.drain(..));
        let mut receives = Vec::new();
        while let Some(op) = self.engine.pop_op() {
            match op {
                Op::PostRecv {
                    wr_id,
                    message_slot,
                } if self.defer_receives => receives.push((wr_id, message_slot)),
                Op::PostRecv {
                    wr_id,
                    message_slot,
                } => self.rq.push_back((wr_id, message_slot)),
                Op::ClearTargetEntry { offset } => self.target[offset..offset + SGE_LEN].fill(0),
                Op::WriteWithImm {
                    wr_id,
                    payload,
                    remote_addr,
                    rkey,
                    imm,
                    inline,
                    signaled,
                } => {
                    let source = self.source(payload, inline);
                    let kind = Kind::WriteImm(imm);
                    self.sq.push_back(Posted {
                        kind,
                        wr_id,
                        source,
                        remote_addr,
                        rkey,
                        signaled,
                    });
                }
                Op::Write {
                    wr_id,
                    payload,
                    remote_addr,
                    rkey,
                    inline,
                    signaled,
                } => {
                    let source = self.source(payload, inline);
                    let kind = Kind::Write;
                    self.sq.push_back(Posted {
                        kind,
                        wr_id,
                        source,
                        remote_addr,
                        rkey,
                        signaled,
                    });
                }
                Op::Read {
                    wr_id,
                    remote_addr,
                    rkey,
                } => self.sq.push_back(Posted {
                    kind: Kind::Read,
                    wr_id,
                    source: Source::Captured(Vec::new()),
                    remote_addr,
                    rkey,
                    signaled: true,
                }),
                Op::Send {
                    wr_id,
                    payload,
                    inline,
                    signaled,
                } => {
                    assert!(inline, "message words are always inline");
                    let source = self.source(payload, inline);
                    let (kind, remote_addr, rkey) = (Kind::Send, 0, 0);
                    self.sq.push_back(Posted {
                        kind,
                        wr_id,
                        source,
                        remote_addr,
                        rkey,
                        signaled,
                    });
                }
            }
        }
        self.late_receives = receives;
        if self.engine.ring_change_pending() {
            self.change_rings();
        }
    }

    pub(crate) fn source(&mut self, payload: Payload, inline: bool) -> Source {
        match payload {
            Payload::Empty => Source::Captured(Vec::new()),
            Payload::SendRing { first, second } => {
                let mut spans = vec![(first.offset, first.len)];
                spans.extend(second.map(|s| (s.offset, s.len)));
                assert!(spans.iter().all(|&(o, l)| o + l <= self.send_ring.len()));
                if inline {
                    let mut v = Vec::new();
                    for (o, l) in spans {
                        v.extend_from_slice(&self.send_ring[o..o + l]);
                    }
                    Source::Captured(v)
                } else {
                    Source::Ring(spans)
                }
            }
            Payload::Registered { .. } => {
                panic!("the simulation makes no zero-copy writes: {payload:?}")
            }
            Payload::Small {
                bytes,
                len,
                control_slot,
            } => {
                let len = usize::from(len);
                if inline {
                    Source::Captured(bytes[..len].to_vec())
                } else {
                    let at = usize::from(control_slot) * 16;
                    self.control[at..at + len].copy_from_slice(&bytes[..len]);
                    Source::Control(at, len)
                }
            }
        }
    }

    pub(crate) fn gather(&self, source: &Source) -> Vec<u8> {
        match source {
            Source::Captured(v) => v.clone(),
            Source::Ring(spans) => {
                let mut v = Vec::new();
                for &(o, l) in spans {
                    v.extend_from_slice(&self.send_ring[o..o + l]);
                }
                v
            }
            Source::Control(at, len) => self.control[*at..*at + *len].to_vec(),
        }
    }

    /// The application writes up to `n` bytes.
    pub(crate) fn app_write(&mut self, n: usize) -> Result<usize, StreamError> {
        let n = n.min(self.to_send - self.sent);
        let have = self.unsent.len() - self.unsent_start;
        if have < n {
            self.gen.fill(&mut self.unsent, n - have);
        }
        let src = &self.unsent[self.unsent_start..];
        let inline = if self.inline_writes {
            self.engine.write_inline(n)
        } else {
            None
        };
        let ring = &mut self.send_ring;
        let r = if let Some(w) = inline {
            // The caller's bytes, captured as the provider copies an inline send's.
            let (kind, signaled) = match w.message {
                InlineMessage::Immediate(imm) => (Kind::WriteImm(imm), w.signaled),
                InlineMessage::Send { .. } => (Kind::Write, false),
            };
            self.sq.push_back(Posted {
                kind,
                wr_id: w.wr_id,
                source: Source::Captured(src[..n].to_vec()),
                remote_addr: w.remote_addr,
                rkey: w.rkey,
                signaled,
            });
            if let InlineMessage::Send { wr_id, word } = w.message {
                self.sq.push_back(Posted {
                    kind: Kind::Send,
                    wr_id,
                    source: Source::Captured(word.to_vec()),
                    remote_addr: 0,
                    rkey: 0,
                    signaled: w.signaled,
                });
            }
            self.inline_written += 1;
            Ok(n)
        } else {
            self.engine.write(n, |c: CopySpan| {
                ring[c.ring_offset..c.ring_offset + c.len]
                    .copy_from_slice(&src[c.data_offset..c.data_offset + c.len]);
            })
        };
        if let Ok(k) = r {
            self.sent_hash
                .update(&self.unsent[self.unsent_start..self.unsent_start + k]);
            self.unsent_start += k;
            self.sent += k;
            if self.unsent_start > (1 << 20) {
                self.unsent.drain(..self.unsent_start);
                self.unsent_start = 0;
            }
        }
        self.drain_ops();
        r
    }

    /// The application reads up to `n` bytes (peeking first, half the time) and checks them.
    pub(crate) fn app_read(&mut self, n: usize, peek: bool) -> Result<usize, StreamError> {
        let mut buf = vec![0u8; n];
        let ring = Self::reading_ring(&self.engine, &self.old_recv_ring, &self.recv_ring);
        let mut copy = |c: CopySpan| {
            buf[c.data_offset..c.data_offset + c.len]
                .copy_from_slice(&ring[c.ring_offset..c.ring_offset + c.len]);
        };
        if peek {
            let before = self.engine.readable_bytes();
            let k = self.engine.peek(n, &mut copy)?;
            assert_eq!(self.engine.readable_bytes(), before, "peek consumed data");
            self.check(&buf[..k]);
            buf.fill(0);
        }
        let ring = Self::reading_ring(&self.engine, &self.old_recv_ring, &self.recv_ring);
        let r = self.engine.read(n, |c: CopySpan| {
            buf[c.data_offset..c.data_offset + c.len]
                .copy_from_slice(&ring[c.ring_offset..c.ring_offset + c.len]);
        });
        if let Ok(k) = r {
            self.check(&buf[..k]);
            self.recv_hash.update(&buf[..k]);
            self.expected.drain(..k);
            self.received += k;
            if k == 0 && n > 0 {
                self.eof = true;
            }
        }
        // A read that returned nothing makes the socket's whole progress pass.
        if matches!(r, Ok(k) if k > 0) {
            self.drain_ops();
        } else {
            self.post_all_ops();
        }
        r
    }

    /// The receive ring the engine reads from now.
    fn reading_ring<'a>(engine: &StreamEngine, old: &'a [u8], current: &'a [u8]) -> &'a [u8] {
        if engine.reads_old_recv_ring() {
            old
        } else {
            current
        }
    }

    pub(crate) fn check(&mut self, got: &[u8]) {
        if self.expected.len() < got.len() {
            let more = got.len() - self.expected.len();
            self.expect_gen.fill(&mut self.expected, more);
        }
        if got != &self.expected[..got.len()] {
            let i = (0..got.len())
                .find(|&i| got[i] != self.expected[i])
                .unwrap_or(0);
            panic!("stream corrupted at byte {}", self.received + i);
        }
    }

    /// Feeds one completion (with `defer_receives`, after posting what waits: the socket
    /// layer's progress pass); false when there is none.
    pub(crate) fn poll(&mut self) -> bool {
        if self.defer_receives {
            self.post_all_ops();
        }
        self.feed_one()
    }

    /// One progress pass of the socket layer: posts what waits, then feeds every queued
    /// completion, posting after each as `drain_ops` does (so with `defer_receives` up to
    /// `RECV_DEFER_MAX` receive reposts stay queued). Returns how many were fed.
    pub(crate) fn progress_pass(&mut self) -> usize {
        self.post_all_ops();
        let mut fed = 0;
        while self.feed_one() {
            fed += 1;
        }
        fed
    }

    /// Feeds the next completion and posts what that queued (see `drain_ops`).
    fn feed_one(&mut self) -> bool {
        let Some(c) = self.cq.pop_front() else {
            return false;
        };
        match c {
            Completion::Send(wr_id, ok) => self.engine.on_send_completion(wr_id, ok),
            Completion::Recv(wr_id, imm) => {
                let received = match imm {
                    Some(imm) => Received::Immediate(imm),
                    None => {
                        let at = wr_id.message_slot() as usize * 4;
                        let w = &self.messages[at..at + 4];
                        Received::Message([w[0], w[1], w[2], w[3]])
                    }
                };
                let target = self.target.clone();
                self.engine.on_receive(wr_id, received, &target);
                while let Some(slot) = self.engine.take_iomap_update() {
                    let at = StreamEngine::iomap_entry_offset(slot);
                    let entry: [u8; 24] = target[at..at + 24].try_into().unwrap();
                    self.engine.on_iomap_entry(slot, &entry);
                }
            }
            Completion::RecvFailed(wr_id) => self.engine.on_receive_failed(wr_id, None),
        }
        self.drain_ops();
        true
    }
}
