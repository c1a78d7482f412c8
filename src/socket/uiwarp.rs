//! The userspace connection manager for the userspace iWARP provider (`uiwarp`), and the
//! choice between it and the kernel's rdma_cm.
//!
//! [`UiwarpCm`] listens on and dials plain TCP ports; the MPA exchange carries the rsocket
//! hello as private data and the queue pair reaches RTS by itself. [`AutoCm`], what
//! `RdmaSocket::connect` and `RdmaListener::bind` use, takes the kernel path when a kernel
//! RDMA device serves the address, else this one, and says so once on stderr; the
//! `RDMASOCK_PROVIDER` variable forces either (`uiwarp`, or a kernel provider).
#![forbid(unsafe_code)]

use super::cm::{CmEndpoint, CmListener, CmNotice, ConnectionManager, IncomingRequest, KernelCm};
use crate::registry::{ProviderChoice, ProviderKind};
use crate::verbs::provider::Provider;
use crate::verbs::qp_attr::{QpAttrMask, QpAttributes};
use crate::verbs::{AccessFlags, Context, DeviceInfo, QpState, QueuePair};
use nix::sys::eventfd::{EfdFlags, EventFd};
use rdmasock_uiwarp::driver::Endpoint;
use rdmasock_uiwarp::{Notice, Rejected, UiwarpListener, UiwarpProvider, UiwarpRequest};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::time::Duration;

/// The userspace connection manager: iWARP connection setup over TCP, in this process.
#[derive(Debug, Default, Clone, Copy)]
pub struct UiwarpCm;

impl ConnectionManager for UiwarpCm {
    fn resolve(&self, dst: SocketAddr, _timeout: Duration) -> io::Result<Box<dyn CmEndpoint>> {
        Ok(Box::new(UiwarpEndpoint::new(Some(dst), None, None)?))
    }

    fn listen(&self, addr: SocketAddr, backlog: u32) -> io::Result<Box<dyn CmListener>> {
        Ok(Box::new(UiwarpCmListener {
            listener: UiwarpListener::bind(addr, backlog)?,
        }))
    }
}

/// One connection's endpoint on uiwarp0.
#[derive(Debug)]
struct UiwarpEndpoint {
    peer: Option<SocketAddr>,
    local: Option<SocketAddr>,
    request: Mutex<Option<UiwarpRequest>>,
    qp: OnceLock<Arc<Endpoint>>,
    /// Stands in for the QP's notice fd until the QP exists; never readable.
    idle: EventFd,
}

impl UiwarpEndpoint {
    fn new(
        peer: Option<SocketAddr>,
        local: Option<SocketAddr>,
        request: Option<UiwarpRequest>,
    ) -> io::Result<UiwarpEndpoint> {
        Ok(UiwarpEndpoint {
            peer,
            local,
            request: Mutex::new(request),
            qp: OnceLock::new(),
            idle: EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?,
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
        Ok(rdmasock_uiwarp::device_info())
    }

    fn open_context(&self) -> io::Result<Context> {
        let ops = UiwarpProvider::new().open(&rdmasock_uiwarp::device_info())?;
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
        let _ = self.qp.set(rdmasock_uiwarp::driver::endpoint(qp)?);
        Ok(())
    }

    fn connect(
        &self,
        qp: &QueuePair,
        private_data: &[u8],
        timeout: Duration,
    ) -> io::Result<Vec<u8>> {
        let dst = self.peer.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "a passive endpoint cannot connect",
            )
        })?;
        rdmasock_uiwarp::connect(qp, dst, private_data, timeout).map_err(explain)
    }

    fn start_accept(&self, qp: &QueuePair, private_data: &[u8]) -> io::Result<()> {
        self.take_request()?.start_accept(qp, private_data)
    }

    fn poll_accept(&self, qp: &QueuePair) -> io::Result<bool> {
        rdmasock_uiwarp::accepted(qp)
    }

    fn reject(&self, private_data: &[u8]) -> io::Result<()> {
        self.take_request()?.reject(private_data)
    }

    fn disconnect(&self, qp: &QueuePair) -> io::Result<()> {
        rdmasock_uiwarp::disconnect(qp)
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
            Some(e) => e.set_tcp_user_timeout(timeout),
            None => Ok(()),
        }
    }

    fn end_reason(&self) -> Option<String> {
        self.qp.get().and_then(|e| e.end_reason())
    }

    fn event_fd(&self) -> BorrowedFd<'_> {
        match self.qp.get() {
            Some(e) => e.notice_fd(),
            None => self.idle.as_fd(),
        }
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        self.qp.get().and_then(|e| e.local_addr()).or(self.local)
    }

    fn peer_addr(&self) -> Option<SocketAddr> {
        self.qp.get().and_then(|e| e.peer_addr()).or(self.peer)
    }
}

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

/// The connection manager `RdmaSocket::connect` and `RdmaListener::bind` use: the kernel's
/// rdma_cm when a kernel RDMA device serves the address, else [`UiwarpCm`] (said once on
/// stderr). `RDMASOCK_PROVIDER=uiwarp` forces the userspace path; `rxe`, `siw` or `ibverbs`
/// force the kernel path.
#[derive(Debug, Default, Clone, Copy)]
pub struct AutoCm;

/// Which path `RDMASOCK_PROVIDER` forces, if any.
fn forced() -> io::Result<Option<bool>> {
    let choice =
        ProviderChoice::from_env().map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    if choice.forces_userspace() {
        return Ok(Some(true));
    }
    // A name no device has: what the variable asks for every device.
    let kernel = matches!(
        choice.for_device("\0every device"),
        Some(ProviderKind::Rxe | ProviderKind::Siw | ProviderKind::Ibverbs)
    );
    Ok(kernel.then_some(false))
}

/// Whether the kernel has any RDMA device at all.
fn kernel_has_devices() -> bool {
    std::fs::read_dir("/sys/class/infiniband")
        .map(|mut d| d.next().is_some())
        .unwrap_or(false)
}

/// Whether a kernel-path error means "no kernel RDMA device serves this address".
fn no_kernel_device(e: &io::Error) -> bool {
    matches!(
        e.get_ref()
            .and_then(|r| r.downcast_ref::<crate::cm::Error>()),
        Some(crate::cm::Error::NoRdmaDevice { .. } | crate::cm::Error::NotLoaded { .. })
    )
}

fn announce(addr: SocketAddr) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        eprintln!(
            "rdmasock: no kernel RDMA device serves {addr}; using the userspace iWARP provider (uiwarp)"
        );
    });
}

impl AutoCm {
    fn pick<T>(
        &self,
        addr: SocketAddr,
        kernel: impl FnOnce() -> io::Result<T>,
        user: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        match forced()? {
            Some(true) => return user(),
            Some(false) => return kernel(),
            None => {}
        }
        if !kernel_has_devices() {
            announce(addr);
            return user();
        }
        match kernel() {
            Err(e) if no_kernel_device(&e) => {
                announce(addr);
                user()
            }
            r => r,
        }
    }
}

impl ConnectionManager for AutoCm {
    fn resolve(&self, dst: SocketAddr, timeout: Duration) -> io::Result<Box<dyn CmEndpoint>> {
        self.pick(
            dst,
            || KernelCm.resolve(dst, timeout),
            || UiwarpCm.resolve(dst, timeout),
        )
    }

    fn resolve_from_free_port(
        &self,
        dst: SocketAddr,
        timeout: Duration,
    ) -> io::Result<Box<dyn CmEndpoint>> {
        self.pick(
            dst,
            || KernelCm.resolve_from_free_port(dst, timeout),
            || UiwarpCm.resolve_from_free_port(dst, timeout),
        )
    }

    fn listen(&self, addr: SocketAddr, backlog: u32) -> io::Result<Box<dyn CmListener>> {
        self.pick(
            addr,
            || KernelCm.listen(addr, backlog),
            || UiwarpCm.listen(addr, backlog),
        )
    }
}
