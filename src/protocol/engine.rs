//! [`StreamEngine`]: one connection's rsocket protocol state, without I/O. This file holds the
//! state, connection setup, readiness and the send side; `recv.rs` the receive side and
//! credit returns; `control.rs` shutdown, keepalive and send completions.
#![forbid(unsafe_code)]

use super::config::{StreamConfig, CONTROL_SLOTS, SEND_LOW_WATER};
use super::error::StreamError;
use super::hello::{Hello, FLAG_ANSWERS_FENCE, FLAG_BIG_ENDIAN, FLAG_IOMAP, FLAG_RDMASOCK};
use super::iomap::{iomap_scale, IomapState};
use super::msg::{ByteOrder, Control, Message, RemoteSge, SGE_LEN};
use super::op::{CopySpan, LocalRegions, Op, Payload, Readiness, RingSpan, WrId};
use super::op_queue::OpQueue;
use std::collections::VecDeque;

/// Number of entries in a target list (`RS_SGL_SIZE`).
pub const TARGET_ENTRIES: usize = 2;
/// Size of our target list in bytes.
pub const TARGET_LIST_LEN: usize = TARGET_ENTRIES * SGE_LEN;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Opening,
    Connected,
    /// The connection manager said the connection is down (DISCONNECTED) before the peer's
    /// DISCONNECT message was fed: the event can overtake the completions of the peer's last
    /// messages, so end-of-stream waits for the flushed receives, which come after them
    /// (see [`StreamEngine::on_cm_disconnected`]). Nothing is sent any more.
    Disconnecting,
    Disconnected,
}

/// What a posted send work request holds until it completes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pending {
    /// The sequence number of the last work request it covers (its work request id's).
    pub(crate) seq: u64,
    /// The sequence number of the first work request it covers: below `seq` for a run of
    /// unsignalled iowrites kept as one entry (see [`StreamEngine::track_iowrite`]).
    pub(crate) first: u64,
    /// How many iowrites it covers (0 for anything else).
    pub(crate) iowrites: u32,
    pub(crate) sqes: u32,
    pub(crate) ctrl: u32,
    pub(crate) bytes: usize,
    pub(crate) disconnect: bool,
    /// The number (`sseq_no` after it) of the data message it carries; 0 for control.
    pub(crate) message: u16,
    /// It produces a completion (the last one posted must, before a flush can finish).
    pub(crate) signaled: bool,
    /// A placement fence (see [`StreamEngine::proves_placement_by_read`]); its `message` is
    /// the newest data message it covers.
    pub(crate) fence: bool,
}

/// One connection's rsocket stream protocol state.
///
/// The engine owns no memory and performs no I/O: the driver registers a send ring, a receive
/// ring, a 32-byte target list (and in write+send mode a message area), copies bytes where the
/// engine says ([`CopySpan`]), posts the [`Op`]s from [`pop_op`](Self::pop_op) in order
/// (receive reposts may wait a little, see [`RECV_DEFER_MAX`](super::RECV_DEFER_MAX)), and
/// feeds completions back. See the module documentation for the sequence.
#[derive(Debug)]
pub struct StreamEngine {
    pub(crate) cfg: StreamConfig,
    pub(crate) local: LocalRegions,
    pub(crate) phase: Phase,
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    pub(crate) error: Option<StreamError>,
    pub(crate) peer_order: ByteOrder,
    pub(crate) peer_rdmasock: bool,
    /// The peer answers a placement fence ([`Hello::answers_fence`]).
    pub(crate) peer_answers_fence: bool,
    pub(crate) ops: OpQueue,
    /// How many of `ops` are receive reposts ([`Op::PostRecv`]): whether only they are
    /// queued is asked on every read and small write, without walking the queue.
    pub(crate) queued_receives: usize,
    /// Receives handed to the driver ([`pop_op`](Self::pop_op)) whose completion was not fed
    /// yet: those a queue pair in the error state still flushes.
    pub(crate) receives_posted: u32,
    // Send side.
    pub(crate) sseq_no: u16,
    pub(crate) sseq_comp: u16,
    /// The peer's credit window (its hello's credits, its receive-queue depth): its credit
    /// limit `sseq_comp` is the count of our data messages it consumed plus this.
    pub(crate) peer_window: u16,
    pub(crate) target: [RemoteSge; TARGET_ENTRIES],
    pub(crate) target_index: usize,
    pub(crate) target_expected: usize,
    pub(crate) remote_sgl: RemoteSge,
    pub(crate) remote_sge: u32,
    pub(crate) sbuf_head: usize,
    pub(crate) sbuf_avail: usize,
    pub(crate) sqe_avail: u32,
    pub(crate) ctrl_in_use: u32,
    pub(crate) ctrl_seqno: u32,
    pub(crate) pending: VecDeque<Pending>,
    pub(crate) next_seq: u64,
    pub(crate) unsignaled: u16,
    pub(crate) pending_ctrl: Option<Control>,
    /// Every posted send must complete (a flush, or the peer's DISCONNECT): the last one posted
    /// gets a signalled successor as soon as a control slot allows.
    pub(crate) completion_wanted: bool,
    /// The peer's DISCONNECT arrived: it sends nothing more.
    pub(crate) peer_closed: bool,
    /// Our DISCONNECT is posted: we send nothing more (no credits, no keepalive).
    pub(crate) disconnect_posted: bool,
    /// The peer's SHUTDOWN arrived: it writes nothing more.
    pub(crate) peer_shutdown: bool,
    /// A close message completed with an error: the peer may not have it, and no flush or
    /// close may report success, unless the peer closed (its DISCONNECT arrived): it reads
    /// nothing more, and a close message carries no bytes.
    pub(crate) sends_lost: bool,
    /// The newest data message a failed completion retired: the peer may lack its bytes
    /// unless its credit updates show it consumed that message
    /// ([`consumed_by_peer`](Self::consumed_by_peer)).
    pub(crate) lost_message: Option<u16>,
    /// A data message was posted after the last placement fence (see
    /// [`proves_placement_by_read`](Self::proves_placement_by_read)).
    pub(crate) unfenced: bool,
    /// The newest data message a placement fence proved in the peer's memory.
    pub(crate) fenced_message: u16,
    // Receive side.
    pub(crate) rmsg: VecDeque<u32>,
    pub(crate) rbuf_offset: usize,
    pub(crate) rbuf_queued: usize,
    pub(crate) rbuf_avail: usize,
    pub(crate) rbuf_free_offset: usize,
    pub(crate) rseq_no: u16,
    pub(crate) rseq_comp: u16,
    pub(crate) next_msg_slot: u32,
    // Ring sizes (see `rings.rs`).
    /// The send ring's size now.
    pub(crate) sring_len: usize,
    /// The receive ring's size now.
    pub(crate) rring_len: usize,
    /// The send ring is to change to this size: writes wait until every send completed.
    pub(crate) send_resize: Option<usize>,
    /// The receive ring is to change to this size: no half of the current ring is
    /// advertised any more, and it changes once the peer has written and we have read all
    /// that was.
    pub(crate) recv_resize: Option<usize>,
    /// The driver could not provide a bigger ring: no more growth on this side.
    pub(crate) send_grow_refused: bool,
    pub(crate) recv_grow_refused: bool,
    /// The message counters at the last idle tick (see `rings.rs`).
    pub(crate) idle_marks: (u16, u16),
    /// The receive ring replaced last, while bytes the peer wrote there are unread: its
    /// size and read offset (the peer writes there no more). Reads take these bytes first.
    pub(crate) old_ring: (usize, usize),
    /// Bytes unread in that old ring (0: none is held).
    pub(crate) old_queued: usize,
    /// The iomap tables and windows (see `iomap.rs`).
    pub(crate) iomap: IomapState,
}

impl StreamEngine {
    /// A new engine for a connection about to be made. It queues one [`Op::PostRecv`] per
    /// receive-queue entry ([`StreamConfig::recv_posted`]); post them before connecting or
    /// accepting.
    pub fn new(cfg: StreamConfig, local: LocalRegions) -> Self {
        let half = cfg.recv_ring_min / 2;
        let mut e = StreamEngine {
            phase: Phase::Opening,
            readable: false,
            writable: false,
            error: None,
            peer_order: ByteOrder::native(),
            peer_rdmasock: false,
            peer_answers_fence: false,
            ops: OpQueue::new(),
            queued_receives: 0,
            receives_posted: 0,
            sseq_no: 0,
            sseq_comp: 0,
            peer_window: 0,
            target: [RemoteSge::default(); TARGET_ENTRIES],
            target_index: 0,
            target_expected: 1,
            remote_sgl: RemoteSge::default(),
            remote_sge: 1,
            sbuf_head: 0,
            sbuf_avail: cfg.send_ring_min,
            sqe_avail: u32::from(cfg.send_queue_depth) - CONTROL_SLOTS,
            ctrl_in_use: 0,
            ctrl_seqno: 0,
            pending: VecDeque::new(),
            next_seq: 0,
            unsignaled: 0,
            pending_ctrl: None,
            completion_wanted: false,
            peer_closed: false,
            disconnect_posted: false,
            peer_shutdown: false,
            sends_lost: false,
            lost_message: None,
            unfenced: false,
            fenced_message: 0,
            // Grows with the messages in flight: an idle connection holds none.
            rmsg: VecDeque::new(),
            rbuf_offset: 0,
            rbuf_queued: 0,
            rbuf_avail: half,
            rbuf_free_offset: half,
            rseq_no: 0,
            rseq_comp: cfg.recv_queue_depth / 2,
            next_msg_slot: 0,
            sring_len: cfg.send_ring_min,
            rring_len: cfg.recv_ring_min,
            send_resize: None,
            recv_resize: None,
            send_grow_refused: false,
            recv_grow_refused: false,
            idle_marks: (0, 0),
            old_ring: (0, 0),
            old_queued: 0,
            iomap: IomapState::new(cfg.iomap_size),
            cfg,
            local,
        };
        for _ in 0..e.cfg.recv_posted() {
            e.post_recv();
        }
        e
    }

    /// The configuration.
    pub fn config(&self) -> &StreamConfig {
        &self.cfg
    }

    /// Our hello, for the connect or accept private data.
    pub fn hello(&self) -> Hello {
        let order_flag = match self.cfg.byte_order {
            ByteOrder::Big => FLAG_BIG_ENDIAN,
            ByteOrder::Little => 0,
        };
        // The iomap flag only with a table: the default hello stays as it was.
        let iomap_flag = if self.cfg.iomap_size > 0 {
            FLAG_IOMAP
        } else {
            0
        };
        // The provider under a fencing configuration answers fences too.
        let fence_flag = if self.cfg.placement_fence {
            FLAG_ANSWERS_FENCE
        } else {
            0
        };
        Hello {
            flags: order_flag | iomap_flag | fence_flag | FLAG_RDMASOCK,
            credits: self.cfg.recv_queue_depth,
            target_iomap_size: iomap_scale(self.cfg.iomap_size),
            target_sgl: RemoteSge::new(
                self.local.target_list_addr,
                self.local.target_list_rkey,
                TARGET_ENTRIES as u32,
            ),
            data_buf: RemoteSge::new(
                self.local.recv_ring_addr,
                self.local.recv_ring_rkey,
                (self.rring_len / 2) as u32,
            ),
        }
    }

    /// The connection is established with a peer that sent `peer` (parse it with
    /// [`Hello::parse`]). Queues the advertisement of our second receive-ring half.
    pub fn on_connected(&mut self, peer: &Hello) -> Result<(), StreamError> {
        if self.phase != Phase::Opening {
            return Err(StreamError::Protocol(
                "a second hello arrived on an established stream".into(),
            ));
        }
        self.peer_order = ByteOrder::from_big_endian_flag(peer.big_endian());
        self.peer_rdmasock = peer.is_rdmasock();
        self.peer_answers_fence = peer.answers_fence();
        self.remote_sgl = peer.target_sgl;
        self.remote_sge = 1;
        self.target = [peer.data_buf, RemoteSge::default()];
        self.target_index = 0;
        self.target_expected = 1;
        self.sseq_comp = peer.credits;
        self.peer_window = peer.credits;
        self.iomap.on_connected(peer);
        self.phase = Phase::Connected;
        self.readable = true;
        self.writable = true;
        self.update_credits();
        Ok(())
    }

    /// True when the peer announced itself as rdmasock (hello flag bit 7).
    pub fn peer_is_rdmasock(&self) -> bool {
        self.peer_rdmasock
    }

    /// The next work request to post, in order.
    pub fn pop_op(&mut self) -> Option<Op> {
        let op = self.ops.pop_front();
        if let Some(Op::PostRecv { .. }) = op {
            self.queued_receives -= 1;
            self.receives_posted += 1;
        }
        op
    }

    /// True when work requests are waiting in [`pop_op`](Self::pop_op).
    pub fn has_ops(&self) -> bool {
        !self.ops.is_empty()
    }

    /// True when what is queued is receive reposts ([`Op::PostRecv`]) only, at most `n` of
    /// them (nothing queued counts): a driver may leave up to
    /// [`RECV_DEFER_MAX`](super::RECV_DEFER_MAX) of them for its next post.
    #[inline]
    pub fn only_receives_queued(&self, n: usize) -> bool {
        self.ops.len() <= n && self.only_receives()
    }

    /// Whether everything queued is a receive repost (or nothing is).
    #[inline]
    pub(crate) fn only_receives(&self) -> bool {
        self.ops.len() == self.queued_receives
    }

    /// The next op [`pop_op`](Self::pop_op) would return, without taking it.
    pub fn peek_op(&self) -> Option<&Op> {
        self.ops.front()
    }

    /// Whether the stream is over for the connection manager: failed, or disconnected with
    /// every send completed (cheaper than [`readiness`](Self::readiness) for the data path).
    #[inline]
    pub fn finished(&self) -> bool {
        self.error.is_some() || (self.phase == Phase::Disconnected && self.all_sends_done())
    }

    /// Whether end-of-stream waits for the flushed receives: the connection manager said the
    /// connection is down, and whether the peer closed it with its DISCONNECT message or it
    /// broke is known once the receives the queue pair flushes are fed (see
    /// [`on_cm_disconnected`](Self::on_cm_disconnected)). Reads of an empty ring say
    /// [`StreamError::WouldBlock`] meanwhile.
    pub fn awaits_flush(&self) -> bool {
        self.phase == Phase::Disconnecting && self.error.is_none()
    }

    /// Whether the peer closed the stream (its DISCONNECT arrived): it sends nothing more
    /// on this connection. (A peer's SHUTDOWN is not that: until it has ours it still reads
    /// and sends ring updates; SHUTDOWNs that cross are each answered with a DISCONNECT.)
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// What is possible now.
    pub fn readiness(&self) -> Readiness {
        let open = self.phase != Phase::Opening;
        let error = self.error.is_some();
        Readiness {
            readable: self.rbuf_queued + self.old_queued > 0 || (open && !self.readable) || error,
            writable: (self.phase == Phase::Connected && self.writable && self.can_send())
                || (open && !self.writable)
                || error,
            read_closed: open && !self.readable,
            write_closed: open && !self.writable,
            disconnected: self.phase == Phase::Disconnected,
            error,
        }
    }

    /// The error the connection failed with, if it did.
    pub fn error(&self) -> Option<&StreamError> {
        self.error.as_ref()
    }

    pub(crate) fn fail(&mut self, e: StreamError) {
        if self.error.is_none() {
            self.error = Some(e);
        }
        self.readable = false;
        self.writable = false;
        self.pending_ctrl = None;
    }

    /// Fails the stream with `e` and drops every queued work request: what they would carry
    /// can no longer be trusted (the driver could not put a write's bytes in the send ring,
    /// or take a read's out of the receive ring). The sends they stood for stay outstanding,
    /// so no flush or close reports them delivered.
    pub fn abort(&mut self, e: StreamError) {
        self.fail(e);
        self.ops.clear();
        self.queued_receives = 0;
    }

    pub(crate) fn sqes_per_message(&self) -> u32 {
        if self.cfg.write_with_send {
            2
        } else {
            1
        }
    }

    pub(crate) fn send_low_water(&self) -> usize {
        SEND_LOW_WATER.min(self.sring_len)
    }

    /// rsocket's `rs_can_send`: a send-queue slot, the send-ring low-water mark free, a credit,
    /// and room in the current destination.
    pub(crate) fn can_send(&self) -> bool {
        self.sqe_avail >= self.sqes_per_message()
            && self.sbuf_avail >= self.send_low_water()
            && self.sseq_no != self.sseq_comp
            && self.target[self.target_index].length != 0
            && self.send_resize.is_none()
    }

    /// Whether the send side has half or more of its send-queue slots and send ring, a
    /// quarter of its credits and room in the current destination, and waits for no control
    /// message or completion. A writer that finds this may post without feeding completions
    /// first: what they would give back is not needed yet. (A destination, half the peer's
    /// ring, runs out at its end whatever is fed; the write that finds it used up feeds the
    /// completions that bring the next.)
    pub fn has_headroom(&self) -> bool {
        let half_queue = (u32::from(self.cfg.send_queue_depth) - CONTROL_SLOTS) / 2;
        let credits = self.sseq_comp.wrapping_sub(self.sseq_no);
        self.phase == Phase::Connected
            && self.error.is_none()
            && self.pending_ctrl.is_none()
            && !self.completion_wanted
            && self.sqe_avail >= half_queue
            && self.sbuf_avail >= self.sring_len / 2
            && credits >= self.cfg.recv_queue_depth / 4
            && self.target[self.target_index].length != 0
    }

    /// Accepts up to `len` bytes of stream data. For each accepted piece, `copy` is told where
    /// in the send ring to put which bytes of the application's buffer; the driver copies them
    /// before posting the ops queued here. Returns the bytes accepted, or
    /// [`StreamError::WouldBlock`] when none could be (wait for writable readiness).
    pub fn write(
        &mut self,
        len: usize,
        mut copy: impl FnMut(CopySpan),
    ) -> Result<usize, StreamError> {
        self.write_allowed()?;
        let mut done = 0;
        while done < len && self.can_send() {
            let xfer = (len - done)
                .min(self.cfg.max_transfer as usize)
                .min(self.sbuf_avail)
                .min(self.target[self.target_index].length as usize);
            let first_len = xfer.min(self.sring_len - self.sbuf_head);
            let first = RingSpan {
                offset: self.sbuf_head,
                len: first_len,
            };
            copy(CopySpan {
                data_offset: done,
                ring_offset: first.offset,
                len: first_len,
            });
            let second = (xfer > first_len).then(|| {
                let s = RingSpan {
                    offset: 0,
                    len: xfer - first_len,
                };
                copy(CopySpan {
                    data_offset: done + first_len,
                    ring_offset: 0,
                    len: s.len,
                });
                s
            });
            self.sbuf_head = (self.sbuf_head + xfer) % self.sring_len;
            self.post_data(Payload::SendRing { first, second }, xfer);
            done += xfer;
        }
        if done < len && self.send_ring_is_short() {
            self.grow_send_ring();
        }
        if done == 0 && len > 0 {
            Err(StreamError::WouldBlock)
        } else {
            Ok(done)
        }
    }

    /// rsocket's `rs_write_data`: one data message into the current destination.
    fn post_data(&mut self, payload: Payload, len: usize) {
        let (dest, signaled) = self.take_data_slot(len);
        let msg = Message::Data(len as u32).encode();
        let inline = len <= self.cfg.inline_threshold as usize;
        self.post_write_msg(
            payload, msg, dest.addr, dest.key, inline, signaled, false, len,
        );
    }

    /// The accounting of one data message of `len` bytes (its ring space already taken): a
    /// credit, a send-queue slot, `len` bytes of send ring and of the current destination
    /// (queueing the clearing of its target-list entry when that is used up), and whether
    /// it is signalled. Returns where in the peer's ring it goes, and that flag.
    #[inline]
    pub(crate) fn take_data_slot(&mut self, len: usize) -> (RemoteSge, bool) {
        self.take_data_slot_with(len, len)
    }

    /// [`take_data_slot`](Self::take_data_slot) for a message whose payload holds
    /// `ring_bytes` of send ring (0 when it comes from the caller's registered buffer).
    #[inline]
    pub(crate) fn take_data_slot_with(
        &mut self,
        len: usize,
        ring_bytes: usize,
    ) -> (RemoteSge, bool) {
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= self.sqes_per_message();
        self.sbuf_avail -= ring_bytes;
        let idx = self.target_index;
        let dest = self.target[idx];
        self.target[idx].addr += len as u64;
        self.target[idx].length -= len as u32;
        if self.target[idx].length == 0 {
            self.ops.push_back(Op::ClearTargetEntry {
                offset: idx * SGE_LEN,
            });
            self.target_index = (idx + 1) % TARGET_ENTRIES;
        }
        (dest, self.count_signal())
    }

    /// Counts one more message towards the signalling interval and says whether it is
    /// signalled: when the interval is reached, or when this post leaves us unable to send
    /// again (then a completion is what will unblock us).
    pub(crate) fn count_signal(&mut self) -> bool {
        self.unsignaled += 1;
        let starved =
            self.sqe_avail < self.sqes_per_message() || self.sbuf_avail < self.send_low_water();
        let signaled = self.unsignaled >= self.cfg.signal_interval || starved;
        if signaled {
            self.unsignaled = 0;
        }
        signaled
    }

    /// Whether stream data may be written now: not before the connection is up, nor after
    /// the connection failed, the peer disconnected or our side shut writing down.
    pub(crate) fn write_allowed(&self) -> Result<(), StreamError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        match self.phase {
            Phase::Opening => Err(StreamError::NotConnected),
            Phase::Disconnecting | Phase::Disconnected => Err(StreamError::WriteClosed),
            Phase::Connected if !self.writable => Err(StreamError::WriteClosed),
            Phase::Connected => Ok(()),
        }
    }

    /// Queues `msg` with `payload` written to (addr, rkey): one WRITE WITH IMM, or in
    /// write+send mode a WRITE followed by a 4-byte SEND. Each work request holds a control
    /// slot (`control`) or a data slot until it completes; the last one also holds `bytes` of
    /// send ring.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn post_write_msg(
        &mut self,
        payload: Payload,
        msg: u32,
        addr: u64,
        rkey: u32,
        inline: bool,
        signaled: bool,
        control: bool,
        bytes: usize,
    ) {
        if !self.cfg.write_with_send {
            let wr_id = self.track(control, bytes, false, signaled);
            self.ops.push_back(Op::WriteWithImm {
                wr_id,
                payload,
                remote_addr: addr,
                rkey,
                imm: msg,
                inline,
                signaled,
            });
        } else {
            let wr_id = self.track(control, 0, false, false);
            self.ops.push_back(Op::Write {
                wr_id,
                payload,
                remote_addr: addr,
                rkey,
                inline,
                signaled: false,
            });
            self.post_message_send(msg, control, signaled, bytes, false);
        }
    }

    /// Queues a 4-byte inline SEND of `msg` (write+send mode), holding a control slot or a
    /// data slot, and `bytes` of send ring.
    pub(crate) fn post_message_send(
        &mut self,
        msg: u32,
        control: bool,
        signaled: bool,
        bytes: usize,
        disconnect: bool,
    ) {
        let control_slot = (self.ctrl_seqno % CONTROL_SLOTS) as u8;
        let wr_id = self.track(control, bytes, disconnect, signaled);
        let mut word = [0u8; SGE_LEN];
        word[..4].copy_from_slice(&self.peer_order.word_bytes(msg));
        self.ops.push_back(Op::Send {
            wr_id,
            payload: Payload::Small {
                bytes: word,
                len: 4,
                control_slot,
            },
            inline: true,
            signaled,
        });
    }

    /// Records a posted send work request and returns its id. A control work request takes a
    /// control slot here; a data work request's slot was taken by the caller.
    #[inline]
    pub(crate) fn track(
        &mut self,
        control: bool,
        bytes: usize,
        disconnect: bool,
        signaled: bool,
    ) -> WrId {
        let seq = self.next_seq;
        self.next_seq += 1;
        if control {
            self.ctrl_in_use += 1;
            self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        } else {
            self.unfenced = true;
        }
        self.pending.push_back(Pending {
            seq,
            first: seq,
            iowrites: 0,
            sqes: u32::from(!control),
            ctrl: u32::from(control),
            bytes,
            disconnect,
            message: if control { 0 } else { self.sseq_no },
            signaled,
            fence: false,
        });
        WrId::send(seq)
    }

    #[inline]
    pub(crate) fn post_recv(&mut self) {
        self.queued_receives += 1;
        if self.cfg.write_with_send {
            let slot = self.next_msg_slot;
            self.next_msg_slot = (slot + 1) % self.cfg.recv_posted();
            self.ops.push_back(Op::PostRecv {
                wr_id: WrId::recv(slot),
                message_slot: Some(slot),
            });
        } else {
            self.ops.push_back(Op::PostRecv {
                wr_id: WrId::recv(0),
                message_slot: None,
            });
        }
    }
}
