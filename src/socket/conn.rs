//! One connection's state: the protocol engine, the verbs objects it drives ([`Resources`]),
//! and the endpoint of the connection manager; here the engine is glued to them: completions
//! fed, progress passes, the connection manager's notices, the disconnect, keepalives and the
//! completion channel. Everything here runs under the connection's lock and never blocks;
//! waiting lives in `shared.rs` and `wait.rs`, the caller's bytes in `data_path.rs`, posting
//! in `post.rs`.
#![forbid(unsafe_code)]

use super::completions::CompletionState;
use super::options::SocketOptions;
use super::options::RING_IDLE;
use super::shared::Sleepers;
use super::wait::WaitPolicy;
use crate::cm::{CmEndpoint, CmNotice};
use crate::protocol::{
    CopySpan, Hello, Readiness, RingChange, StreamEngine, StreamError, RECV_DEFER_MAX,
};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use super::resources::{InitQpFailed, Resources};

/// A connection: engine plus resources, and the socket-level settings clones share.
#[derive(Debug)]
pub(crate) struct Connection {
    pub(crate) engine: StreamEngine,
    pub(crate) res: Resources,
    pub(crate) endpoint: Arc<dyn CmEndpoint>,
    pub(crate) opts: SocketOptions,
    /// What the completion side keeps between polls.
    pub(crate) completions: CompletionState,
    cm_closed: bool,
    disconnect_started: bool,
    /// When a stream that waits for its flushed receives after the connection manager's
    /// DISCONNECTED gives up on a device that does not flush them (see `flush_tick`).
    flush_due: Option<Instant>,
    /// Whether `flush_due` is set, readable without the connection's lock: a tokio task
    /// about to wait looks at it before taking the lock for the bound
    /// (`Shared::flush_bound`), which almost every stream never has.
    flush_bound_set: Arc<AtomicBool>,
    pub(crate) scratch_offset: usize,
    keepalive_due: Option<Instant>,
    /// When the rings' idle timer next runs (see `ring_idle_tick`).
    ring_idle_due: Option<Instant>,
    pub(crate) nonblocking: bool,
    pub(crate) read_timeout: Option<Duration>,
    pub(crate) write_timeout: Option<Duration>,
    /// `set_nodelay(true)`: every post goes to the transport at once (see
    /// `QueuePair::set_send_coalescing`).
    pub(crate) nodelay: bool,
    /// The callers blocked on this connection (see `Shared::sleep`).
    pub(crate) sleepers: Sleepers,
    /// How blocking calls wait, what they learnt from recent waits, and their statistics.
    pub(crate) wait: WaitPolicy,
    /// Where a lending write's messages went in the send ring (kept: no allocation a write).
    pub(crate) lent_spans: Vec<CopySpan>,
    /// Bytes the last read or peek returned (0 after an error or at end-of-stream).
    pub(crate) last_read: usize,
    /// Buffers of zero-copy writes submitted and not yet handed back, in order (last: they
    /// drop after the queue pair; see `zero_copy`).
    pub(crate) submitted: std::collections::VecDeque<super::zero_copy::Submission>,
    /// The iomap windows this side mapped, held until the connection closes.
    pub(crate) windows: super::iomap::Windows,
}

impl Connection {
    /// A connection about to be made: the engine is created and the receives posted.
    pub(crate) fn new(
        res: Resources,
        endpoint: Arc<dyn CmEndpoint>,
        opts: SocketOptions,
    ) -> io::Result<Connection> {
        let engine = StreamEngine::new(opts.stream.clone(), res.regions());
        let scratch_offset = opts.stream.send_ring_min() + opts.stream.control_area_len();
        let wait = WaitPolicy::new(opts.stream.progress());
        let mut c = Connection {
            engine,
            res,
            endpoint,
            keepalive_due: opts.keepalive.map(|k| Instant::now() + k),
            ring_idle_due: None,
            opts,
            completions: CompletionState::new(),
            cm_closed: false,
            disconnect_started: false,
            flush_due: None,
            flush_bound_set: Arc::new(AtomicBool::new(false)),
            scratch_offset,
            nonblocking: false,
            read_timeout: None,
            write_timeout: None,
            nodelay: false,
            sleepers: Sleepers::default(),
            wait,
            lent_spans: Vec::new(),
            last_read: 0,
            submitted: std::collections::VecDeque::new(),
            windows: Default::default(),
        };
        c.post_ops()?;
        Ok(c)
    }

    /// Our hello, for the private data.
    pub(crate) fn hello_bytes(&self) -> Vec<u8> {
        self.engine.hello().to_bytes().to_vec()
    }

    /// The peer's hello arrived: the stream is connected.
    pub(crate) fn connected(&mut self, peer: &Hello) -> io::Result<()> {
        self.engine.on_connected(peer).map_err(io::Error::from)
    }

    /// Makes every possible step without blocking: posts queued work, feeds completions, takes
    /// connection-manager notices, starts the disconnect when the stream is done, sends a due
    /// keepalive. Returns whether anything happened.
    pub(crate) fn pump(&mut self) -> io::Result<bool> {
        let progress = self.progress()?;
        Ok(self.take_notices()? || progress)
    }

    /// The notice half of [`pump`](Self::pump): takes the connection manager's notices and
    /// acts on them; whether there were any.
    pub(crate) fn take_notices(&mut self) -> io::Result<bool> {
        let mut progress = false;
        let mut notices = Vec::new();
        while let Some(notice) = self.endpoint.poll_notice()? {
            notices.push(notice);
        }
        // A removal explains a disconnect queued with it (a peer on the same device whose id
        // the kernel destroyed first): the removal is said, not "the connection broke".
        notices.sort_by_key(|n| *n != CmNotice::DeviceRemoved);
        for notice in notices {
            progress = true;
            match notice {
                CmNotice::Disconnected => {
                    self.cm_closed = true;
                    self.disconnected_by_cm()?;
                }
                CmNotice::Lost => {
                    let why = self
                        .endpoint
                        .end_reason()
                        .unwrap_or_else(|| "the peer stopped acknowledging".into());
                    self.engine.fail(StreamError::ConnectionReset(format!(
                        "connection lost: {why}"
                    )));
                }
                CmNotice::DeviceRemoved => {
                    self.res.device.mark_removed();
                    self.engine.fail(StreamError::ConnectionReset(
                        "the RDMA device under this connection was removed (DEVICE_REMOVAL): \
                         drop the socket (the kernel completes the removal once the \
                         connections on that device are gone)"
                            .into(),
                    ));
                }
            }
        }
        self.maybe_disconnect();
        Ok(progress)
    }

    /// The cheap part of [`pump`](Self::pump), for the data path and the spin loop: posts
    /// queued work and feeds completions (no system call on a kernel provider's fast path);
    /// connection-manager notices are taken by `pump` before a caller sleeps. Returns whether
    /// a completion came.
    pub(crate) fn progress(&mut self) -> io::Result<bool> {
        self.post_ops()?;
        let progress = self.drain_cq()?;
        self.maybe_disconnect();
        Ok(progress)
    }

    /// Progress after a write went through: posts what it queued, and feeds completions only
    /// once the send side is down to half of a resource ([`StreamEngine::has_headroom`]). A
    /// streaming writer then polls the completion queue once every several writes instead of
    /// after each (a poll and the completions' bookkeeping cost ~500 instructions a 4 KiB
    /// message on the userspace provider); whatever runs short first brings the poll back, and
    /// a write that finds nothing free feeds them anyway.
    #[inline]
    pub(crate) fn progress_after_write(&mut self) -> io::Result<bool> {
        if !self.engine.has_headroom() {
            return self.progress();
        }
        self.post_ops()?;
        self.maybe_disconnect();
        Ok(false)
    }

    /// Progress after a read went through. When it returned bytes and all that is queued is
    /// up to [`RECV_DEFER_MAX`] receive reposts (the completions fed just before the read),
    /// they and the completion queue wait for the next call, whose attempt finds what came
    /// meanwhile (or makes the progress pass when it finds nothing): a ping-pong's write
    /// posts its message first and the reposts behind it (see `post_ops_with`), so neither
    /// the reposts nor a second pass over the queue stand between the bytes' arrival and the
    /// reply leaving (~0.6 µs of rxe0's 64 B one-way time under QEMU, README).
    /// The reposts come out of the receive reserve, which is sized for it, so a socket left
    /// uncalled starves no one; a credit update or anything else queued is posted now.
    #[inline]
    pub(crate) fn progress_after_read(&mut self) -> io::Result<bool> {
        if self.last_read == 0
            || !self.engine.only_receives_queued(RECV_DEFER_MAX)
            || self.engine.ring_change_pending()
        {
            // A read that returned nothing (end-of-stream, or a read side shut down) may be
            // called in a loop that counts on it to take what arrives: it makes the pass.
            return self.progress();
        }
        self.maybe_disconnect();
        Ok(false)
    }

    /// The connection manager says the connection is down, and that event can overtake the
    /// completions of the peer's last messages (rxe posts them from another task). Moves the
    /// queue pair to ERR, which flushes the receives still posted, and tells the engine, which
    /// holds end-of-stream back until the first flushed receive is fed (see
    /// [`StreamEngine::on_cm_disconnected`]): the completions decide, no clock. Those already
    /// in the queue are fed now; the rest wake the completion channel like any completion.
    /// A device that never flushes is bounded by the close timeout (see `flush_tick`), and so
    /// is a connection on a shared receive queue, whose receives are never flushed.
    fn disconnected_by_cm(&mut self) -> io::Result<()> {
        if !self.disconnect_started {
            self.disconnect_started = true;
            // A failure leaves nothing to do: the connection is gone either way.
            let _ = self.endpoint.disconnect(&self.res.qp);
        }
        self.engine.on_cm_disconnected();
        self.drain_cq()?;
        if self.engine.awaits_flush() && self.flush_due.is_none() {
            self.set_flush_due(Some(Instant::now() + self.opts.close_timeout));
            // The readiness hub times registered sockets: have it look at this one.
            super::readiness::keepalive_changed();
        }
        Ok(())
    }

    /// Sets (or clears) the bound of [`flush_tick`](Self::flush_tick), and the flag that
    /// says whether there is one.
    fn set_flush_due(&mut self, due: Option<Instant>) {
        self.flush_due = due;
        self.flush_bound_set.store(due.is_some(), Ordering::Release);
    }

    /// The flag that says whether [`flush_tick`](Self::flush_tick) has a bound to keep,
    /// shared with whoever reads it without the lock.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn flush_bound_flag(&self) -> Arc<AtomicBool> {
        self.flush_bound_set.clone()
    }

    /// The bound on the wait for the flushed receives after the connection manager's
    /// DISCONNECTED: a device that has not flushed them within the close timeout fails the
    /// stream (an error, never end-of-stream: whether the peer closed it is unknown). Returns
    /// how long until the bound (`None`: nothing waits; zero: the stream failed now).
    pub(crate) fn flush_tick(&mut self) -> Option<Duration> {
        let due = self.flush_due?;
        if !self.engine.awaits_flush() {
            self.set_flush_due(None);
            return None;
        }
        let now = Instant::now();
        if now < due {
            return Some(due - now);
        }
        self.set_flush_due(None);
        let message = if self.res.srq.is_some() {
            // The receives of a shared receive queue are not flushed: only the peer's
            // DISCONNECT message could have ended the wait.
            format!(
                "the connection manager reported the connection closed (DISCONNECTED) and no \
                 DISCONNECT message from the peer came within the close timeout ({:?}): the \
                 connection broke",
                self.opts.close_timeout
            )
        } else {
            format!(
                "the connection manager reported the connection closed (DISCONNECTED) and the \
                 device did not flush the posted receives within the close timeout ({:?}), so \
                 whether the peer closed the stream or it broke is unknown; raise the close \
                 timeout (SocketOptionsBuilder::close_timeout) for a slow device",
                self.opts.close_timeout
            )
        };
        self.engine.fail(StreamError::ConnectionReset(message));
        // The stream just failed: whoever is about to wait looks again at once, and finds it.
        Some(Duration::ZERO)
    }

    /// Runs the connection manager's disconnect once the stream is over: on kernel iWARP,
    /// where our own DISCONNECT's completion does not mean the peer has it, only once the
    /// peer closed too (its DISCONNECT, or the connection manager's event); a drop bounds
    /// that wait by the close timeout ([`CmEndpoint::disconnect_waits_for_peer`]).
    #[inline]
    fn maybe_disconnect(&mut self) {
        if self.disconnect_started || !(self.cm_closed || self.engine.finished()) {
            return;
        }
        self.disconnect_if_over();
    }

    /// The rest of [`maybe_disconnect`](Self::maybe_disconnect), out of line: the stream is
    /// finished or the connection manager said it is closed.
    #[inline(never)]
    fn disconnect_if_over(&mut self) {
        let finished = self.engine.finished()
            && (self.engine.peer_closed()
                || self.engine.error().is_some()
                || !self.endpoint.disconnect_waits_for_peer());
        if self.cm_closed || finished {
            self.disconnect_started = true;
            // A failure here leaves nothing to do: the connection is gone either way.
            let _ = self.endpoint.disconnect(&self.res.qp);
        }
    }

    /// Sends a keepalive when one is due, runs the rings' idle timer and the bound on the
    /// wait for flushed receives (see `flush_tick`); returns how long until the next of them.
    pub(crate) fn keepalive_tick(&mut self) -> Option<Duration> {
        let timers = match (self.ring_idle_tick(), self.flush_tick()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let Some(interval) = self.opts.keepalive else {
            return timers;
        };
        let now = Instant::now();
        let due = self.keepalive_due.get_or_insert(now + interval);
        if now >= *due {
            *due = now + interval;
            self.engine.keepalive();
        }
        let keepalive = due.saturating_duration_since(now);
        Some(timers.map_or(keepalive, |r| r.min(keepalive)))
    }

    /// The rings' idle timer: while a ring is above its smallest size, tells the engine
    /// every [`RING_IDLE`] (which shrinks the rings once a whole period passed without
    /// data) and carries out a change that is due. Returns how long until the next tick
    /// (`None`: both rings are at their smallest, nothing to time).
    fn ring_idle_tick(&mut self) -> Option<Duration> {
        let cfg = self.engine.config();
        let grown = self.engine.recv_ring_len() > cfg.recv_ring_min()
            || self.engine.send_ring_len() > cfg.send_ring_min();
        if !grown {
            self.ring_idle_due = None;
            return None;
        }
        let now = Instant::now();
        let due = self.ring_idle_due.get_or_insert(now + RING_IDLE);
        if now >= *due {
            *due = now + RING_IDLE;
            self.engine.on_idle_tick();
            // A failure fails the stream, which the next call reports.
            let _ = self.change_rings();
        }
        self.ring_idle_due.map(|d| d.saturating_duration_since(now))
    }

    /// Carries out the ring changes the engine asks for ([`StreamEngine::ring_change`]):
    /// registers the new ring in place of the old (which the engine no longer uses), or
    /// tells the engine it cannot be had (memory, RLIMIT_MEMLOCK) and the current ring stays;
    /// then posts what the change queued (the new receive ring's advertisements).
    #[inline(never)]
    pub(crate) fn change_rings(&mut self) -> io::Result<()> {
        if !self.engine.holds_old_recv_ring() {
            // Every byte in the replaced receive ring was read: give it back.
            self.res.old_recv_mr = None;
        }
        while let Some(change) = self.engine.ring_change() {
            match change {
                RingChange::Receive(len) => match self.res.replace_recv_ring(len) {
                    Ok(()) => {
                        let regions = self.res.regions();
                        self.engine.install_recv_ring(
                            regions.recv_ring_addr,
                            regions.recv_ring_rkey,
                            len,
                        );
                        if !self.engine.holds_old_recv_ring() {
                            self.res.old_recv_mr = None;
                        }
                    }
                    Err(_) => self.engine.refuse_ring_change(change),
                },
                RingChange::Send(len) => {
                    let control = self.opts.stream.control_area_len();
                    match self.res.replace_send_ring(len, control) {
                        Ok(()) => {
                            self.scratch_offset = len + control;
                            self.engine.install_send_ring(len);
                        }
                        Err(_) => self.engine.refuse_ring_change(change),
                    }
                }
            }
        }
        let cfg = self.engine.config();
        let grown = self.engine.recv_ring_len() > cfg.recv_ring_min()
            || self.engine.send_ring_len() > cfg.send_ring_min();
        if grown && self.ring_idle_due.is_none() {
            // Start the idle timer, and have the readiness hub (which times registered
            // sockets) look at it.
            self.ring_idle_due = Some(Instant::now() + RING_IDLE);
            super::readiness::keepalive_changed();
        }
        self.post_ops()
    }

    /// Copies up to `buf.len()` bytes into the send ring, or posts them inline at once.
    /// What is possible now.
    pub(crate) fn readiness(&self) -> Readiness {
        self.engine.readiness()
    }

    /// Whether the connection manager's disconnect ran or the connection is gone.
    pub(crate) fn closed(&self) -> bool {
        self.disconnect_started
    }

    /// An engine error as an `io::Error`, with the failed completion's status when known.
    pub(crate) fn io_error(&self, e: StreamError) -> io::Error {
        let kind = io::Error::from(e.clone()).kind();
        match (&e, &self.completions.wc_error) {
            (StreamError::ConnectionReset(_), Some(wc)) => {
                io::Error::new(kind, format!("{e}; {wc}"))
            }
            _ => io::Error::new(kind, e),
        }
    }
}
