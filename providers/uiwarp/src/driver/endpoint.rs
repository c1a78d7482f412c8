//! A queue pair's side of the driver ([`Endpoint`]: its connection, its posted work before a
//! connection exists, what the connection manager waits for). An accepted TCP connection that
//! no queue pair owns yet is a [`Pending`](super::pending::Pending).

use super::completion::uiwarp_cq;
use super::doorbell::Doorbell;
use super::link::{Link, ENGINE_READ_BUDGET};
use super::Engine;
use crate::memory::{InlinePool, QpMemory, RegionSet};
use crate::protocol::{CloseReason, Event, Negotiated, RecvQueue, WorkQueue};
use mio::net::TcpStream;
use nix::sys::eventfd::{EfdFlags, EventFd};
use rdmasock_verbs::provider::CqOps;
use rdmasock_verbs::{QpCapabilities, QpNumber, QpState, RegisteredMemory};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, RwLock};
use std::time::{Duration, Instant};

mod input;

/// The longest liveness timeout (see [`Endpoint::set_liveness_timeout`]): `i32::MAX`
/// milliseconds (24.8 days); a longer one is cut to it.
pub const MAX_LIVENESS_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

/// What a connected endpoint reports to its connection manager user.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// The connection is over: the peer closed it, reset it, or a TERMINATE ended it.
    Disconnected,
    /// The connection is over because the peer stopped acknowledging what was sent, for
    /// longer than [`Endpoint::set_liveness_timeout`] allows (a vanished peer, or a cut
    /// wire). [`Endpoint::end_reason`] says it in words.
    Lost,
}

/// Where connection setup stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// No connection was asked for.
    Idle,
    /// The MPA exchange runs.
    Connecting,
    /// Established; the peer's private data.
    Established(Vec<u8>),
    /// The responder rejected us; its private data.
    Rejected(Vec<u8>),
    /// Setup failed, in words.
    Failed(String),
}

/// The mutable part of an [`Endpoint`].
#[derive(Debug)]
pub(crate) struct EndpointState {
    /// The QP state while no connection exists (RESET, INIT, ERR).
    pub(crate) qp_state: QpState,
    pub(crate) link: Option<Link>,
    /// Receives posted before the connection exists.
    pub(crate) early_recvs: RecvQueue,
    pub(crate) inline: InlinePool,
    /// Send requests handed to the core so far.
    pub(crate) posted_sends: u64,
    pub(crate) outcome: Outcome,
    pub(crate) negotiated: Option<Negotiated>,
    pub(crate) notices: VecDeque<Notice>,
    /// Why the connection ended, once it has.
    pub(crate) ended: Option<String>,
    pub(crate) local: Option<SocketAddr>,
    pub(crate) peer: Option<SocketAddr>,
    /// The liveness timeout asked for (see [`Endpoint::set_liveness_timeout`]): the link
    /// made by a later connect or accept gets it too.
    pub(crate) liveness_timeout: Option<Duration>,
    /// The engine's token for the active side's TCP connect while it runs (see
    /// `driver::dial`): its end raises the notice fd.
    pub(crate) dialing: Option<mio::Token>,
}

impl EndpointState {
    /// The QP state as verbs reports it.
    pub(crate) fn qp_state(&self) -> QpState {
        match &self.link {
            Some(l) => l.conn.qp_state(),
            None => self.qp_state,
        }
    }
}

/// A queue pair as the driver sees it.
#[derive(Debug)]
pub struct Endpoint {
    pub(crate) qpn: QpNumber,
    pub(crate) caps: QpCapabilities,
    pub(crate) regions: Arc<RwLock<RegionSet>>,
    pub(crate) send_cq: Arc<dyn CqOps>,
    pub(crate) recv_cq: Arc<dyn CqOps>,
    pub(crate) state: Mutex<EndpointState>,
    pub(crate) changed: Condvar,
    /// The notice fd when the receive CQ has no uiwarp channel; with one, the channel's
    /// eventfd serves (see [`UiwarpChannel`](super::UiwarpChannel)).
    pub(super) own_notice_fd: Option<EventFd>,
    /// The notice is raised (changed under the state lock only).
    pub(super) notice_raised: AtomicBool,
    /// The socket may hold bytes nobody read: set by the engine on each readable edge
    /// (edge-triggered, so every arrival after a read makes one), cleared just before a
    /// read. Polling an empty completion queue reads the socket only while this is set,
    /// instead of a read syscall that finds nothing on every poll.
    input_hint: AtomicBool,
    /// When a thread last spun on one of this QP's completion queues ([`clock`]
    /// nanoseconds; 0: never): it reads the socket itself, and for [`SPIN_WINDOW`] after
    /// the engine leaves the bytes to it.
    polled_at: AtomicU64,
    /// Reads of the socket by application threads (a spinning poll, a thread woken on a
    /// completion channel), and the count the engine's last backstop saw: while it grows,
    /// the engine leaves the socket to them.
    app_reads: AtomicU64,
    app_reads_seen: AtomicU64,
    /// Quiet backstops in a row while watched (see [`Endpoint::read_by_application`]).
    quiet_looks: AtomicU32,
    /// The engine stopped watching the socket for input, leaving it to a spinner (see
    /// [`Endpoint::leave_input`]); arming a queue with a channel takes it back.
    input_left: AtomicBool,
    /// Threads sleeping on a completion channel that poll this QP's socket themselves (see
    /// [`Endpoint::watch_input`]): the engine leaves its input to them.
    input_watchers: AtomicU32,
    /// Readiness events of this QP's socket that woke the engine thread.
    engine_events: AtomicU64,
    /// Bytes of inline payloads lent by their post, and those of them TCP did not take
    /// during the post (copied).
    lent: AtomicU64,
    lent_copied: AtomicU64,
    /// Bytes the link's transmit queue held after the last activity (see
    /// [`Endpoint::send_backlog`]).
    backlog: AtomicU64,
    /// Doorbell coalescing (see [`super::doorbell`]).
    pub(crate) doorbell: Doorbell,
}

/// When a polling thread reads a socket (see [`Endpoint::poll_should_read`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReadWhen {
    /// Bytes arrived since the last read.
    Now,
    /// The thread spins: read if poll(2) says the socket is readable.
    IfReadable,
}

/// How long after a spinning poll the engine still leaves a socket's input to the spinner,
/// even when the spinner has read nothing since the last backstop (an idle connection's
/// spin). Longer than the backstop ([`super::BACKSTOP`]): under QEMU's TCG one message takes
/// a few hundred microseconds, and a 200 µs window gave the socket back to the engine,
/// which then woke on nearly every arrival. A thread that really stopped polling gets its
/// bytes moved by the engine within this window plus a backstop.
const SPIN_WINDOW: Duration = Duration::from_millis(2);

/// Readiness events of queue pairs' sockets that woke the engine thread, over the process's
/// life (the sum of every [`Endpoint::engine_events`]; see [`engine_events_total`]).
static ENGINE_EVENTS: AtomicU64 = AtomicU64::new(0);

/// How many readiness events of queue pairs' sockets the engine thread has handled in this
/// process, all connections together: the sum of [`Endpoint::engine_events`], for code that
/// does not hold the queue pairs (a socket or an async stream above them) to see whether
/// arrivals crossed the engine thread or were read by the application's own threads.
pub fn engine_events_total() -> u64 {
    ENGINE_EVENTS.load(Ordering::Relaxed)
}

/// Nanoseconds since the first call in this process (never 0 after it).
fn clock() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    base.elapsed().as_nanos() as u64 + 1
}

impl Endpoint {
    pub(crate) fn new(
        qpn: QpNumber,
        caps: QpCapabilities,
        regions: Arc<RwLock<RegionSet>>,
        send_cq: Arc<dyn CqOps>,
        recv_cq: Arc<dyn CqOps>,
    ) -> rdmasock_verbs::Result<Arc<Endpoint>> {
        let own_notice_fd = match uiwarp_cq(&recv_cq).channel() {
            Some(_) => None,
            None => Some(
                EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                    .map_err(|e| {
                        rdmasock_verbs::Error::io("creating a uiwarp QP's event fd", e.into())
                    })?,
            ),
        };
        let e = Arc::new(Endpoint {
            qpn,
            caps,
            regions,
            send_cq,
            recv_cq,
            state: Mutex::new(EndpointState {
                qp_state: QpState::Reset,
                link: None,
                early_recvs: RecvQueue::new(),
                inline: InlinePool::default(),
                posted_sends: 0,
                outcome: Outcome::Idle,
                negotiated: None,
                notices: VecDeque::new(),
                ended: None,
                local: None,
                peer: None,
                liveness_timeout: None,
                dialing: None,
            }),
            changed: Condvar::new(),
            own_notice_fd,
            notice_raised: AtomicBool::new(false),
            input_hint: AtomicBool::new(true),
            polled_at: AtomicU64::new(0),
            app_reads: AtomicU64::new(0),
            app_reads_seen: AtomicU64::new(0),
            quiet_looks: AtomicU32::new(0),
            input_left: AtomicBool::new(false),
            input_watchers: AtomicU32::new(0),
            engine_events: AtomicU64::new(0),
            lent: AtomicU64::new(0),
            lent_copied: AtomicU64::new(0),
            backlog: AtomicU64::new(0),
            doorbell: Doorbell::default(),
        });
        uiwarp_cq(&e.send_cq).attach(&e);
        if !Arc::ptr_eq(&e.send_cq, &e.recv_cq) {
            uiwarp_cq(&e.recv_cq).attach(&e);
        }
        Ok(e)
    }

    /// The endpoint's state. A lock poisoned by a panic (a bug, in the engine or in an
    /// application thread's call) is taken anyway: the engine fails such a connection (see
    /// [`Endpoint::fail_after_panic`]), and a drop must never panic on it.
    pub(crate) fn lock(&self) -> MutexGuard<'_, EndpointState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// After a panic while driving this connection: fails it without another call into its
    /// protocol state (which may be half-updated). The socket closes; the QP is in error, its
    /// end named, and a disconnect notice wakes its waiters; outstanding work requests are not
    /// completed.
    pub(crate) fn fail_after_panic(&self, engine: &Engine, what: &str) {
        self.state.clear_poison();
        let mut st = self.lock();
        if let Some(link) = st.link.take() {
            link.close(engine);
        }
        st.qp_state = QpState::Error;
        let why = format!("the userspace iWARP provider failed internally (a bug: {what})");
        if matches!(st.outcome, Outcome::Connecting) {
            st.outcome = Outcome::Failed(why.clone());
        }
        st.ended = Some(why);
        if st.notices.is_empty() {
            self.raise_notice();
        }
        st.notices.push_back(Notice::Disconnected);
        self.changed.notify_all();
    }

    /// The engine saw the active side's TCP connect end (connected or failed): the notice fd
    /// turns readable for the connect's next step, unless that step ran already.
    pub(crate) fn dial_ended(&self) {
        let st = self.lock();
        if st.dialing.is_some() && st.notices.is_empty() {
            self.raise_notice();
        }
    }

    /// Stops the engine's watch of the active side's TCP connect (see [`Self::dial_ended`])
    /// and takes back what it raised.
    pub(crate) fn dial_over(&self, engine: &Engine, socket: BorrowedFd<'_>) {
        let mut st = self.lock();
        if let Some(token) = st.dialing.take() {
            engine.remove(token);
            let fd = socket.as_raw_fd();
            engine.deregister(&mut mio::unix::SourceFd(&fd));
            if st.notices.is_empty() {
                self.lower_notice();
            }
        }
    }

    /// The QP number.
    pub fn qp_num(&self) -> QpNumber {
        self.qpn
    }

    /// Our TCP address, once connected.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.lock().local
    }

    /// The peer's TCP address, once connected.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.lock().peer
    }

    /// Bounds how long the peer may leave what was sent on the connection unacknowledged
    /// (`None`: TCP's own retransmission limit, about 15 minutes). The driver judges it from
    /// the kernel's `TCP_INFO`, not with `TCP_USER_TIMEOUT`, which Linux also applies to a
    /// full window: a peer whose kernel answers but whose application stopped reading (a
    /// stopped process) is not lost. When the timeout passes, the connection ends with
    /// [`Notice::Lost`]. Applies to the connection now up, and is remembered for the one a
    /// later [`connect`](super::connect) or
    /// [`UiwarpRequest::accept`](super::UiwarpRequest::accept) makes.
    pub fn set_liveness_timeout(&self, timeout: Option<Duration>) {
        let timeout = timeout.map(|t| t.min(MAX_LIVENESS_TIMEOUT));
        let mut st = self.lock();
        st.liveness_timeout = timeout;
        if let Some(link) = st.link.as_mut() {
            link.set_liveness_timeout(timeout);
            if let Ok(engine) = super::engine() {
                link.update_timer(engine);
            }
        }
    }

    /// The connection's liveness timeout (see [`Endpoint::set_liveness_timeout`]); without a
    /// connection, the one remembered for it.
    pub fn liveness_timeout(&self) -> Option<Duration> {
        let st = self.lock();
        match &st.link {
            Some(link) => link.liveness_timeout(),
            None => st.liveness_timeout,
        }
    }

    /// Why the connection ended, once it has.
    pub fn end_reason(&self) -> Option<String> {
        self.lock().ended.clone()
    }

    /// The connection's outcome so far. Once it is no longer `Connecting`, takes back the
    /// notice fd's nudge that announced it (unless a notice waits behind it), so that the fd
    /// is readable only while a notice waits.
    pub(crate) fn take_outcome(&self) -> Outcome {
        let st = self.lock();
        if !matches!(st.outcome, Outcome::Connecting) && st.notices.is_empty() {
            self.lower_notice();
        }
        st.outcome.clone()
    }

    /// The next notice, without blocking.
    pub fn poll_notice(&self) -> Option<Notice> {
        let mut st = self.lock();
        let n = st.notices.pop_front();
        if n.is_some() && st.notices.is_empty() {
            self.lower_notice();
        }
        n
    }

    /// How many readiness events of this QP's socket (bytes in, room to write) the engine
    /// thread has handled: a diagnostic of the hand-offs the application's own reads save.
    /// While an application thread spins on the QP's completion queue or sleeps on its
    /// channel, arrivals do not reach the engine and this stays still.
    pub fn engine_events(&self) -> u64 {
        self.engine_events.load(Ordering::Relaxed)
    }

    /// Bytes of inline payloads lent by their post (sent from the caller's memory), and how
    /// many of them were copied because TCP did not take them during the post: a diagnostic
    /// of the copies lending saves.
    pub fn lent_bytes(&self) -> (u64, u64) {
        (
            self.lent.load(Ordering::Relaxed),
            self.lent_copied.load(Ordering::Relaxed),
        )
    }

    /// Bytes framed for TCP and not yet written by it, as of the last post, write or read:
    /// while some wait, a lent payload would mostly be copied anyway.
    pub fn send_backlog(&self) -> usize {
        self.backlog.load(Ordering::Relaxed) as usize
    }

    /// Counts one readiness event handled on the engine thread.
    pub(crate) fn note_engine_event(&self) {
        self.engine_events.fetch_add(1, Ordering::Relaxed);
        ENGINE_EVENTS.fetch_add(1, Ordering::Relaxed);
    }

    /// Readiness on the engine thread: reads at most [`ENGINE_READ_BUDGET`] bytes, then has
    /// the engine come back after the other connections' events if more may wait.
    pub(crate) fn progress(&self, engine: &Engine) {
        let mut st = self.lock();
        self.drive_engine(&mut st, engine);
    }

    /// [`Endpoint::drive`] on the engine thread, with its read budget.
    fn drive_engine(&self, st: &mut EndpointState, engine: &Engine) {
        self.doorbell.clear();
        let left = self.on_link(st, |link, memory| {
            // Cleared before the read: an arrival after it sets it again.
            self.input_hint.store(false, Ordering::SeqCst);
            link.progress_within(memory, ENGINE_READ_BUDGET)
                .then_some(link.token)
        });
        if let Some(Some(token)) = left {
            engine.resume(token);
        }
        self.dispatch(st, engine);
    }

    /// Adds this QP to the completion channels of its CQs (see [`UiwarpChannel::watch`]).
    ///
    /// [`UiwarpChannel::watch`]: super::completion::UiwarpChannel::watch
    pub(crate) fn watch_socket(self: &Arc<Self>, st: &EndpointState) {
        if st.link.is_none() {
            return;
        }
        for cq in [&self.send_cq, &self.recv_cq] {
            if let Some(ch) = uiwarp_cq(cq).channel() {
                ch.watch(self);
            }
        }
    }

    /// Moves bytes both ways, then reports what happened.
    pub(crate) fn drive(&self, st: &mut EndpointState, engine: &Engine) {
        self.drive_reads(st, engine, false)
    }

    /// [`Endpoint::drive`]; `until_short`: stop reading at a read that did not fill the
    /// buffer instead of reading on until the socket would block.
    pub(crate) fn drive_reads(&self, st: &mut EndpointState, engine: &Engine, until_short: bool) {
        self.doorbell.clear();
        self.on_link(st, |link, memory| {
            // Cleared before the read: an arrival after it sets it again.
            self.input_hint.store(false, Ordering::SeqCst);
            link.progress(memory, until_short);
        });
        self.dispatch(st, engine);
    }

    /// Runs `f` on the link, if there is one, with the memory its connection may reach.
    fn on_link<R>(
        &self,
        st: &mut EndpointState,
        f: impl FnOnce(&mut Link, &QpMemory<'_>) -> R,
    ) -> Option<R> {
        let regions = self.regions.read().expect("uiwarp regions lock");
        let EndpointState { link, inline, .. } = st;
        let memory = QpMemory {
            regions: &regions,
            inline,
        };
        link.as_mut().map(|link| f(link, &memory))
    }

    /// Writes what the core has (after a post), then reports.
    pub(crate) fn flush(&self, st: &mut EndpointState, engine: &Engine) {
        self.doorbell.clear();
        self.on_link(st, |link, memory| link.flush(memory));
        self.dispatch(st, engine);
    }

    /// [`Endpoint::flush`] for a post that lent `lent` (see `RegisteredMemory::lend`): once
    /// TCP took what it would, frames the rest and copies the lent bytes still needed, so
    /// nothing refers to them when the post returns.
    pub(crate) fn flush_lent(
        &self,
        st: &mut EndpointState,
        engine: &Engine,
        lent: &[Arc<RegisteredMemory>],
    ) -> rdmasock_verbs::Result<()> {
        if lent.is_empty() {
            self.flush(st, engine);
            return Ok(());
        }
        self.doorbell.clear();
        let copied = self.on_link(st, |link, memory| {
            link.flush(memory);
            link.keep_lent(memory, lent)
        });
        if let Some(copied) = copied {
            let total: usize = lent.iter().map(|m| m.len()).sum();
            self.lent.fetch_add(total as u64, Ordering::Relaxed);
            self.lent_copied.fetch_add(copied as u64, Ordering::Relaxed);
        }
        let ended = match st.link.as_ref() {
            Some(link) => st.inline.end_lend(|key| link.conn.uses_local_key(key)),
            None => st.inline.end_lend(|_| false),
        };
        self.dispatch(st, engine);
        ended
    }

    /// Hands completions to the CQs and events to the waiters; closes a finished socket.
    pub(crate) fn dispatch(&self, st: &mut EndpointState, engine: &Engine) {
        let Some(link) = st.link.as_mut() else {
            return;
        };
        if !link.conn.completions.is_empty() {
            self.hand_over_completions(&mut link.conn);
        }
        self.backlog
            .store(link.queued_bytes() as u64, Ordering::Relaxed);
        if !st.inline.is_empty() {
            let consumed = st.posted_sends - link.conn.unsent_send_requests() as u64;
            st.inline.release_before(consumed);
        }
        let mut changed = false;
        while let Some(ev) = link.conn.poll_event() {
            match ev {
                Event::Established(e) => {
                    st.negotiated = Some(e.negotiated.clone());
                    st.outcome = Outcome::Established(e.private_data);
                    // Wakes a caller that polls the notice fd for the outcome (see
                    // `Endpoint::take_outcome`, which takes the nudge back).
                    if st.notices.is_empty() {
                        self.raise_notice();
                    }
                    changed = true;
                }
                Event::Rejected { private_data } => {
                    st.outcome = Outcome::Rejected(private_data);
                    changed = true;
                }
                Event::Terminated(t) => {
                    st.ended = Some(t.reason);
                }
                Event::Closed(reason) => {
                    let text = close_text(&reason, link.io_error.as_ref());
                    if matches!(st.outcome, Outcome::Connecting) {
                        st.outcome = Outcome::Failed(st.ended.clone().unwrap_or(text.clone()));
                    }
                    st.ended.get_or_insert(text);
                    if st.notices.is_empty() {
                        self.raise_notice();
                    }
                    let timed_out = link
                        .io_error
                        .as_ref()
                        .is_some_and(|e| e.kind() == std::io::ErrorKind::TimedOut);
                    st.notices.push_back(if timed_out {
                        Notice::Lost
                    } else {
                        Notice::Disconnected
                    });
                    changed = true;
                }
                Event::ConnectRequest(_) => {}
            }
        }
        if link.conn.should_close() && link.finished(Instant::now()) {
            let link = st.link.take().expect("link exists");
            st.qp_state = QpState::Error;
            st.inline.clear();
            link.close(engine);
        } else {
            link.update_timer(engine);
            link.sync_interest(engine);
        }
        if changed {
            self.changed.notify_all();
        }
    }

    /// Moves the connection's completions into the CQs, in order: with one CQ for both
    /// queues (the socket's), all under one hold of its lock.
    fn hand_over_completions(&self, conn: &mut crate::protocol::Connection) {
        let qpn = self.qpn;
        let mut completions = std::iter::from_fn(|| conn.poll_completion()).map(|c| {
            let mut wc = c.completion;
            wc.qp_num = qpn;
            (c.queue, wc, c.queue == WorkQueue::Receive && c.solicited)
        });
        if Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            uiwarp_cq(&self.send_cq).push_all(completions.map(|(_, wc, s)| (wc, s)));
            return;
        }
        for (queue, wc, solicited) in completions.by_ref() {
            match queue {
                WorkQueue::Send => uiwarp_cq(&self.send_cq).push(wc, false),
                WorkQueue::Receive => uiwarp_cq(&self.recv_cq).push(wc, solicited),
            }
        }
    }
}

fn st_attended(cq: &Arc<dyn CqOps>) -> bool {
    uiwarp_cq(cq).armed_with_channel()
}

/// The outcome of an endpoint that never connected.
pub(crate) fn endpoint_idle() -> Outcome {
    Outcome::Idle
}

/// Text for a close reason.
pub(crate) fn close_text(reason: &CloseReason, io: Option<&std::io::Error>) -> String {
    let base = match reason {
        CloseReason::PeerClosed => "the peer closed the TCP connection",
        CloseReason::PeerReset => "the TCP connection was reset",
        CloseReason::PeerClosedMidFrame => {
            "the peer closed the TCP connection in the middle of a frame"
        }
        CloseReason::HandshakeTimeout => "the MPA handshake timed out",
        CloseReason::LocalClose => "the connection was closed locally",
        CloseReason::Rejected => "the connection was rejected",
        CloseReason::Terminated => "a TERMINATE ended the connection",
    };
    match io {
        Some(e) if e.kind() == std::io::ErrorKind::TimedOut => format!(
            "the peer stopped acknowledging what was sent, and TCP gave up on it ({e}): \
             the peer's host or the network between went away"
        ),
        Some(e) => format!("{base} ({e})"),
        None => base.to_string(),
    }
}
