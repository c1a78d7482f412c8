//! Outbound messages: the RTR, READ requests and responses and the send queue, each started
//! here and cut into FPDUs by `framing`.

use super::config::Rtr;
use super::connection::{Blame, Connection, Fault, OutstandingRead, Phase};
use super::memory::{AccessError, MemoryTable};
use super::segments::Segments;
use super::txqueue::TxQueue;
use super::work::{SendOperation, SmallPayload};
use crate::wire::ddp::{queue, Opcode, Placement, SegmentRepr};
use crate::wire::fpdu;
use crate::wire::rdmap::{ReadRequestRepr, TerminateCode};
use rdmasock_verbs::{AccessFlags, LocalKey, WcStatus};

mod framing;

/// A message being cut into segments.
#[derive(Clone, Debug)]
pub(crate) struct TxMessage {
    kind: TxKind,
    total: u32,
    sent: u32,
}

impl TxMessage {
    /// The send request this message carries, if it is one (not a READ response).
    pub(crate) fn send_seq(&self) -> Option<u64> {
        match self.kind {
            TxKind::Send { seq, .. } | TxKind::Write { seq, .. } => Some(seq),
            TxKind::ReadResponse { .. } => None,
        }
    }
}

/// What [`Connection::start_next`] started.
enum Started {
    /// A SEND, WRITE or READ response, to cut into FPDUs.
    Message(TxMessage),
    /// Something framed whole already (an RTR or a READ request), or a request failed.
    Framed,
    /// Nothing may start now.
    Nothing,
}

#[derive(Clone, Debug)]
enum TxKind {
    Send {
        seq: u64,
        opcode: Opcode,
        msn: u32,
        invalidate: u32,
        segments: Segments,
        small: Option<SmallPayload>,
    },
    Write {
        seq: u64,
        stag: u32,
        offset: u64,
        segments: Segments,
        small: Option<SmallPayload>,
    },
    /// The response to the READ request at the head of the IRQ.
    ReadResponse {
        sink_stag: u32,
        sink_offset: u64,
        source_stag: u32,
        source_offset: u64,
    },
}

impl TxKind {
    /// The payload a small SEND or WRITE carries itself.
    fn small(&self) -> Option<&SmallPayload> {
        match self {
            TxKind::Send { small, .. } | TxKind::Write { small, .. } => small.as_ref(),
            TxKind::ReadResponse { .. } => None,
        }
    }
}

impl Connection {
    /// Appends what is ready to go to `out`, and returns how many bytes it appended: MPA
    /// frames and a TERMINATE first, then whole FPDUs while fewer than `max_len` bytes were
    /// appended (so it may go past `max_len` by up to one FPDU). SEND and WRITE requests
    /// complete here, once their last FPDU is copied out. The driver uses
    /// [`Connection::poll_transmit_queue`] instead, which copies no payload.
    pub fn poll_transmit(
        &mut self,
        memory: &dyn MemoryTable,
        out: &mut Vec<u8>,
        max_len: usize,
    ) -> usize {
        let mut queue = TxQueue::new();
        let n = self.poll_transmit_queue(memory, &mut queue, max_len);
        queue.copy_to(out);
        let len = queue.len();
        queue.advance(len, self);
        n
    }

    /// Like [`Connection::poll_transmit`], but appends to `queue`, where payloads stay in
    /// their registered memory (see [`TxQueue`]); a SEND or WRITE request completes when
    /// [`TxQueue::advance`] passes its last byte.
    pub fn poll_transmit_queue(
        &mut self,
        memory: &dyn MemoryTable,
        queue: &mut TxQueue,
        max_len: usize,
    ) -> usize {
        let start = queue.len();
        queue.bytes().append(&mut self.control);
        while queue.len() - start < max_len && self.may_send_fpdus() {
            // A message just started goes to framing straight, not through `tx_current`.
            let msg = match self.tx_current.take() {
                Some(msg) => Some(msg),
                None => match self.start_next(memory, queue.bytes()) {
                    Started::Message(msg) => Some(msg),
                    Started::Framed => None,
                    Started::Nothing => break,
                },
            };
            if let Some(msg) = msg {
                self.emit_segment(msg, memory, queue);
            }
            queue.bytes().append(&mut self.control);
        }
        queue.len() - start
    }

    /// Whether [`Connection::poll_transmit`] has something to give now.
    pub fn wants_transmit(&self) -> bool {
        if !self.control.is_empty() {
            return true;
        }
        if !self.may_send_fpdus() {
            return false;
        }
        self.rtr_to_send.is_some()
            || self.tx_current.is_some()
            || !self.irq.is_empty()
            || self
                .sq_pending
                .front()
                .is_some_and(|(_, w)| self.may_start(w))
    }

    /// Whether a send request not yet framed whole still names `lkey` (the driver copies
    /// lent bytes such a request still needs before the post that lent them returns).
    pub fn uses_local_key(&self, lkey: LocalKey) -> bool {
        let current = self.tx_current.as_ref().map(|m| match &m.kind {
            TxKind::Send { segments, .. } | TxKind::Write { segments, .. } => &segments[..],
            TxKind::ReadResponse { .. } => &[],
        });
        current
            .into_iter()
            .chain(self.sq_pending.iter().map(|(_, w)| &w.segments[..]))
            .any(|segments| segments.iter().any(|s| s.lkey == lkey))
    }

    pub(super) fn may_send_fpdus(&self) -> bool {
        matches!(self.phase, Phase::Established) && self.hold_until.is_none()
    }

    fn may_start(&self, work: &super::work::SendWork) -> bool {
        let ord = self.negotiated.as_ref().map_or(0, |n| usize::from(n.ord));
        match work.op {
            SendOperation::RdmaRead { .. } if self.orq.len() >= ord.max(1) => false,
            _ if work.fence && !self.orq.is_empty() => false,
            _ => true,
        }
    }

    /// Starts the next message: a message to cut into FPDUs, one framed whole into `out`
    /// already (or a fault), or nothing when nothing may start now.
    fn start_next(&mut self, memory: &dyn MemoryTable, out: &mut Vec<u8>) -> Started {
        if let Some(rtr) = self.rtr_to_send.take() {
            self.emit_rtr(rtr, out);
            return Started::Framed;
        }
        if let Some(r) = self.irq.front() {
            return Started::Message(TxMessage {
                kind: TxKind::ReadResponse {
                    sink_stag: r.sink_stag,
                    sink_offset: r.sink_offset,
                    source_stag: r.source_stag,
                    source_offset: r.source_offset,
                },
                total: r.size,
                sent: 0,
            });
        }
        if !self
            .sq_pending
            .front()
            .is_some_and(|(_, w)| self.may_start(w))
        {
            return Started::Nothing;
        }
        let (seq, work) = self.sq_pending.pop_front().expect("front exists");
        let total = u32::try_from(work.total_length()).unwrap_or(u32::MAX);
        let needed = match work.op {
            SendOperation::RdmaRead { .. } => AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            _ => AccessFlags::empty(),
        };
        for s in work.segments.iter().filter(|s| s.length > 0) {
            let checked = memory
                .local(s.lkey)
                .ok_or(AccessError::InvalidKey)
                .and_then(|r| r.resolve(s.addr, u64::from(s.length), needed));
            if let Err(e) = checked {
                let why = match (e, needed.is_empty()) {
                    (AccessError::InvalidKey, _) => "its lkey names no memory region",
                    (AccessError::OutOfBounds, _) => "it lies outside its memory region",
                    (AccessError::NotPermitted, _) => {
                        "an RDMA READ sink must be registered with LOCAL_WRITE and REMOTE_WRITE (iWARP rule)"
                    }
                };
                self.fail(
                    Fault::new(
                        TerminateCode::RDMAP_LOCAL_CATASTROPHIC,
                        format!(
                            "work request {:#x}: a scatter/gather entry is unusable: {why}",
                            work.wr_id
                        ),
                    )
                    .blame(Blame::Send(seq, WcStatus::LocalProtectionError)),
                );
                return Started::Framed;
            }
        }
        match work.op {
            SendOperation::Send {
                solicited,
                invalidate,
            } => {
                self.tx_msn[0] = self.tx_msn[0].wrapping_add(1);
                let opcode = match (solicited, invalidate.is_some()) {
                    (false, false) => Opcode::Send,
                    (false, true) => Opcode::SendWithInvalidate,
                    (true, false) => Opcode::SendWithSolicitedEvent,
                    (true, true) => Opcode::SendWithSolicitedEventAndInvalidate,
                };
                Started::Message(TxMessage {
                    kind: TxKind::Send {
                        seq,
                        opcode,
                        msn: self.tx_msn[0],
                        invalidate: invalidate.map_or(0, |k| k.0),
                        segments: work.segments,
                        small: work.small,
                    },
                    total,
                    sent: 0,
                })
            }
            SendOperation::RdmaWrite { remote_addr, rkey } => Started::Message(TxMessage {
                kind: TxKind::Write {
                    seq,
                    stag: rkey.0,
                    offset: remote_addr,
                    segments: work.segments,
                    small: work.small,
                },
                total,
                sent: 0,
            }),
            SendOperation::RdmaRead { remote_addr, rkey } => {
                let sink = work.segments.first().copied().filter(|s| s.length > 0);
                self.emit_read_request(
                    ReadRequestRepr {
                        sink_stag: sink.map_or(0, |s| s.lkey.0),
                        sink_offset: sink.map_or(0, |s| s.addr),
                        size: total,
                        source_stag: rkey.0,
                        source_offset: remote_addr,
                    },
                    out,
                );
                self.orq.push_back(OutstandingRead {
                    seq: Some(seq),
                    sink,
                    sink_stag: sink.map_or(0, |s| s.lkey.0),
                    sink_offset: sink.map_or(0, |s| s.addr),
                    size: total,
                    received: 0,
                });
                Started::Framed
            }
        }
    }

    fn emit_read_request(&mut self, body: ReadRequestRepr, out: &mut Vec<u8>) {
        self.tx_msn[1] = self.tx_msn[1].wrapping_add(1);
        let start = fpdu::begin(out);
        SegmentRepr {
            last: true,
            opcode: Opcode::ReadRequest,
            placement: Placement::Untagged {
                reserved_ulp: 0,
                queue: queue::READ_REQUEST,
                msn: self.tx_msn[1],
                offset: 0,
            },
        }
        .append(out);
        body.append(out);
        fpdu::finish(out, start, self.crc);
    }

    /// The zero-length operation that lets a peer-to-peer responder start.
    fn emit_rtr(&mut self, rtr: Rtr, out: &mut Vec<u8>) {
        match rtr {
            Rtr::Write => {
                let start = fpdu::begin(out);
                SegmentRepr {
                    last: true,
                    opcode: Opcode::RdmaWrite,
                    // siw sends STag 1 for its RTR WRITE; zero-length STags are not checked.
                    placement: Placement::Tagged { stag: 1, offset: 0 },
                }
                .append(out);
                fpdu::finish(out, start, self.crc);
            }
            Rtr::Send => {
                self.tx_msn[0] = self.tx_msn[0].wrapping_add(1);
                let start = fpdu::begin(out);
                SegmentRepr {
                    last: true,
                    opcode: Opcode::Send,
                    placement: Placement::Untagged {
                        reserved_ulp: 0,
                        queue: queue::SEND,
                        msn: self.tx_msn[0],
                        offset: 0,
                    },
                }
                .append(out);
                fpdu::finish(out, start, self.crc);
            }
            Rtr::Read => {
                self.emit_read_request(
                    ReadRequestRepr {
                        sink_stag: 0,
                        sink_offset: 0,
                        size: 0,
                        source_stag: 1,
                        source_offset: 0,
                    },
                    out,
                );
                self.orq.push_back(OutstandingRead {
                    seq: None,
                    sink: None,
                    sink_stag: 0,
                    sink_offset: 0,
                    size: 0,
                    received: 0,
                });
            }
        }
    }
}
