//! Doorbell coalescing: sends posted in quick succession go to TCP together.
//!
//! Were every post to end in a `sendmsg(2)` of its frames, on a fast loopback that system
//! call, not the protocol, would bound a stream of small writes (a 4 KiB message would cost
//! the writer ~3.7 µs, ~2.7 of them in the kernel's TCP send, against ~2.4 µs for
//! `TcpStream`'s whole `write`). A NIC's doorbell only starts work that the NIC does while the CPU goes on; ours
//! does the work on the poster's thread, so it batches instead: a post that comes within
//! [`WINDOW`] of the connection's last write to TCP, while neither of its QP's completion
//! queues is armed (a thread may be about to sleep on the channel), is *held* (queued in the
//! core, not yet framed or written) while fewer than [`MAX_HELD_BYTES`] and
//! [`MAX_HELD_REQUESTS`] are, and the held posts go out, in order, with the first of:
//!
//! * a post that cannot be held (a full batch, a lent payload, a quiet connection);
//! * a poll or an arm of either of the QP's completion queues, on any thread: whoever waits
//!   for a completion (the socket layer's reads and waits, a verbs user's poll loop) first
//!   rings the held doorbells, so a request followed by a wait for its answer loses nothing;
//! * any other write to the socket (input that the core answers, the engine's writable edge,
//!   a close);
//! * the engine's [`BACKSTOP`] timer, armed by the first held post, for a poster that neither
//!   posts nor polls again (a held post then waits about a millisecond, where TCP's Nagle
//!   algorithm may hold a write for a delayed ACK's 40 ms).
//!
//! [`QpOps::set_send_coalescing`](rdmasock_verbs::provider::QpOps::set_send_coalescing)
//! turns it off for a QP (`RdmaSocket::set_nodelay(true)` does).
#![forbid(unsafe_code)]

use super::completion::uiwarp_cq;
use super::endpoint::{Endpoint, EndpointState};
use super::{Engine, HOLD_BIT};
use mio::Token;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A post this soon after the last write to TCP may be held.
pub(crate) const WINDOW: Duration = Duration::from_micros(20);
/// Payload bytes held at most: a post that would pass this rings.
pub(crate) const MAX_HELD_BYTES: u64 = 64 * 1024;
/// Requests held at most (a writev takes a few pieces per request; see `link`).
pub(crate) const MAX_HELD_REQUESTS: usize = 32;
/// How long after the first held post the engine rings, if nobody did.
pub(crate) const BACKSTOP: Duration = Duration::from_millis(1);

/// A link's held posts (under the endpoint's lock).
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// When the link last wrote to TCP (stamped only while coalescing is on: nothing else
    /// reads it).
    last_write: Option<Instant>,
    bytes: u64,
    requests: usize,
    /// Coalescing is off for the QP: a write reads no clock.
    pub(crate) off: bool,
}

impl Held {
    /// Whether a post of `bytes` in `requests` may join the held ones at `now`.
    fn may_hold(&self, now: Instant, bytes: u64, requests: usize) -> bool {
        self.last_write
            .is_some_and(|t| now.saturating_duration_since(t) < WINDOW)
            && self.bytes + bytes < MAX_HELD_BYTES
            && self.requests + requests < MAX_HELD_REQUESTS
    }

    fn hold(&mut self, bytes: u64, requests: usize) {
        self.bytes += bytes;
        self.requests += requests;
    }

    /// The link wrote what the core had (`wrote`: some bytes went to TCP): nothing is held.
    pub(crate) fn rung(&mut self, wrote: bool) {
        if wrote && !self.off {
            self.last_write = Some(Instant::now());
        }
        self.bytes = 0;
        self.requests = 0;
    }
}

/// An endpoint's coalescing switches and hints (read without its lock).
#[derive(Debug)]
pub(crate) struct Doorbell {
    enabled: AtomicBool,
    /// Posts may be held: set with them, cleared under the lock by whatever writes them.
    held: AtomicBool,
    /// The engine's backstop timer is armed.
    timer: AtomicBool,
    /// Posts held so far.
    holds: AtomicU64,
}

impl Default for Doorbell {
    fn default() -> Doorbell {
        Doorbell {
            enabled: AtomicBool::new(true),
            held: AtomicBool::new(false),
            timer: AtomicBool::new(false),
            holds: AtomicU64::new(0),
        }
    }
}

impl Doorbell {
    /// Turns coalescing on or off; off rings nothing by itself (the caller does).
    pub(crate) fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// Called under the endpoint's lock by everything that writes the link.
    pub(crate) fn clear(&self) {
        self.held.store(false, Ordering::Release);
    }
}

impl Endpoint {
    /// Turns coalescing on or off for the QP: the switch the posts read, and the link's
    /// (whether its writes are stamped for [`Held::may_hold`]). A link made later stamps
    /// until this is called again, which costs a clock read per write and nothing else.
    pub(crate) fn set_coalescing(&self, on: bool) {
        self.doorbell.set_enabled(on);
        if let Some(link) = self.lock().link.as_mut() {
            link.held.off = !on;
        }
    }

    /// Whether [`Endpoint::try_hold`] would hold a post of `bytes` in `requests` now (it
    /// changes nothing): the lean path frames only a post that is not held.
    pub(crate) fn would_hold(&self, st: &EndpointState, bytes: u64, requests: usize) -> bool {
        // An armed queue means a thread may sleep on its channel, which a held post would
        // leave waiting for the backstop: the classic event loop arms, polls, posts the
        // answers and sleeps.
        if !self.doorbell.enabled.load(Ordering::Relaxed)
            || uiwarp_cq(&self.send_cq).is_armed()
            || uiwarp_cq(&self.recv_cq).is_armed()
        {
            return false;
        }
        st.link.as_ref().is_some_and(|link| {
            link.can_hold() && link.held.may_hold(Instant::now(), bytes, requests)
        })
    }

    /// Holds the post just made (`bytes` of payload in `requests`) instead of writing it, if
    /// coalescing is on and allows it (see the module). Returns whether it did.
    pub(crate) fn try_hold(
        &self,
        st: &mut EndpointState,
        engine: &Engine,
        bytes: u64,
        requests: usize,
    ) -> bool {
        if !self.would_hold(st, bytes, requests) {
            return false;
        }
        let Some(link) = st.link.as_mut() else {
            return false;
        };
        let now = Instant::now();
        link.held.hold(bytes, requests);
        let token = link.token;
        self.doorbell.held.store(true, Ordering::Release);
        self.doorbell.holds.fetch_add(1, Ordering::Relaxed);
        uiwarp_cq(&self.send_cq).note_held();
        if !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            uiwarp_cq(&self.recv_cq).note_held();
        }
        if !self.doorbell.timer.swap(true, Ordering::AcqRel) {
            engine.set_timer(Token(token.0 | HOLD_BIT), Some(now + BACKSTOP));
        }
        true
    }

    /// Writes the held posts, if any (a poll or arm of one of the QP's CQs, which saw the
    /// CQ's hint that the post set after this endpoint's).
    pub(crate) fn ring_held(&self) {
        if self.doorbell.held.load(Ordering::Acquire) {
            self.ring();
        }
    }

    /// The engine's backstop: writes what is still held.
    pub(crate) fn hold_timer(&self) {
        // Cleared before the lock, and the lock taken whatever the hint says: a post that
        // holds after this finds the timer unarmed and arms it, one that held before is
        // written here.
        self.doorbell.timer.store(false, Ordering::Release);
        self.ring();
    }

    fn ring(&self) {
        if let Ok(engine) = super::engine() {
            let mut st = self.lock();
            self.flush(&mut st, engine);
        }
    }

    /// Posts held so far (each went to TCP with a later one's write).
    pub fn held_posts(&self) -> u64 {
        self.doorbell.holds.load(Ordering::Relaxed)
    }
}
