//! The userspace connection manager: this provider's implementation of rdmasock-cm's
//! [`ConnectionManager`] seam.
//!
//! [`UiwarpCm`] listens on and dials plain TCP ports; the MPA exchange carries the caller's
//! private data and the queue pair reaches RTS by itself. Of the connection parameters only
//! the private data travels (MPA has no field for the others).
#![forbid(unsafe_code)]

use crate::driver::Endpoint;
use crate::{Dial, Notice, Rejected, UiwarpListener, UiwarpProvider, UiwarpRequest};
use nix::sys::eventfd::{EfdFlags, EventFd};
use rdmasock_cm::{
    CmEndpoint, CmListener, CmNotice, ConnectionManager, ConnectionParameters, IncomingRequest,
    Resolving,
};
use rdmasock_verbs::provider::Provider;
use rdmasock_verbs::qp_attr::{QpAttrMask, QpAttributes};
use rdmasock_verbs::{AccessFlags, Context, DeviceInfo, ProviderRegistry, QpState, QueuePair};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The userspace connection manager: iWARP connection setup over TCP, in this process.
#[derive(Debug, Default, Clone, Copy)]
pub struct UiwarpCm;

impl ConnectionManager for UiwarpCm {
    fn resolve(&self, dst: SocketAddr, _timeout: Duration) -> io::Result<Box<dyn CmEndpoint>> {
        Ok(Box::new(UiwarpEndpoint::new(Some(dst), None, None)?))
    }

    fn start_resolve(
        &self,
        dst: SocketAddr,
        _from_free_port: bool,
        _timeout: Duration,
    ) -> io::Result<Box<dyn Resolving>> {
        Ok(Box::new(UiwarpResolving {
            dst,
            endpoint: Some(Box::new(UiwarpEndpoint::new(Some(dst), None, None)?)),
            ready: EventFd::from_value_and_flags(
                1,
                EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC,
            )?,
        }))
    }

    fn listen(&self, addr: SocketAddr, backlog: u32) -> io::Result<Box<dyn CmListener>> {
        Ok(Box::new(UiwarpCmListener {
            listener: UiwarpListener::bind(addr, backlog)?,
        }))
    }
}

/// A resolution on uiwarp0, which has nothing to resolve: done at once (TCP finds the route
/// when it connects).
#[derive(Debug)]
struct UiwarpResolving {
    dst: SocketAddr,
    endpoint: Option<Box<dyn CmEndpoint>>,
    /// Readable while the endpoint waits to be taken.
    ready: EventFd,
}

impl Resolving for UiwarpResolving {
    fn event_fd(&self) -> BorrowedFd<'_> {
        self.ready.as_fd()
    }

    fn poll(&mut self) -> io::Result<Option<Box<dyn CmEndpoint>>> {
        let _ = self.ready.read();
        Ok(self.endpoint.take())
    }

    fn retry_from_free_port(&self, timeout: Duration) -> io::Result<Box<dyn Resolving>> {
        UiwarpCm.start_resolve(self.dst, true, timeout)
    }
}

fn never_readable() -> io::Result<EventFd> {
    Ok(EventFd::from_value_and_flags(
        0,
        EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC,
    )?)
}

/// A never-readable fd the process shares, for an endpoint that could not make its own:
/// made with the first endpoint ([`UiwarpEndpoint::new`] fails without it).
static SHARED_IDLE: OnceLock<EventFd> = OnceLock::new();

/// Makes [`SHARED_IDLE`] if it is not yet.
fn make_shared_idle() -> io::Result<()> {
    if SHARED_IDLE.get().is_none() {
        let fd = never_readable()?;
        let _ = SHARED_IDLE.set(fd);
    }
    Ok(())
}

/// [`SHARED_IDLE`], which every endpoint made sure of.
fn shared_never_readable() -> BorrowedFd<'static> {
    SHARED_IDLE
        .get()
        .expect("made by UiwarpEndpoint::new")
        .as_fd()
}

/// One connection's endpoint on uiwarp0.
#[derive(Debug)]
struct UiwarpEndpoint {
    peer: Option<SocketAddr>,
    local: Option<SocketAddr>,
    request: Mutex<Option<UiwarpRequest>>,
    qp: OnceLock<Arc<Endpoint>>,
    /// Stands in for the QP's notice fd until the QP exists; never readable. Made only when
    /// asked for before the QP exists (an fd a connection would hold for nothing after).
    idle: OnceLock<EventFd>,
    /// The active side's connect while it runs (its QP's notice fd says when to poll it).
    dial: Mutex<Option<Dial>>,
}

impl UiwarpEndpoint {
    fn new(
        peer: Option<SocketAddr>,
        local: Option<SocketAddr>,
        request: Option<UiwarpRequest>,
    ) -> io::Result<UiwarpEndpoint> {
        make_shared_idle()?;
        Ok(UiwarpEndpoint {
            peer,
            local,
            request: Mutex::new(request),
            qp: OnceLock::new(),
            idle: OnceLock::new(),
            dial: Mutex::new(None),
        })
    }

    fn take_request(&self) -> io::Result<UiwarpRequest> {
        self.request
            .lock()
            .expect("uiwarp request lock")
            .take()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "this endpoint has no connection request to answer (answered already, or it is the active side)",
                )
            })
    }
}

/// A rejection's private data as text, when it is printable (an rdmasock listener's reason).
fn explain(e: io::Error) -> io::Error {
    let text = e
        .get_ref()
        .and_then(|r| r.downcast_ref::<Rejected>())
        .map(|r| {
            String::from_utf8_lossy(&r.private_data)
                .trim_end_matches('\0')
                .to_string()
        });
    match text {
        Some(t) if !t.is_empty() && t.chars().all(|c| !c.is_control()) => {
            io::Error::new(e.kind(), format!("{e}: \"{t}\""))
        }
        _ => e,
    }
}

impl CmEndpoint for UiwarpEndpoint {
    fn device(&self) -> io::Result<DeviceInfo> {
        Ok(crate::device_info())
    }

    /// Opens uiwarp0 with this provider: `registry` has no say over the userspace device.
    fn open_context(&self, _registry: &ProviderRegistry) -> io::Result<Context> {
        let ops = UiwarpProvider::new().open(&crate::device_info())?;
        Ok(Context::from_ops(ops))
    }

    fn init_qp(&self, qp: &QueuePair) -> io::Result<()> {
        qp.modify(
            &QpAttributes {
                qp_state: QpState::Init,
                port_num: 1,
                qp_access_flags: AccessFlags::LOCAL_WRITE
                    | AccessFlags::REMOTE_WRITE
                    | AccessFlags::REMOTE_READ,
                ..QpAttributes::default()
            },
            QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | QpAttrMask::ACCESS_FLAGS,
        )?;
        let _ = self.qp.set(crate::driver::endpoint(qp)?);
        Ok(())
    }

    fn start_connect(
        &self,
        qp: &QueuePair,
        parameters: &ConnectionParameters,
        timeout: Duration,
    ) -> io::Result<()> {
        let dst = self.peer.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "a passive endpoint cannot connect",
            )
        })?;
        let dial = Dial::start(qp, dst, &parameters.private_data, timeout)?;
        *self.dial.lock().expect("uiwarp dial lock") = Some(dial);
        Ok(())
    }

    fn poll_connect(&self, qp: &QueuePair) -> io::Result<Option<Vec<u8>>> {
        let mut dial = self.dial.lock().expect("uiwarp dial lock");
        let Some(dial) = dial.as_mut() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no connect runs on this endpoint (start_connect first)",
            ));
        };
        dial.poll(qp).map_err(explain)
    }

    fn connect_timed_out(&self, qp: &QueuePair) -> io::Error {
        match self.dial.lock().expect("uiwarp dial lock").take() {
            Some(dial) => dial.timed_out(qp),
            None => io::Error::new(
                io::ErrorKind::InvalidInput,
                "no connect runs on this endpoint (start_connect first)",
            ),
        }
    }

    fn connect_fd(&self) -> BorrowedFd<'_> {
        self.event_fd()
    }

    fn start_accept(&self, qp: &QueuePair, parameters: &ConnectionParameters) -> io::Result<()> {
        self.take_request()?
            .start_accept(qp, &parameters.private_data)
    }

    fn poll_accept(&self, qp: &QueuePair) -> io::Result<bool> {
        crate::accepted(qp)
    }

    fn reject(&self, private_data: &[u8]) -> io::Result<()> {
        self.take_request()?.reject(private_data)
    }

    fn disconnect(&self, qp: &QueuePair) -> io::Result<()> {
        crate::disconnect(qp)
    }

    fn poll_notice(&self) -> io::Result<Option<CmNotice>> {
        Ok(self
            .qp
            .get()
            .and_then(|e| e.poll_notice())
            .map(|n| match n {
                Notice::Disconnected => CmNotice::Disconnected,
                Notice::Lost => CmNotice::Lost,
            }))
    }

    fn set_liveness_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self.qp.get() {
            Some(e) => {
                e.set_liveness_timeout(timeout);
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn end_reason(&self) -> Option<String> {
        self.qp.get().and_then(|e| e.end_reason())
    }

    fn event_fd(&self) -> BorrowedFd<'_> {
        match self.qp.get() {
            Some(e) => e.notice_fd(),
            None => match self.idle.get() {
                Some(fd) => fd.as_fd(),
                None => match never_readable() {
                    Ok(fd) => self.idle.get_or_init(|| fd).as_fd(),
                    // Out of fds: one the process shares (never readable either).
                    Err(_) => shared_never_readable(),
                },
            },
        }
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        self.qp.get().and_then(|e| e.local_addr()).or(self.local)
    }

    fn peer_addr(&self) -> Option<SocketAddr> {
        self.qp.get().and_then(|e| e.peer_addr()).or(self.peer)
    }
}

/// A listening TCP port for MPA requests.
#[derive(Debug)]
struct UiwarpCmListener {
    listener: UiwarpListener,
}

impl CmListener for UiwarpCmListener {
    fn poll_request(&self) -> io::Result<Option<IncomingRequest>> {
        let Some(request) = self.listener.try_request() else {
            return Ok(None);
        };
        let private_data = request.private_data().to_vec();
        let (peer, local) = (request.peer_addr(), request.local_addr());
        Ok(Some(IncomingRequest {
            endpoint: Box::new(UiwarpEndpoint::new(peer, local, Some(request))?),
            private_data,
        }))
    }

    fn event_fd(&self) -> BorrowedFd<'_> {
        self.listener.as_fd()
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.listener.local_addr())
    }
}
