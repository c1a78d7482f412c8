//! The kernel's rdma_cm as a [`ConnectionManager`]: a connection's id lives on the process's
//! event channel (read by the thread `rdmasock-cm`) once it has an endpoint; a resolution and a listener
//! have a channel of their own.
#![forbid(unsafe_code)]

use super::process_channel::{self, Adoption};
use super::{CmEndpoint, CmListener, CmNotice, ConnectionManager, IncomingRequest, Resolving};
use crate::{CmEvent, CmId, ConnectionParameters, EventChannel};
use rdmasock_verbs::{Context, DeviceInfo, ProviderRegistry, QueuePair, Transport};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// The kernel's rdma_cm (`/dev/infiniband/rdma_cm`). Established connections share one
/// event channel per process, read by the thread `rdmasock-cm`, so that a connection holds no
/// fd of the connection manager's but its event fd (an eventfd); each listener and each
/// resolution in progress has a channel of its own.
#[derive(Debug, Default, Clone, Copy)]
pub struct KernelCm;

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

    fn start_resolve(
        &self,
        dst: SocketAddr,
        from_free_port: bool,
        timeout: Duration,
    ) -> io::Result<Box<dyn Resolving>> {
        let src = match from_free_port {
            true => Some(free_tcp_port_toward(dst)?),
            false => None,
        };
        let channel = EventChannel::open()?;
        let id = CmId::new(&channel)?;
        id.resolve_addr(src, dst, timeout)?;
        Ok(Box::new(KernelResolving {
            channel,
            id: Some(id),
            dst,
            route_started: false,
            timeout,
        }))
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

/// A new rdma_cm id resolved to `dst` (from `src` when given) on a channel of its own, then
/// moved onto the process's channel.
fn kernel_resolve(
    src: Option<SocketAddr>,
    dst: SocketAddr,
    timeout: Duration,
) -> io::Result<Box<dyn CmEndpoint>> {
    let channel = EventChannel::open()?;
    let id = CmId::new(&channel)?;
    id.resolve(src, dst, timeout)?;
    drop(channel);
    Ok(Box::new(KernelEndpoint::new(id, true)?))
}

/// A kernel rdma_cm id whose address, then route, is being resolved.
#[derive(Debug)]
struct KernelResolving {
    channel: EventChannel,
    /// Handed over to the endpoint once resolved.
    id: Option<CmId>,
    dst: SocketAddr,
    /// RESOLVE_ROUTE was sent (ADDR_RESOLVED came).
    route_started: bool,
    timeout: Duration,
}

impl Resolving for KernelResolving {
    fn event_fd(&self) -> BorrowedFd<'_> {
        self.channel.as_fd()
    }

    fn poll(&mut self) -> io::Result<Option<Box<dyn CmEndpoint>>> {
        let Some(id) = &self.id else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the resolution was handed over already",
            ));
        };
        while let Some(ev) = id.channel().try_get_event()? {
            if ev.id != id.token() {
                continue;
            }
            match (self.route_started, ev.event) {
                (false, CmEvent::AddrResolved) => {
                    id.resolve_route(self.timeout)?;
                    self.route_started = true;
                }
                (true, CmEvent::RouteResolved) => {
                    let id = self.id.take().expect("checked above");
                    return Ok(Some(Box::new(KernelEndpoint::new(id, true)?)));
                }
                (false, other) => return Err(id.event_error("ADDR_RESOLVED", other).into()),
                (true, other) => return Err(id.event_error("ROUTE_RESOLVED", other).into()),
            }
        }
        Ok(None)
    }

    fn retry_from_free_port(&self, timeout: Duration) -> io::Result<Box<dyn Resolving>> {
        KernelCm.start_resolve(self.dst, true, timeout)
    }
}

/// The local address the kernel routes `dst` from, with a port that TCP's table has free
/// now: the routing is asked with an unsent UDP `connect`, the port by binding a TCP socket
/// (without `SO_REUSEADDR`, so no port any socket holds) and closing it again.
pub fn free_tcp_port_toward(dst: SocketAddr) -> io::Result<SocketAddr> {
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

/// A kernel rdma_cm id on the process's channel; its events arrive in its inbox.
#[derive(Debug)]
struct KernelEndpoint {
    id: CmId,
    /// The id's place on the process's channel, and its inbox.
    adoption: Adoption,
    local: Option<SocketAddr>,
    peer: Option<SocketAddr>,
    /// The active side (made by resolving, not by a request).
    initiator: bool,
    /// What [`CmEndpoint::start_connect`] was given in all, for its timeout error.
    connect_timeout: Mutex<Duration>,
}

impl KernelEndpoint {
    /// The endpoint of `id`, which moves onto the process's channel.
    fn new(mut id: CmId, initiator: bool) -> io::Result<Self> {
        let (local, peer) = match id.query_addr() {
            Ok(a) => (a.local, a.peer),
            Err(_) => (None, None),
        };
        let adoption = process_channel::adopt(&mut id)?;
        Ok(KernelEndpoint {
            id,
            adoption,
            local,
            peer,
            initiator,
            connect_timeout: Mutex::new(Duration::ZERO),
        })
    }
}

impl CmEndpoint for KernelEndpoint {
    fn device(&self) -> io::Result<DeviceInfo> {
        Ok(self.id.device()?)
    }

    fn open_context(&self, registry: &ProviderRegistry) -> io::Result<Context> {
        let device = self.device()?;
        Ok(Context::open(&device, registry)?)
    }

    fn init_qp(&self, qp: &QueuePair) -> io::Result<()> {
        Ok(self.id.init_qp(qp)?)
    }

    fn start_connect(
        &self,
        qp: &QueuePair,
        parameters: &ConnectionParameters,
        timeout: Duration,
    ) -> io::Result<()> {
        *self
            .connect_timeout
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = timeout;
        Ok(self.id.start_connect_qp(qp, parameters)?)
    }

    fn poll_connect(&self, qp: &QueuePair) -> io::Result<Option<Vec<u8>>> {
        match self.adoption.inbox().next() {
            Some(event) => Ok(Some(self.id.finish_connect_qp(qp, event)?.private_data)),
            None => Ok(None),
        }
    }

    fn connect_timed_out(&self, _qp: &QueuePair) -> io::Error {
        let timeout = *self
            .connect_timeout
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        crate::Error::TimedOut {
            operation: "CONNECT_RESPONSE",
            target: self.id.describe(),
            timeout,
        }
        .into()
    }

    fn start_accept(&self, qp: &QueuePair, parameters: &ConnectionParameters) -> io::Result<()> {
        Ok(self.id.accept_qp(qp, parameters)?)
    }

    fn poll_accept(&self, qp: &QueuePair) -> io::Result<bool> {
        if let Some(event) = self.adoption.inbox().next() {
            return match event {
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
            Err(crate::Error::Command { source, .. })
                if source.raw_os_error() == Some(libc::EINVAL) =>
            {
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    fn poll_notice(&self) -> io::Result<Option<CmNotice>> {
        while let Some(event) = self.adoption.inbox().next() {
            match event {
                CmEvent::Disconnected { .. } => return Ok(Some(CmNotice::Disconnected)),
                CmEvent::DeviceRemoval => return Ok(Some(CmNotice::DeviceRemoved)),
                // TIMEWAIT_EXIT, ADDR_CHANGE, a late ESTABLISHED: nothing for the stream.
                _ => {}
            }
        }
        Ok(None)
    }

    fn event_fd(&self) -> BorrowedFd<'_> {
        self.adoption.inbox().fd()
    }

    fn can_wake(&self) -> bool {
        true
    }

    fn wake(&self) {
        self.adoption.inbox().wake();
    }

    fn take_wake(&self) {
        self.adoption.inbox().take_wake();
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

/// A kernel rdma_cm id listening on a channel of its own.
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
                    return Ok(Some(IncomingRequest {
                        endpoint: Box::new(KernelEndpoint::new(request.id, false)?),
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
