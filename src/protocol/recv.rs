//! The receive side: incoming messages, reads, and credit / buffer returns to the peer.
#![forbid(unsafe_code)]

use super::config::CONTROL_SLOTS;
use super::engine::{Phase, StreamEngine, TARGET_ENTRIES, TARGET_LIST_LEN};
use super::error::StreamError;
use super::msg::{Control, Message, RemoteSge, SGE_LEN};
use super::op::{CopySpan, Op, Payload, Received, WrId};

impl StreamEngine {
    /// A receive completed successfully. `target_list` is the current content of our 32-byte
    /// target list (used only when the message is a buffer update, whose entry the peer wrote
    /// before the completion was generated). See [`on_receive_with`](Self::on_receive_with),
    /// which reads the list only then.
    pub fn on_receive(&mut self, wr_id: WrId, received: Received, target_list: &[u8]) {
        self.on_receive_with(wr_id, received, |list| {
            let n = list.len().min(target_list.len());
            list[..n].copy_from_slice(&target_list[..n]);
        })
    }

    /// [`on_receive`](Self::on_receive), with the target list read by `read_targets` only
    /// for a buffer update (a data message, the common case, needs no read of that memory).
    #[inline]
    pub fn on_receive_with(
        &mut self,
        wr_id: WrId,
        received: Received,
        read_targets: impl FnOnce(&mut [u8; TARGET_LIST_LEN]),
    ) {
        if !wr_id.is_receive() {
            self.fail(StreamError::Protocol(format!(
                "the driver fed send work request {wr_id:?} as a receive"
            )));
            return;
        }
        self.receives_posted = self.receives_posted.saturating_sub(1);
        if self.phase == Phase::Opening {
            self.fail(StreamError::Protocol(
                "a message arrived before the peer's hello was given to on_connected".into(),
            ));
            return;
        }
        let word = match received {
            Received::Immediate(imm) => imm,
            Received::Message(bytes) => self.cfg.byte_order.word_from(bytes),
            Received::ShortMessage(len) => {
                self.fail(StreamError::Protocol(format!(
                    "a SEND of {len} bytes arrived where a 4-byte message was expected"
                )));
                return;
            }
        };
        if self.phase == Phase::Connected && self.error.is_none() {
            self.post_recv();
        }
        match Message::decode(word) {
            Message::Data(len) => self.on_data(len),
            Message::Sgl(limit) => {
                self.sseq_comp = limit as u16;
                let mut list = [0u8; TARGET_LIST_LEN];
                read_targets(&mut list);
                self.refresh_targets(&list);
            }
            Message::Control(Control::Disconnect) => self.on_peer_closed(),
            Message::Control(Control::Shutdown) => {
                self.readable = false;
                self.peer_shutdown = true;
                if !self.writable && !self.disconnect_posted {
                    // Our SHUTDOWN crossed the peer's: both directions are over, so say so
                    // with a DISCONNECT (after which we send nothing). The peer's SHUTDOWN
                    // does not mean it sends nothing more: until ours arrives it still reads
                    // and sends ring updates, and only its DISCONNECT (or the connection
                    // manager's event) tells us when it has stopped.
                    self.pending_ctrl = Some(Control::Disconnect);
                    self.flush_pending_control();
                }
            }
            Message::IomapSgl(index) => self.on_iomap_message(index),
            // Keepalive and unknown controls are ignored, as rsocket does.
            Message::Control(_) => {}
            Message::Write(_) | Message::Reserved { .. } => {
                let op = word >> 29;
                self.fail(StreamError::Protocol(format!(
                    "received a message with operation {op}, which is reserved (word {word:#010x})"
                )));
            }
        }
        self.update_credits();
    }

    /// A receive completed with an error status (flushed when the queue pair left the
    /// connected state, or broken); `cause` is why the connection ended, where the
    /// connection manager knows it. Every message the peer sent before is fed by then: a
    /// stream still connected, or waiting for this after the connection manager's
    /// DISCONNECTED ([`awaits_flush`](Self::awaits_flush)), had no DISCONNECT from the peer
    /// and fails.
    pub fn on_receive_failed(&mut self, wr_id: WrId, cause: Option<&str>) {
        self.receives_posted = self.receives_posted.saturating_sub(1);
        if matches!(self.phase, Phase::Connected | Phase::Disconnecting) && self.error.is_none() {
            let cause = cause.map(|c| format!(": {c}")).unwrap_or_default();
            self.fail(StreamError::ConnectionReset(format!(
                "receive work request {:#x} completed with an error: the connection broke \
                 without a DISCONNECT message from the peer{cause}",
                wr_id.0
            )));
        }
    }

    fn on_peer_closed(&mut self) {
        self.phase = Phase::Disconnected;
        self.peer_closed = true;
        self.readable = false;
        self.writable = false;
        self.pending_ctrl = None;
        // The driver disconnects once every send completed: make sure the last one will.
        self.completion_wanted = true;
        self.signal_last_send();
    }

    #[inline]
    fn on_data(&mut self, len: u32) {
        let len = len as usize;
        if self.rmsg.len() >= usize::from(self.cfg.recv_queue_depth) {
            self.fail(StreamError::Protocol(format!(
                "the peer sent more than the {} messages it had credit for",
                self.cfg.recv_queue_depth
            )));
            return;
        }
        if len == 0 {
            // A zero-length data message carries nothing; count it as consumed at once so it
            // cannot look like end-of-stream to a reader.
            self.rseq_no = self.rseq_no.wrapping_add(1);
            return;
        }
        let ring = self.rring_len;
        let half = ring / 2;
        let pos = (self.rbuf_offset + self.rbuf_queued) % ring;
        let half_end = (pos / half + 1) * half;
        let advertised = ring - self.rbuf_avail;
        if pos + len > half_end || self.rbuf_queued + len > advertised {
            self.fail(StreamError::Protocol(format!(
                "the peer wrote {len} bytes at ring offset {pos}, past the buffer it was given"
            )));
            return;
        }
        self.rmsg.push_back(len as u32);
        self.rbuf_queued += len;
        if self.rbuf_queued == advertised {
            // The peer has used every byte it was given: it waits for us.
            self.peer_filled_recv_ring();
        }
    }

    /// Adopts the target-list entry the peer writes next, once ours is used up and the
    /// peer has written a fresh one.
    fn refresh_targets(&mut self, target_list: &[u8]) {
        let e = self.target_expected;
        if self.target[e].length != 0 {
            return;
        }
        // While the clearing of this entry still waits in the op queue, its memory holds the
        // used-up entry: the data that lets the peer write a fresh one is queued after it.
        let clear = Op::ClearTargetEntry {
            offset: e * SGE_LEN,
        };
        if self.ops.contains(&clear) {
            return;
        }
        let Some(bytes) = target_list.get(e * SGE_LEN..(e + 1) * SGE_LEN) else {
            self.fail(StreamError::Protocol(format!(
                "the driver passed a {}-byte target list; it is {} bytes",
                target_list.len(),
                TARGET_ENTRIES * SGE_LEN
            )));
            return;
        };
        if let Some(sge) = RemoteSge::decode(bytes, self.cfg.byte_order) {
            if sge.length == 0 {
                return;
            }
            if let Some(problem) = sge.buffer_problem() {
                // Found by fuzzing: a write into it advanced the address past u64::MAX.
                self.fail(StreamError::Protocol(format!(
                    "the peer advertised a receive buffer of {} bytes at {:#x}, which {} \
                     (a broken or hostile rsocket peer)",
                    sge.length,
                    sge.addr,
                    problem.text()
                )));
                return;
            }
            self.target[e] = sge;
            self.target_expected = (e + 1) % TARGET_ENTRIES;
        }
    }

    /// Moves up to `len` bytes of received data out; for each piece, `copy` is told which ring
    /// bytes go where in the application's buffer. Returns the bytes moved; `Ok(0)` (for
    /// `len > 0`) means end of stream; [`StreamError::WouldBlock`] means wait for readable.
    #[inline]
    pub fn read(&mut self, len: usize, copy: impl FnMut(CopySpan)) -> Result<usize, StreamError> {
        self.copy_out(len, copy, true)
    }

    /// Like [`read`](Self::read) but leaves the data queued.
    pub fn peek(&mut self, len: usize, copy: impl FnMut(CopySpan)) -> Result<usize, StreamError> {
        self.copy_out(len, copy, false)
    }

    /// Bytes received and not yet read.
    pub fn readable_bytes(&self) -> usize {
        self.rbuf_queued + self.old_queued
    }

    /// The receive ring's offset just past the last byte received: where the peer's next
    /// bytes land.
    pub fn received_end(&self) -> usize {
        (self.rbuf_offset + self.rbuf_queued) % self.rring_len
    }

    #[inline]
    fn copy_out(
        &mut self,
        len: usize,
        mut copy: impl FnMut(CopySpan),
        consume: bool,
    ) -> Result<usize, StreamError> {
        if len == 0 {
            return Ok(0);
        }
        if self.rbuf_queued + self.old_queued == 0 {
            if let Some(e) = &self.error {
                return Err(e.clone());
            }
            return match self.phase {
                Phase::Opening => Err(StreamError::NotConnected),
                _ if !self.readable => Ok(0),
                _ => Err(StreamError::WouldBlock),
            };
        }
        // Bytes left in a replaced ring come first, and one call reads from one ring
        // ([`reads_old_recv_ring`](Self::reads_old_recv_ring) says which).
        let old = self.old_queued > 0;
        let (ring, mut offset, queued) = if old {
            (self.old_ring.0, self.old_ring.1, self.old_queued)
        } else {
            (self.rring_len, self.rbuf_offset, self.rbuf_queued)
        };
        let len = len.min(queued);
        let mut done = 0;
        let mut index = 0;
        let mut front_left = 0;
        while done < len && index < self.rmsg.len() {
            let msg_len = self.rmsg[index] as usize;
            let take = msg_len.min(len - done);
            // One piece, or two where the message wraps the ring's end (one call site of
            // `copy`, which the compiler can then inline).
            let mut piece = CopySpan {
                data_offset: done,
                ring_offset: offset,
                len: take.min(ring - offset),
            };
            loop {
                copy(piece);
                let copied = piece.data_offset + piece.len - done;
                if copied == take {
                    break;
                }
                piece = CopySpan {
                    data_offset: done + copied,
                    ring_offset: 0,
                    len: take - copied,
                };
            }
            offset = (offset + take) % ring;
            done += take;
            if take == msg_len {
                index += 1;
            } else {
                front_left = msg_len - take;
            }
        }
        if consume {
            for _ in 0..index {
                self.rmsg.pop_front();
                self.rseq_no = self.rseq_no.wrapping_add(1);
            }
            if front_left > 0 {
                self.rmsg[0] = front_left as u32;
            }
            if old {
                // The old ring's space is not the peer's again: it is given back once read.
                self.old_ring.1 = offset;
                self.old_queued -= done;
            } else {
                self.rbuf_offset = offset;
                self.rbuf_queued -= done;
                self.rbuf_avail += done;
            }
            self.update_credits();
        }
        Ok(done)
    }

    /// Whether the next read or peek copies from the receive ring replaced last (bytes the
    /// peer wrote there before the change are unread): the driver reads its spans from
    /// that ring, and may give it back once this turns false
    /// ([`holds_old_recv_ring`](Self::holds_old_recv_ring)).
    #[inline]
    pub fn reads_old_recv_ring(&self) -> bool {
        self.old_queued > 0
    }

    fn control_slots_needed(&self) -> u32 {
        if self.cfg.write_with_send {
            2
        } else {
            1
        }
    }

    pub(crate) fn control_available(&self, n: u32) -> bool {
        self.ctrl_in_use + n <= CONTROL_SLOTS
    }

    /// rsocket's `rs_give_credits` / `rs_send_credits`: grant credits once half the receive
    /// queue's worth of messages was consumed since the last grant, and advertise a receive-ring
    /// half as soon as one is free. (Checked after every message and read: the common case,
    /// nothing due, is inlined, the sending out of line.)
    #[inline]
    pub(crate) fn update_credits(&mut self) {
        if self.credits_due() {
            self.send_due_credits();
        }
    }

    /// Whether a credit grant or a ring half is due (whether it can be sent is checked by
    /// [`send_due_credits`](Self::send_due_credits)).
    #[inline]
    fn credits_due(&self) -> bool {
        (self.rbuf_avail >= self.rring_len / 2 && self.recv_resize.is_none())
            || (self.rseq_no.wrapping_sub(self.rseq_comp) as i16) >= 0
    }

    /// Sends what [`credits_due`](Self::credits_due) says, while the stream may send it and a
    /// control slot is free.
    #[inline(never)]
    fn send_due_credits(&mut self) {
        loop {
            let due = self.credits_due();
            // Nothing follows our DISCONNECT: we read no more, and on iWARP the peer may
            // close its TCP socket once it has the DISCONNECT, which answers a later
            // segment with a reset that loses what that socket still had to send us.
            if !(due
                && self.phase == Phase::Connected
                && !self.disconnect_posted
                && self.error.is_none()
                && self.control_available(self.control_slots_needed()))
            {
                return;
            }
            self.send_credits();
        }
    }

    fn send_credits(&mut self) {
        let rq = self.cfg.recv_queue_depth;
        let half = self.rring_len / 2;
        self.rseq_comp = self.rseq_no.wrapping_add(rq / 2);
        // rsocket sends the un-truncated sum; the receiver compares it in 16 bits.
        let msg = Message::Sgl(u32::from(self.rseq_no) + u32::from(rq)).encode();
        if self.rbuf_avail >= half && self.recv_resize.is_none() {
            let sge = RemoteSge::new(
                self.local.recv_ring_addr + self.rbuf_free_offset as u64,
                self.local.recv_ring_rkey,
                half as u32,
            );
            let payload = Payload::Small {
                bytes: sge.encode(self.peer_order),
                len: SGE_LEN as u8,
                control_slot: (self.ctrl_seqno % CONTROL_SLOTS) as u8,
            };
            let addr = self.remote_sgl.addr + u64::from(self.remote_sge) * SGE_LEN as u64;
            let inline = self.cfg.inline_threshold as usize >= SGE_LEN;
            let rkey = self.remote_sgl.key;
            self.post_write_msg(payload, msg, addr, rkey, inline, true, true, 0);
            self.rbuf_avail -= half;
            self.rbuf_free_offset = (self.rbuf_free_offset + half) % self.rring_len;
            self.remote_sge = (self.remote_sge + 1) % self.remote_sgl.length;
        } else {
            self.post_ctrl_message(msg, false);
        }
    }

    /// Queues a 32-bit message alone: a zero-length WRITE WITH IMM, or a SEND in write+send
    /// mode. It holds a control slot.
    pub(crate) fn post_ctrl_message(&mut self, msg: u32, disconnect: bool) {
        if self.cfg.write_with_send {
            self.post_message_send(msg, true, true, 0, disconnect);
        } else {
            let wr_id = self.track(true, 0, disconnect, true);
            self.ops.push_back(Op::WriteWithImm {
                wr_id,
                payload: Payload::Empty,
                remote_addr: 0,
                rkey: 0,
                imm: msg,
                inline: false,
                signaled: true,
            });
        }
    }
}
