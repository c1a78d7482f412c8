//! Truthful [`mio`] readiness for [`RdmaSocket`](super::RdmaSocket).
//!
//! A registered socket shows mio two eventfds under its token: one that turns readable when a
//! read that returned `WouldBlock` can go on, and one that turns writable when a write that
//! returned `WouldBlock` can go on (an eventfd is writable below its largest count: we hold
//! it there while writes would block, and reading it back to zero makes the writable edge).
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
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

/// The largest count an eventfd holds: at it, the fd is not writable.
const FULL: u64 = u64::MAX - 1;

/// A socket's readiness eventfds and who waits on them. Changed only under the connection's
/// lock (the atomics just let `Shared` hold them outside it).
#[derive(Debug)]
pub(crate) struct ReadyFds {
    read: EventFd,
    write: EventFd,
    read_waiting: AtomicBool,
    write_waiting: AtomicBool,
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
        let write = eventfd()?;
        write.write(FULL).map_err(io::Error::from)?;
        Ok(ReadyFds {
            read: eventfd()?,
            write,
            read_waiting: AtomicBool::new(false),
            write_waiting: AtomicBool::new(false),
            flush_waiting: AtomicBool::new(false),
            hub_id: Mutex::new(None),
        })
    }

    /// A read returned `WouldBlock`: the read fd goes quiet until reading can go on.
    pub(crate) fn read_blocked(&self) {
        // EAGAIN means it was quiet already.
        let _ = self.read.read();
        self.read_waiting.store(true, Ordering::SeqCst);
    }

    /// A write returned `WouldBlock`: the write fd stops being writable until writing can go
    /// on.
    pub(crate) fn write_blocked(&self) {
        // EAGAIN means it was at FULL already.
        let _ = self.write.write(FULL);
        self.write_waiting.store(true, Ordering::SeqCst);
    }

    /// A nonblocking flush found sends still in flight: the write fd stops being writable
    /// until they have all completed (or a write that returned `WouldBlock` can go on).
    pub(crate) fn flush_blocked(&self) {
        // EAGAIN means it was at FULL already.
        let _ = self.write.write(FULL);
        self.flush_waiting.store(true, Ordering::SeqCst);
    }

    /// Whether a direction waits for its edge (only after a `WouldBlock` or a registration):
    /// when none does, there is nothing to report and the readiness need not be computed.
    pub(crate) fn waiting(&self) -> bool {
        self.read_waiting.load(Ordering::SeqCst)
            || self.write_waiting.load(Ordering::SeqCst)
            || self.flush_waiting.load(Ordering::SeqCst)
    }

    /// Raises the fd of each waited-for direction that `readable`/`writable` now allow; the
    /// write fd also when a flush waits and `flushed` (every posted send completed) holds.
    pub(crate) fn update(&self, readable: bool, writable: bool, flushed: bool) {
        if readable && self.read_waiting.swap(false, Ordering::SeqCst) {
            // Overflow is impossible: the count is 0 or small.
            let _ = self.read.write(1);
        }
        let write_edge = writable && self.write_waiting.swap(false, Ordering::SeqCst);
        let flush_edge = flushed && self.flush_waiting.swap(false, Ordering::SeqCst);
        if write_edge || flush_edge {
            // Back to zero: writable, one edge (a flush waiter that was not done yet looks
            // again and blocks anew).
            let _ = self.write.read();
        }
    }

    /// The eventfd that turns readable when a read that returned `WouldBlock` can go on
    /// (edge: reading it back to zero is the socket's business, on the next `WouldBlock`).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn read_fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }

    /// The eventfd that turns writable when a write that returned `WouldBlock` can go on, or
    /// a flush that found sends in flight can ([`ReadyFds::flush_blocked`]).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn write_fd(&self) -> BorrowedFd<'_> {
        self.write.as_fd()
    }

    fn register_fds(&self, registry: &Registry, token: Token, again: bool) -> io::Result<()> {
        let r = self.read.as_fd().as_raw_fd();
        let w = self.write.as_fd().as_raw_fd();
        if again {
            SourceFd(&r).reregister(registry, token, Interest::READABLE)?;
            SourceFd(&w).reregister(registry, token, Interest::WRITABLE)
        } else {
            SourceFd(&r).register(registry, token, Interest::READABLE)?;
            SourceFd(&w).register(registry, token, Interest::WRITABLE)
        }
    }

    fn deregister_fds(&self, registry: &Registry) -> io::Result<()> {
        SourceFd(&self.read.as_fd().as_raw_fd()).deregister(registry)?;
        SourceFd(&self.write.as_fd().as_raw_fd()).deregister(registry)
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
            .min()?;
        Some(Instant::now() + next)
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
        }
        if next_keepalive.is_some_and(|t| Instant::now() >= t) {
            next_keepalive = hub.sweep_keepalives();
        }
    }
}

impl Shared {
    /// Registers the socket's readiness fds with `registry` and its channel fds with the hub,
    /// then reports what is possible already.
    pub(crate) fn register_ready(
        self: &Arc<Self>,
        registry: &Registry,
        token: Token,
        again: bool,
    ) -> io::Result<()> {
        self.ready.register_fds(registry, token, again)?;
        self.enroll()
    }

    /// Puts the socket's completion channel and rdma_cm fd under the hub (once; again is a
    /// no-op), so that its readiness fds are raised with no call from the application, then
    /// reports what is possible already: both directions count as waited for, and the first
    /// raise says what can go on.
    pub(crate) fn enroll(self: &Arc<Self>) -> io::Result<()> {
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
            SourceFd(&cm).register(&hub.registry, Token(new), Interest::READABLE)?;
            *id = Some(new);
        }
        drop(id);
        let _ = hub.waker.wake();
        self.ready.read_blocked();
        self.ready.write_blocked();
        self.progress_for_readiness();
        Ok(())
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

    /// Takes the socket's channel fds out of the hub (the undoing of [`Shared::enroll`]).
    pub(crate) fn withdraw(&self) {
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
            let _ = SourceFd(&cm).deregister(&hub.registry);
            hub.sockets
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .1
                .remove(&id);
        }
    }
}
