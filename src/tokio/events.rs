//! The fds a stream hands tokio's reactor, and the loop that drives the stream's progress on
//! the task that polls it ([`Readiness::drive`]).
//!
//! Each direction watches fds of its own: the connection's completion channel and its
//! connection manager's event fd (duplicates, so that the reader's and the writer's
//! registrations each get their edge; one fd where the two are the same, as on the userspace
//! provider), and the socket's readiness eventfd for that direction, which another handle's
//! progress raises when it took the event this direction waited for (a reader that fed the
//! completion a writer waits on). No thread stands between the device and the task: the
//! channel's edge wakes the task, and its next poll reaps the completions, feeds the engine
//! and posts.
//!
//! Where the channel lends its input watch (the userspace provider: the queue pair's TCP
//! socket, see [`CompletionChannel::watch_input`](crate::verbs::CompletionChannel::watch_input)),
//! each direction also watches a duplicate of that socket, and the stream holds the watch for
//! its life: the provider's engine thread leaves the socket's input to the stream, an arrival
//! wakes the task directly, and the task's next attempt reads the bytes (every attempt that
//! would block takes the channel's events first, which reads the socket until it would
//! block). Nothing waits for the task meanwhile: while no task reads, the engine takes the
//! socket back within a few of its backstops (a few milliseconds) and moves the bytes as
//! before, raising the channel.
#![forbid(unsafe_code)]

use crate::socket::{RdmaSocket, Shared};
use ::tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};
use ::tokio::io::Interest;
use ::tokio::time::Sleep;
use std::fmt;
use std::future::Future;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

/// Which way a call moves bytes: which of a stream's watches it waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    Read,
    Write,
}

/// One direction's fds, registered with the reactor.
#[derive(Debug)]
struct Watch {
    /// The connection's completion channel (a duplicate of its fd).
    channel: AsyncFd<OwnedFd>,
    /// The connection manager's event fd (a duplicate): a disconnect, a lost connection.
    /// `None` where it is the channel's own fd (the userspace provider's channel is its
    /// queue pair's notice fd too).
    notices: Option<AsyncFd<OwnedFd>>,
    /// The socket's readiness eventfd for this direction (readable for reads, writable for
    /// writes).
    raised: AsyncFd<OwnedFd>,
    /// The fd whose input raises the channel's events (a duplicate of the fd of the
    /// channel's input watch), where the channel lends one.
    input: Option<AsyncFd<OwnedFd>>,
    /// The input reached its end (the peer's FIN or an error): the reactor reports it ready
    /// for good (closed states are final), and no arrival can follow, so it is watched no
    /// more (the channel reports what the end does to the connection).
    input_ended: AtomicBool,
    /// The timer of a wait for flushed receives after DISCONNECTED (see
    /// [`Shared::flush_bound`]), while one runs.
    flush_timer: Mutex<Option<Pin<Box<Sleep>>>>,
    /// `flush_timer` holds a timer (set under its lock): a wait without a bound and without
    /// a timer to drop takes no lock.
    flush_timer_set: AtomicBool,
    /// The last [`Readiness::drive`] of a read returned `Pending`: the next one reads the
    /// input first if its edge came (see there).
    waited: AtomicBool,
}

/// Where [`Watch::poll`] puts the input's guard.
const INPUT: usize = 3;

/// The ready guards of one look at a [`Watch`]: each is cleared after the next attempt (one
/// that came after the edge it reported) found nothing, never before, so that no edge is
/// lost.
type Guards<'a> = [Option<AsyncFdReadyGuard<'a, OwnedFd>>; 4];

impl Watch {
    fn register(
        socket: &RdmaSocket,
        raised: BorrowedFd<'_>,
        input: Option<BorrowedFd<'_>>,
        way: Way,
    ) -> io::Result<Watch> {
        let interest = match way {
            Way::Read => Interest::READABLE,
            Way::Write => Interest::WRITABLE,
        };
        let shared = &socket.shared;
        let channel = shared.cq_channel().as_fd();
        let notices = shared.endpoint().event_fd();
        Ok(Watch {
            channel: register(channel, Interest::READABLE)?,
            notices: if notices.as_raw_fd() == channel.as_raw_fd() {
                None
            } else {
                Some(register(notices, Interest::READABLE)?)
            },
            raised: register(raised, interest)?,
            input: input
                .map(|fd| register(fd, Interest::READABLE))
                .transpose()?,
            input_ended: AtomicBool::new(false),
            flush_timer: Mutex::new(None),
            flush_timer_set: AtomicBool::new(false),
            waited: AtomicBool::new(false),
        })
    }

    /// Polls the fds: the guards of those that are ready; the others will wake `cx`.
    fn poll<'a>(&'a self, cx: &mut Context<'_>, way: Way) -> io::Result<Guards<'a>> {
        let ready = |p: Poll<io::Result<AsyncFdReadyGuard<'a, OwnedFd>>>| match p {
            Poll::Ready(Ok(guard)) => Ok(Some(guard)),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Ok(None),
        };
        let readable = |fd: Option<&'a AsyncFd<OwnedFd>>, cx: &mut Context<'_>| match fd {
            Some(fd) => ready(fd.poll_read_ready(cx)),
            None => Ok(None),
        };
        let input = match self.input_ended.load(Ordering::Relaxed) {
            true => None,
            false => self.input.as_ref(),
        };
        let raised = match way {
            Way::Read => self.raised.poll_read_ready(cx),
            Way::Write => self.raised.poll_write_ready(cx),
        };
        Ok([
            ready(self.channel.poll_read_ready(cx))?,
            readable(self.notices.as_ref(), cx)?,
            ready(raised)?,
            readable(input, cx)?,
        ])
    }
}

/// The channel's input watch, held for the stream (see the [module](self)).
type InputWatch = Box<dyn AsFd + Send>;

/// A socket registered with tokio's reactor: each direction's [`Watch`], and the channel's
/// input watch while the stream's tasks read the socket themselves.
pub(crate) struct Readiness {
    read: Watch,
    write: Watch,
    /// Held from the registration until [`lend_input`](Self::lend_input) or the drop.
    input: Mutex<Option<InputWatch>>,
    /// [`lend_input`](Self::lend_input) was called (a plain load for the common case).
    input_lent: AtomicBool,
    /// The connection, to take the watched input on the task (see [`drive`](Self::drive)).
    shared: Arc<Shared>,
}

impl fmt::Debug for Readiness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Readiness")
            .field("read", &self.read)
            .field("write", &self.write)
            .field("input_lent", &self.input_lent)
            .finish()
    }
}

impl Drop for Readiness {
    fn drop(&mut self) {
        // The socket may go on without the stream (`into_std`): arming reads the input again.
        self.shared.set_input_edges_watched(false);
    }
}

impl Readiness {
    /// Registers `socket` (nonblocking from now on) with the current runtime's reactor, and
    /// holds the channel's input watch where it lends one, unless the socket's readiness
    /// thread serves its fd to others already (a handed-out fd or a mio registration, which
    /// wait for the channel's events alone).
    pub(crate) fn register(socket: &RdmaSocket) -> io::Result<Readiness> {
        socket.set_nonblocking(true)?;
        let ready = &socket.shared.ready;
        let input = if ready.watched_by_others() {
            None
        } else {
            socket.shared.cq_channel().watch_input()
        };
        let input_fd = input.as_ref().map(|w| w.as_fd());
        // The stream reads the input on its edges from now on; arming reads none.
        socket.shared.set_input_edges_watched(input.is_some());
        Ok(Readiness {
            read: Watch::register(socket, ready.read_fd()?, input_fd, Way::Read)?,
            write: Watch::register(socket, ready.write_fd()?, input_fd, Way::Write)?,
            input: Mutex::new(input),
            input_lent: AtomicBool::new(false),
            shared: Arc::clone(&socket.shared),
        })
    }

    /// Gives the channel's input watch back to the provider, for good: the socket's fd is
    /// handed out, and whoever waits on it is woken by the channel's events alone, which the
    /// provider raises for arrivals only while nobody watches the input. The stream's tasks
    /// still wake on arrivals (its duplicates stay registered).
    pub(crate) fn lend_input(&self) {
        if self.input_lent.load(Ordering::Relaxed) || self.input_lent.swap(true, Ordering::SeqCst) {
            return;
        }
        self.shared.set_input_edges_watched(false);
        drop(
            self.input
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
    }

    /// Runs `attempt` (a nonblocking call on the socket: it makes the progress there is and
    /// arms the completion queue before it returns `WouldBlock`; on the userspace provider,
    /// where the stream watches the input, arming takes only the events already raised and
    /// reads no input) until it does not return `WouldBlock`; `Pending` when it does and
    /// none of `way`'s fds has had an edge since the attempt armed the queue (one wakes the
    /// task then).
    ///
    /// The attempt comes before the look at the fds, so a stream in full flow makes no look
    /// at all, except in a read after a `Pending`, which first takes the input if its edge
    /// came (the bytes that woke the task are still in the socket), and otherwise looks at
    /// the other fds and the flush bound and stays `Pending` without an attempt when none
    /// had its edge (nothing that could let the read go on came); bytes that came before
    /// the stream was registered show as the input's edge (registering reports what is
    /// there). A ready guard is cleared only after an attempt that came after its edge found
    /// nothing, except the input's: it is cleared at once, and the input read until a read
    /// that does not fill the buffer before the next attempt. Once it reports the input's
    /// end, the input is read to its end and not watched again.
    pub(crate) fn drive<T>(
        &self,
        cx: &mut Context<'_>,
        way: Way,
        mut attempt: impl FnMut() -> io::Result<T>,
    ) -> Poll<io::Result<T>> {
        let watch = match way {
            Way::Read => &self.read,
            Way::Write => &self.write,
        };
        let mut seen: Guards<'_> = [None, None, None, None];
        if way == Way::Read && watch.waited.swap(false, Ordering::Relaxed) {
            // A read back after a wait: mostly for the input's edge, whose bytes are still in
            // the socket (the stream reads them itself), so an attempt first would find
            // nothing and arm the queue for nothing. Read them first; the attempt follows
            // whatever woke the task. (The waker this registers is the one the wait
            // registered.) A writer waits for room, which its own completions give as well
            // as the input: it attempts first.
            let mut input_edge = false;
            if let Some(input) = watch.input.as_ref() {
                if !watch.input_ended.load(Ordering::Relaxed) {
                    if let Poll::Ready(guard) = input.poll_read_ready(cx) {
                        seen[INPUT] = Some(guard?);
                        input_edge = true;
                        if let Err(e) = self.take_input(watch, way, &mut seen) {
                            return Poll::Ready(Err(e));
                        }
                    }
                }
            }
            if !input_edge {
                // Polled again with no arrival (a task polled for another reason, a
                // `select!`): unless another of the fds had its edge since the wait, or its
                // flush bound passed, the attempt would find what the one before the wait
                // found, and every change that could let the read go on comes with one of
                // those edges (the wait's guarantee). Wait on without an attempt.
                seen = match watch.poll(cx, way) {
                    Ok(guards) => guards,
                    Err(e) => return Poll::Ready(Err(e)),
                };
                if seen.iter().all(Option::is_none) && !self.flush_bound_passed(cx, watch) {
                    watch.waited.store(true, Ordering::Relaxed);
                    return Poll::Pending;
                }
                if let Err(e) = self.take_input(watch, way, &mut seen) {
                    return Poll::Ready(Err(e));
                }
            }
        }
        loop {
            match attempt() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                result => return Poll::Ready(result),
            }
            if let Some(guard) = &seen[INPUT] {
                let ready = guard.ready();
                if ready.is_read_closed() || ready.is_error() {
                    // The attempt read the end: closed states stay ready for good.
                    watch.input_ended.store(true, Ordering::Relaxed);
                }
            }
            for guard in seen.iter_mut().filter_map(Option::take) {
                let mut guard = guard;
                guard.clear_ready();
            }
            loop {
                seen = match watch.poll(cx, way) {
                    Ok(guards) => guards,
                    Err(e) => return Poll::Ready(Err(e)),
                };
                if seen.iter().all(Option::is_none) {
                    if self.flush_bound_passed(cx, watch) {
                        break;
                    }
                    if way == Way::Read {
                        watch.waited.store(true, Ordering::Relaxed);
                    }
                    return Poll::Pending;
                }
                match self.take_input(watch, way, &mut seen) {
                    // Only the input was ready, and reading it brought nothing: look again
                    // (registering the waker) without another attempt.
                    Ok(false) if seen.iter().all(Option::is_none) => continue,
                    Ok(_) => break,
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
        }
    }

    /// Before the task waits: whether a wait for flushed receives after DISCONNECTED reached
    /// its bound (the stream failed: the next attempt says so); otherwise the timer for it
    /// is set to wake the task at the bound. No readiness thread ticks a stream without
    /// keepalive, so a device that never flushes would leave the task waiting for ever.
    fn flush_bound_passed(&self, cx: &mut Context<'_>, watch: &Watch) -> bool {
        let bound = self.shared.flush_bound();
        if bound.is_none() && !watch.flush_timer_set.load(Ordering::Acquire) {
            return false;
        }
        let mut timer = watch
            .flush_timer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let left = match bound {
            Some(left) if !left.is_zero() => left,
            _ => {
                *timer = None;
                watch.flush_timer_set.store(false, Ordering::Release);
                return bound.is_some();
            }
        };
        watch.flush_timer_set.store(true, Ordering::Release);
        let deadline = ::tokio::time::Instant::now() + left;
        let sleep = timer.get_or_insert_with(|| Box::pin(::tokio::time::sleep_until(deadline)));
        if sleep.deadline() != deadline {
            sleep.as_mut().reset(deadline);
        }
        // Ready: the bound has passed by the timer's clock; the next attempt finds it.
        sleep.as_mut().poll(cx).is_ready()
    }

    /// When `seen` holds the input's ready guard (and the input has not ended): clears it
    /// and then reads the input until a read that does not fill the buffer (everything there
    /// was; an arrival after the clear is a new edge), so that an edge that an attempt
    /// already took the bytes of is not left for the next call to find stale. A guard that
    /// says read-closed has the input read to its end instead, once. Whether that read
    /// brought progress (`false` when the input was not ready).
    fn take_input<'a>(&self, watch: &Watch, way: Way, seen: &mut Guards<'a>) -> io::Result<bool> {
        let Some(guard) = seen[INPUT].as_mut() else {
            return Ok(false);
        };
        if watch.input_ended.load(Ordering::Relaxed) {
            return Ok(true);
        }
        if guard.ready().is_read_closed() {
            // Closed states stay ready: read the input to its end once (arming reads none
            // where the stream watches it); the attempt then finds the end.
            self.shared.take_input(true, way == Way::Read)?;
            watch.input_ended.store(true, Ordering::Relaxed);
            return Ok(true);
        }
        guard.clear_ready();
        seen[INPUT] = None;
        self.shared.take_input(false, way == Way::Read)
    }
}

/// Registers a duplicate of `fd` (the same open file) with the reactor. The registration
/// owns its fd, so that it stays open and the same for the registration's whole life, which
/// is what the reactor needs from it (the reason tokio deprecates the constructor for fds it
/// cannot vouch for: this one it owns).
#[allow(deprecated)]
fn register(fd: BorrowedFd<'_>, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    AsyncFd::with_interest(fd.try_clone_to_owned()?, interest)
}
