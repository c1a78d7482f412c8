//! The short way for a lone small write: one data message whose bytes go inline from the
//! caller's buffer, handed to the driver at once instead of through the op queue (see
//! [`StreamEngine::write_inline`]), as an RDMA WRITE WITH IMMEDIATE or, in write+send mode,
//! an RDMA WRITE and the 4-byte SEND of its message word, chained; and the same for a small iowrite, one plain RDMA WRITE
//! into the peer's mapped window (see [`StreamEngine::iowrite_inline`]), as rsocket's
//! `riowrite` posts one inline from the caller's buffer.
#![forbid(unsafe_code)]

use super::engine::{Pending, Phase, StreamEngine};
use super::msg::Message;
use super::op::WrId;

/// One data message for the driver to post now: an inline RDMA WRITE of the caller's bytes
/// (all of them, in one scatter/gather entry) to `remote_addr` with `rkey`, which carries
/// the message word as its immediate data or is followed by a SEND of it (see
/// [`InlineMessage`]). The last work request is signalled when `signaled` says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InlineWrite {
    /// The RDMA WRITE's work request id (feed its completion, if one comes, to
    /// [`StreamEngine::on_send_completion`]).
    pub wr_id: WrId,
    /// Where in the peer's receive ring the bytes go.
    pub remote_addr: u64,
    /// The peer's receive ring's remote key.
    pub rkey: u32,
    /// How the message word (the data length) reaches the peer.
    pub message: InlineMessage,
    /// Whether the last work request (the WRITE WITH IMMEDIATE, or the SEND) asks for a
    /// completion; in write+send mode the WRITE never does.
    pub signaled: bool,
}

/// How an [`InlineWrite`] tells the peer of its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InlineMessage {
    /// The WRITE is an RDMA WRITE WITH IMMEDIATE with this immediate data.
    Immediate(u32),
    /// Write+send mode: the WRITE is a plain unsignalled RDMA WRITE, and right after it in
    /// the same chain goes an inline SEND of `word` with work request id `wr_id`.
    Send {
        /// The SEND's work request id.
        wr_id: WrId,
        /// The SEND's payload: the message word in the peer's byte order.
        word: [u8; 4],
    },
}

/// One iowrite for the driver to post now, as an inline plain RDMA WRITE of the caller's
/// bytes (all of them, in one scatter/gather entry) to `remote_addr` in the peer's mapped
/// window with `rkey`, signalled when `signaled` says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InlineIowrite {
    /// The work request id (feed its completion to
    /// [`StreamEngine::on_send_completion`]).
    pub wr_id: WrId,
    /// Where in the peer's window the bytes go.
    pub remote_addr: u64,
    /// The window's remote key.
    pub rkey: u32,
    /// Whether the work request asks for a completion.
    pub signaled: bool,
}

impl StreamEngine {
    /// Moves the send ring's head on by `len` bytes (at most the ring's length, as every
    /// reservation is), wrapping without a division.
    #[inline]
    fn advance_send_head(&mut self, len: usize) {
        let head = self.sbuf_head + len;
        self.sbuf_head = if head >= self.sring_len {
            head - self.sring_len
        } else {
            head
        };
    }

    /// [`write`](Self::write) of all `len` bytes as one message sent inline, when it can go
    /// now, ahead of what is queued: `len` is 1 to the inline threshold, the stream is open
    /// for writing, a message can be sent
    /// ([`Readiness::writable`](super::Readiness)), the bytes fit the send ring, one transfer
    /// and the current destination without using it up, and nothing but receive reposts
    /// ([`Op::PostRecv`](super::Op::PostRecv)) waits in [`pop_op`](Self::pop_op) (they may go after it).
    ///
    /// Returns the work requests, which the engine counts as posted: post them at once
    /// (before the queued ops), with the caller's bytes inline; their send-ring space is
    /// reserved but not written, as no one reads it. In write+send mode the WRITE and its
    /// SEND are one entry of the record of posted sends, as the queued way's two entries
    /// would be retired together (the WRITE is unsignalled); a failed completion of either
    /// retires it. `None` when any condition fails: nothing changed, and `write` does what
    /// is possible.
    #[inline]
    pub fn write_inline(&mut self, len: usize) -> Option<InlineWrite> {
        let destination = self.target[self.target_index].length as usize;
        let fits = len > 0
            && len <= self.cfg.inline_threshold as usize
            && self.error.is_none()
            && self.phase == Phase::Connected
            && self.writable
            && self.can_send()
            && len <= self.sbuf_avail
            && len <= self.cfg.max_transfer as usize
            && len < destination
            && self.only_receives();
        if !fits {
            return None;
        }
        self.advance_send_head(len);
        let (dest, signaled) = self.take_data_slot(len);
        let msg = Message::Data(len as u32).encode();
        let (wr_id, message) = if self.cfg.write_with_send {
            let (write, send) = self.track_message_pair(len, signaled);
            let word = self.peer_order.word_bytes(msg);
            (write, InlineMessage::Send { wr_id: send, word })
        } else {
            let wr_id = self.track(false, len, false, signaled);
            (wr_id, InlineMessage::Immediate(msg))
        };
        Some(InlineWrite {
            wr_id,
            remote_addr: dest.addr,
            rkey: dest.key,
            message,
            signaled,
        })
    }

    /// Records a data message's unsignalled WRITE and its SEND (write+send mode) as one
    /// entry covering both: what [`track`](Self::track) records for each, summed (two
    /// send-queue slots, `bytes` of send ring, the current message). Returns the two ids.
    #[inline]
    fn track_message_pair(&mut self, bytes: usize, signaled: bool) -> (WrId, WrId) {
        let first = self.next_seq;
        let seq = first + 1;
        self.next_seq += 2;
        self.unfenced = true;
        self.pending.push_back(Pending {
            seq,
            first,
            iowrites: 0,
            sqes: 2,
            ctrl: 0,
            bytes,
            disconnect: false,
            message: self.sseq_no,
            signaled,
            fence: false,
        });
        (WrId::send(first), WrId::send(seq))
    }

    /// [`iowrite`](Self::iowrite) of all `len` bytes as one WRITE sent inline, when it can
    /// go now, ahead of what is queued: `len` is 1 to the inline threshold and one transfer,
    /// the stream is open for writing, a send-queue slot and the send ring's low-water mark
    /// are free (what `iowrite` waits for), one window the peer mapped holds the whole
    /// range, and nothing but receive reposts waits in [`pop_op`](Self::pop_op) (they may
    /// go after it). No credit is taken, as for `iowrite`.
    ///
    /// Returns the work request, which the engine counts as posted: post it at once (before
    /// the queued ops), with the caller's bytes inline; their send-ring space is reserved
    /// but not written, as no one reads it. `None` when any condition fails: nothing
    /// changed, and `iowrite` does what is possible or says why it cannot.
    #[inline]
    pub fn iowrite_inline(&mut self, offset: u64, len: usize) -> Option<InlineIowrite> {
        let fits = len > 0
            && len <= self.cfg.inline_threshold as usize
            && len <= self.cfg.max_transfer as usize
            && self.error.is_none()
            && self.phase == Phase::Connected
            && self.writable
            && self.sqe_avail >= 1
            && self.sbuf_avail >= self.send_low_water()
            && len <= self.sbuf_avail
            && self.send_resize.is_none()
            && self.only_receives();
        if !fits {
            return None;
        }
        let window = self.iomap_window(offset, len as u64)?;
        self.advance_send_head(len);
        self.sbuf_avail -= len;
        self.sqe_avail -= 1;
        let signaled = self.count_iowrite_signal();
        let wr_id = self.track_iowrite(len, signaled);
        Some(InlineIowrite {
            wr_id,
            remote_addr: window.window.addr + (offset - window.offset),
            rkey: window.window.key,
            signaled,
        })
    }
}
