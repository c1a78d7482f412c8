//! The seam every connection manager implements: [`ConnectionManager`] makes endpoints by
//! resolving a peer or by listening, [`CmEndpoint`] is one connection's endpoint and
//! [`CmListener`] a listening one.
//!
//! The kernel's rdma_cm ([`KernelCm`], in [`kernel`]) is one implementation; the userspace
//! iWARP provider (`rdmasock-uiwarp`) brings another, and the root crate's registry chooses
//! between them. Callers supply what is theirs to decide: the provider registry that opens a
//! verbs context ([`CmEndpoint::open_context`]) and the connection parameters a protocol wants
//! ([`CmEndpoint::connect`], [`CmEndpoint::start_accept`]).
//!
//! The active side runs in steps that never block, for event loops: [`ConnectionManager::
//! start_resolve`] and [`Resolving::poll`], then [`CmEndpoint::start_connect`] and
//! [`CmEndpoint::poll_connect`], each waiting on an fd that turns readable when the next poll
//! may get further. The blocking [`CmEndpoint::connect`] is those steps with poll(2) between.
#![forbid(unsafe_code)]

pub mod kernel;
mod process_channel;

pub use kernel::KernelCm;

use crate::ConnectionParameters;
use rdmasock_verbs::{Context, DeviceInfo, ProviderRegistry, QueuePair};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

/// What a connection's endpoint reports after it is established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmNotice {
    /// The connection is down (the peer disconnected, or its node went away).
    Disconnected,
    /// The device was removed.
    DeviceRemoved,
    /// The transport gave up on a peer that stopped acknowledging (uiwarp: TCP's user
    /// timeout, see [`CmEndpoint::set_liveness_timeout`]); [`CmEndpoint::end_reason`] says
    /// it in words.
    Lost,
}

/// A connection manager: makes endpoints by resolving a peer or by listening.
pub trait ConnectionManager: Send + Sync + fmt::Debug {
    /// Resolves `dst` to a local device and a route, within `timeout`.
    fn resolve(&self, dst: SocketAddr, timeout: Duration) -> io::Result<Box<dyn CmEndpoint>>;
    /// [`resolve`](Self::resolve) again after a connect failed because the source port the
    /// manager chose is taken in TCP's table (`AddrInUse`, `AddrNotAvailable`): on iWARP the
    /// kernel's rdma_cm picks ports in a space of its own, then siw binds a TCP socket to
    /// it, which fails where a `TcpStream` (never bound with `SO_REUSEADDR`) or its
    /// TIME_WAIT holds the port. The kernel manager binds to a port TCP just chose as free
    /// instead; the default resolves as before.
    fn resolve_from_free_port(
        &self,
        dst: SocketAddr,
        timeout: Duration,
    ) -> io::Result<Box<dyn CmEndpoint>> {
        self.resolve(dst, timeout)
    }
    /// Starts resolving `dst` (as [`resolve`](Self::resolve), or as
    /// [`resolve_from_free_port`](Self::resolve_from_free_port) when `from_free_port`) without
    /// blocking; the returned [`Resolving`] finishes it. The manager's own bounds use `timeout`;
    /// the caller enforces its deadline (dropping the [`Resolving`] abandons the resolution).
    fn start_resolve(
        &self,
        dst: SocketAddr,
        from_free_port: bool,
        timeout: Duration,
    ) -> io::Result<Box<dyn Resolving>>;
    /// Binds to `addr` and listens with `backlog`.
    fn listen(&self, addr: SocketAddr, backlog: u32) -> io::Result<Box<dyn CmListener>>;
}

/// A resolution in progress ([`ConnectionManager::start_resolve`]). Dropping it releases what
/// it holds at once.
pub trait Resolving: Send + Sync + fmt::Debug {
    /// An fd that turns readable when [`poll`](Self::poll) may get further (level-triggered).
    fn event_fd(&self) -> BorrowedFd<'_>;
    /// Moves the resolution on without blocking: `Ok(Some(endpoint))` once resolved (once
    /// only), `Ok(None)` while it runs, an error when it failed.
    fn poll(&mut self) -> io::Result<Option<Box<dyn CmEndpoint>>>;
    /// A new resolution of the same address by the same manager, from a port TCP has free (see
    /// [`ConnectionManager::resolve_from_free_port`]), for a connect whose port was taken.
    fn retry_from_free_port(&self, timeout: Duration) -> io::Result<Box<dyn Resolving>>;
}

/// One connection's endpoint, bound to a device.
pub trait CmEndpoint: Send + Sync + fmt::Debug {
    /// The device the endpoint is on.
    fn device(&self) -> io::Result<DeviceInfo>;
    /// Opens a verbs context on that device, with the provider `registry` picks for it (a
    /// manager whose device has a provider of its own opens with that one).
    fn open_context(&self, registry: &ProviderRegistry) -> io::Result<Context>;
    /// Moves a new queue pair to INIT the way this manager wants.
    fn init_qp(&self, qp: &QueuePair) -> io::Result<()>;
    /// Active side: connects `qp` with `parameters` (their private data included; a manager
    /// uses the fields its transport has); returns the peer's private data once `qp` can send.
    /// The steps [`start_connect`](Self::start_connect) and
    /// [`poll_connect`](Self::poll_connect), with poll(2) on
    /// [`connect_fd`](Self::connect_fd) between them, bounded by `timeout`.
    fn connect(
        &self,
        qp: &QueuePair,
        parameters: &ConnectionParameters,
        timeout: Duration,
    ) -> io::Result<Vec<u8>> {
        let deadline = Instant::now().checked_add(timeout);
        self.start_connect(qp, parameters, timeout)?;
        loop {
            if let Some(peer) = self.poll_connect(qp)? {
                return Ok(peer);
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                return Err(self.connect_timed_out(qp));
            }
            wait_readable(self.connect_fd(), left)?;
        }
    }
    /// Active side, without blocking: starts connecting `qp` with `parameters` (as
    /// [`connect`](Self::connect)); [`poll_connect`](Self::poll_connect) finishes it.
    /// `timeout` is what the connect is given in all (for the manager's own bounds and its
    /// timeout error); the caller enforces it.
    fn start_connect(
        &self,
        qp: &QueuePair,
        parameters: &ConnectionParameters,
        timeout: Duration,
    ) -> io::Result<()>;
    /// Active side, after [`start_connect`](Self::start_connect): `Ok(Some(private_data))`
    /// with the peer's private data once `qp` can send, `Ok(None)` while the connect runs
    /// ([`connect_fd`](Self::connect_fd) turns readable when that may have changed), an error
    /// when it failed. Does not block.
    fn poll_connect(&self, qp: &QueuePair) -> io::Result<Option<Vec<u8>>>;
    /// The error of a connect whose time ran out before [`poll_connect`](Self::poll_connect)
    /// finished it (the manager's own words, naming the peer); also stops the attempt.
    fn connect_timed_out(&self, qp: &QueuePair) -> io::Error;
    /// An fd that turns readable when [`poll_connect`](Self::poll_connect) may get further
    /// (level-triggered). By default the [`event_fd`](Self::event_fd).
    fn connect_fd(&self) -> BorrowedFd<'_> {
        self.event_fd()
    }
    /// Passive side: readies `qp` and accepts with `parameters`, without waiting; then
    /// [`poll_accept`](Self::poll_accept) tells when the connection is established.
    fn start_accept(&self, qp: &QueuePair, parameters: &ConnectionParameters) -> io::Result<()>;
    /// Passive side, after [`start_accept`](Self::start_accept): `Ok(true)` once the
    /// connection is established (`qp` can send), `Ok(false)` while the handshake runs (the
    /// [`event_fd`](Self::event_fd) turns readable when that may have changed), an error when
    /// it failed. Does not block.
    fn poll_accept(&self, qp: &QueuePair) -> io::Result<bool>;
    /// Passive side: refuses the request with `private_data` (a short reason).
    fn reject(&self, private_data: &[u8]) -> io::Result<()>;
    /// Moves `qp` out of the connected state and starts (or answers) the disconnect.
    fn disconnect(&self, qp: &QueuePair) -> io::Result<()>;
    /// The next notice, without blocking.
    fn poll_notice(&self) -> io::Result<Option<CmNotice>>;
    /// An fd that turns readable when [`poll_notice`](Self::poll_notice) has something.
    fn event_fd(&self) -> BorrowedFd<'_>;
    /// Whether [`wake`](Self::wake) can make the [`event_fd`](Self::event_fd) readable, so
    /// that a caller sleeping on it can be woken by another thread without an fd of its own.
    /// True for the kernel manager, whose event fd is an eventfd.
    fn can_wake(&self) -> bool {
        false
    }
    /// Where [`can_wake`](Self::can_wake): makes the [`event_fd`](Self::event_fd) readable
    /// until [`take_wake`](Self::take_wake) (every reader of the fd then polls as after any
    /// readiness). Otherwise nothing.
    fn wake(&self) {}
    /// Takes back a [`wake`](Self::wake); the fd stays readable while notices wait.
    fn take_wake(&self) {}
    /// The local address.
    fn local_addr(&self) -> Option<SocketAddr>;
    /// The peer's address.
    fn peer_addr(&self) -> Option<SocketAddr>;
    /// Whether the stream must send one more frame (a keepalive) once the peer's first frame
    /// has arrived. True on the active side of a kernel iWARP connection: siw as responder
    /// hands its TCP socket to the queue pair only after sending the MPA reply, and frames of
    /// ours that arrive in between stay unread until more data comes (see
    /// `RdmaListener::accept`'s wait for our first frame, which then runs out and sends).
    fn nudge_after_first_receive(&self) -> bool {
        false
    }
    /// Whether the side that closes first must wait for the peer's close before the
    /// connection manager's disconnect. True on kernel iWARP: there a send completion means
    /// only that TCP took the bytes, and the disconnect releases the TCP socket at once, so
    /// that segments the peer still sends (its credit updates) draw a reset that also throws
    /// away our DISCONNECT message (or data) still waiting to be retransmitted. On InfiniBand
    /// and RoCE a completion means the peer acknowledged; the userspace provider closes its
    /// own TCP socket gracefully.
    fn disconnect_waits_for_peer(&self) -> bool {
        false
    }
    /// Bounds how long the transport keeps retrying data the peer does not acknowledge,
    /// once the connection is up (`None`: the transport's default). Only uiwarp has such a
    /// knob (its check of the TCP connection's progress); on rxe the queue pair's retry count and
    /// timeout bound it, and the kernel's siw keeps its TCP socket to itself, so there this
    /// does nothing.
    fn set_liveness_timeout(&self, _timeout: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
    /// Why the connection ended, in words, once it has (where the manager knows).
    fn end_reason(&self) -> Option<String> {
        None
    }
}

/// A connection request that arrived at a listener.
#[derive(Debug)]
pub struct IncomingRequest {
    /// The new connection's endpoint, with an event fd of its own.
    pub endpoint: Box<dyn CmEndpoint>,
    /// The peer's private data (its hello).
    pub private_data: Vec<u8>,
}

/// A listening endpoint.
pub trait CmListener: Send + Sync + fmt::Debug {
    /// The next connection request, without blocking.
    fn poll_request(&self) -> io::Result<Option<IncomingRequest>>;
    /// An fd that turns readable when a request may be waiting.
    fn event_fd(&self) -> BorrowedFd<'_>;
    /// The bound address (with the chosen port).
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

/// Waits until `fd` is readable or `timeout` (`None`: forever) passes; an interrupted wait
/// returns early too (the caller polls again).
fn wait_readable(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<()> {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    let ms = match timeout {
        None => PollTimeout::NONE,
        // Rounded up, so that the wait does not end just before the deadline.
        Some(t) => {
            PollTimeout::try_from(t.as_nanos().div_ceil(1_000_000)).unwrap_or(PollTimeout::MAX)
        }
    };
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    match nix::poll::poll(&mut fds, ms) {
        Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
        Err(e) => Err(io::Error::other(format!(
            "poll on the connection manager's fd: {e}"
        ))),
    }
}
