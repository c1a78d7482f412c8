//! Completion channels (an eventfd per channel) and completion queues filled by the engine.
//!
//! They belong to the driver: polling an empty queue, or waiting on a channel, makes progress
//! on the sockets of the queue pairs that report there. The verbs provider creates them.

use nix::sys::eventfd::{EfdFlags, EventFd};
use rdmasock_verbs::provider::{ChannelOps, CqOps, InputEdge};
use rdmasock_verbs::{Error, Result, WcStatus, WorkCompletion};
use std::any::Any;
use std::cell::Cell;
use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::Endpoint;

/// Cookies of completion queues: process-wide, never 0.
static NEXT_COOKIE: AtomicU64 = AtomicU64::new(1);

fn new_eventfd(what: &str) -> Result<EventFd> {
    EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
        .map_err(|e| Error::io(format!("creating the eventfd of {what}"), e.into()))
}

/// A completion channel. Its fd is an eventfd, readable while events wait: the channel costs
/// a connection one fd. A thread that sleeps on it may also poll the socket of its one queue
/// pair ([`ChannelOps::watch_input`]): the engine leaves that socket's input to it, and its
/// [`ChannelOps::get_event`] reads the bytes once it wakes. For a thread that waits on the
/// eventfd alone, the engine thread, which watches the sockets of the queue pairs, raises the
/// channel when bytes arrive while a queue that reports here is armed (`raise_input`)
/// instead of reading them: the woken thread's `get_event` reads them itself.
///
/// The eventfd is also the notice fd of those queue pairs (see
/// [`Endpoint::notice_fd`](super::Endpoint::notice_fd)): it is readable while events wait
/// or while one of them has a connection notice raised, so a connection costs no fd of its
/// own for its notices. Each may see the other's readiness (a waiter then finds nothing and
/// waits again).
#[derive(Debug)]
pub struct UiwarpChannel {
    fd: EventFd,
    events: Mutex<Events>,
    endpoints: Mutex<Vec<Weak<Endpoint>>>,
}

/// Queued events, raised notices, and whether the eventfd is set for them.
#[derive(Debug, Default)]
struct Events {
    queue: VecDeque<u64>,
    /// Queue pairs reporting here whose notice is raised.
    notices: usize,
    /// [`ChannelOps::wake`] was called and [`ChannelOps::take_wake`] has not taken it yet.
    woken: bool,
    /// Bytes arrived for a queue pair reporting here ([`UiwarpChannel::raise_input`]) and
    /// no [`ChannelOps::get_event`] has read them yet.
    input: bool,
    fd_set: bool,
}

impl Events {
    /// Sets the eventfd if it is not.
    fn set(&mut self, fd: &EventFd) {
        if !self.fd_set {
            // An eventfd write fails only when the counter would overflow: it is 0 here.
            let _ = fd.write(1);
            self.fd_set = true;
        }
    }

    /// After an event was taken: drains the eventfd when nothing else waits, else sets it
    /// (events raised without the write remain for another caller or thread).
    fn settle_or_set(&mut self, fd: &EventFd) {
        if self.queue.is_empty() {
            self.settle(fd);
        } else {
            self.set(fd);
        }
    }

    /// Drains the eventfd if it is set and neither an event, a notice nor a wake waits.
    fn settle(&mut self, fd: &EventFd) {
        if self.fd_set && self.queue.is_empty() && self.notices == 0 && !self.woken && !self.input {
            // Drains the counter (EAGAIN cannot happen: it was written).
            let _ = fd.read();
            self.fd_set = false;
        }
    }
}

thread_local! {
    /// The channel whose [`ChannelOps::get_event`] this thread is making progress for (its
    /// address; 0 for none): events it raises there are taken by the same call, so they
    /// need no eventfd write and read.
    static GETTING_EVENTS: Cell<usize> = const { Cell::new(0) };
    /// The channel (its address; 0 for none) whose last [`ChannelOps::get_event`] on this
    /// thread read its queue pairs' sockets until they would block and returned an event:
    /// the caller's next call (the one that finds the queue empty, ending its loop) reads
    /// them again only if input was raised meanwhile. Arrivals after that read are announced
    /// as any arrivals are (the engine's edge, or the fd that a watcher of the input polls).
    static JUST_READ: Cell<usize> = const { Cell::new(0) };
}

impl UiwarpChannel {
    pub(crate) fn new() -> Result<UiwarpChannel> {
        let fd = new_eventfd("a completion channel")?;
        Ok(UiwarpChannel {
            fd,
            events: Mutex::new(Events::default()),
            endpoints: Mutex::new(Vec::new()),
        })
    }

    fn address(&self) -> usize {
        self as *const UiwarpChannel as usize
    }

    /// Queues an event for the CQ with `cookie` and makes the fd readable (unless this
    /// thread takes it in the [`ChannelOps::get_event`] call that raised it).
    fn signal(&self, cookie: u64) {
        let mut events = self.events.lock().expect("channel lock");
        events.queue.push_back(cookie);
        if GETTING_EVENTS.get() != self.address() {
            events.set(&self.fd);
        }
    }

    /// Raises a queue pair's notice: the notice fd (and the channel fd) turn readable until
    /// it is lowered. Each queue pair raises at most once before it lowers.
    pub(crate) fn raise_notice(&self) {
        let mut events = self.events.lock().expect("channel lock");
        events.notices += 1;
        events.set(&self.fd);
    }

    /// Bytes arrived on the socket of a queue pair reporting here while one of its queues is
    /// armed: the fd turns readable, and the next [`ChannelOps::get_event`] reads the
    /// sockets.
    pub(crate) fn raise_input(&self) {
        let mut events = self.events.lock().expect("channel lock");
        events.input = true;
        events.set(&self.fd);
    }

    /// Lowers a notice [`raise_notice`](Self::raise_notice) raised.
    pub(crate) fn lower_notice(&self) {
        let mut events = self.events.lock().expect("channel lock");
        events.notices = events.notices.saturating_sub(1);
        events.settle(&self.fd);
    }

    /// The notice fd of the queue pairs reporting here: readable while a notice is raised
    /// (or an event waits).
    pub(crate) fn notice_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Adds a connected QP whose CQs report here: [`ChannelOps::get_event`] makes progress
    /// on it when it finds no event waiting.
    pub(crate) fn watch(&self, endpoint: &Arc<Endpoint>) {
        let mut list = self.endpoints.lock().expect("channel lock");
        list.retain(|w| w.strong_count() > 0);
        if !list
            .iter()
            .any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(endpoint)))
        {
            list.push(Arc::downgrade(endpoint));
        }
    }

    /// Takes the oldest event; keeps the eventfd readable exactly while events (or notices,
    /// or a wake) wait.
    fn pop(&self) -> Option<u64> {
        let mut events = self.events.lock().expect("channel lock");
        let cookie = events.queue.pop_front();
        events.settle_or_set(&self.fd);
        cookie
    }
}

/// Which sockets [`UiwarpChannel::get_event_reading`] reads, and how far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reads {
    /// Every queue pair's, each until it would block.
    ToTheEnd,
    /// Every queue pair's, each until a read that does not fill the buffer: the holder of the
    /// input watch, woken by an edge, learns of later bytes and of the end from its
    /// edge-triggered readiness.
    UntilShort,
    /// Only those whose input nobody watches: the watcher saw no edge since it read them.
    Unwatched,
}

impl UiwarpChannel {
    /// Takes one event, reading the queue pairs' sockets as `reads` says when none is
    /// waiting (unless this thread's last call read them and nothing was raised since).
    /// The common call (one event waiting, or none and nothing to read) takes the events
    /// lock once and allocates nothing.
    fn get_event_reading(&self, reads: Reads) -> Result<Option<u64>> {
        let just_read = JUST_READ.replace(0) == self.address();
        let raised = {
            // The reads below take the raised input (an event taken instead leaves it to
            // the poll of the queue that follows: the queue pair's input hint is set).
            let mut events = self.events.lock().expect("channel lock");
            let raised = std::mem::take(&mut events.input);
            if let Some(cookie) = events.queue.pop_front() {
                events.settle_or_set(&self.fd);
                return Ok(Some(cookie));
            }
            events.settle(&self.fd);
            raised
        };
        if just_read && !raised {
            return Ok(None);
        }
        let outer = GETTING_EVENTS.replace(self.address());
        let mut from = 0;
        while let Some((index, e)) = self.endpoint_from(from) {
            match reads {
                Reads::ToTheEnd => e.progress_waiting(false),
                Reads::UntilShort => e.progress_waiting(true),
                Reads::Unwatched if raised || !e.input_watched() => e.progress_waiting(false),
                Reads::Unwatched => {}
            }
            from = index + 1;
        }
        GETTING_EVENTS.set(outer);
        let event = self.pop();
        if event.is_some() {
            JUST_READ.set(self.address());
        }
        Ok(event)
    }

    /// The first live queue pair reporting here at or after index `from` of the list, with
    /// its index; the list's lock is not held while the caller drives it (its progress may
    /// signal this channel).
    fn endpoint_from(&self, from: usize) -> Option<(usize, Arc<Endpoint>)> {
        let list = self.endpoints.lock().expect("channel lock");
        list.get(from..)?
            .iter()
            .enumerate()
            .find_map(|(i, w)| w.upgrade().map(|e| (from + i, e)))
    }
}

impl ChannelOps for UiwarpChannel {
    fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn get_event(&self) -> Result<Option<u64>> {
        self.get_event_reading(Reads::ToTheEnd)
    }

    fn get_event_watched(&self, input: InputEdge) -> Result<Option<u64>> {
        self.get_event_reading(match input {
            InputEdge::Seen => Reads::UntilShort,
            InputEdge::None => Reads::Unwatched,
        })
    }

    fn events_make_progress(&self) -> bool {
        true
    }

    fn can_wake(&self) -> bool {
        true
    }

    fn wake(&self) {
        let mut events = self.events.lock().expect("channel lock");
        events.woken = true;
        events.set(&self.fd);
    }

    fn take_wake(&self) {
        let mut events = self.events.lock().expect("channel lock");
        events.woken = false;
        events.settle(&self.fd);
    }

    fn watch_input(&self) -> Option<Box<dyn AsFd + Send>> {
        let endpoint = {
            let list = self.endpoints.lock().expect("channel lock");
            let mut live = list.iter().filter_map(Weak::upgrade);
            let endpoint = live.next()?;
            if live.next().is_some() {
                return None;
            }
            endpoint
        };
        let socket = endpoint.watch_input()?;
        Some(Box::new(InputWatch { endpoint, socket }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A sleeping thread's watch on the socket of a channel's one queue pair (see
/// [`ChannelOps::watch_input`]): the engine leaves the socket's input to it until it drops.
struct InputWatch {
    endpoint: Arc<Endpoint>,
    socket: Arc<mio::net::TcpStream>,
}

impl AsFd for InputWatch {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

impl Drop for InputWatch {
    fn drop(&mut self) {
        self.endpoint.unwatch_input();
    }
}

#[derive(Debug, Default)]
struct CqState {
    queue: VecDeque<WorkCompletion>,
    /// Armed: `Some(solicited_only)`.
    armed: Option<bool>,
    /// QPs that report here: polling an empty queue drives their sockets.
    endpoints: Vec<Weak<Endpoint>>,
}

/// A completion queue in memory.
#[derive(Debug)]
pub struct UiwarpCq {
    state: Mutex<CqState>,
    channel: Option<Arc<dyn ChannelOps>>,
    depth: u32,
    cookie: u64,
    /// Polls in a row that found the queue empty: from [`SPIN_STREAK`] on, the poller spins.
    empty_streak: AtomicU32,
    /// One of the QPs that report here may hold posts (see `driver::doorbell`): the next
    /// poll or arm writes them.
    held: AtomicBool,
    /// `CqState::armed.is_some()`, readable without the lock: a thread may be about to
    /// sleep on the channel, so posts to its QPs are not held.
    armed: AtomicBool,
}

/// Empty polls in a row that make a spin (see [`Endpoint::poll_should_read`]). A data path
/// that polls between posts finds a completion every other time, and the socket layer's
/// bookkeeping polls (after an operation, when arming) come a few in a row: neither gets
/// there, so neither pays a poll(2) per empty poll. A busy-poll loop gets there in well
/// under a microsecond.
const SPIN_STREAK: u32 = 8;

/// Sockets a spinning poll checks with poll(2) at most (see [`UiwarpCq`]'s `poll`).
const SPIN_CHECKS: usize = 4;

impl UiwarpCq {
    pub(crate) fn new(depth: u32, channel: Option<Arc<dyn ChannelOps>>) -> UiwarpCq {
        UiwarpCq {
            state: Mutex::new(CqState::default()),
            channel,
            depth,
            cookie: NEXT_COOKIE.fetch_add(1, Ordering::Relaxed),
            empty_streak: AtomicU32::new(0),
            held: AtomicBool::new(false),
            armed: AtomicBool::new(false),
        }
    }

    /// Adds a completion; raises the channel event if armed for it. `solicited`: a receive of
    /// a SEND with solicited event (errors wake a solicited-only arm too, as in the kernel).
    pub(crate) fn push(&self, completion: WorkCompletion, solicited: bool) {
        self.push_all(std::iter::once((completion, solicited)));
    }

    /// Adds completions, each with whether it is `solicited` (see [`push`](Self::push)), in
    /// order under one hold of the lock: a connection hands over all it has at once. The
    /// first that an armed queue is armed for disarms it and raises the channel event, once
    /// all are in; the rest find the queue disarmed, as one by one.
    pub(crate) fn push_all(&self, completions: impl Iterator<Item = (WorkCompletion, bool)>) {
        let mut s = self.state.lock().expect("cq lock");
        let mut wake = false;
        for (completion, solicited) in completions {
            s.queue.push_back(completion);
            wake |= match s.armed {
                Some(false) => true,
                Some(true) => {
                    solicited || WcStatus::from_raw(completion.status) != WcStatus::Success
                }
                None => false,
            };
            if wake && s.armed.is_some() {
                s.armed = None;
                self.armed.store(false, Ordering::Relaxed);
            }
        }
        drop(s);
        if wake {
            if let Some(c) = self.channel() {
                c.signal(self.cookie);
            }
        }
    }

    /// The channel, if it is a uiwarp one.
    pub(crate) fn channel(&self) -> Option<&UiwarpChannel> {
        self.channel
            .as_ref()
            .and_then(|c| c.as_any().downcast_ref::<UiwarpChannel>())
    }

    /// Armed, with a channel: a thread may sleep on the channel, which the engine raises
    /// when the QPs' sockets get bytes.
    pub(crate) fn armed_with_channel(&self) -> bool {
        self.channel().is_some() && self.state.lock().expect("cq lock").armed.is_some()
    }

    pub(crate) fn attach(&self, endpoint: &Arc<Endpoint>) {
        let mut s = self.state.lock().expect("cq lock");
        s.endpoints.retain(|w| w.strong_count() > 0);
        s.endpoints.push(Arc::downgrade(endpoint));
    }

    /// Armed for an event: a thread may sleep on the channel until one comes (see the
    /// `armed` field).
    pub(crate) fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Relaxed)
    }

    /// A QP that reports here held a post (after marking itself).
    pub(crate) fn note_held(&self) {
        self.held.store(true, Ordering::Release);
    }

    /// Writes the posts its QPs hold, if the hint says any may: one load when none does.
    fn ring_held(&self) {
        if !self.held.load(Ordering::Relaxed) || !self.held.swap(false, Ordering::AcqRel) {
            return;
        }
        let mut from = 0;
        while let Some((i, e, ())) = self.next_endpoint(from, |_, _, _| Some(())) {
            e.ring_held();
            from = i + 1;
        }
    }

    /// The first live endpoint at or after index `from` that `pick` (given the number of
    /// endpoints, the index and the endpoint) accepts: its index, itself and what `pick`
    /// said. The CQ lock is released before the caller takes the endpoint's (an endpoint
    /// pushes completions here under its own), and the walk allocates nothing.
    fn next_endpoint<T>(
        &self,
        from: usize,
        mut pick: impl FnMut(usize, usize, &Endpoint) -> Option<T>,
    ) -> Option<(usize, Arc<Endpoint>, T)> {
        let s = self.state.lock().expect("cq lock");
        let n = s.endpoints.len();
        s.endpoints[from.min(n)..]
            .iter()
            .enumerate()
            .find_map(|(i, w)| {
                let e = w.upgrade()?;
                pick(n, from + i, &e).map(|t| (from + i, e, t))
            })
    }

    /// Moves queued completions into `out`; taking any ends a run of empty polls.
    fn take(&self, out: &mut [WorkCompletion]) -> usize {
        let mut s = self.state.lock().expect("cq lock");
        let n = out.len().min(s.queue.len());
        for (slot, wc) in out.iter_mut().zip(s.queue.drain(..n)) {
            *slot = wc;
        }
        if n > 0 {
            self.empty_streak.store(0, Ordering::Relaxed);
        }
        n
    }
}

impl CqOps for UiwarpCq {
    fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        // A poller waits for something: held posts may be what it waits for.
        self.ring_held();
        let n = self.take(out);
        if n > 0 || out.is_empty() {
            return Ok(n);
        }
        let streak = self.empty_streak.fetch_add(1, Ordering::Relaxed) + 1;
        let spinning = streak >= SPIN_STREAK;
        // Nothing yet: make progress on our QPs' sockets on this thread rather than wait for
        // the engine thread to wake (the engine does the same work when nobody polls).
        // Only sockets that got bytes since their last read, or, when this thread spins, that
        // poll(2) finds readable (a lone idle poll costs no syscall; a spin does not wait for
        // the engine to see bytes).
        // A busy-polling thread comes here in a tight loop: no allocation, and the CQ lock is
        // not held while a socket is read (its completions come back through `push`). On a
        // queue shared by many QPs a spin checks at most SPIN_CHECKS sockets per poll, a
        // different share each time (every socket once per `stride` polls), so that one poll
        // is not one poll(2) per QP.
        let mut from = 0;
        let mut moved = false;
        while let Some((i, e, when)) = self.next_endpoint(from, |n, i, e| {
            let stride = n.div_ceil(SPIN_CHECKS).max(1);
            let checked = spinning && i % stride == streak as usize % stride;
            e.poll_should_read(checked)
        }) {
            e.try_progress(when);
            moved = true;
            from = i + 1;
        }
        if !moved {
            return Ok(0);
        }
        Ok(self.take(out))
    }

    fn req_notify(&self, solicited_only: bool) -> Result<()> {
        // Arming precedes a sleep: nothing may stay held through it.
        self.ring_held();
        let mut s = self.state.lock().expect("cq lock");
        if s.armed != Some(false) {
            s.armed = Some(solicited_only);
            self.armed.store(true, Ordering::Relaxed);
        }
        drop(s);
        if self.channel.is_some() {
            // A thread may sleep on the channel now, and only the engine's input edges raise
            // it: the engine takes back the sockets it left to a spinner.
            let mut from = 0;
            while let Some((i, e, ())) = self.next_endpoint(from, |_, _, _| Some(())) {
                e.take_input_back();
                from = i + 1;
            }
        }
        Ok(())
    }

    fn ack_events(&self, _n: u32) {}

    fn depth(&self) -> u32 {
        self.depth
    }

    fn cookie(&self) -> u64 {
        self.cookie
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The uiwarp CQ behind a trait object this provider made (checked when the QP was created).
pub(crate) fn uiwarp_cq(cq: &Arc<dyn CqOps>) -> &UiwarpCq {
    cq.as_any()
        .downcast_ref::<UiwarpCq>()
        .expect("uiwarp QPs are created only with uiwarp CQs")
}

#[cfg(test)]
mod tests;
