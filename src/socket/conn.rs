//! One connection's state: the protocol engine, the verbs objects it drives ([`Resources`]),
//! and the endpoint of the connection manager; here the engine is glued to them: completions
//! fed, progress passes, the connection manager's notices, the disconnect, keepalives and the
//! completion channel. Everything here runs under the connection's lock and never blocks;
//! waiting lives in `shared.rs` and `wait.rs`, the caller's bytes in `data_path.rs`, posting
//! in `post.rs`.
#![forbid(unsafe_code)]

use super::cm::{CmEndpoint, CmNotice};
use super::options::SocketOptions;
use super::wait::WaitPolicy;
use super::warm::warm;
use crate::protocol::{
    CopySpan, Hello, Readiness, Received, StreamEngine, StreamError, WrId, RECV_DEFER_MAX,
};
use crate::verbs::{WcOpcode, WcStatus, WorkCompletion};
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use super::resources::{InitQpFailed, Resources};

/// Completions taken from the queue per poll.
const POLL_BATCH: usize = 32;
/// How long a closing connection polls for its flushed receives.
const FLUSH_WAIT: Duration = Duration::from_millis(200);

/// A connection: engine plus resources, and the socket-level settings clones share.
#[derive(Debug)]
pub(crate) struct Connection {
    pub(crate) engine: StreamEngine,
    pub(crate) res: Resources,
    pub(crate) endpoint: Arc<dyn CmEndpoint>,
    pub(crate) opts: SocketOptions,
    cq_armed: bool,
    cm_closed: bool,
    disconnect_started: bool,
    wc_error: Option<String>,
    /// A receive completed with an error: the queue pair left the connected state and every
    /// completion before that point has been fed.
    receive_flushed: bool,
    pub(crate) scratch_offset: usize,
    keepalive_due: Option<Instant>,
    pub(crate) nonblocking: bool,
    pub(crate) read_timeout: Option<Duration>,
    pub(crate) write_timeout: Option<Duration>,
    /// `set_nodelay(true)`: every post goes to the transport at once (see
    /// `QueuePair::set_send_coalescing`).
    pub(crate) nodelay: bool,
    /// A blocking call is sleeping in poll(2) on the connection's fds.
    pub(crate) poller_active: bool,
    /// Blocked callers waiting on the condition variable for the one in poll(2).
    pub(crate) cond_waiters: u32,
    /// A receive has completed (see [`CmEndpoint::nudge_after_first_receive`]).
    first_receive_seen: bool,
    /// Where completions are polled into (kept, so that a poll initialises nothing).
    wcs: Box<[WorkCompletion; POLL_BATCH]>,
    /// How blocking calls wait, what they learnt from recent waits, and their statistics.
    pub(crate) wait: WaitPolicy,
    /// Where a lending write's messages went in the send ring (kept: no allocation a write).
    pub(crate) lent_spans: Vec<CopySpan>,
    /// Bytes the last read or peek returned (0 after an error or at end-of-stream).
    pub(crate) last_read: usize,
}

impl Connection {
    /// A connection about to be made: the engine is created and the receives posted.
    pub(crate) fn new(
        res: Resources,
        endpoint: Arc<dyn CmEndpoint>,
        opts: SocketOptions,
    ) -> io::Result<Connection> {
        let engine = StreamEngine::new(opts.stream.clone(), res.regions());
        let scratch_offset = opts.stream.send_ring() + opts.stream.control_area_len();
        let wait = WaitPolicy::new(opts.stream.progress());
        let mut c = Connection {
            engine,
            res,
            endpoint,
            keepalive_due: opts.keepalive.map(|k| Instant::now() + k),
            opts,
            cq_armed: false,
            cm_closed: false,
            disconnect_started: false,
            wc_error: None,
            receive_flushed: false,
            scratch_offset,
            nonblocking: false,
            read_timeout: None,
            write_timeout: None,
            nodelay: false,
            poller_active: false,
            cond_waiters: 0,
            first_receive_seen: false,
            wcs: Box::new([WorkCompletion::default(); POLL_BATCH]),
            wait,
            lent_spans: Vec::new(),
            last_read: 0,
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

    /// Feeds one completion to the engine.
    fn feed(&mut self, wc: &WorkCompletion) -> io::Result<()> {
        let id = WrId(wc.wr_id);
        let status = wc.status();
        let ok = status.is_success();
        if !ok && status != WcStatus::WorkRequestFlushError && self.wc_error.is_none() {
            self.wc_error = Some(format!(
                "work request {:#x} completed with status {} ({status}, vendor error {:#x})",
                wc.wr_id, wc.status, wc.vendor_err
            ));
        }
        if id.is_receive() {
            if !ok {
                self.receive_flushed = true;
                let cause = self.endpoint.end_reason();
                self.engine.on_receive_failed(id, cause.as_deref());
                return Ok(());
            }
            let received = if wc.opcode() == WcOpcode::RecvRdmaWithImm {
                Received::Immediate(wc.imm_data)
            } else {
                let mut word = [0u8; 4];
                if let Some(mr) = &self.res.message_mr {
                    mr.read_at(id.message_slot() as usize * 4, &mut word)?;
                }
                Received::Message(word)
            };
            let target_mr = &self.res.target_mr;
            let mut read = Ok(());
            self.engine.on_receive_with(id, received, |list| {
                read = target_mr.read_at(0, list);
            });
            read?;
            if !self.first_receive_seen {
                self.first_receive_seen = true;
                if self.endpoint.nudge_after_first_receive() {
                    self.engine.keepalive();
                }
            }
        } else {
            self.engine.on_send_completion(id, ok);
        }
        Ok(())
    }

    /// Makes every possible step without blocking: posts queued work, feeds completions, takes
    /// connection-manager notices, starts the disconnect when the stream is done, sends a due
    /// keepalive. Returns whether anything happened.
    pub(crate) fn pump(&mut self) -> io::Result<bool> {
        let mut progress = self.progress()?;
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
                    self.flush_before_close()?;
                    self.engine.on_cm_disconnected();
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
    /// reply leaving (~0.6 µs of rxe0's 64 B one-way time under QEMU, README, session 29).
    /// The reposts come out of the receive reserve, which is sized for it, so a socket left
    /// uncalled starves no one; a credit update or anything else queued is posted now.
    #[inline]
    pub(crate) fn progress_after_read(&mut self) -> io::Result<bool> {
        if self.last_read == 0 || !self.engine.only_receives_queued(RECV_DEFER_MAX) {
            // A read that returned nothing (end-of-stream, or a read side shut down) may be
            // called in a loop that counts on it to take what arrives: it makes the pass.
            return self.progress();
        }
        self.maybe_disconnect();
        Ok(false)
    }

    /// Feeds every completion waiting in the queue; true when there was any.
    pub(crate) fn drain_cq(&mut self) -> io::Result<bool> {
        let mut progress = false;
        loop {
            let n = self.res.cq.poll(&mut self.wcs[..])?.len();
            for i in 0..n {
                let wc = self.wcs[i];
                self.feed(&wc)?;
                // A lone receive repost waits for the next post (see `progress_after_read`).
                if !self.engine.only_receives_queued(RECV_DEFER_MAX) {
                    self.post_ops()?;
                }
            }
            progress |= n > 0;
            if n < POLL_BATCH {
                if progress && self.res.recv_warm.is_some() {
                    // The next bytes land behind these: bring their pages in.
                    let end = self.engine.received_end();
                    warm(&mut self.res.recv_warm, &self.res.recv_mr, end);
                }
                return Ok(progress);
            }
        }
    }

    /// The connection manager says the connection is down, and that event can overtake the
    /// completions of the peer's last messages (rxe posts them from another task). Move the
    /// queue pair to ERR and feed completions until the flushed receives show up: everything
    /// the peer sent before is then in.
    fn flush_before_close(&mut self) -> io::Result<()> {
        if !self.disconnect_started {
            self.disconnect_started = true;
            // A failure leaves nothing to do: the connection is gone either way.
            let _ = self.endpoint.disconnect(&self.res.qp);
        }
        let end = Instant::now() + FLUSH_WAIT;
        while !self.receive_flushed && Instant::now() < end {
            if !self.drain_cq()? {
                std::thread::yield_now();
            }
        }
        Ok(())
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

    /// Sends a keepalive when one is due; returns how long until the next.
    pub(crate) fn keepalive_tick(&mut self) -> Option<Duration> {
        let interval = self.opts.keepalive?;
        let now = Instant::now();
        let due = self.keepalive_due.get_or_insert(now + interval);
        if now >= *due {
            *due = now + interval;
            self.engine.keepalive();
        }
        Some(due.saturating_duration_since(now))
    }

    /// Takes the completion channel's events and arms the queue, so that the next completion
    /// wakes the channel; then polls once more (the lost-wakeup race). Returns whether events
    /// were taken or that last poll made progress.
    pub(crate) fn arm(&mut self) -> io::Result<bool> {
        let took = self.take_events()?;
        if !self.cq_armed {
            self.res.cq.req_notify(false)?;
            self.cq_armed = true;
        }
        Ok(self.pump()? || took)
    }

    /// Before a nap (see `WaitPolicy::plan`), on a provider whose channel events move the
    /// data (uiwarp): arms the queue, so that what arrives during the nap raises an event
    /// that the first look after it takes (`take_events_after_wake` reads the socket). Without
    /// it, bytes that came during the nap wait in the socket until a spinning poll checks it,
    /// the look after the nap finds nothing, and the nap is never judged too long. True when
    /// arming found progress (no nap then). A kernel provider's completions are in the queue
    /// at the first look: nothing to do.
    pub(crate) fn arm_for_nap(&mut self) -> io::Result<bool> {
        if self.res.cq_channel.events_make_progress() {
            self.arm()
        } else {
            Ok(false)
        }
    }

    /// Takes and acknowledges the completion channel's events, leaving the queue unarmed;
    /// true when there were any.
    fn take_events(&mut self) -> io::Result<bool> {
        let mut events = 0;
        while self.res.cq_channel.try_get_event()?.is_some() {
            events += 1;
        }
        if events > 0 {
            self.res.cq.ack_events(events);
            self.cq_armed = false;
        }
        Ok(events > 0)
    }

    /// After a sleep on the completion channel: on a provider whose events move the data
    /// (uiwarp, see `events_make_progress`), takes them first, so that the woken thread reads
    /// the socket inside `get_event` and the event it raises needs no eventfd write and read;
    /// the queue is re-armed only before the next sleep. On a kernel provider this does
    /// nothing: the completions are polled as usual, and the event is taken when arming.
    pub(crate) fn take_events_after_wake(&mut self) -> io::Result<bool> {
        if self.res.cq_channel.events_make_progress() {
            self.take_events()
        } else {
            Ok(false)
        }
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
        match (&e, &self.wc_error) {
            (StreamError::ConnectionReset(_), Some(wc)) => {
                io::Error::new(kind, format!("{e}; {wc}"))
            }
            _ => io::Error::new(kind, e),
        }
    }
}
