//! The connection manager as the socket layer sees it: a small trait family, so that a
//! userspace connection manager (for the userspace iWARP provider) can stand in for the
//! kernel's rdma_cm, which [`KernelCm`] drives.
#![forbid(unsafe_code)]

use crate::cm::{CmEvent, CmId, ConnectionParameters, EventChannel};
use crate::verbs::{Context, DeviceInfo, QueuePair, Transport};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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
    /// Binds to `addr` and listens with `backlog`.
    fn listen(&self, addr: SocketAddr, backlog: u32) -> io::Result<Box<dyn CmListener>>;
}

/// One connection's endpoint, bound to a device.
pub trait CmEndpoint: Send + Sync + fmt::Debug {
    /// The device the endpoint is on.
    fn device(&self) -> io::Result<DeviceInfo>;
    /// Opens a verbs context on that device (with the provider that drives it).
    fn open_context(&self) -> io::Result<Context>;
    /// Moves a new queue pair to INIT the way this manager wants.
    fn init_qp(&self, qp: &QueuePair) -> io::Result<()>;
    /// Active side: connects `qp` sending `private_data`; returns the peer's private data once
    /// `qp` can send.
    fn connect(
        &self,
        qp: &QueuePair,
        private_data: &[u8],
        timeout: Duration,
    ) -> io::Result<Vec<u8>>;
    /// Passive side: readies `qp` and accepts with `private_data`, without waiting; then
    /// [`poll_accept`](Self::poll_accept) tells when the connection is established.
    fn start_accept(&self, qp: &QueuePair, private_data: &[u8]) -> io::Result<()>;
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
    /// knob (its TCP socket's `TCP_USER_TIMEOUT`); on rxe the queue pair's retry count and
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

/// The kernel's rdma_cm (`/dev/infiniband/rdma_cm`), one event channel per connection.
#[derive(Debug, Default, Clone, Copy)]
pub struct KernelCm;

/// rsocket's connection parameters (see the stream module's documentation).
fn rsocket_parameters(private_data: &[u8]) -> ConnectionParameters {
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

impl ConnectionManager for KernelCm {
    fn resolve(&self, dst: SocketAddr, timeout: Duration) -> io::Result<Box<dyn CmEndpoint>> {
        kernel_resolve(None, dst, timeout)
    }

    fn resolve_from_free_port(
        &self,
        dst: SocketAddr,
        timeout: Duration,
    ) -> io::Result<Box<dyn CmEndpoint>> {
        kernel_resolve(Some(free_tcp_port_toward(dst)?), dst, timeout)
    }

    fn listen(&self, addr: SocketAddr, backlog: u32) -> io::Result<Box<dyn CmListener>> {
        let channel = EventChannel::open()?;
        if addr.ip().is_loopback() {
            // rdma_cm binds a loopback address to some device, but nobody can connect to it:
            // refuse it with the resolver's explanation (naming the devices and addresses).
            let probe = CmId::new(&channel)?;
            probe.resolve(None, addr, Duration::from_secs(2))?;
        }
        let id = CmId::new(&channel)?;
        id.bind(addr)?;
        id.listen(backlog)?;
        let local = id.local_addr()?;
        Ok(Box::new(KernelListener {
            id,
            local,
            removed: AtomicBool::new(false),
        }))
    }
}

/// A new rdma_cm id on a channel of its own, resolved to `dst` (from `src` when given).
fn kernel_resolve(
    src: Option<SocketAddr>,
    dst: SocketAddr,
    timeout: Duration,
) -> io::Result<Box<dyn CmEndpoint>> {
    let channel = EventChannel::open()?;
    let id = CmId::new(&channel)?;
    id.resolve(src, dst, timeout)?;
    Ok(Box::new(KernelEndpoint::new(id, true)))
}

/// The local address the kernel routes `dst` from, with a port that TCP's table has free
/// now: the routing is asked with an unsent UDP `connect`, the port by binding a TCP socket
/// (without `SO_REUSEADDR`, so no port any socket holds) and closing it again.
fn free_tcp_port_toward(dst: SocketAddr) -> io::Result<SocketAddr> {
    use socket2::{Domain, Protocol, Socket, Type};
    let any: SocketAddr = match dst {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let route = std::net::UdpSocket::bind(any)?;
    route.connect(dst)?;
    let ip = route.local_addr()?.ip();
    let probe = Socket::new(Domain::for_address(dst), Type::STREAM, Some(Protocol::TCP))?;
    probe.bind(&SocketAddr::new(ip, 0).into())?;
    probe
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("a TCP socket's address is not an IP address"))
}

/// A kernel rdma_cm id on a channel of its own.
#[derive(Debug)]
struct KernelEndpoint {
    id: CmId,
    local: Option<SocketAddr>,
    peer: Option<SocketAddr>,
    /// The active side (made by resolving, not by a request).
    initiator: bool,
}

impl KernelEndpoint {
    fn new(id: CmId, initiator: bool) -> Self {
        let (local, peer) = match id.query_addr() {
            Ok(a) => (a.local, a.peer),
            Err(_) => (None, None),
        };
        KernelEndpoint {
            id,
            local,
            peer,
            initiator,
        }
    }
}

impl CmEndpoint for KernelEndpoint {
    fn device(&self) -> io::Result<DeviceInfo> {
        Ok(self.id.device()?)
    }

    fn open_context(&self) -> io::Result<Context> {
        let device = self.device()?;
        Ok(Context::open(&device, &crate::default_registry())?)
    }

    fn init_qp(&self, qp: &QueuePair) -> io::Result<()> {
        Ok(self.id.init_qp(qp)?)
    }

    fn connect(
        &self,
        qp: &QueuePair,
        private_data: &[u8],
        timeout: Duration,
    ) -> io::Result<Vec<u8>> {
        let param = rsocket_parameters(private_data);
        let peer = self.id.connect_blocking(Some(qp), &param, timeout)?;
        Ok(peer.private_data)
    }

    fn start_accept(&self, qp: &QueuePair, private_data: &[u8]) -> io::Result<()> {
        let mut param = rsocket_parameters(private_data);
        if qp.context().device().transport == Transport::Iwarp {
            param.initiator_depth = 1;
        }
        Ok(self.id.accept_qp(qp, &param)?)
    }

    fn poll_accept(&self, qp: &QueuePair) -> io::Result<bool> {
        while let Some(ev) = self.id.channel().try_get_event()? {
            if ev.id != self.id.token() {
                continue;
            }
            return match ev.event {
                CmEvent::Established { .. } => {
                    self.id.note_established_qp(qp);
                    Ok(true)
                }
                other => {
                    let _ = qp.to_error();
                    Err(self.id.event_error("ESTABLISHED", other).into())
                }
            };
        }
        Ok(false)
    }

    fn reject(&self, private_data: &[u8]) -> io::Result<()> {
        Ok(self.id.reject(private_data)?)
    }

    fn disconnect(&self, qp: &QueuePair) -> io::Result<()> {
        match self.id.disconnect_qp(qp) {
            Ok(()) => Ok(()),
            // Already disconnected (the peer's DREQ was answered): nothing left to do.
            Err(crate::cm::Error::Command { source, .. })
                if source.raw_os_error() == Some(libc::EINVAL) =>
            {
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    fn poll_notice(&self) -> io::Result<Option<CmNotice>> {
        while let Some(ev) = self.id.channel().try_get_event()? {
            if ev.id != self.id.token() {
                continue;
            }
            match ev.event {
                CmEvent::Disconnected { .. } => return Ok(Some(CmNotice::Disconnected)),
                CmEvent::DeviceRemoval => return Ok(Some(CmNotice::DeviceRemoved)),
                // TIMEWAIT_EXIT, ADDR_CHANGE, a late ESTABLISHED: nothing for the stream.
                _ => {}
            }
        }
        Ok(None)
    }

    fn event_fd(&self) -> BorrowedFd<'_> {
        self.id.channel().as_fd()
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        self.local
    }

    fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }

    fn nudge_after_first_receive(&self) -> bool {
        self.initiator && self.id.transport() == Some(Transport::Iwarp)
    }

    fn disconnect_waits_for_peer(&self) -> bool {
        self.id.transport() == Some(Transport::Iwarp)
    }
}

#[derive(Debug)]
struct KernelListener {
    id: CmId,
    /// The bound address with its port, as LISTEN left it (the id cannot be asked once its
    /// device is gone).
    local: Option<SocketAddr>,
    /// The device under the bound address was removed (DEVICE_REMOVAL): the id takes no more
    /// requests, and the kernel finishes the removal only once it is destroyed.
    removed: AtomicBool,
}

impl KernelListener {
    fn removed_error(&self) -> io::Error {
        let addr = match self.local {
            Some(a) => a.to_string(),
            None => "the bound address".to_string(),
        };
        io::Error::new(
            io::ErrorKind::NotConnected,
            format!(
                "the RDMA device under {addr} was removed (DEVICE_REMOVAL): this listener takes \
                 no more connections; drop it (the kernel completes the removal once it and the \
                 connections on that device are gone) and bind again when the device is back"
            ),
        )
    }
}

impl CmListener for KernelListener {
    fn poll_request(&self) -> io::Result<Option<IncomingRequest>> {
        if self.removed.load(Ordering::Relaxed) {
            return Err(self.removed_error());
        }
        while let Some(ev) = self.id.channel().try_get_event()? {
            match ev.event {
                CmEvent::ConnectRequest(request) => {
                    let mut id = request.id;
                    let own = EventChannel::open()?;
                    id.migrate(&own)?;
                    return Ok(Some(IncomingRequest {
                        endpoint: Box::new(KernelEndpoint::new(id, false)),
                        private_data: request.param.private_data,
                    }));
                }
                CmEvent::DeviceRemoval => {
                    self.removed.store(true, Ordering::Relaxed);
                    return Err(self.removed_error());
                }
                // ADDR_CHANGE and the like: nothing for a listener.
                _ => {}
            }
        }
        Ok(None)
    }

    fn event_fd(&self) -> BorrowedFd<'_> {
        self.id.channel().as_fd()
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.local.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotConnected,
                "the listener has no local address",
            )
        })
    }
}
