//! A connection shared by a socket and its clones, and the one place that waits: blocking
//! calls sleep in poll(2) on the completion channel and the connection manager's fd (one
//! thread at a time; the others wait on a condition variable and are woken whenever the
//! sleeper makes progress).
#![forbid(unsafe_code)]

use super::conn::Connection;
use super::readiness::ReadyFds;
use crate::cm::CmEndpoint;
use crate::stream::StreamError;
use crate::verbs::CompletionChannel;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::io;
use std::net::Shutdown;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

/// Which timeout a blocking call obeys.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Direction {
    Read,
    Write,
    /// No timeout of the socket's (closing, flushing).
    Other(Option<Duration>),
}

/// A connection and what waiting on it needs outside its lock.
#[derive(Debug)]
pub(crate) struct Shared {
    conn: Mutex<Connection>,
    cond: Condvar,
    cq_channel: CompletionChannel,
    endpoint: Arc<dyn CmEndpoint>,
    /// Wakes a blocking caller sleeping in poll(2).
    pub(crate) waker: EventFd,
    /// What a mio registration sees.
    pub(crate) ready: ReadyFds,
    /// Callers blocked on `conn`'s lock right now.
    contenders: AtomicU32,
}

impl Shared {
    pub(crate) fn new(conn: Connection) -> io::Result<Shared> {
        let cq_channel = conn.res.cq_channel.clone();
        let endpoint = conn.endpoint.clone();
        // Without a keepalive the transport's default stands: nothing to set.
        if let Some(t) = super::options::liveness_timeout(conn.opts.keepalive) {
            endpoint.set_liveness_timeout(Some(t))?;
        }
        let waker = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(io::Error::from)?;
        Ok(Shared {
            conn: Mutex::new(conn),
            cond: Condvar::new(),
            cq_channel,
            endpoint,
            waker,
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

    /// Drains the waker (it only carries edges).
    pub(crate) fn drain_waker(&self) {
        let _ = self.waker.read();
    }

    /// Runs `attempt` until it does not return `WouldBlock`, waiting for progress in between
    /// (or returning `WouldBlock` on a nonblocking socket, with the queue armed so that an
    /// event follows).
    pub(crate) fn run<T>(
        &self,
        dir: Direction,
        mut attempt: impl FnMut(&mut Connection) -> Result<T, StreamError>,
    ) -> io::Result<T> {
        let mut g = self.lock();
        let timeout = match dir {
            Direction::Read => g.read_timeout,
            Direction::Write => g.write_timeout,
            Direction::Other(t) => t,
        };
        let deadline = timeout.map(|t| Instant::now() + t);
        let nonblocking = g.nonblocking && !matches!(dir, Direction::Other(_));
        // When this call first found it must wait, and until when it may busy-poll.
        let mut waiting: Option<(Instant, Instant)> = None;
        // Set after a sleep (see `Connection::take_events_after_wake`).
        let mut woke = false;
        // The nap just taken, until the attempt after it has told whether it came too late.
        let mut napped = None;
        // This call's wait is counted in the connection's `WaitStats`.
        let mut counted = false;
        // When the spin found the progress the attempt then took: the wait's end, without a
        // clock read after the bytes came (one costs ~100 ns under QEMU).
        let mut spun_to = None;
        loop {
            let took = woke && g.take_events_after_wake()?;
            woke = false;
            // The attempt comes first: when the bytes or the room are already there (a
            // stream in flight), the completions wait for the progress after it, and the
            // call makes one pass over the queue instead of two.
            match attempt(&mut g) {
                Err(StreamError::WouldBlock) => {
                    napped = None;
                    spun_to = None;
                }
                result => {
                    match (waiting, napped) {
                        // Ready at the first look after the nap: it came during the nap, at
                        // a time unknown, so the time waited says only that the nap was
                        // too long.
                        (Some(_), Some(nap)) => {
                            g.wait_stats.overslept_naps += 1;
                            g.record_overslept(nap)
                        }
                        (Some((start, _)), None) => {
                            g.record_wait(start, spun_to.unwrap_or_else(Instant::now))
                        }
                        _ => {}
                    }
                    let pumped = match dir {
                        Direction::Write => g.progress_after_write(),
                        Direction::Read => g.progress_after_read(),
                        Direction::Other(_) => g.progress(),
                    };
                    self.wake_others(&g);
                    self.report(&g);
                    let value = result.map_err(|e| g.io_error(e))?;
                    pumped?;
                    return Ok(value);
                }
            }
            let mut progress = g.progress()? || took;
            if !nonblocking && !progress {
                let spin_end = match waiting {
                    Some((_, end)) => end,
                    None => {
                        let start = Instant::now();
                        let plan = g.wait_plan();
                        if !counted {
                            counted = true;
                            g.wait_stats.waits += 1;
                        }
                        let nap = deadline.map_or(plan.nap, |d| {
                            plan.nap.min(d.saturating_duration_since(start))
                        });
                        if nap.is_zero() {
                            let end = start + plan.spin;
                            waiting = Some((start, end));
                            end
                        } else {
                            if g.arm_for_nap()? {
                                // A completion came while arming (perhaps not the one
                                // awaited, perhaps one a sleeping caller waits for): look
                                // again before planning the wait.
                                self.wake_others(&g);
                                continue;
                            }
                            g.wait_stats.naps += 1;
                            g = self.nap(g, nap);
                            napped = Some(nap);
                            waiting = Some((start, Instant::now() + plan.spin));
                            // What came during the nap is for the attempt to find first
                            // (on uiwarp the armed channel's events read the socket).
                            let took = g.take_events_after_wake()?;
                            if g.progress()? || took {
                                self.wake_others(&g);
                            }
                            continue;
                        }
                    }
                };
                spun_to = spin_until(&mut g, spin_end, &self.contenders)?;
                progress = spun_to.is_some();
            }
            if !progress {
                progress = g.arm()?;
            }
            if progress {
                // What this thread took from the queue may be what a sleeping caller waits
                // for, and the channel event that would have woken it may be consumed.
                self.wake_others(&g);
                continue;
            }
            if nonblocking {
                self.report(&g);
                match dir {
                    Direction::Read => self.ready.read_blocked(),
                    Direction::Write => self.ready.write_blocked(),
                    Direction::Other(_) => {}
                }
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let left = match deadline {
                None => None,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(io::Error::new(
                            io::ErrorKind::WouldBlock,
                            format!(
                                "timed out after {:?} waiting on the RDMA connection",
                                timeout.unwrap_or_default()
                            ),
                        ));
                    }
                    Some(left)
                }
            };
            g = self.sleep(g, left)?;
            woke = true;
        }
    }

    /// Sleeps `nap` on a timer, outside the lock (a clone may go on meanwhile).
    fn nap<'a>(
        &'a self,
        g: MutexGuard<'a, Connection>,
        nap: Duration,
    ) -> MutexGuard<'a, Connection> {
        drop(g);
        std::thread::sleep(nap);
        self.lock()
    }

    /// Sleeps until a completion, a connection-manager event, the keepalive timer or `left`.
    fn sleep<'a>(
        &'a self,
        mut g: MutexGuard<'a, Connection>,
        left: Option<Duration>,
    ) -> io::Result<MutexGuard<'a, Connection>> {
        let keepalive = g.keepalive_tick();
        if g.engine.has_ops() {
            return Ok(g);
        }
        let wait = match (left, keepalive) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        g.wait_stats.channel_sleeps += 1;
        if g.poller_active {
            g.cond_waiters += 1;
            let mut g = match wait {
                Some(w) => {
                    self.cond
                        .wait_timeout(g, w)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
                None => self.cond.wait(g).unwrap_or_else(|p| p.into_inner()),
            };
            g.cond_waiters -= 1;
            return Ok(g);
        }
        g.poller_active = true;
        drop(g);
        let result = poll_fds(&self.cq_channel, self.endpoint.as_ref(), &self.waker, wait);
        let mut g = self.lock();
        g.poller_active = false;
        if matches!(result, Ok(true)) {
            self.drain_waker();
        }
        if g.cond_waiters > 0 {
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

    /// Tells the mio registration which waited-for directions can go on now.
    fn report(&self, g: &Connection) {
        // A flag is set under the connection's lock (a `WouldBlock`) or by a registration,
        // which reports under the lock after setting it: a flag missed here is reported then.
        if !self.ready.waiting() {
            return;
        }
        let r = g.readiness();
        self.ready.update(r.readable, r.writable);
    }

    /// The readiness hub saw an event on the completion channel or the rdma_cm fd: drain,
    /// re-arm and drain again, then report.
    pub(crate) fn progress_for_readiness(&self) {
        let mut g = self.lock();
        match g.arm() {
            Ok(_) => self.report(&g),
            // The next call fails with it: wake both directions to make it.
            Err(_) => self.ready.update(true, true),
        }
        self.wake_others(&g);
    }

    /// The readiness hub's keepalive timer for a registered socket: sends the keepalive if it
    /// is due, reports what that changed, and returns how long until the next (`None`: off).
    pub(crate) fn keepalive_for_readiness(&self) -> Option<Duration> {
        let mut g = self.lock();
        let next = g.keepalive_tick();
        if g.engine.has_ops() {
            // An error here fails the connection, which the report below tells the reader.
            let _ = g.progress();
            self.report(&g);
            self.wake_others(&g);
        }
        next
    }

    /// Wakes the callers waiting on the condition variable and the one sleeping in poll(2).
    fn wake_others(&self, g: &Connection) {
        // A notify is a futex system call even with no one waiting: skip it then (waiters
        // register under the lock, so none can be missed).
        if g.cond_waiters > 0 {
            self.cond.notify_all();
        }
        if g.poller_active {
            let _ = self.waker.write(1);
        }
    }
}

/// A spin yields the CPU once in this many polls of the completion queue.
const YIELD_EVERY: u32 = 128;

/// Busy-polls the completion queue until `end`; when something happened, the time read just
/// before the poll that found it (`None`: nothing did). One poll in
/// [`YIELD_EVERY`] also yields the CPU, so that a runnable thread on the same CPU (the
/// kernel's softirq thread finishing a soft device's work, the peer of a same-host
/// connection) waits at most that many polls for it. The polls do not `pause`
/// (`std::hint::spin_loop`): each one reads the clock and the queue anyway, and under
/// QEMU's TCG a `pause` leaves the CPU loop (~260 ns), and neither a `pause` nor a
/// `sched_yield` between polls helps: a reply that arrives during one waits for its end.
/// The spin also ends, without progress, as soon as another caller waits for the
/// connection's lock (`contenders`): a clone writing while this one reads must not wait out
/// the whole budget; this caller then sleeps in poll(2), which releases the lock.
fn spin_until(
    g: &mut Connection,
    end: Instant,
    contenders: &AtomicU32,
) -> io::Result<Option<Instant>> {
    let mut spins = 0u32;
    loop {
        let now = Instant::now();
        if now >= end {
            return Ok(None);
        }
        if g.progress()? {
            return Ok(Some(now));
        }
        if contenders.load(Ordering::Relaxed) > 0 {
            return Ok(None);
        }
        spins = spins.wrapping_add(1);
        if spins % YIELD_EVERY == 0 {
            std::thread::yield_now();
        }
    }
}

/// Sleeps in poll(2) on the three fds; true when the waker fired.
fn poll_fds(
    channel: &CompletionChannel,
    endpoint: &dyn CmEndpoint,
    waker: &EventFd,
    wait: Option<Duration>,
) -> io::Result<bool> {
    let timeout = match wait {
        None => PollTimeout::NONE,
        Some(w) => {
            // Round up so that a sub-millisecond remainder still sleeps.
            let ms = w.as_millis().saturating_add(1).min(i32::MAX as u128) as i32;
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
        }
    };
    let mut fds = [
        PollFd::new(channel.as_fd(), PollFlags::POLLIN),
        PollFd::new(endpoint.event_fd(), PollFlags::POLLIN),
        PollFd::new(waker.as_fd(), PollFlags::POLLIN),
    ];
    match nix::poll::poll(&mut fds, timeout) {
        Ok(_) => Ok(fds[2].any().unwrap_or(true)),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(io::Error::other(format!(
            "poll on the connection's completion channel and rdma_cm fd: {e}"
        ))),
    }
}

impl Drop for Shared {
    /// The last handle is gone: graceful close (end-of-stream after the queued data, the
    /// disconnect handshake), bounded by the close timeout.
    fn drop(&mut self) {
        let timeout = {
            let mut g = self.lock();
            g.engine.shutdown(Shutdown::Both);
            g.nonblocking = false;
            g.opts.close_timeout
        };
        let _ = self.run(Direction::Other(Some(timeout)), |c| {
            if c.closed() {
                Ok(())
            } else {
                Err(StreamError::WouldBlock)
            }
        });
        let g = self.lock();
        if !g.closed() {
            // Time ran out: tear down without the handshake.
            let _ = g.endpoint.disconnect(&g.res.qp);
        }
        drop(g);
        self.forget_ready();
    }
}
