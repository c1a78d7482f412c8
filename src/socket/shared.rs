//! A connection shared by a socket and its clones, and the driver loop every call runs
//! ([`Shared::run`]): attempt the call, make progress, and wait as the connection's
//! [`WaitPolicy`](super::wait::WaitPolicy) says. Blocking calls sleep in poll(2) on the
//! completion channel and the connection manager's fd (one thread at a time; the others wait
//! on a condition variable and are woken whenever the sleeper makes progress).
#![forbid(unsafe_code)]

mod close;

use super::conn::Connection;
use super::readiness::ReadyFds;
use super::wait::{spin_until, CallWait, Step};
use crate::cm::CmEndpoint;
use crate::protocol::StreamError;
use crate::verbs::CompletionChannel;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::Duration;

/// Which timeout a blocking call obeys.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Direction {
    Read,
    Write,
    /// No timeout of the socket's (closing, flushing).
    Other(Option<Duration>),
}

/// The callers blocked on one connection, kept under its lock.
#[derive(Debug, Default)]
pub(crate) struct Sleepers {
    /// A blocking call is sleeping in poll(2) on the connection's fds.
    pub(crate) poller_active: bool,
    /// Blocked callers waiting on the condition variable for the one in poll(2).
    pub(crate) cond_waiters: u32,
}

/// A connection and what waiting on it needs outside its lock.
#[derive(Debug)]
pub(crate) struct Shared {
    conn: Mutex<Connection>,
    cond: Condvar,
    cq_channel: CompletionChannel,
    endpoint: Arc<dyn CmEndpoint>,
    /// Wakes a blocking caller sleeping in poll(2); made when a caller first sleeps there
    /// (a connection only ever driven by one thread's calls, or by mio, never needs it),
    /// unless the completion channel or the endpoint's event fd can be woken itself
    /// (`CompletionChannel::can_wake`, `CmEndpoint::can_wake`).
    waker: OnceLock<EventFd>,
    /// What a mio registration and the handed-out fd see.
    pub(crate) ready: ReadyFds,
    /// Callers blocked on `conn`'s lock right now.
    contenders: AtomicU32,
    /// Whether the connection keeps a bound on a wait for flushed receives (see
    /// [`flush_bound`](Self::flush_bound)), set and cleared under the lock.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    flush_bound_set: Arc<AtomicBool>,
}

impl Shared {
    pub(crate) fn new(conn: Connection) -> io::Result<Shared> {
        let cq_channel = conn.res.cq_channel.clone();
        let endpoint = conn.endpoint.clone();
        // Without a keepalive the transport's default stands: nothing to set.
        if let Some(t) = super::options::liveness_timeout(conn.opts.keepalive) {
            endpoint.set_liveness_timeout(Some(t))?;
        }
        let flush_bound_set = conn.flush_bound_flag();
        Ok(Shared {
            flush_bound_set,
            conn: Mutex::new(conn),
            cond: Condvar::new(),
            cq_channel,
            endpoint,
            waker: OnceLock::new(),
            ready: ReadyFds::new()?,
            contenders: AtomicU32::new(0),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Connection> {
        match self.conn.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                // Counted so that a caller busy-polling under the lock stops and sleeps
                // (releasing it) instead of holding it for its whole spin budget.
                self.contenders.fetch_add(1, Ordering::SeqCst);
                let g = self.conn.lock().unwrap_or_else(|p| p.into_inner());
                self.contenders.fetch_sub(1, Ordering::SeqCst);
                g
            }
        }
    }

    pub(crate) fn cq_channel(&self) -> &CompletionChannel {
        &self.cq_channel
    }

    pub(crate) fn endpoint(&self) -> &Arc<dyn CmEndpoint> {
        &self.endpoint
    }

    /// Whether a sleeper is woken through the endpoint's event fd ([`CmEndpoint::wake`]):
    /// where the completion channel cannot be woken itself and the endpoint can.
    fn endpoint_wakes(&self) -> bool {
        !self.cq_channel.can_wake() && self.endpoint.can_wake()
    }

    /// Drains the waker (it only carries edges).
    pub(crate) fn drain_waker(&self) {
        if let Some(w) = self.waker.get() {
            let _ = w.read();
        }
    }

    /// The waker, made now if it is not yet; `None` when it cannot be (out of fds): the
    /// sleeper then looks again every [`WAKERLESS_NAP`] for what another caller did.
    fn waker(&self) -> Option<&EventFd> {
        if let Some(w) = self.waker.get() {
            return Some(w);
        }
        let made = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC).ok()?;
        Some(self.waker.get_or_init(|| made))
    }

    /// Runs `attempt` until it does not return `WouldBlock`: attempt the call, make progress
    /// (post, drain completions), and when there is none, wait as the connection's
    /// [`WaitPolicy`](super::wait::WaitPolicy) says (spin, nap, or arm and sleep). On a
    /// nonblocking socket it returns `WouldBlock` instead of sleeping, with the queue armed
    /// so that an event follows.
    pub(crate) fn run<T>(
        &self,
        dir: Direction,
        mut attempt: impl FnMut(&mut Connection) -> Result<T, StreamError>,
    ) -> io::Result<T> {
        let mut g = self.lock();
        if let Some(e) = self.ready.take_enroll_error() {
            return Err(e);
        }
        if matches!(dir, Direction::Write) {
            self.ready.write_called();
        }
        // The attempt comes first: when the bytes or the room are already there (a stream
        // in flight), the completions wait for the progress after it, and the call makes one
        // pass over the queue instead of two. A call that goes through at once returns
        // before its wait is set up (it has waited for nothing: the policy learns nothing).
        match attempt(&mut g) {
            Err(StreamError::WouldBlock) => self.run_waiting(g, dir, &mut attempt),
            result => self.finish(g, dir, None, result),
        }
    }

    /// The rest of [`run`](Self::run) once its first attempt found nothing: progress, wait
    /// and attempt again. Out of line, so that a call that goes through at once runs
    /// none of its set-up.
    #[inline(never)]
    fn run_waiting<'a, T>(
        &'a self,
        mut g: MutexGuard<'a, Connection>,
        dir: Direction,
        attempt: &mut impl FnMut(&mut Connection) -> Result<T, StreamError>,
    ) -> io::Result<T> {
        let mut call = self.call_wait(&g, dir);
        // The channel's input watch of the last arming (see `arm_to_sleep`): dropped once
        // the events are taken after the sleep.
        let mut watch = None;
        let mut attempted = true;
        loop {
            let mut took = false;
            if !std::mem::take(&mut attempted) {
                took = call.take_woke() && g.take_events_after_wake()?;
                drop(watch.take());
                match attempt(&mut g) {
                    Err(StreamError::WouldBlock) => call.not_yet(),
                    result => return self.finish(g, dir, Some(&call), result),
                }
            }
            let progress = g.progress()?
                || took
                || match g.wait.next_step(&mut call) {
                    Step::Spin(end) => {
                        let found = spin_until(end, &self.contenders, || g.progress())?;
                        call.spun(found) || self.arm_to_sleep(&mut g, &mut watch)?
                    }
                    Step::Nap(nap) => {
                        let progressed;
                        (g, progressed) = self.nap(g, &mut call, nap)?;
                        if progressed {
                            self.wake_others(&g);
                        }
                        continue;
                    }
                    Step::ArmAndSleep if call.nonblocking() => g.arm()?,
                    Step::ArmAndSleep => self.arm_to_sleep(&mut g, &mut watch)?,
                };
            if progress {
                // What this thread took from the queue may be what a sleeping caller waits
                // for, and the channel event that would have woken it may be consumed.
                self.wake_others(&g);
                continue;
            }
            if call.nonblocking() {
                return Err(self.report_blocked(&g, dir));
            }
            let bound = call.sleep_bound()?;
            g = self.sleep(g, bound, watch.as_deref().map(|w| w.as_fd()))?;
        }
    }

    /// Arms the queue for a blocking call about to sleep, holding the channel's input watch
    /// first where it lends one ([`CompletionChannel::watch_input`], uiwarp's socket): the
    /// sleep polls that fd too and wakes on arrivals directly, and the provider does not
    /// raise the channel for them meanwhile. The caller drops the watch once it has taken
    /// the events after its sleep. Whether the arming found progress.
    fn arm_to_sleep<'a>(
        &'a self,
        g: &mut Connection,
        watch: &mut Option<InputWatch<'a>>,
    ) -> io::Result<bool> {
        if watch.is_none() {
            *watch = self.cq_channel.watch_input();
        }
        g.arm()
    }

    /// A new call's wait: the timeout of its direction, and whether it may block.
    #[inline(always)]
    fn call_wait(&self, g: &Connection, dir: Direction) -> CallWait {
        let timeout = match dir {
            Direction::Read => g.read_timeout,
            Direction::Write => g.write_timeout,
            Direction::Other(t) => t,
        };
        CallWait::new(
            timeout,
            g.nonblocking && !matches!(dir, Direction::Other(_)),
        )
    }

    /// The attempt went through (or failed): the policy learns how long the call waited
    /// (`call`: `None` when it went through at once, without a wait), progress is made as
    /// the direction allows, and the others are told. Inlined: this is the way out of every
    /// call that found its bytes or its room at once.
    #[inline(always)]
    fn finish<T>(
        &self,
        mut g: MutexGuard<'_, Connection>,
        dir: Direction,
        call: Option<&CallWait>,
        result: Result<T, StreamError>,
    ) -> io::Result<T> {
        if let Some(call) = call {
            g.wait.call_ended(call);
        }
        let pumped = match dir {
            Direction::Write => g.progress_after_write(),
            Direction::Read => g.progress_after_read(),
            Direction::Other(_) => g.progress(),
        };
        self.wake_others(&g);
        self.report(&g);
        if matches!(dir, Direction::Read) {
            self.ready.read_done(|| g.readiness().readable);
        }
        let value = result.map_err(|e| g.io_error(e))?;
        pumped?;
        Ok(value)
    }

    /// Takes the nap the policy planned: unless arming the queue finds progress already,
    /// sleeps `nap` on a timer outside the lock (a clone may go on meanwhile), then makes the
    /// progress that came during it; true when there was any. What came is for the attempt
    /// to find first (on uiwarp the armed channel's events read the socket).
    fn nap<'a>(
        &'a self,
        mut g: MutexGuard<'a, Connection>,
        call: &mut CallWait,
        nap: Duration,
    ) -> io::Result<(MutexGuard<'a, Connection>, bool)> {
        // A completion that came while arming (perhaps not the one awaited, perhaps one a
        // sleeping caller waits for) is looked at before the wait is planned again.
        if g.arm_for_nap()? {
            return Ok((g, true));
        }
        g.wait.nap_taken();
        drop(g);
        std::thread::sleep(nap);
        let mut g = self.lock();
        call.napped(nap);
        let took = g.take_events_after_wake()?;
        let progressed = g.progress()? || took;
        Ok((g, progressed))
    }

    /// Sleeps until a completion, a connection-manager event, the keepalive timer or `left`;
    /// also until `input` is readable, the fd of the channel's input watch (see
    /// [`arm_to_sleep`](Self::arm_to_sleep)) where there is one.
    fn sleep<'a>(
        &'a self,
        mut g: MutexGuard<'a, Connection>,
        left: Option<Duration>,
        input: Option<BorrowedFd<'_>>,
    ) -> io::Result<MutexGuard<'a, Connection>> {
        let keepalive = g.keepalive_tick();
        if g.engine.has_ops() {
            return Ok(g);
        }
        let wait = match (left, keepalive) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        g.wait.channel_sleep();
        if g.sleepers.poller_active {
            g.sleepers.cond_waiters += 1;
            let mut g = match wait {
                Some(w) => {
                    self.cond
                        .wait_timeout(g, w)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
                None => self.cond.wait(g).unwrap_or_else(|p| p.into_inner()),
            };
            g.sleepers.cond_waiters -= 1;
            return Ok(g);
        }
        // Made under the lock, before the flag: whoever sees the flag finds the waker. A
        // channel that can be woken itself (uiwarp's) needs none, nor does an endpoint whose
        // event fd can be (the kernel manager's): the sleeper polls them anyway.
        let channel_wakes = self.cq_channel.can_wake();
        let endpoint_wakes = self.endpoint_wakes();
        let waker = if channel_wakes || endpoint_wakes {
            None
        } else {
            self.waker()
        };
        let wait = match waker {
            None if !channel_wakes && !endpoint_wakes => {
                Some(wait.map_or(WAKERLESS_NAP, |w| w.min(WAKERLESS_NAP)))
            }
            _ => wait,
        };
        g.sleepers.poller_active = true;
        drop(g);
        let result = poll_fds(&self.cq_channel, self.endpoint.as_ref(), waker, input, wait);
        let mut g = self.lock();
        g.sleepers.poller_active = false;
        if matches!(result, Ok(true)) {
            self.drain_waker();
        }
        // No wake can come now that the flag is down (they are raised under the lock).
        if channel_wakes {
            self.cq_channel.take_wake();
        }
        if endpoint_wakes {
            self.endpoint.take_wake();
        }
        if g.sleepers.cond_waiters > 0 {
            self.cond.notify_all();
        }
        result?;
        Ok(g)
    }

    /// Wakes other blocked callers after a state change made outside `run`.
    pub(crate) fn notify(&self) {
        let g = self.lock();
        self.wake_others(&g);
        self.report(&g);
    }

    /// Tells the mio registration which waited-for directions can go on now: the one place
    /// where a call's progress reaches readiness (with [`report_blocked`](Self::report_blocked)).
    pub(super) fn report(&self, g: &Connection) {
        // A flag is set under the connection's lock (a `WouldBlock`) or by a registration,
        // which reports under the lock after setting it: a flag missed here is reported then.
        if !self.ready.waiting() {
            return;
        }
        let r = g.readiness();
        // A flush waits for every send; a look for a submitted buffer, for its own.
        let flushed = r.error || g.engine.all_sends_done() || g.submission_done();
        self.ready.update(r.readable, r.writable, flushed);
    }

    /// A nonblocking call must wait: reports what is possible, marks its direction as
    /// waited for (an event follows when it can go on), and returns the `WouldBlock`.
    fn report_blocked(&self, g: &Connection, dir: Direction) -> io::Error {
        self.report(g);
        match dir {
            Direction::Read => self.ready.read_blocked(),
            Direction::Write => self.ready.write_blocked(),
            Direction::Other(_) => {}
        }
        io::ErrorKind::WouldBlock.into()
    }

    /// One nonblocking look at whether a read (`write` false) or a write would go on, for
    /// the async adapter's `readable`/`writable`: makes the progress there is, and when the
    /// direction must wait, arms the completion queue (polling once more after, as a
    /// nonblocking call does) and marks the direction as waited for, so that another
    /// handle's progress raises its eventfd; `false` then.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn try_ready(&self, write: bool) -> io::Result<bool> {
        let mut g = self.lock();
        if let Some(e) = self.ready.take_enroll_error() {
            return Err(e);
        }
        loop {
            let r = g.readiness();
            if (write && r.writable) || (!write && r.readable) {
                self.report(&g);
                return Ok(true);
            }
            if g.progress()? || g.arm()? {
                self.wake_others(&g);
                continue;
            }
            self.report(&g);
            if write {
                self.ready.write_blocked();
            } else {
                self.ready.read_blocked();
            }
            return Ok(false);
        }
    }

    /// One nonblocking look at a flush, for the async adapter: `true` once every written byte
    /// was placed in the peer's memory (or the connection failed: the next read or write
    /// says so, as after a blocking flush). Otherwise the queue is armed, the write fd goes
    /// quiet, and it turns writable when the sends have completed; `false`.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn try_flush(&self) -> io::Result<bool> {
        let mut g = self.lock();
        loop {
            match g.engine.flush() {
                Ok(()) => {
                    drop(g);
                    self.notify();
                    return Ok(true);
                }
                Err(StreamError::WouldBlock) => {}
                Err(e) => return Err(g.io_error(e)),
            }
            if g.progress()? || g.arm()? {
                continue;
            }
            self.ready.flush_blocked();
            self.report(&g);
            self.wake_others(&g);
            return Ok(false);
        }
    }

    /// For the async adapter, once the fd of the channel's input watch (uiwarp's socket) was
    /// readable: takes the channel's events, which reads the socket until a read that does
    /// not fill the buffer (`take_events_after_edge`), and makes the progress that brought. Whether there was any (events or completions): the caller's attempt may
    /// go on then.
    /// `to_end`: the input's end is known to be there (the stream's readiness says
    /// read-closed): read until the socket would block or ends, not only until a short read.
    /// `reader`: the caller is the read task, which attempts its read next (the progress
    /// raises no read event for it).
    #[cfg(feature = "tokio")]
    pub(crate) fn take_input(&self, to_end: bool, reader: bool) -> io::Result<bool> {
        let mut g = self.lock();
        if reader {
            self.ready.reader_looks_again();
        }
        let took = match to_end {
            true => g.take_events_after_wake()?,
            false => g.take_events_after_edge()?,
        };
        let progress = g.progress()?;
        if progress {
            self.wake_others(&g);
            self.report(&g);
        }
        Ok(took || progress)
    }

    /// Whether a tokio stream holds the channel's input watch and reads the input on its
    /// edges (see `Connection::take_events_after_edge`).
    #[cfg(feature = "tokio")]
    pub(crate) fn set_input_edges_watched(&self, watched: bool) {
        self.lock().completions.input_edges_watched = watched;
    }

    /// The readiness hub saw an event on the completion channel or the rdma_cm fd: drain,
    /// re-arm and drain again, then report.
    pub(crate) fn progress_for_readiness(&self) {
        let mut g = self.lock();
        match g.arm() {
            Ok(_) => self.report(&g),
            // The next call fails with it: wake both directions to make it.
            Err(_) => self.ready.update(true, true, true),
        }
        self.wake_others(&g);
    }

    /// The readiness hub's keepalive timer for a registered socket: sends the keepalive if it
    /// is due (or fails a stream whose device did not flush in time, see
    /// `Connection::keepalive_tick`), reports what that changed, and returns how long until
    /// the next (`None`: off).
    pub(crate) fn keepalive_for_readiness(&self) -> Option<Duration> {
        let mut g = self.lock();
        let failed = g.engine.error().is_some();
        let next = g.keepalive_tick();
        if g.engine.has_ops() || (!failed && g.engine.error().is_some()) {
            // An error here fails the connection, which the report below tells the reader.
            let _ = g.progress();
            self.report(&g);
            self.wake_others(&g);
        }
        next
    }

    /// The bound on a wait for flushed receives after DISCONNECTED, for a waiter that no
    /// readiness thread ticks (a tokio stream without keepalive): how long until it, `None`
    /// when nothing waits; at the bound the stream fails, and every waiter is told. Without
    /// a bound (the flag, set under the lock) it returns at once, without the lock: a task
    /// calls this each time it is about to wait.
    #[cfg(feature = "tokio")]
    pub(crate) fn flush_bound(&self) -> Option<Duration> {
        if !self.flush_bound_set.load(Ordering::Acquire) {
            return None;
        }
        let mut g = self.lock();
        let next = g.flush_tick();
        if next == Some(Duration::ZERO) {
            self.report(&g);
            self.wake_others(&g);
        }
        next
    }

    /// Wakes the callers waiting on the condition variable and the one sleeping in poll(2).
    pub(super) fn wake_others(&self, g: &Connection) {
        // A notify is a futex system call even with no one waiting: skip it then (waiters
        // register under the lock, so none can be missed).
        if g.sleepers.cond_waiters > 0 {
            self.cond.notify_all();
        }
        if g.sleepers.poller_active {
            if let Some(w) = self.waker.get() {
                let _ = w.write(1);
            } else if self.endpoint_wakes() {
                // Taken back by the sleeper once awake (see `sleep`), as the channel's.
                self.endpoint.wake();
            } else {
                // Taken back by the sleeper once awake (see `sleep`).
                self.cq_channel.wake();
            }
        }
    }
}

/// How long a caller sleeping in poll(2) without a waker (none could be made) sleeps at a
/// time: another caller's progress reaches it within this.
const WAKERLESS_NAP: Duration = Duration::from_millis(5);

/// A sleeper's watch on the fd whose input raises the channel's events (see
/// [`CompletionChannel::watch_input`]).
type InputWatch<'a> = Box<dyn AsFd + Send + 'a>;

/// Sleeps in poll(2) on the three fds (two without a waker), and on `input` too where the
/// channel lends it; true when the waker fired.
fn poll_fds(
    channel: &CompletionChannel,
    endpoint: &dyn CmEndpoint,
    waker: Option<&EventFd>,
    input: Option<BorrowedFd<'_>>,
    wait: Option<Duration>,
) -> io::Result<bool> {
    if let Some(input) = input {
        return poll_with_input(channel, endpoint, waker, input, wait);
    }
    let timeout = poll_timeout(wait);
    let mut fds = [
        PollFd::new(channel.as_fd(), PollFlags::POLLIN),
        PollFd::new(endpoint.event_fd(), PollFlags::POLLIN),
    ];
    let mut with_waker;
    let fds: &mut [PollFd<'_>] = match waker {
        Some(w) => {
            let [a, b] = fds;
            with_waker = [a, b, PollFd::new(w.as_fd(), PollFlags::POLLIN)];
            &mut with_waker
        }
        None => &mut fds,
    };
    match nix::poll::poll(fds, timeout) {
        Ok(_) => Ok(fds.get(2).is_some_and(|w| w.any().unwrap_or(true))),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(io::Error::other(format!(
            "poll on the connection's completion channel and rdma_cm fd: {e}"
        ))),
    }
}

/// poll(2)'s timeout for `wait` (`None`: none).
fn poll_timeout(wait: Option<Duration>) -> PollTimeout {
    match wait {
        None => PollTimeout::NONE,
        Some(w) => {
            // Round up so that a sub-millisecond remainder still sleeps.
            let ms = w.as_millis().saturating_add(1).min(i32::MAX as u128) as i32;
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
        }
    }
}

/// [`poll_fds`] with the channel's input fd as well (the waker, if any, comes third).
fn poll_with_input(
    channel: &CompletionChannel,
    endpoint: &dyn CmEndpoint,
    waker: Option<&EventFd>,
    input: BorrowedFd<'_>,
    wait: Option<Duration>,
) -> io::Result<bool> {
    let mut fds = [
        PollFd::new(channel.as_fd(), PollFlags::POLLIN),
        PollFd::new(endpoint.event_fd(), PollFlags::POLLIN),
        PollFd::new(input, PollFlags::POLLIN),
        PollFd::new(input, PollFlags::POLLIN),
    ];
    let n = match waker {
        Some(w) => {
            fds[2] = PollFd::new(w.as_fd(), PollFlags::POLLIN);
            4
        }
        None => 3,
    };
    let fds = &mut fds[..n];
    match nix::poll::poll(fds, poll_timeout(wait)) {
        Ok(_) => Ok(waker.is_some() && fds[2].any().unwrap_or(true)),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(io::Error::other(format!(
            "poll on the connection's completion channel, rdma_cm fd and socket: {e}"
        ))),
    }
}
