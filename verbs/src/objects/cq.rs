//! [`CompletionChannel`] and [`CompletionQueue`].

use crate::error::{Error, Result};
use crate::provider::{ChannelOps, CqOps, InputEdge};
use crate::wc::WorkCompletion;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A completion channel: a non-blocking, pollable fd that turns readable when an armed CQ
/// gets a completion. Register it with mio (`SourceFd`) or epoll, or wait with
/// [`CompletionChannel::wait`].
#[derive(Clone, Debug)]
pub struct CompletionChannel {
    ops: Arc<dyn ChannelOps>,
}

impl CompletionChannel {
    pub(crate) fn new(ops: Arc<dyn ChannelOps>) -> Self {
        CompletionChannel { ops }
    }

    /// The provider's object.
    pub fn ops(&self) -> &Arc<dyn ChannelOps> {
        &self.ops
    }

    /// Makes the fd blocking (`true`: rdma-core's default, for a thread that only waits on
    /// this channel: [`wait`](Self::wait) without a timeout is then a single read(2)) or
    /// non-blocking again (`false`, the default, for poll/epoll/mio).
    /// [`try_get_event`](Self::try_get_event) never blocks either way, but on a blocking
    /// channel take events from one thread only: another thread's read between its check
    /// and its read would block it. Kernel devices only (rxe, siw); other providers return an
    /// error.
    pub fn set_blocking(&self, blocking: bool) -> Result<()> {
        self.ops.set_blocking(blocking)
    }

    /// Takes one event without blocking: the cookie of the CQ it is for, or `None`.
    /// Acknowledge each with [`CompletionQueue::ack_events`].
    pub fn try_get_event(&self) -> Result<Option<u64>> {
        self.ops.get_event()
    }

    /// [`try_get_event`](Self::try_get_event) for the holder of a
    /// [`watch_input`](Self::watch_input) watch that waits with edge-triggered readiness:
    /// see [`ChannelOps::get_event_watched`].
    pub fn try_get_event_watched(&self, input: InputEdge) -> Result<Option<u64>> {
        self.ops.get_event_watched(input)
    }

    /// Whether taking events moves the data that raises them (uiwarp, which reads its
    /// sockets then): a thread woken on the channel should take its events before polling.
    pub fn events_make_progress(&self) -> bool {
        self.ops.events_make_progress()
    }

    /// Whether [`wake`](Self::wake) works on this channel (uiwarp's): a thread sleeping on
    /// it can be woken through it, with no wake fd of its own.
    pub fn can_wake(&self) -> bool {
        self.ops.can_wake()
    }

    /// Makes the channel's fd readable with no event, waking a thread that sleeps on it,
    /// until that thread calls [`take_wake`](Self::take_wake): taking events leaves the wake,
    /// so another thread's [`try_get_event`](Self::try_get_event) cannot steal it. Does
    /// nothing where [`can_wake`](Self::can_wake) is false.
    pub fn wake(&self) {
        self.ops.wake()
    }

    /// Takes back a [`wake`](Self::wake): the woken thread calls it once awake.
    pub fn take_wake(&self) {
        self.ops.take_wake()
    }

    /// For a thread about to sleep on the channel: the fd whose input raises its events, to
    /// poll beside the channel's and read through [`try_get_event`](Self::try_get_event)
    /// once readable; arrivals there raise no event while the watch lives (see
    /// [`ChannelOps::watch_input`]). Drop it after taking the events. `None` for kernel
    /// devices and channels that serve several queue pairs.
    pub fn watch_input(&self) -> Option<Box<dyn AsFd + Send>> {
        self.ops.watch_input()
    }

    /// Waits up to `timeout` (forever with `None`) for an event; `Ok(None)` on timeout.
    ///
    /// It polls the fd first and reads once it is readable: a waiter usually arrives before
    /// its event, and a read that would only find nothing is a wasted system call (when an
    /// event is already queued, poll returns at once).
    ///
    /// On a channel made blocking with [`set_blocking`](Self::set_blocking), waiting without
    /// a timeout is one read(2) that sleeps in the kernel, as rdma-core's `ibv_get_cq_event`.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<Option<u64>> {
        if timeout.is_none() {
            if let Some(cookie) = self.ops.wait_blocking()? {
                return Ok(Some(cookie));
            }
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = match deadline {
                None => PollTimeout::NONE,
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        // One last look: an event may have come with the deadline.
                        return self.ops.get_event();
                    }
                    let ms = (d - now).as_millis().clamp(1, i32::MAX as u128) as i32;
                    PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
                }
            };
            let mut fds = [PollFd::new(self.ops.fd(), PollFlags::POLLIN)];
            let ready = match nix::poll::poll(&mut fds, left) {
                Ok(n) => n > 0,
                Err(nix::errno::Errno::EINTR) => true,
                Err(e) => return Err(Error::io("waiting on a completion channel", e.into())),
            };
            if ready {
                if let Some(cookie) = self.ops.get_event()? {
                    return Ok(Some(cookie));
                }
            }
        }
    }
}

impl AsFd for CompletionChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.ops.fd()
    }
}

impl AsRawFd for CompletionChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.ops.fd().as_raw_fd()
    }
}

/// A completion queue.
#[derive(Clone, Debug)]
pub struct CompletionQueue {
    ops: Arc<dyn CqOps>,
    channel: Option<CompletionChannel>,
}

impl CompletionQueue {
    pub(crate) fn new(ops: Arc<dyn CqOps>, channel: Option<CompletionChannel>) -> Self {
        CompletionQueue { ops, channel }
    }

    /// The provider's object.
    pub fn ops(&self) -> &Arc<dyn CqOps> {
        &self.ops
    }

    /// The channel it reports to, if any.
    pub fn channel(&self) -> Option<&CompletionChannel> {
        self.channel.as_ref()
    }

    /// The number of entries.
    pub fn depth(&self) -> u32 {
        self.ops.depth()
    }

    /// The value channel events carry for this CQ.
    pub fn cookie(&self) -> u64 {
        self.ops.cookie()
    }

    /// Moves up to `out.len()` completions into `out` and returns them. The statuses are not
    /// checked here: call [`WorkCompletion::ok`] on each.
    #[inline(always)]
    pub fn poll<'a>(&self, out: &'a mut [WorkCompletion]) -> Result<&'a [WorkCompletion]> {
        let n = self.ops.poll(out)?;
        Ok(&out[..n])
    }

    /// Arms the CQ: the next completion (`solicited_only`: the next solicited or error one)
    /// makes the channel readable once.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        if self.channel.is_none() {
            return Err(Error::InvalidArgument(
                "req_notify on a completion queue created without a completion channel".into(),
            ));
        }
        self.ops.req_notify(solicited_only)
    }

    /// Acknowledges `n` events taken from the channel for this CQ.
    pub fn ack_events(&self, n: u32) {
        self.ops.ack_events(n)
    }
}
