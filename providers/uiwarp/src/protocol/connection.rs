//! The connection: its state, the public calls, and the error path (TERMINATE and flush).

use super::config::{Config, Negotiated, Role, Rtr};
use super::event::{CloseReason, Event, Origin, Termination};
use super::handshake::PendingRequest;
use super::memory::MemoryTable;
use super::recv_queue::RecvQueue;
pub(crate) use super::state::{
    Blame, Fault, InboundRead, OutstandingRead, ReceiveProgress, SqSlot, TaggedProgress,
};
use super::work::{Completion, RecvWork, SendOperation, SendWork, WorkQueue};
use super::ProtocolError;
use crate::wire::ddp::{self, Opcode, Placement, SegmentRepr};
use crate::wire::fpdu;
use crate::wire::rdmap::{TerminateCode, TerminateRepr};
use rdmasock_verbs::{QpState, WcFlags, WcOpcode, WcStatus, WorkCompletion};
use std::collections::VecDeque;
use std::time::Instant;

/// Where the connection is.
#[derive(Clone, Debug)]
pub(crate) enum Phase {
    /// Responder: waiting for the MPA Request.
    AwaitRequest { deadline: Instant },
    /// Responder: the application decides.
    AwaitAccept(PendingRequest),
    /// Initiator: waiting for the MPA Reply.
    AwaitReply { deadline: Instant },
    /// Peer-to-peer responder: replied, waiting for the RTR; may not send. Holds the event
    /// to report once it arrives.
    AwaitRtr(Box<super::event::Established>),
    /// Work requests flow.
    Established,
    /// The QP is in error; only a TERMINATE may still go out.
    Error,
}

impl Phase {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Phase::AwaitRequest { .. } => "waiting for the MPA request",
            Phase::AwaitAccept(_) => "waiting for accept or reject",
            Phase::AwaitReply { .. } => "waiting for the MPA reply",
            Phase::AwaitRtr(_) => "waiting for the peer's ready-to-receive",
            Phase::Established => "established",
            Phase::Error => "in the error state",
        }
    }
}

/// A sans-IO iWARP connection (see the [module docs](super)).
#[derive(Debug)]
pub struct Connection {
    pub(crate) config: Config,
    pub(crate) role: Role,
    pub(crate) phase: Phase,
    pub(crate) negotiated: Option<Negotiated>,
    /// CRC on the FPDUs we send (also for a TERMINATE after a failed handshake).
    pub(crate) crc: bool,
    pub(crate) rx: Vec<u8>,
    /// Bytes that go out before any further FPDU: MPA frames and a TERMINATE.
    pub(crate) control: Vec<u8>,
    pub(crate) hold_until: Option<Instant>,
    pub(crate) rtr_to_send: Option<Rtr>,
    pub(crate) sq_pending: VecDeque<(u64, SendWork)>,
    pub(crate) sq_slots: VecDeque<SqSlot>,
    pub(crate) next_seq: u64,
    pub(crate) tx_current: Option<super::transmit::TxMessage>,
    pub(crate) tx_msn: [u32; 3],
    pub(crate) orq: VecDeque<OutstandingRead>,
    pub(crate) irq: VecDeque<InboundRead>,
    pub(crate) rq: RecvQueue,
    pub(crate) rx_msn: [u32; 3],
    pub(crate) rx_send: Option<ReceiveProgress>,
    pub(crate) rx_tagged: Option<TaggedProgress>,
    pub(crate) completions: VecDeque<Completion>,
    pub(crate) events: VecDeque<Event>,
}

impl Connection {
    pub(crate) fn new(config: Config, role: Role, phase: Phase) -> Connection {
        let config = config.normalized();
        Connection {
            crc: config.crc,
            config,
            role,
            phase,
            negotiated: None,
            rx: Vec::new(),
            control: Vec::new(),
            hold_until: None,
            rtr_to_send: None,
            sq_pending: VecDeque::new(),
            sq_slots: VecDeque::new(),
            next_seq: 0,
            tx_current: None,
            tx_msn: [0; 3],
            orq: VecDeque::new(),
            irq: VecDeque::new(),
            rq: RecvQueue::new(),
            rx_msn: [1; 3],
            rx_send: None,
            rx_tagged: None,
            completions: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// The side of the handshake this connection is.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The settings it runs with (IRD/ORD clamped).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// What the handshake settled, once it has.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.negotiated.as_ref()
    }

    /// The QP state as verbs would report it: INIT during the handshake, RTR while a
    /// peer-to-peer responder waits for the RTR, RTS when established, ERR after any error or
    /// close.
    pub fn qp_state(&self) -> QpState {
        match self.phase {
            Phase::AwaitRequest { .. } | Phase::AwaitAccept(_) | Phase::AwaitReply { .. } => {
                QpState::Init
            }
            Phase::AwaitRtr(_) => QpState::ReadyToReceive,
            Phase::Established => QpState::ReadyToSend,
            Phase::Error => QpState::Error,
        }
    }

    /// A description of the current state, for messages.
    pub fn state_name(&self) -> &'static str {
        self.phase.name()
    }

    /// Whether the driver should close TCP once it has written everything `poll_transmit`
    /// gave it: the connection is over and nothing (no TERMINATE) is left to send.
    pub fn should_close(&self) -> bool {
        matches!(self.phase, Phase::Error) && self.control.is_empty()
    }

    /// Binds the connection to a queue pair: the QP number put in completions and the queue
    /// depths enforced at post time. A responder's connection exists before the application
    /// creates the QP it accepts on, so the driver sets these when it accepts.
    pub fn set_queue_pair(
        &mut self,
        qp_number: rdmasock_verbs::QpNumber,
        max_send_requests: usize,
        max_recv_requests: usize,
    ) {
        self.config.qp_number = qp_number;
        self.config.max_send_requests = max_send_requests;
        self.config.max_recv_requests = max_recv_requests;
    }

    /// How many posted send requests have not yet been handed over whole to
    /// [`Connection::poll_transmit`]'s output: their gather memory may still be read. Requests
    /// are consumed in posting order.
    pub fn unsent_send_requests(&self) -> usize {
        self.sq_pending.len()
            + usize::from(
                self.tx_current
                    .as_ref()
                    .is_some_and(|m| m.send_seq().is_some()),
            )
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The next work completion, if any. Send completions come in posting order, receive
    /// completions in arrival order.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// When the driver must call [`Connection::handle_timeout`] next, if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let deadline = match self.phase {
            Phase::AwaitRequest { deadline } | Phase::AwaitReply { deadline } => Some(deadline),
            _ => None,
        };
        match (deadline, self.hold_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Tells the connection the time is `now`: ends a handshake that took too long, and
    /// releases the responder's first-FPDU hold.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(h) = self.hold_until {
            if now >= h {
                self.hold_until = None;
            }
        }
        match self.phase {
            Phase::AwaitRequest { deadline } | Phase::AwaitReply { deadline }
                if now >= deadline =>
            {
                self.enter_error(Blame::None, 0);
                self.events
                    .push_back(Event::Closed(CloseReason::HandshakeTimeout));
            }
            _ => {}
        }
    }

    /// Posts a send work request. It runs once the connection is established; in the error
    /// state it completes at once with `WorkRequestFlushError`.
    pub fn post_send(&mut self, work: SendWork) -> Result<(), ProtocolError> {
        if let SendOperation::RdmaRead { .. } = work.op {
            if work.segments.len() > 1 {
                return Err(ProtocolError::Unsupported {
                    operation: "RDMA_READ with more than one scatter entry",
                    why: "iWARP READ responses land in one contiguous sink (siw's max_sge_rd is 1)",
                });
            }
        }
        if work.total_length() > u64::from(u32::MAX) {
            return Err(ProtocolError::Unsupported {
                operation: "a message over 4 GiB",
                why: "DDP message offsets and READ sizes are 32 bits",
            });
        }
        if self.sq_slots.len() >= self.config.max_send_requests {
            return Err(ProtocolError::QueueFull {
                queue: "send",
                depth: self.config.max_send_requests,
            });
        }
        let opcode = match work.op {
            SendOperation::Send { .. } => WcOpcode::Send,
            SendOperation::RdmaWrite { .. } => WcOpcode::RdmaWrite,
            SendOperation::RdmaRead { .. } => WcOpcode::RdmaRead,
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        let failed = matches!(self.phase, Phase::Error);
        self.sq_slots.push_back(SqSlot {
            seq,
            wr_id: work.wr_id,
            opcode,
            signaled: work.signaled,
            byte_len: u32::try_from(work.total_length()).unwrap_or(u32::MAX),
            status: failed.then_some(WcStatus::WorkRequestFlushError),
            vendor_err: 0,
        });
        if failed {
            self.release_send_completions();
        } else {
            self.sq_pending.push_back((seq, work));
        }
        Ok(())
    }

    /// Posts a receive work request; in the error state it completes at once with
    /// `WorkRequestFlushError`.
    pub fn post_recv(&mut self, work: RecvWork) -> Result<(), ProtocolError> {
        if self.admit_recv(work.wr_id)? {
            self.rq.push_back(work);
        }
        Ok(())
    }

    /// Feeds bytes TCP delivered. Errors in them end in a TERMINATE, the error state and
    /// flushed requests, reported through events and completions; this never panics.
    /// Bytes buffered while the application decides on a request are processed by the next
    /// call, which may pass an empty slice.
    pub fn handle_input(&mut self, data: &[u8], memory: &dyn MemoryTable) {
        if matches!(self.phase, Phase::Error) {
            return;
        }
        let data = self.complete_buffered_frame(data, memory);
        if self.rx.is_empty() && self.in_fpdu_phase() {
            // The common case: whole FPDUs straight from the caller's bytes, no copy into
            // the buffer; only an incomplete last frame is kept.
            let consumed = self.consume(data, memory);
            if !matches!(self.phase, Phase::Error) {
                self.rx.extend_from_slice(&data[consumed..]);
            }
            return;
        }
        self.rx.extend_from_slice(data);
        let rx = std::mem::take(&mut self.rx);
        let consumed = self.consume(&rx, memory);
        self.rx = rx;
        if matches!(self.phase, Phase::Error) {
            self.rx.clear();
        } else {
            self.rx.drain(..consumed);
        }
    }

    /// Whether input is a stream of FPDUs now (the handshake is over).
    fn in_fpdu_phase(&self) -> bool {
        matches!(self.phase, Phase::AwaitRtr(_) | Phase::Established)
    }

    /// With part of an FPDU buffered from earlier input, moves only the bytes that complete it
    /// from `data` into the buffer and processes it; returns the rest of `data`.
    fn complete_buffered_frame<'d>(
        &mut self,
        mut data: &'d [u8],
        memory: &dyn MemoryTable,
    ) -> &'d [u8] {
        while !self.rx.is_empty() && !data.is_empty() && self.in_fpdu_phase() {
            let want = fpdu::Fpdu::<&[u8]>::peek_len(&self.rx).unwrap_or(fpdu::LENGTH_LEN);
            let take = want.saturating_sub(self.rx.len()).min(data.len());
            if take == 0 {
                // The buffer holds more than one frame's worth: the general path sorts it out.
                break;
            }
            self.rx.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.rx.len() < want || want == fpdu::LENGTH_LEN {
                continue;
            }
            let rx = std::mem::take(&mut self.rx);
            let consumed = self.consume(&rx, memory);
            self.rx = rx;
            if matches!(self.phase, Phase::Error) {
                self.rx.clear();
                return &[];
            }
            self.rx.drain(..consumed);
            if consumed == 0 {
                break;
            }
        }
        data
    }

    /// Processes as much of `buf` as forms whole units for the current phase; returns the
    /// bytes used.
    fn consume(&mut self, buf: &[u8], memory: &dyn MemoryTable) -> usize {
        let mut consumed = 0;
        loop {
            let rest = buf.len() - consumed;
            let used = match self.phase {
                Phase::AwaitRequest { .. } | Phase::AwaitReply { .. } => {
                    self.handshake_input(&buf[consumed..])
                }
                Phase::AwaitRtr(_) | Phase::Established => {
                    self.fpdu_input(&buf[consumed..], memory)
                }
                Phase::AwaitAccept(_) if rest > fpdu::frame_len(fpdu::MAX_ULPDU) => {
                    self.fail(Fault::new(
                        TerminateCode::LLP_INVALID_REQUEST_REPLY,
                        "the initiator keeps sending before our MPA reply",
                    ));
                    0
                }
                Phase::AwaitAccept(_) | Phase::Error => 0,
            };
            if used == 0 || used > rest {
                return consumed;
            }
            consumed += used;
        }
    }

    /// Tells the connection TCP ended: `reset` for an RST or an error, else a FIN. The QP goes
    /// to the error state and every request is flushed.
    pub fn handle_peer_closed(&mut self, reset: bool) {
        if matches!(self.phase, Phase::Error) {
            self.control.clear();
            return;
        }
        let reason = if !self.rx.is_empty() {
            CloseReason::PeerClosedMidFrame
        } else if reset {
            CloseReason::PeerReset
        } else {
            CloseReason::PeerClosed
        };
        self.rx.clear();
        self.enter_error(Blame::None, 0);
        self.control.clear();
        self.events.push_back(Event::Closed(reason));
    }

    /// Closes the connection from our side (a disconnect): the QP goes to the error state and
    /// every request is flushed; nothing more is sent.
    pub fn close(&mut self) {
        if matches!(self.phase, Phase::Error) {
            return;
        }
        self.enter_error(Blame::None, 0);
        self.control.clear();
        self.events
            .push_back(Event::Closed(CloseReason::LocalClose));
    }

    /// Fails the connection for an error found locally: TERMINATE out (when FPDUs can be
    /// framed), error state, flush, events.
    pub(crate) fn fail(&mut self, fault: Fault) {
        if matches!(self.phase, Phase::Error) {
            return;
        }
        let mut body = Vec::new();
        let (seg_len, ddp_copy, rdmap_copy) = match &fault.copy {
            Some((l, d, r)) => (Some(*l), Some(d.as_slice()), r.as_deref()),
            None => (None, None, None),
        };
        TerminateRepr {
            code: fault.code,
            segment_length: seg_len,
            ddp_header: ddp_copy,
            rdmap_header: rdmap_copy,
        }
        .append(&mut body);
        self.tx_msn[2] = self.tx_msn[2].wrapping_add(1);
        let start = fpdu::begin(&mut self.control);
        SegmentRepr {
            last: true,
            opcode: Opcode::Terminate,
            placement: Placement::Untagged {
                reserved_ulp: 0,
                queue: ddp::queue::TERMINATE,
                msn: self.tx_msn[2],
                offset: 0,
            },
        }
        .append(&mut self.control);
        self.control.extend_from_slice(&body);
        fpdu::finish(&mut self.control, start, self.crc);
        let vendor = vendor_error(fault.code);
        self.enter_error(fault.blame, vendor);
        self.events.push_back(Event::Terminated(Termination {
            origin: Origin::Local,
            code: fault.code,
            reason: fault.reason,
        }));
        self.events
            .push_back(Event::Closed(CloseReason::Terminated));
    }

    /// The peer sent a TERMINATE.
    pub(crate) fn terminated_by_peer(&mut self, code: TerminateCode) {
        let status = remote_status(code);
        self.enter_error(Blame::OldestRead(status), vendor_error(code));
        self.events.push_back(Event::Terminated(Termination {
            origin: Origin::Remote,
            code,
            reason: format!("the peer sent a TERMINATE: {}", code.description()),
        }));
        self.events
            .push_back(Event::Closed(CloseReason::Terminated));
    }

    /// Moves to the error state and flushes everything, charging `blame` first.
    pub(crate) fn enter_error(&mut self, blame: Blame, vendor_err: u32) {
        self.phase = Phase::Error;
        self.hold_until = None;
        self.rtr_to_send = None;
        let in_progress = self.tx_current.take().and_then(|m| m.send_seq());
        self.rx_tagged = None;
        self.irq.clear();
        if let Some(p) = self.rx_send.take() {
            let (status, v) = match blame {
                Blame::Receive(s) => (s, vendor_err),
                _ => (WcStatus::WorkRequestFlushError, 0),
            };
            self.push_recv_completion(p.work.wr_id, status, p.received, 0, false, v);
        }
        for w in std::mem::take(&mut self.rq).into_works() {
            self.push_recv_completion(w.wr_id, WcStatus::WorkRequestFlushError, 0, 0, false, 0);
        }
        let blamed = match blame {
            Blame::Send(seq, s) => Some((seq, s)),
            Blame::OldestRead(s) => self
                .orq
                .iter()
                .find_map(|r| r.seq)
                .or(in_progress)
                .map(|seq| (seq, s)),
            _ => None,
        };
        self.orq.clear();
        self.sq_pending.clear();
        for slot in self.sq_slots.iter_mut() {
            if slot.status.is_none() {
                match blamed {
                    Some((seq, s)) if seq == slot.seq => {
                        slot.status = Some(s);
                        slot.vendor_err = vendor_err;
                    }
                    _ => slot.status = Some(WcStatus::WorkRequestFlushError),
                }
            }
        }
        self.release_send_completions();
    }

    /// Marks send slot `seq` done.
    pub(crate) fn finish_send(&mut self, seq: u64, status: WcStatus, vendor_err: u32) {
        if let Some(slot) = self.sq_slots.iter_mut().find(|s| s.seq == seq) {
            slot.status = Some(status);
            slot.vendor_err = vendor_err;
        }
        self.release_send_completions();
    }

    /// Hands out finished send requests from the head of the queue, in order.
    pub(crate) fn release_send_completions(&mut self) {
        while let Some(slot) = self.sq_slots.front() {
            let Some(status) = slot.status else { break };
            let slot = self.sq_slots.pop_front().expect("front exists");
            if slot.signaled || status != WcStatus::Success {
                self.completions.push_back(Completion {
                    queue: WorkQueue::Send,
                    completion: WorkCompletion {
                        wr_id: slot.wr_id,
                        status: status.to_raw(),
                        opcode: slot.opcode.to_raw(),
                        vendor_err: slot.vendor_err,
                        byte_len: if status == WcStatus::Success {
                            slot.byte_len
                        } else {
                            0
                        },
                        qp_num: self.config.qp_number,
                        ..WorkCompletion::default()
                    },
                    solicited: false,
                });
            }
        }
    }

    pub(crate) fn push_recv_completion(
        &mut self,
        wr_id: u64,
        status: WcStatus,
        byte_len: u32,
        invalidated: u32,
        solicited: bool,
        vendor_err: u32,
    ) {
        let mut flags = WcFlags::empty();
        if invalidated != 0 {
            flags |= WcFlags::WITH_INVALIDATE;
        }
        self.completions.push_back(Completion {
            queue: WorkQueue::Receive,
            completion: WorkCompletion {
                wr_id,
                status: status.to_raw(),
                opcode: WcOpcode::Recv.to_raw(),
                vendor_err,
                byte_len,
                imm_data: invalidated,
                qp_num: self.config.qp_number,
                wc_flags: flags.bits(),
                ..WorkCompletion::default()
            },
            solicited,
        });
    }
}

/// The vendor error we put in completions an error is charged to: `layer << 16 | etype << 8 |
/// code` of the TERMINATE, with bit 24 set so that it is never 0.
pub(super) fn vendor_error(code: TerminateCode) -> u32 {
    let layer = match code.layer {
        crate::wire::rdmap::Layer::Rdmap => 0,
        crate::wire::rdmap::Layer::Ddp => 1,
        crate::wire::rdmap::Layer::Llp => 2,
        crate::wire::rdmap::Layer::Other(o) => u32::from(o),
    };
    1 << 24 | layer << 16 | u32::from(code.etype) << 8 | u32::from(code.code)
}

/// The status of the request a peer's TERMINATE is charged to.
fn remote_status(code: TerminateCode) -> WcStatus {
    use crate::wire::rdmap::Layer;
    match (code.layer, code.etype) {
        (Layer::Rdmap, 1) | (Layer::Ddp, 1) => WcStatus::RemoteAccessError,
        (Layer::Ddp, 2) => WcStatus::RemoteInvalidRequestError,
        _ => WcStatus::RemoteOperationError,
    }
}
