//! The connections a listener has answered whose handshake still runs: each request is
//! accepted at once and finished when its last step comes, so that a client that is slow or
//! stalls half-way holds up no other, and a nonblocking `accept` never waits.
//!
//! A handshake's last steps: the connection manager's ESTABLISHED (the initiator's RTU on
//! IB/RoCE, its ready-to-receive on iWARP), then on iWARP the initiator's first frame (see
//! [`first_frame_seen`]). Each is bounded: the connect timeout, then [`FIRST_FRAME_WAIT`].
//! While registered with mio, the listener's token also watches each handshake's fd and a
//! timer for the nearest bound, so an event follows whenever `accept` could go on.
#![forbid(unsafe_code)]

use super::conn::Connection;
use super::devices::OpenDevice;
use crate::cm::ConnectionParameters;
use crate::verbs::Transport;
use mio::event::Source as _;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long an iWARP accept waits for the initiator's first frame before it lets its own
/// queued frames go (see [`first_frame_seen`]).
pub(crate) const FIRST_FRAME_WAIT: Duration = Duration::from_secs(2);

/// rsocket's connection parameters for a connect or an accept carrying `private_data` (the
/// hello): see the protocol module's documentation. `initiator_depth = 1` on every transport
/// covers rsocket's rule for iWARP.
pub(crate) fn rsocket_parameters(private_data: &[u8]) -> ConnectionParameters {
    ConnectionParameters {
        flow_control: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        responder_resources: 1,
        initiator_depth: 1,
        private_data: private_data.to_vec(),
        ..ConnectionParameters::default()
    }
}

/// Where one answered request stands.
enum Stage {
    /// Accepted; waiting for ESTABLISHED until the instant.
    Established(Instant),
    /// iWARP: established; waiting for the initiator's first frame until the instant.
    FirstFrame(Instant),
}

/// Which of a handshake's fds tells of its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watched {
    /// The connection manager's (waiting for ESTABLISHED).
    Endpoint,
    /// The completion channel (waiting for the first frame).
    Channel,
}

/// One answered request.
pub(crate) struct Handshake {
    conn: Connection,
    peer: Option<SocketAddr>,
    stage: Stage,
    /// The fd registered with mio for this handshake, if any.
    watched: Option<Watched>,
    /// The fd in the listener's own epoll (its handed-out fd), if any.
    owned: Option<Watched>,
}

/// What [`Handshake::advance`] found.
enum Step {
    Waiting,
    Ready,
    Failed(io::Error),
}

impl Handshake {
    /// A connection whose accept was just sent, to be established within `timeout`.
    pub(crate) fn new(conn: Connection, peer: Option<SocketAddr>, timeout: Duration) -> Self {
        Handshake {
            conn,
            peer,
            stage: Stage::Established(Instant::now() + timeout),
            watched: None,
            owned: None,
        }
    }

    /// An error about this handshake, naming the client.
    fn failure(&self, kind: io::ErrorKind, what: &str) -> io::Error {
        accept_failure(self.peer, kind, what)
    }

    /// Moves on as far as what has arrived allows, without blocking.
    fn advance(&mut self, first_frame_bound: Duration) -> Step {
        loop {
            let now = Instant::now();
            match self.stage {
                Stage::Established(until) => {
                    match self.conn.endpoint.poll_accept(&self.conn.res.qp) {
                        Ok(true) => {
                            if self.conn.res.qp.context().device().transport != Transport::Iwarp {
                                return Step::Ready;
                            }
                            self.stage = Stage::FirstFrame(now + first_frame_bound);
                        }
                        Ok(false) if now < until => return Step::Waiting,
                        Ok(false) => {
                            return Step::Failed(self.failure(
                                io::ErrorKind::TimedOut,
                                "the handshake did not finish within the connect timeout",
                            ))
                        }
                        Err(e) => return Step::Failed(self.failure(e.kind(), &e.to_string())),
                    }
                }
                Stage::FirstFrame(until) => {
                    return match first_frame_seen(&mut self.conn) {
                        Ok(true) => Step::Ready,
                        Ok(false) if now < until => Step::Waiting,
                        // A silent initiator: it has long read our reply by now.
                        Ok(false) => Step::Ready,
                        Err(e) => Step::Failed(e),
                    };
                }
            }
        }
    }

    /// The fd that turns readable when [`advance`](Self::advance) may get further.
    fn fd(&self) -> BorrowedFd<'_> {
        self.fd_of(self.watch_now())
    }

    /// Which fd [`fd`](Self::fd) is.
    fn watch_now(&self) -> Watched {
        match self.stage {
            Stage::Established(_) => Watched::Endpoint,
            Stage::FirstFrame(_) => Watched::Channel,
        }
    }

    fn fd_of(&self, which: Watched) -> BorrowedFd<'_> {
        match which {
            Watched::Endpoint => self.conn.endpoint.event_fd(),
            Watched::Channel => self.conn.res.cq_channel.as_fd(),
        }
    }

    fn until(&self) -> Instant {
        match self.stage {
            Stage::Established(t) | Stage::FirstFrame(t) => t,
        }
    }

    /// The established connection and the peer's address as known (if it was).
    pub(crate) fn finish(self) -> (Connection, Option<SocketAddr>) {
        (self.conn, self.peer)
    }
}

/// An error about accepting the request from `peer`, naming it.
pub(crate) fn accept_failure(
    peer: Option<SocketAddr>,
    kind: io::ErrorKind,
    what: impl std::fmt::Display,
) -> io::Error {
    let client = peer.map_or_else(|| "a client".to_string(), |p| p.to_string());
    io::Error::new(kind, format!("accepting {client}: {what}"))
}

/// A listener's answered requests, shared by its clones.
pub(crate) struct Backlog {
    handshakes: Vec<Handshake>,
    /// Requests the answering thread is answering outside the backlog's lock: they count as
    /// handshakes under way (see [`Backlog::reserve`]).
    reserved: usize,
    /// The mio registry and token the listener is registered with, and the timer that wakes
    /// it at the nearest bound.
    watch: Option<(Registry, Token, TimerFd)>,
    /// The listener's handed-out fd: an epoll instance over its connection manager's fd
    /// (while the backlog has room), every handshake's fd and `own_timer`; level-triggered.
    own: Arc<Epoll>,
    own_timer: TimerFd,
    /// Whether `own` watches the connection manager's fd.
    own_listens: bool,
    /// Raised by the answering thread when it added a handshake or kept an error for
    /// `accept`; watched by `own`, by mio and by a blocking `accept`'s wait, and reset by
    /// `accept`.
    notice: EventFd,
    /// An error the answering thread met, for the next `accept` to return.
    deferred: Option<io::Error>,
    /// The devices of the connections this listener answered, kept open while it lives, so
    /// that its next connections (and this process's clients on the same device) find the
    /// device context and protection domain open instead of opening them again; one that was
    /// removed is let go. Keeping them delays no device removal: the kernel's removal waits
    /// for the listener's own connection-manager id anyway.
    devices: Vec<Arc<OpenDevice>>,
}

fn timer() -> io::Result<TimerFd> {
    TimerFd::new(
        ClockId::CLOCK_MONOTONIC,
        TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
    )
    .map_err(|e| io::Error::other(format!("creating the listener's timer: {e}")))
}

fn own_error(e: nix::Error) -> io::Error {
    io::Error::other(format!(
        "watching the listener's fds in its readiness fd: {e}"
    ))
}

impl Backlog {
    /// An empty backlog whose own epoll watches `listener_fd`, the connection manager's.
    pub(crate) fn new(listener_fd: BorrowedFd<'_>) -> io::Result<Backlog> {
        let own = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(own_error)?;
        let own_timer = timer()?;
        own.add(&own_timer, EpollEvent::new(EpollFlags::EPOLLIN, 0))
            .map_err(own_error)?;
        own.add(listener_fd, EpollEvent::new(EpollFlags::EPOLLIN, 0))
            .map_err(own_error)?;
        let notice = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(|e| io::Error::other(format!("creating the listener's eventfd: {e}")))?;
        own.add(&notice, EpollEvent::new(EpollFlags::EPOLLIN, 0))
            .map_err(own_error)?;
        Ok(Backlog {
            handshakes: Vec::new(),
            reserved: 0,
            watch: None,
            own: Arc::new(own),
            own_timer,
            own_listens: true,
            notice,
            deferred: None,
            devices: Vec::new(),
        })
    }

    /// The listener's handed-out fd (see [`Backlog::own`]).
    pub(crate) fn own(&self) -> Arc<Epoll> {
        Arc::clone(&self.own)
    }

    /// Whether the handed-out fd watches the connection manager's fd: not while the backlog
    /// holds `most` handshakes, as `accept` takes no request then (the fd would stay readable
    /// for nothing).
    pub(crate) fn own_listen(
        &mut self,
        listener_fd: BorrowedFd<'_>,
        most: usize,
    ) -> io::Result<()> {
        let room = self.len() < most;
        if room == self.own_listens {
            return Ok(());
        }
        if room {
            self.own
                .add(listener_fd, EpollEvent::new(EpollFlags::EPOLLIN, 0))
                .map_err(own_error)?;
        } else {
            self.own.delete(listener_fd).map_err(own_error)?;
        }
        self.own_listens = room;
        Ok(())
    }

    /// Raises the notice (see [`Backlog::notice`](Self#structfield.notice)).
    pub(crate) fn notify(&self) {
        let _ = self.notice.write(1);
    }

    /// Keeps `e` for the next `accept`, and raises the notice.
    pub(crate) fn defer_error(&mut self, e: io::Error) {
        self.deferred.get_or_insert(e);
        self.notify();
    }

    /// What `accept` does first: resets the notice and takes a kept error.
    pub(crate) fn take_notice(&mut self) -> Option<io::Error> {
        let _ = self.notice.read();
        self.deferred.take()
    }

    /// What the listener's last handle lets go of when it is dropped: the handshakes under
    /// way and the devices kept open. Taken out rather than left to the backlog's own drop,
    /// which comes later when the answering thread is serving the listener at that moment:
    /// the devices close as soon as the listener and its connections are gone.
    pub(crate) fn let_go(&mut self) -> (Vec<Handshake>, Vec<Arc<OpenDevice>>) {
        (
            std::mem::take(&mut self.handshakes),
            std::mem::take(&mut self.devices),
        )
    }

    /// Adds an answered request.
    pub(crate) fn push(&mut self, mut h: Handshake) -> io::Result<()> {
        let device = &h.conn.res.device;
        self.devices.retain(|d| !d.is_removed());
        if !self.devices.iter().any(|d| Arc::ptr_eq(d, device)) && !device.is_removed() {
            self.devices.push(Arc::clone(device));
        }
        if let Some((registry, token, _)) = &self.watch {
            watch(registry, *token, &mut h)?;
        }
        own_watch(&self.own, &mut h)?;
        self.handshakes.push(h);
        Ok(())
    }

    /// The oldest handshake that is done, if any; failed ones are dropped, the last failure
    /// kept in `failed`.
    pub(crate) fn take_ready(
        &mut self,
        first_frame_bound: Duration,
        failed: &Mutex<Option<io::Error>>,
    ) -> io::Result<Option<Handshake>> {
        let mut i = 0;
        while i < self.handshakes.len() {
            let step = self.handshakes[i].advance(first_frame_bound);
            match step {
                Step::Waiting => {
                    // The stage may have changed, and with it the fd.
                    if let Some((registry, token, _)) = &self.watch {
                        watch(registry, *token, &mut self.handshakes[i])?;
                    }
                    own_watch(&self.own, &mut self.handshakes[i])?;
                    i += 1;
                }
                Step::Ready | Step::Failed(_) => {
                    let mut h = self.handshakes.remove(i);
                    if let Some((registry, _, _)) = &self.watch {
                        unwatch(registry, &mut h);
                    }
                    own_unwatch(&self.own, &mut h);
                    match step {
                        Step::Ready => return Ok(Some(h)),
                        Step::Failed(e) => {
                            *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e)
                        }
                        Step::Waiting => unreachable!("handled above"),
                    }
                }
            }
        }
        Ok(None)
    }

    /// Sets the timers (the handed-out fd's, and mio's when registered) to the nearest bound
    /// (after `accept` returned `WouldBlock`).
    pub(crate) fn arm_timer(&self) -> io::Result<()> {
        self.arm(&self.own_timer)?;
        match &self.watch {
            Some((_, _, timer)) => self.arm(timer),
            None => Ok(()),
        }
    }

    fn arm(&self, timer: &TimerFd) -> io::Result<()> {
        let result = match self.nearest() {
            None => timer.unset(),
            Some(t) => {
                // At least 1 ms: a zero expiration would disarm the timer.
                let left = t
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1));
                timer.set(
                    Expiration::OneShot(TimeSpec::from(left)),
                    TimerSetTimeFlags::empty(),
                )
            }
        };
        result.map_err(|e| io::Error::other(format!("setting the listener's timer: {e}")))
    }

    fn nearest(&self) -> Option<Instant> {
        self.handshakes.iter().map(Handshake::until).min()
    }

    /// How many handshakes run.
    pub(crate) fn len(&self) -> usize {
        self.handshakes.len() + self.reserved
    }

    /// Holds a place for a request answered without the backlog's lock, so that `accept`
    /// hands out established connections meanwhile; false when the backlog (with `most`
    /// places) is full. [`release`](Self::release) gives the place back, before the
    /// answer's handshake is pushed.
    pub(crate) fn reserve(&mut self, most: usize) -> bool {
        let room = self.len() < most;
        if room {
            self.reserved += 1;
        }
        room
    }

    /// Gives back a place [`reserve`](Self::reserve) held.
    pub(crate) fn release(&mut self) {
        self.reserved = self.reserved.saturating_sub(1);
    }

    /// What a blocking `accept` waits for: `listener_fd` (if given) and each handshake's fd,
    /// duplicated so that the wait holds no lock on the backlog (a clone's nonblocking
    /// `accept` must not wait behind it), until the nearest bound.
    pub(crate) fn wait_set(&self, listener_fd: Option<BorrowedFd<'_>>) -> io::Result<WaitSet> {
        let fds = listener_fd
            .into_iter()
            .chain([self.notice.as_fd()])
            .chain(self.handshakes.iter().map(Handshake::fd))
            .map(|fd| fd.try_clone_to_owned())
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| io::Error::other(format!("duplicating the listener's fds: {e}")))?;
        Ok(WaitSet {
            fds,
            until: self.nearest(),
        })
    }

    /// Watches every handshake's fd and a timer under `token` too (mio `register`).
    pub(crate) fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        self.deregister(registry);
        let timer = timer()?;
        SourceFd(&timer.as_fd().as_raw_fd()).register(registry, token, Interest::READABLE)?;
        SourceFd(&self.notice.as_fd().as_raw_fd()).register(registry, token, Interest::READABLE)?;
        for h in &mut self.handshakes {
            watch(registry, token, h)?;
        }
        self.watch = Some((registry.try_clone()?, token, timer));
        self.arm_timer()
    }

    /// Stops watching (mio `deregister`).
    pub(crate) fn deregister(&mut self, registry: &Registry) {
        if let Some((_, _, timer)) = self.watch.take() {
            let _ = SourceFd(&timer.as_fd().as_raw_fd()).deregister(registry);
            let _ = SourceFd(&self.notice.as_fd().as_raw_fd()).deregister(registry);
        }
        for h in &mut self.handshakes {
            unwatch(registry, h);
        }
    }
}

/// The fds and bound of one blocking wait in `accept` (see [`Backlog::wait_set`]).
pub(crate) struct WaitSet {
    fds: Vec<OwnedFd>,
    until: Option<Instant>,
}

impl WaitSet {
    /// Blocks until one of the fds is readable, or the bound.
    pub(crate) fn wait(&self) -> io::Result<()> {
        let mut fds: Vec<PollFd<'_>> = self
            .fds
            .iter()
            .map(|fd| PollFd::new(fd.as_fd(), PollFlags::POLLIN))
            .collect();
        let timeout = match self.until {
            None => PollTimeout::NONE,
            Some(t) => {
                let ms = t
                    .saturating_duration_since(Instant::now())
                    .as_millis()
                    .saturating_add(1);
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
            }
        };
        match nix::poll::poll(&mut fds, timeout) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
            Err(e) => Err(io::Error::other(format!("poll on the listener's fds: {e}"))),
        }
    }
}

/// Registers `h`'s current fd under `token`, replacing the one registered before.
fn watch(registry: &Registry, token: Token, h: &mut Handshake) -> io::Result<()> {
    let now = h.watch_now();
    if h.watched == Some(now) {
        return Ok(());
    }
    unwatch(registry, h);
    SourceFd(&h.fd_of(now).as_raw_fd()).register(registry, token, Interest::READABLE)?;
    h.watched = Some(now);
    Ok(())
}

fn unwatch(registry: &Registry, h: &mut Handshake) {
    if let Some(which) = h.watched.take() {
        let _ = SourceFd(&h.fd_of(which).as_raw_fd()).deregister(registry);
    }
}

/// Puts `h`'s current fd in the listener's own epoll, replacing the one there before.
fn own_watch(own: &Epoll, h: &mut Handshake) -> io::Result<()> {
    let now = h.watch_now();
    if h.owned == Some(now) {
        return Ok(());
    }
    own_unwatch(own, h);
    own.add(h.fd_of(now), EpollEvent::new(EpollFlags::EPOLLIN, 0))
        .map_err(own_error)?;
    h.owned = Some(now);
    Ok(())
}

fn own_unwatch(own: &Epoll, h: &mut Handshake) {
    if let Some(which) = h.owned.take() {
        let _ = own.delete(h.fd_of(which));
    }
}

/// iWARP responder: whether the initiator's first frame has arrived (a completion on the
/// queue), without posting the credits our stream has queued; arms the queue so that its
/// channel turns readable when one comes.
///
/// MPA (RFC 5044) lets the responder transmit only after the initiator's first FPDU, unless
/// both negotiated peer-to-peer RTR (RFC 6581), which siw as initiator never asks for. The
/// responder's ESTABLISHED comes as soon as its MPA reply is sent; a frame of ours that
/// reaches the initiator before its kernel worker has read that reply is read together with
/// the reply's private data, and siw then fails the connect (CONNECT_ERROR, EINVAL) and drops
/// the TCP connection. rdmasock initiators send their credits as soon as they are connected;
/// [`FIRST_FRAME_WAIT`] lets a silent initiator's connection go on (the initiator has long
/// read the reply by then), at the cost of a slower accept. The bound also ends the wait when
/// siw left our initiator's frames unread (see `CmEndpoint::nudge_after_first_receive`).
fn first_frame_seen(conn: &mut Connection) -> io::Result<bool> {
    if conn.drain_cq()? {
        return Ok(true);
    }
    let channel = &conn.res.cq_channel;
    let mut events = 0;
    while channel.try_get_event()?.is_some() {
        events += 1;
    }
    if events > 0 {
        conn.res.cq.ack_events(events);
    }
    conn.res.cq.req_notify(false)?;
    // A completion that came before the arming raises no event: look once more.
    conn.drain_cq()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request being answered outside the lock holds its place: the backlog counts it, and
    /// refuses a place beyond `most` until it is given back.
    #[test]
    fn reserved_places_count_as_handshakes_under_way() {
        let listener_fd = EventFd::from_flags(EfdFlags::EFD_NONBLOCK).unwrap();
        let mut backlog = Backlog::new(listener_fd.as_fd()).unwrap();
        assert!(backlog.reserve(2));
        assert!(backlog.reserve(2));
        assert_eq!(backlog.len(), 2);
        assert!(!backlog.reserve(2), "a third place in a backlog of 2");
        backlog.release();
        assert_eq!(backlog.len(), 1);
        assert!(backlog.reserve(2));
    }
}
