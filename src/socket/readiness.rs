//! Truthful [`mio`] readiness for [`RdmaSocket`](super::RdmaSocket).
//!
//! A registered socket shows mio two eventfds under its token: one that turns readable when a
//! read that returned `WouldBlock` can go on, and one that turns writable when a write that
//! returned `WouldBlock` can go on, or a submitted zero-copy buffer can be taken back after
//! `completed_registered` found none (an eventfd is writable below its largest count: we
//! hold it there while writes would block, and reading it back to zero makes the writable
//! edge).
//! The completion channel and the connection manager's fd only say that *something* happened;
//! a per-process thread (the hub) waits on those of every registered socket, makes the
//! progress (drain the completion queue, re-arm it, drain again) and raises the eventfd of
//! each direction that became possible. The same happens at the end of every call into the
//! socket, so progress made by one call is reported to the other direction's waiter.
//!
//! The hub also sends the keepalives of registered sockets (a nonblocking socket's calls never
//! wait, so the blocking path's keepalive timer never runs for it): a peer that vanished
//! without a word then fails the connection, and mio reports it, with no call from the
//! application.
#![forbid(unsafe_code)]

use super::shared::Shared;
use mio::event::Source;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

/// The largest count an eventfd holds: at it, the fd is not writable.
const FULL: u64 = u64::MAX - 1;

/// A socket's readiness eventfds, made when something first watches the socket (a mio
/// registration, its handed-out fd, a tokio stream): a socket that is only read and written
/// through blocking calls never holds them.
#[derive(Debug)]
struct Fds {
    read: EventFd,
    write: EventFd,
    /// The handed-out fd's write half: readable from when a write that returned `WouldBlock`
    /// can go on until the next write call, and from when a submitted buffer can be taken
    /// back (after `completed_registered` found none ready, or handed one back with more in
    /// flight) until the next `completed_registered` call.
    write_notice: EventFd,
    /// The fd handed out ([`AsFd`] on the socket): an epoll instance over `read` and
    /// `write_notice`, readable while either is.
    poller: Epoll,
}

impl Fds {
    fn new() -> io::Result<Fds> {
        let write = eventfd()?;
        write.write(FULL).map_err(io::Error::from)?;
        let read = eventfd()?;
        let write_notice = eventfd()?;
        let poller = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .and_then(|p| {
                p.add(&read, EpollEvent::new(EpollFlags::EPOLLIN, 0))?;
                p.add(&write_notice, EpollEvent::new(EpollFlags::EPOLLIN, 1))?;
                Ok(p)
            })
            .map_err(|e| io::Error::other(format!("creating the socket's readiness fd: {e}")))?;
        Ok(Fds {
            read,
            write,
            write_notice,
            poller,
        })
    }
}

/// What a socket's handed-out fd is when its own could not be made: always readable, so that
/// the application calls in and the call returns the error.
fn always_readable() -> BorrowedFd<'static> {
    static FD: OnceLock<EventFd> = OnceLock::new();
    FD.get_or_init(|| {
        let fd = eventfd().unwrap_or_else(|e| {
            panic!("rdmasock: no fd for a socket's readiness ({e}); raise the fd limit (ulimit -n)")
        });
        let _ = fd.write(1);
        fd
    })
    .as_fd()
}

/// A socket's readiness eventfds (once made) and who waits on them. Changed only under the
/// connection's lock (the atomics just let `Shared` hold them outside it).
#[derive(Debug)]
pub(crate) struct ReadyFds {
    fds: OnceLock<Fds>,
    read_waiting: AtomicBool,
    write_waiting: AtomicBool,
    notice_waiting: AtomicBool,
    /// `read` holds a count (it is drained only then).
    read_raised: AtomicBool,
    /// `write_notice` holds a count for a write that can go on.
    notice_raised: AtomicBool,
    /// `completed_registered` waits for a submitted buffer: `write_notice` is raised (and the
    /// write fd made writable, through `flush_waiting`) once one can be taken back.
    completion_waiting: AtomicBool,
    /// `write_notice` holds a count for a submitted buffer that can be taken back.
    completion_raised: AtomicBool,
    /// The fd was handed out: the socket stays under the hub until it is dropped.
    handed_out: AtomicBool,
    /// Putting the socket under the hub for its fd failed: the next call returns the error.
    enroll_failed: AtomicBool,
    enroll_error: Mutex<Option<io::Error>>,
    /// Which of `read` and `write` are registered with mio.
    mio: Mutex<(bool, bool)>,
    /// A nonblocking flush waits until every posted send completed (the async adapter's
    /// `poll_flush`); it shares the write fd with writes.
    flush_waiting: AtomicBool,
    /// The hub's token for this socket, once registered.
    hub_id: Mutex<Option<usize>>,
}

fn eventfd() -> io::Result<EventFd> {
    EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC).map_err(io::Error::from)
}

impl ReadyFds {
    pub(crate) fn new() -> io::Result<ReadyFds> {
        Ok(ReadyFds {
            fds: OnceLock::new(),
            read_waiting: AtomicBool::new(false),
            write_waiting: AtomicBool::new(false),
            notice_waiting: AtomicBool::new(false),
            read_raised: AtomicBool::new(false),
            notice_raised: AtomicBool::new(false),
            completion_waiting: AtomicBool::new(false),
            completion_raised: AtomicBool::new(false),
            handed_out: AtomicBool::new(false),
            enroll_failed: AtomicBool::new(false),
            enroll_error: Mutex::new(None),
            mio: Mutex::new((false, false)),
            flush_waiting: AtomicBool::new(false),
            hub_id: Mutex::new(None),
        })
    }

    /// The eventfds, made now if they are not yet. Made, they start as the flags say: the
    /// read fd and the notice raised where their flag is (a raise that found no fd set only
    /// the flag; one racing with this sees the fds or leaves its flag for this to see).
    fn fds(&self) -> io::Result<&Fds> {
        if let Some(fds) = self.fds.get() {
            return Ok(fds);
        }
        let _ = self.fds.set(Fds::new()?);
        let fds = self.fds.get().expect("set above");
        if self.read_raised.load(Ordering::SeqCst) {
            let _ = fds.read.write(1);
        }
        if self.notice_raised.load(Ordering::SeqCst)
            || self.completion_raised.load(Ordering::SeqCst)
        {
            let _ = fds.write_notice.write(1);
        }
        Ok(fds)
    }

    /// A read returned `WouldBlock` (or left nothing to read): the read fd goes quiet until
    /// reading can go on.
    pub(crate) fn read_blocked(&self) {
        if self.read_raised.swap(false, Ordering::SeqCst) {
            if let Some(fds) = self.fds.get() {
                // EAGAIN means it was quiet already.
                let _ = fds.read.read();
            }
        }
        self.read_waiting.store(true, Ordering::SeqCst);
    }

    /// The reader that a `WouldBlock` left waiting is about to look again itself (a tokio
    /// stream's read task taking the input it watches): the progress it makes now raises no
    /// read event for it. A `WouldBlock` it gets then marks it waiting again.
    #[cfg(feature = "tokio")]
    pub(crate) fn reader_looks_again(&self) {
        self.read_waiting.store(false, Ordering::SeqCst);
    }

    /// A read went through: when it left nothing more to read (`readable()` is false) while
    /// the read fd is raised, the fd goes quiet until reading can go on, so that it stays
    /// readable only while a read would not block.
    #[inline(always)]
    pub(crate) fn read_done(&self, readable: impl FnOnce() -> bool) {
        if self.read_raised.load(Ordering::Relaxed) && !readable() {
            self.read_blocked();
        }
    }

    /// A write returned `WouldBlock`: the write fd stops being writable, and the handed-out
    /// fd's write half waits, until writing can go on.
    pub(crate) fn write_blocked(&self) {
        self.write_waits();
        self.notice_waiting.store(true, Ordering::SeqCst);
    }

    /// The write fd stops being writable until writing can go on (a `WouldBlock` or a
    /// registration).
    fn write_waits(&self) {
        if let Some(fds) = self.fds.get() {
            // EAGAIN means it was at FULL already.
            let _ = fds.write.write(FULL);
        }
        self.write_waiting.store(true, Ordering::SeqCst);
    }

    /// A write call begins: the handed-out fd's write half, if raised for a write, goes quiet
    /// (it told of one `WouldBlock` that is over), unless a submitted buffer also waits to
    /// be taken back.
    #[inline(always)]
    pub(crate) fn write_called(&self) {
        if self.notice_raised.load(Ordering::Relaxed) {
            self.notice_raised.store(false, Ordering::SeqCst);
            self.quiet_notice();
        }
    }

    /// `completed_registered` is called: the handed-out fd's write half, if raised for a
    /// submitted buffer, goes quiet (the call takes it back), unless a write also waits.
    pub(crate) fn completion_called(&self) {
        if self.completion_raised.swap(false, Ordering::SeqCst) {
            self.quiet_notice();
        }
    }

    /// Drains `write_notice` when neither a write nor a submitted buffer keeps it raised.
    fn quiet_notice(&self) {
        if self.notice_raised.load(Ordering::SeqCst)
            || self.completion_raised.load(Ordering::SeqCst)
        {
            return;
        }
        if let Some(fds) = self.fds.get() {
            // EAGAIN means it was quiet already.
            let _ = fds.write_notice.read();
        }
    }

    /// `completed_registered` waits for a submitted buffer (none was ready, or more are in
    /// flight): the write fd stops being writable, and the handed-out fd's write half waits,
    /// until one can be taken back (`flushed` in [`update`](Self::update)).
    pub(crate) fn completion_blocked(&self) {
        self.flush_blocked();
        self.completion_waiting.store(true, Ordering::SeqCst);
    }

    /// A nonblocking flush found sends still in flight: the write fd stops being writable
    /// until they have all completed (or a write that returned `WouldBlock` can go on).
    pub(crate) fn flush_blocked(&self) {
        if let Some(fds) = self.fds.get() {
            // EAGAIN means it was at FULL already.
            let _ = fds.write.write(FULL);
        }
        self.flush_waiting.store(true, Ordering::SeqCst);
    }

    /// Whether the socket's readiness thread serves its readiness to code that waits on fds
    /// itself: the fd was handed out, or the socket is registered with mio.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn watched_by_others(&self) -> bool {
        let mio = *self.mio.lock().unwrap_or_else(|p| p.into_inner());
        self.handed_out.load(Ordering::SeqCst) || mio.0 || mio.1
    }

    /// Whether a direction waits for its edge (only after a `WouldBlock` or a registration):
    /// when none does, there is nothing to report and the readiness need not be computed.
    pub(crate) fn waiting(&self) -> bool {
        self.read_waiting.load(Ordering::SeqCst)
            || self.write_waiting.load(Ordering::SeqCst)
            || self.notice_waiting.load(Ordering::SeqCst)
            || self.flush_waiting.load(Ordering::SeqCst)
            || self.completion_waiting.load(Ordering::SeqCst)
    }

    /// Raises the fd of each waited-for direction that `readable`/`writable` now allow; the
    /// write fd also when a flush waits and `flushed` (every posted send completed, or a
    /// submitted buffer can be taken back) holds, and the handed-out fd's write half when
    /// `completed_registered` waits and `flushed` holds.
    pub(crate) fn update(&self, readable: bool, writable: bool, flushed: bool) {
        if readable && self.read_waiting.swap(false, Ordering::SeqCst) {
            self.raise_read();
        }
        let write_edge = writable && self.write_waiting.swap(false, Ordering::SeqCst);
        let flush_edge = flushed && self.flush_waiting.swap(false, Ordering::SeqCst);
        if write_edge || flush_edge {
            if let Some(fds) = self.fds.get() {
                // Back to zero: writable, one edge (a flush waiter that was not done yet
                // looks again and blocks anew).
                let _ = fds.write.read();
            }
        }
        if writable && self.notice_waiting.swap(false, Ordering::SeqCst) {
            self.notice_raised.store(true, Ordering::SeqCst);
            if let Some(fds) = self.fds.get() {
                let _ = fds.write_notice.write(1);
            }
        }
        if flushed && self.completion_waiting.swap(false, Ordering::SeqCst) {
            self.completion_raised.store(true, Ordering::SeqCst);
            if let Some(fds) = self.fds.get() {
                let _ = fds.write_notice.write(1);
            }
        }
    }

    fn raise_read(&self) {
        self.read_raised.store(true, Ordering::SeqCst);
        if let Some(fds) = self.fds.get() {
            // Overflow is impossible: the count is 0 or small.
            let _ = fds.read.write(1);
        }
    }

    /// The fd handed out by `AsFd`: readable while either half is raised (always readable
    /// when it could not be made: the next call returns why).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        match self.fds() {
            Ok(fds) => fds.poller.0.as_fd(),
            Err(_) => always_readable(),
        }
    }

    /// Takes the error of a failed enrollment for the fd, once.
    #[inline(always)]
    pub(crate) fn take_enroll_error(&self) -> Option<io::Error> {
        if !self.enroll_failed.load(Ordering::Relaxed) {
            return None;
        }
        self.enroll_failed.store(false, Ordering::SeqCst);
        self.enroll_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// The eventfd that turns readable when a read that returned `WouldBlock` can go on
    /// (edge: reading it back to zero is the socket's business, on the next `WouldBlock`).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn read_fd(&self) -> io::Result<BorrowedFd<'_>> {
        Ok(self.fds()?.read.as_fd())
    }

    /// The eventfd that turns writable when a write that returned `WouldBlock` can go on, or
    /// a flush that found sends in flight can ([`ReadyFds::flush_blocked`]).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn write_fd(&self) -> io::Result<BorrowedFd<'_>> {
        Ok(self.fds()?.write.as_fd())
    }

    /// Registers the read fd when `interests` is readable and the write fd when it is
    /// writable (again: changes the registration to that).
    fn register_fds(
        &self,
        registry: &Registry,
        token: Token,
        interests: Interest,
        again: bool,
    ) -> io::Result<()> {
        let mut registered = self.mio.lock().unwrap_or_else(|p| p.into_inner());
        if !again {
            *registered = (false, false);
        }
        let want = (interests.is_readable(), interests.is_writable());
        let fds = self.fds()?;
        let fds = [
            (&fds.read, Interest::READABLE, registered.0, want.0),
            (&fds.write, Interest::WRITABLE, registered.1, want.1),
        ];
        for (fd, interest, was, wanted) in fds {
            let fd = fd.as_fd().as_raw_fd();
            match (was, wanted) {
                (true, true) => SourceFd(&fd).reregister(registry, token, interest)?,
                (false, true) => SourceFd(&fd).register(registry, token, interest)?,
                (true, false) => SourceFd(&fd).deregister(registry)?,
                (false, false) => {}
            }
        }
        *registered = want;
        Ok(())
    }

    fn deregister_fds(&self, registry: &Registry) -> io::Result<()> {
        let mut registered = self.mio.lock().unwrap_or_else(|p| p.into_inner());
        let (r, w) = std::mem::take(&mut *registered);
        let Some(fds) = self.fds.get() else {
            return Ok(());
        };
        if r {
            SourceFd(&fds.read.as_fd().as_raw_fd()).deregister(registry)?;
        }
        if w {
            SourceFd(&fds.write.as_fd().as_raw_fd()).deregister(registry)?;
        }
        Ok(())
    }
}

/// The per-process thread that turns completion-channel and rdma_cm events of registered
/// sockets into readiness.
#[derive(Debug)]
struct Hub {
    registry: Registry,
    sockets: Mutex<(usize, HashMap<usize, Weak<Shared>>)>,
    /// Wakes the hub to look at the keepalive timers again (a registration, a new interval).
    waker: Waker,
}

/// The hub's own token, for its waker (socket ids count up from 0).
const WAKE: Token = Token(usize::MAX);

impl Hub {
    /// Sends the keepalives that are due on every registered socket; returns when the next
    /// is due (`None`: no registered socket has a keepalive).
    fn sweep_keepalives(&self) -> Option<Instant> {
        let sockets: Vec<Arc<Shared>> = {
            let map = self.sockets.lock().unwrap_or_else(|p| p.into_inner());
            map.1.values().filter_map(Weak::upgrade).collect()
        };
        let next = sockets
            .iter()
            .filter_map(|s| s.keepalive_for_readiness())
            .min();
        sockets.into_iter().for_each(let_go);
        Some(Instant::now() + next?)
    }
}

/// Makes the hub, if it runs, look at the keepalive timers again.
pub(crate) fn keepalive_changed() {
    if let Some(Ok(hub)) = HUB.get() {
        let _ = hub.waker.wake();
    }
}

static HUB: OnceLock<Result<Arc<Hub>, String>> = OnceLock::new();

fn hub() -> io::Result<Arc<Hub>> {
    HUB.get_or_init(|| start().map_err(|e| e.to_string()))
        .clone()
        .map_err(|e| io::Error::other(format!("the RdmaSocket mio readiness thread: {e}")))
}

fn start() -> io::Result<Arc<Hub>> {
    let poll = Poll::new()?;
    let hub = Arc::new(Hub {
        registry: poll.registry().try_clone()?,
        sockets: Mutex::new((0, HashMap::new())),
        waker: Waker::new(poll.registry(), WAKE)?,
    });
    let h = hub.clone();
    std::thread::Builder::new()
        .name("rdmasock-mio".into())
        .spawn(move || run(poll, &h))?;
    Ok(hub)
}

fn run(mut poll: Poll, hub: &Hub) {
    let mut events = Events::with_capacity(256);
    // When the next keepalive is due on some registered socket.
    let mut next_keepalive: Option<Instant> = None;
    loop {
        let timeout = next_keepalive.map(|t| t.saturating_duration_since(Instant::now()));
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            eprintln!("rdmasock: the mio readiness thread stops: {e}");
            return;
        }
        for ev in events.iter() {
            if ev.token() == WAKE {
                next_keepalive = Some(Instant::now());
                continue;
            }
            let id = ev.token().0;
            let socket = {
                let mut map = hub.sockets.lock().unwrap_or_else(|p| p.into_inner());
                match map.1.get(&id).map(Weak::upgrade) {
                    Some(Some(s)) => s,
                    Some(None) => {
                        map.1.remove(&id);
                        continue;
                    }
                    None => continue,
                }
            };
            socket.progress_for_readiness();
            let_go(socket);
        }
        if next_keepalive.is_some_and(|t| Instant::now() >= t) {
            next_keepalive = hub.sweep_keepalives();
        }
    }
}

/// Drops the hub's handle on a socket. When it was the last one (the application dropped its
/// own during the event), the socket's close, graceful and bounded by the close timeout
/// (it may wait for a peer that does not answer), runs on a thread of its own: on the hub,
/// every other registered socket's events would wait for it.
fn let_go(socket: Arc<Shared>) {
    let Some(last) = Arc::into_inner(socket) else {
        return;
    };
    let spawned = std::thread::Builder::new()
        .name("rdmasock-close".into())
        .spawn(move || drop(last));
    if let Err(e) = spawned {
        eprintln!(
            "rdmasock: no thread for a socket's close ({e}); the mio readiness thread closes it"
        );
    }
}

impl Shared {
    /// Registers the socket's readiness fds for `interests` with `registry` and its channel
    /// fds with the hub, then reports what is possible already.
    pub(crate) fn register_ready(
        self: &Arc<Self>,
        registry: &Registry,
        token: Token,
        interests: Interest,
        again: bool,
    ) -> io::Result<()> {
        self.ready.register_fds(registry, token, interests, again)?;
        self.enroll()
    }

    /// Puts the socket's completion channel and rdma_cm fd under the hub (once; again is a
    /// no-op), so that its readiness fds are raised with no call from the application, then
    /// reports what is possible already: both directions count as waited for, and the first
    /// raise says what can go on.
    pub(crate) fn enroll(self: &Arc<Self>) -> io::Result<()> {
        // The fds first: the raise below must find them.
        self.ready.fds()?;
        let hub = hub()?;
        let mut id = self.ready.hub_id.lock().unwrap_or_else(|p| p.into_inner());
        if id.is_none() {
            let new = {
                let mut map = hub.sockets.lock().unwrap_or_else(|p| p.into_inner());
                let new = map.0;
                map.0 += 1;
                map.1.insert(new, Arc::downgrade(self));
                new
            };
            let channel = self.cq_channel().as_fd().as_raw_fd();
            let cm = self.endpoint().event_fd().as_raw_fd();
            SourceFd(&channel).register(&hub.registry, Token(new), Interest::READABLE)?;
            // One fd may be both (uiwarp's eventfd is its queue pair's notice fd too).
            if cm != channel {
                SourceFd(&cm).register(&hub.registry, Token(new), Interest::READABLE)?;
            }
            *id = Some(new);
        }
        drop(id);
        let _ = hub.waker.wake();
        self.ready.read_blocked();
        self.ready.write_waits();
        self.progress_for_readiness();
        Ok(())
    }

    /// Puts the socket under the hub for its handed-out fd, once and for as long as the
    /// socket lives. A failure raises the fd and is returned by the next call (the one
    /// after it tries again).
    #[inline]
    pub(crate) fn enroll_for_fd(self: &Arc<Self>) {
        // A plain load first: `as_fd` is called on every turn of an event loop.
        if self.ready.handed_out.load(Ordering::Relaxed)
            || self.ready.handed_out.swap(true, Ordering::SeqCst)
        {
            return;
        }
        if let Err(e) = self.enroll() {
            *self
                .ready
                .enroll_error
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(io::Error::new(
                e.kind(),
                format!("watching the socket's readiness fd: {e}"),
            ));
            self.ready.enroll_failed.store(true, Ordering::SeqCst);
            self.ready.handed_out.store(false, Ordering::SeqCst);
            self.ready.raise_read();
        }
    }

    /// Forgets the socket in the hub (it is being dropped; its fds close with it).
    pub(crate) fn forget_ready(&self) {
        let id = self
            .ready
            .hub_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let (Some(id), Some(Ok(hub))) = (id, HUB.get()) {
            hub.sockets
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .1
                .remove(&id);
        }
    }

    /// Takes the socket out of `registry` and the hub.
    pub(crate) fn deregister_ready(&self, registry: &Registry) -> io::Result<()> {
        let r = self.ready.deregister_fds(registry);
        self.withdraw();
        r
    }

    /// Takes the socket's channel fds out of the hub (the undoing of [`Shared::enroll`]),
    /// unless its fd was handed out: that one is raised for as long as the socket lives.
    pub(crate) fn withdraw(&self) {
        if self.ready.handed_out.load(Ordering::SeqCst) {
            return;
        }
        let Ok(hub) = hub() else {
            return;
        };
        let id = self
            .ready
            .hub_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(id) = id {
            let channel = self.cq_channel().as_fd().as_raw_fd();
            let cm = self.endpoint().event_fd().as_raw_fd();
            let _ = SourceFd(&channel).deregister(&hub.registry);
            if cm != channel {
                let _ = SourceFd(&cm).deregister(&hub.registry);
            }
            hub.sockets
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .1
                .remove(&id);
        }
    }
}
