//! Rings that change size: each starts at its smallest size
//! ([`StreamConfig::recv_ring_min`](super::StreamConfig::recv_ring_min),
//! [`send_ring_min`](super::StreamConfig::send_ring_min)), grows to the largest while it is what holds the
//! stream back, up to the largest, and goes back to the smallest when the connection is idle.
//! The engine decides; the driver provides the memory ([`StreamEngine::ring_change`]).
//!
//! The receive ring is the peer's to write into, within the buffers it was given (the
//! halves advertised in the hello and in buffer updates, each `{address, key, length}` in
//! the peer's target list). A sender, plain rsocket too, uses each entry it is given in
//! full, in the order given, before the next, and takes address, key and length from the
//! entry itself: so a new ring is announced by advertising its halves like any other, and
//! nothing else on the wire changes. The one rule is when: the engine stops advertising
//! halves of the current ring, and advertises the new one only once the peer has written
//! every byte it was given in the old. Then the peer holds no entry into the old ring (it
//! used them all up) and no write aimed there is in flight (all arrived): it writes there
//! no more. Bytes there the application has not read are read first; once they are, the
//! driver gives the old ring back. The peer waits meanwhile only as long as it would have
//! anyway: growth starts when it has used up everything it was given, and the new ring is
//! advertised at once, whether or not the application reads.
//!
//! The send ring is ours alone: a change waits until every send completed (no posted work
//! request reads the ring), with writes held back meanwhile.
#![forbid(unsafe_code)]

use super::engine::{Phase, StreamEngine};
use super::error::StreamError;

/// A ring the driver is to provide now, in place of the current one (see
/// [`StreamEngine::ring_change`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingChange {
    /// Register a remotely writable receive ring of this many bytes and hand it over with
    /// [`StreamEngine::install_recv_ring`] (or [`StreamEngine::refuse_ring_change`]).
    Receive(usize),
    /// Make a send ring of this many bytes (plus
    /// [`StreamConfig::control_area_len`](super::StreamConfig::control_area_len)) and hand it
    /// over with [`StreamEngine::install_send_ring`] (or
    /// [`StreamEngine::refuse_ring_change`]).
    Send(usize),
}

impl StreamEngine {
    /// The receive ring's size now.
    pub fn recv_ring_len(&self) -> usize {
        self.rring_len
    }

    /// The send ring's size now.
    pub fn send_ring_len(&self) -> usize {
        self.sring_len
    }

    /// Whether a ring change is under way, or a replaced receive ring is still held (cheap:
    /// for the driver's check after every call).
    #[inline]
    pub fn ring_change_pending(&self) -> bool {
        self.recv_resize.is_some() || self.send_resize.is_some() || self.old_queued > 0
    }

    /// Whether the receive ring replaced last is still needed: bytes the peer wrote there
    /// before the change are unread. Once false, the driver gives it back.
    pub fn holds_old_recv_ring(&self) -> bool {
        self.old_queued > 0
    }

    /// The ring change the driver is to carry out now, if one is due: after every call and
    /// completion, once the queued ops are posted, the driver registers the ring asked for
    /// and calls [`install_recv_ring`](Self::install_recv_ring) or
    /// [`install_send_ring`](Self::install_send_ring); when it cannot (memory, a limit), it
    /// calls [`refuse_ring_change`](Self::refuse_ring_change) and the current ring stays.
    /// Then it asks again (both rings may be due).
    pub fn ring_change(&self) -> Option<RingChange> {
        if self.phase != Phase::Connected || self.error.is_some() {
            return None;
        }
        if let Some(len) = self.recv_resize {
            // Every advertised byte written (the peer holds no entry into this ring), and
            // no older ring still held.
            if self.rbuf_queued + self.rbuf_avail == self.rring_len && self.old_queued == 0 {
                return Some(RingChange::Receive(len));
            }
        }
        match self.send_resize {
            Some(len) if self.pending.is_empty() => Some(RingChange::Send(len)),
            _ => None,
        }
    }

    /// The new receive ring the driver registered for [`RingChange::Receive`]. The peer
    /// writes into the old one no more (it holds no entry into it, and nothing queued points
    /// there); bytes it wrote there and the application has not read stay there, and reads
    /// take them first ([`reads_old_recv_ring`](Self::reads_old_recv_ring)). The driver
    /// keeps the old ring while [`holds_old_recv_ring`](Self::holds_old_recv_ring), and may
    /// deregister it as soon as that is false. Both halves of the new ring are advertised at
    /// once.
    pub fn install_recv_ring(&mut self, addr: u64, rkey: u32, len: usize) {
        if self.ring_change() != Some(RingChange::Receive(len)) {
            self.fail(StreamError::Protocol(format!(
                "the driver installed a {len}-byte receive ring that was not asked for"
            )));
            return;
        }
        self.local.recv_ring_addr = addr;
        self.local.recv_ring_rkey = rkey;
        self.old_ring = (self.rring_len, self.rbuf_offset);
        self.old_queued = self.rbuf_queued;
        self.rbuf_queued = 0;
        self.rring_len = len;
        self.rbuf_offset = 0;
        self.rbuf_avail = len;
        self.rbuf_free_offset = 0;
        self.recv_resize = None;
        self.update_credits();
    }

    /// The new send ring (and control area) the driver made for [`RingChange::Send`]: ring
    /// offsets from now on are in it, and the old one is not used any more.
    pub fn install_send_ring(&mut self, len: usize) {
        if self.ring_change() != Some(RingChange::Send(len)) {
            self.fail(StreamError::Protocol(format!(
                "the driver installed a {len}-byte send ring that was not asked for"
            )));
            return;
        }
        self.sring_len = len;
        self.sbuf_head = 0;
        self.sbuf_avail = len;
        self.send_resize = None;
    }

    /// The driver could not provide the ring `change` asked for: the current one stays, and
    /// that side grows no more (it may again after it shrank).
    pub fn refuse_ring_change(&mut self, change: RingChange) {
        match change {
            RingChange::Receive(len) => {
                self.recv_grow_refused |= len > self.rring_len;
                self.recv_resize = None;
                self.update_credits();
            }
            RingChange::Send(len) => {
                self.send_grow_refused |= len > self.sring_len;
                self.send_resize = None;
            }
        }
    }

    /// The driver's idle timer: call it every idle period (the socket layer's
    /// `ring_idle`). When no data message was sent or read since the previous call, a ring
    /// above its smallest size goes back to it: the send ring at once (once its sends
    /// completed), the receive ring once the peer has used up the buffers it holds (see the
    /// module documentation). Returns whether a change was started.
    pub fn on_idle_tick(&mut self) -> bool {
        let marks = (self.rseq_no, self.sseq_no);
        let idle = marks == self.idle_marks;
        self.idle_marks = marks;
        if !idle || self.phase != Phase::Connected || self.error.is_some() {
            return false;
        }
        let mut started = false;
        if self.rring_len > self.cfg.recv_ring_min && self.recv_resize.is_none() {
            self.recv_resize = Some(self.cfg.recv_ring_min);
            self.recv_grow_refused = false;
            started = true;
        }
        if self.sring_len > self.cfg.send_ring_min && self.send_resize.is_none() {
            self.send_resize = Some(self.cfg.send_ring_min);
            self.send_grow_refused = false;
            self.completion_wanted = true;
            self.signal_last_send();
            started = true;
        }
        started
    }

    /// The peer has written every byte it was given: the receive ring is what holds it back.
    /// Grows the ring to its largest size, unless a change is under way (a
    /// shrink goes through, as its wait for the peer to use up its buffers ends just so,
    /// and the ring grows again from there if the stream stays busy).
    #[inline(never)]
    pub(crate) fn peer_filled_recv_ring(&mut self) {
        if self.recv_resize.is_none()
            && !self.recv_grow_refused
            && self.rring_len < self.cfg.recv_ring
        {
            self.recv_resize = Some(self.cfg.recv_ring);
        }
    }

    /// Whether the send ring's free space is all that keeps a write from sending (a
    /// queue slot, a credit and a destination are there), with room to grow.
    pub(crate) fn send_ring_is_short(&self) -> bool {
        self.sring_len < self.cfg.send_ring
            && !self.send_grow_refused
            && self.send_resize.is_none()
            && self.sbuf_avail < self.send_low_water()
            && self.sqe_avail >= self.sqes_per_message()
            && self.sseq_no != self.sseq_comp
            && self.target[self.target_index].length != 0
    }

    /// Asks for the largest send ring: writes wait until every send completed, and the last
    /// one posted is made to signal (one wait, however far it grows).
    #[inline(never)]
    pub(crate) fn grow_send_ring(&mut self) {
        self.send_resize = Some(self.cfg.send_ring);
        self.completion_wanted = true;
        self.signal_last_send();
    }
}
