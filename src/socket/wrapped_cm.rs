//! A connection manager for tests: the userspace one, whose accepted endpoints pass a few
//! calls through [`EndpointHooks`] that a test overrides (everything else goes straight to
//! the userspace endpoint).

use crate::cm::{
    CmEndpoint, CmListener, CmNotice, ConnectionManager, ConnectionParameters, IncomingRequest,
    Resolving,
};
use crate::verbs::{Context, DeviceInfo, ProviderRegistry, QueuePair};
use rdmasock_uiwarp::UiwarpCm;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

/// What a test changes of an accepted endpoint; each call gets the userspace endpoint
/// (`inner`), which the default passes it to.
pub(super) trait EndpointHooks: Send + Sync + fmt::Debug + 'static {
    fn disconnect(&self, inner: &dyn CmEndpoint, qp: &QueuePair) -> io::Result<()> {
        inner.disconnect(qp)
    }
    fn poll_notice(&self, inner: &dyn CmEndpoint) -> io::Result<Option<CmNotice>> {
        inner.poll_notice()
    }
    fn disconnect_waits_for_peer(&self, inner: &dyn CmEndpoint) -> bool {
        inner.disconnect_waits_for_peer()
    }
}

/// The userspace connection manager, its accepted endpoints hooked by `H`.
#[derive(Debug)]
pub(super) struct WrappedCm<H>(pub(super) Arc<H>);

#[derive(Debug)]
struct WrappedListener<H>(Box<dyn CmListener>, Arc<H>);

#[derive(Debug)]
struct WrappedEndpoint<H>(Box<dyn CmEndpoint>, Arc<H>);

impl<H: EndpointHooks> ConnectionManager for WrappedCm<H> {
    fn resolve(&self, dst: SocketAddr, timeout: Duration) -> io::Result<Box<dyn CmEndpoint>> {
        UiwarpCm.resolve(dst, timeout)
    }
    fn resolve_from_free_port(
        &self,
        dst: SocketAddr,
        timeout: Duration,
    ) -> io::Result<Box<dyn CmEndpoint>> {
        UiwarpCm.resolve_from_free_port(dst, timeout)
    }
    fn start_resolve(
        &self,
        dst: SocketAddr,
        from_free_port: bool,
        timeout: Duration,
    ) -> io::Result<Box<dyn Resolving>> {
        UiwarpCm.start_resolve(dst, from_free_port, timeout)
    }
    fn listen(&self, addr: SocketAddr, backlog: u32) -> io::Result<Box<dyn CmListener>> {
        let inner = UiwarpCm.listen(addr, backlog)?;
        Ok(Box::new(WrappedListener(inner, Arc::clone(&self.0))))
    }
}

impl<H: EndpointHooks> CmListener for WrappedListener<H> {
    fn poll_request(&self) -> io::Result<Option<IncomingRequest>> {
        Ok(self.0.poll_request()?.map(|r| IncomingRequest {
            endpoint: Box::new(WrappedEndpoint(r.endpoint, Arc::clone(&self.1))),
            private_data: r.private_data,
        }))
    }
    fn event_fd(&self) -> BorrowedFd<'_> {
        self.0.event_fd()
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

impl<H: EndpointHooks> CmEndpoint for WrappedEndpoint<H> {
    fn device(&self) -> io::Result<DeviceInfo> {
        self.0.device()
    }
    fn open_context(&self, registry: &ProviderRegistry) -> io::Result<Context> {
        self.0.open_context(registry)
    }
    fn init_qp(&self, qp: &QueuePair) -> io::Result<()> {
        self.0.init_qp(qp)
    }
    fn connect(
        &self,
        qp: &QueuePair,
        parameters: &ConnectionParameters,
        timeout: Duration,
    ) -> io::Result<Vec<u8>> {
        self.0.connect(qp, parameters, timeout)
    }
    fn start_connect(
        &self,
        qp: &QueuePair,
        parameters: &ConnectionParameters,
        timeout: Duration,
    ) -> io::Result<()> {
        self.0.start_connect(qp, parameters, timeout)
    }
    fn poll_connect(&self, qp: &QueuePair) -> io::Result<Option<Vec<u8>>> {
        self.0.poll_connect(qp)
    }
    fn connect_timed_out(&self, qp: &QueuePair) -> io::Error {
        self.0.connect_timed_out(qp)
    }
    fn connect_fd(&self) -> BorrowedFd<'_> {
        self.0.connect_fd()
    }
    fn start_accept(&self, qp: &QueuePair, parameters: &ConnectionParameters) -> io::Result<()> {
        self.0.start_accept(qp, parameters)
    }
    fn poll_accept(&self, qp: &QueuePair) -> io::Result<bool> {
        self.0.poll_accept(qp)
    }
    fn reject(&self, private_data: &[u8]) -> io::Result<()> {
        self.0.reject(private_data)
    }
    fn disconnect(&self, qp: &QueuePair) -> io::Result<()> {
        self.1.disconnect(self.0.as_ref(), qp)
    }
    fn poll_notice(&self) -> io::Result<Option<CmNotice>> {
        self.1.poll_notice(self.0.as_ref())
    }
    fn event_fd(&self) -> BorrowedFd<'_> {
        self.0.event_fd()
    }
    fn can_wake(&self) -> bool {
        self.0.can_wake()
    }
    fn wake(&self) {
        self.0.wake()
    }
    fn take_wake(&self) {
        self.0.take_wake()
    }
    fn local_addr(&self) -> Option<SocketAddr> {
        self.0.local_addr()
    }
    fn peer_addr(&self) -> Option<SocketAddr> {
        self.0.peer_addr()
    }
    fn nudge_after_first_receive(&self) -> bool {
        self.0.nudge_after_first_receive()
    }
    fn disconnect_waits_for_peer(&self) -> bool {
        self.1.disconnect_waits_for_peer(self.0.as_ref())
    }
    fn set_liveness_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.0.set_liveness_timeout(timeout)
    }
    fn end_reason(&self) -> Option<String> {
        self.0.end_reason()
    }
}
