//! Which connection manager serves an address: the kernel's rdma_cm ([`KernelCm`]) or the
//! userspace iWARP provider's ([`UiwarpCm`]).
//!
//! [`connection_manager`], what `RdmaSocket::connect` and `RdmaListener::bind` use, takes the
//! kernel path when a kernel RDMA device serves the address, else the userspace one, and says
//! so once on stderr; `RDMASOCK_PROVIDER` forces either (`uiwarp`, or a kernel provider).
//! [`connection_manager_for`] gives the one a provider kind connects with, for programs that
//! force one.
#![forbid(unsafe_code)]

use super::{ProviderChoice, ProviderKind};
use rdmasock_cm::{CmEndpoint, CmListener, ConnectionManager, KernelCm, Resolving};
use rdmasock_uiwarp::UiwarpCm;
use std::io;
use std::net::SocketAddr;
use std::sync::Once;
use std::time::Duration;

/// The connection manager `RdmaSocket::connect` and `RdmaListener::bind` use: the kernel's
/// rdma_cm when a kernel RDMA device serves the address, else the userspace iWARP provider's
/// (said once on stderr). `RDMASOCK_PROVIDER=uiwarp` forces the userspace path; `rxe`, `siw`
/// or `ibverbs` force the kernel path.
pub fn connection_manager() -> &'static dyn ConnectionManager {
    &AutoCm
}

/// The connection manager `kind` connects with: the userspace one for
/// [`ProviderKind::Uiwarp`], the kernel's rdma_cm for the kernel providers (which provider
/// then drives the device is the provider registry's choice, see
/// [`default_registry`](super::default_registry)).
pub fn connection_manager_for(kind: ProviderKind) -> &'static dyn ConnectionManager {
    match kind {
        ProviderKind::Uiwarp => &UiwarpCm,
        ProviderKind::Rxe | ProviderKind::Siw | ProviderKind::Ibverbs => &KernelCm,
    }
}

/// The automatic choice ([`connection_manager`]): the kernel's rdma_cm when a kernel RDMA
/// device serves the address, else [`UiwarpCm`] (said once on stderr).
#[derive(Debug, Default, Clone, Copy)]
struct AutoCm;

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
            .and_then(|r| r.downcast_ref::<rdmasock_cm::Error>()),
        Some(rdmasock_cm::Error::NoRdmaDevice { .. } | rdmasock_cm::Error::NotLoaded { .. })
    )
}

/// Says once per process that the userspace provider stands in for a kernel device.
fn announce(addr: SocketAddr) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        eprintln!(
            "rdmasock: no kernel RDMA device serves {addr}; using the userspace iWARP provider (uiwarp)"
        );
    });
}

impl AutoCm {
    /// Runs `user` or `kernel` as `RDMASOCK_PROVIDER` and the machine's devices decide.
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

    fn start_resolve(
        &self,
        dst: SocketAddr,
        from_free_port: bool,
        timeout: Duration,
    ) -> io::Result<Box<dyn Resolving>> {
        let fallback = forced()?.is_none();
        self.pick(
            dst,
            || {
                let inner = KernelCm.start_resolve(dst, from_free_port, timeout)?;
                Ok(Box::new(AutoResolving {
                    dst,
                    timeout,
                    inner,
                    fallback,
                }) as Box<dyn Resolving>)
            },
            || UiwarpCm.start_resolve(dst, from_free_port, timeout),
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

/// A kernel resolution that falls back to the userspace provider when its address turns out
/// to be on no kernel RDMA device (unless `RDMASOCK_PROVIDER` forced the kernel path), as
/// [`AutoCm::resolve`] does.
#[derive(Debug)]
struct AutoResolving {
    dst: SocketAddr,
    timeout: Duration,
    inner: Box<dyn Resolving>,
    /// The userspace provider may still take over.
    fallback: bool,
}

impl Resolving for AutoResolving {
    fn event_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.inner.event_fd()
    }

    fn poll(&mut self) -> io::Result<Option<Box<dyn CmEndpoint>>> {
        match self.inner.poll() {
            Err(e) if self.fallback && no_kernel_device(&e) => {
                announce(self.dst);
                self.fallback = false;
                self.inner = UiwarpCm.start_resolve(self.dst, false, self.timeout)?;
                self.inner.poll()
            }
            r => r,
        }
    }

    fn retry_from_free_port(&self, timeout: Duration) -> io::Result<Box<dyn Resolving>> {
        self.inner.retry_from_free_port(timeout)
    }
}
