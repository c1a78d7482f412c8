//! Blocking helpers over the non-blocking core: each issues a command and waits, on the id's
//! channel, for the event that completes it (events of other ids are set aside for
//! `EventChannel::try_get_event`). Any other event for the id becomes a clear [`Error`].
#![forbid(unsafe_code)]

use crate::device::{is_no_device, no_rdma_device};
use crate::error::{Error, Result};
use crate::event::{CmEvent, ConnectRequest, ConnectionParameters};
use crate::id::CmId;
use rdmasock_verbs::QueuePair;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// Extra time a blocking wait gives the kernel beyond its own timeout, so that its error
/// event (with the reason) arrives before ours.
const KERNEL_SLACK: Duration = Duration::from_millis(500);

impl CmId {
    /// The next event of this id, waiting up to `timeout`.
    pub fn wait_event(&self, timeout: Duration) -> Result<CmEvent> {
        self.channel()
            .get_event_for(self.token(), timeout)?
            .ok_or_else(|| Error::TimedOut {
                operation: "waiting for an rdma_cm event",
                target: self.describe(),
                timeout,
            })
    }

    fn wait_for(&self, expected: &'static str, timeout: Duration) -> Result<CmEvent> {
        match self.channel().get_event_for(self.token(), timeout)? {
            Some(ev) => Ok(ev),
            None => Err(Error::TimedOut {
                operation: expected,
                target: self.describe(),
                timeout,
            }),
        }
    }

    /// Turns an event that is not the one waited for into the error it means.
    pub fn event_error(&self, expected: &'static str, event: CmEvent) -> Error {
        let peer = self.peer_hint();
        let errno = |s: i32| io::Error::from_raw_os_error(-s);
        match (event, peer) {
            (CmEvent::AddrError { status }, Some(addr)) if is_no_device(Some(-status)) => {
                no_rdma_device(addr.ip(), "ADDR_ERROR", errno(status))
            }
            (CmEvent::AddrError { status }, Some(addr)) => Error::AddressResolution {
                addr,
                source: errno(status),
            },
            (CmEvent::RouteError { status }, Some(addr)) if is_no_device(Some(-status)) => {
                no_rdma_device(addr.ip(), "ROUTE_ERROR", errno(status))
            }
            (CmEvent::RouteError { status }, Some(addr)) => Error::RouteResolution {
                addr,
                source: errno(status),
            },
            (CmEvent::Rejected { reason, .. }, Some(addr)) if reason.is_no_listener() => {
                Error::ConnectionRefused { addr, reason }
            }
            (
                CmEvent::Rejected {
                    reason,
                    private_data,
                },
                Some(addr),
            ) => Error::Rejected {
                addr,
                reason,
                private_data,
            },
            (CmEvent::Unreachable { status }, Some(addr)) => Error::Unreachable {
                addr,
                source: errno(status.min(-1)),
            },
            (CmEvent::ConnectError { status }, Some(addr)) => Error::ConnectError {
                addr,
                source: errno(status.min(-1)),
            },
            (CmEvent::DeviceRemoval, _) => Error::DeviceRemoved {
                target: self.describe(),
            },
            (other, _) => Error::UnexpectedEvent {
                expected,
                target: self.describe(),
                got: other.to_string(),
            },
        }
    }

    /// RESOLVE_ADDR then RESOLVE_ROUTE to `dst`, each within `timeout`.
    ///
    /// # Errors
    /// [`Error::NoRdmaDevice`] (naming the address and listing the devices) when `dst` is
    /// reached through no RDMA device, [`Error::AddressResolution`] /
    /// [`Error::RouteResolution`] otherwise, [`Error::TimedOut`].
    pub fn resolve(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        self.resolve_addr(src, dst, timeout)?;
        match self.wait_for("ADDR_RESOLVED", timeout.saturating_add(KERNEL_SLACK))? {
            CmEvent::AddrResolved => {}
            other => return Err(self.event_error("ADDR_RESOLVED", other)),
        }
        self.resolve_route(timeout)?;
        match self.wait_for("ROUTE_RESOLVED", timeout.saturating_add(KERNEL_SLACK))? {
            CmEvent::RouteResolved => Ok(()),
            other => Err(self.event_error("ROUTE_RESOLVED", other)),
        }
    }

    /// CONNECT and wait until connected, driving `qp` when given (without a QP the id is
    /// only established at the CM level, like `rdma_establish`). Returns the peer's
    /// parameters and private data (REP on IB/RoCE, ESTABLISHED on iWARP).
    ///
    /// # Errors
    /// [`Error::ConnectionRefused`] when nothing listens, [`Error::Rejected`],
    /// [`Error::Unreachable`], [`Error::ConnectError`], [`Error::TimedOut`].
    pub fn connect_blocking(
        &self,
        qp: Option<&QueuePair>,
        param: &ConnectionParameters,
        timeout: Duration,
    ) -> Result<ConnectionParameters> {
        self.start_connect_with(qp, param)?;
        let event = self.wait_for("CONNECT_RESPONSE", timeout)?;
        self.finish_connect_with(qp, event)
    }

    /// CONNECT carrying `qp`'s number, without waiting: the first half of
    /// [`connect_blocking`](Self::connect_blocking) with a QP;
    /// [`finish_connect_qp`](Self::finish_connect_qp) takes the id's next event.
    pub fn start_connect_qp(&self, qp: &QueuePair, param: &ConnectionParameters) -> Result<()> {
        self.start_connect_with(Some(qp), param)
    }

    /// The second half of [`connect_blocking`](Self::connect_blocking) with a QP, given the
    /// id's next event after CONNECT: moves `qp` to RTS and returns the peer's parameters, or
    /// moves it to ERR and returns the error the event means.
    pub fn finish_connect_qp(
        &self,
        qp: &QueuePair,
        event: CmEvent,
    ) -> Result<ConnectionParameters> {
        self.finish_connect_with(Some(qp), event)
    }

    fn start_connect_with(
        &self,
        qp: Option<&QueuePair>,
        param: &ConnectionParameters,
    ) -> Result<()> {
        let param = match qp {
            Some(qp) => ConnectionParameters {
                qp_num: qp.qp_num(),
                ..param.clone()
            },
            None => param.clone(),
        };
        self.connect(&param)
    }

    fn finish_connect_with(
        &self,
        qp: Option<&QueuePair>,
        event: CmEvent,
    ) -> Result<ConnectionParameters> {
        match event {
            CmEvent::ConnectResponse { param: peer } => {
                match qp {
                    Some(qp) => self.establish_qp(qp)?,
                    None => self.establish()?,
                }
                Ok(peer)
            }
            CmEvent::Established { param: peer } => {
                if let Some(qp) = qp {
                    self.note_established_qp(qp);
                }
                Ok(peer)
            }
            other => {
                if let Some(qp) = qp {
                    let _ = qp.to_error();
                }
                Err(self.event_error("CONNECT_RESPONSE", other))
            }
        }
    }

    /// On a listener: the next connection request.
    pub fn get_request(&self, timeout: Duration) -> Result<ConnectRequest> {
        match self.wait_for("CONNECT_REQUEST", timeout)? {
            CmEvent::ConnectRequest(request) => Ok(*request),
            other => Err(self.event_error("CONNECT_REQUEST", other)),
        }
    }

    /// On a request's id: ACCEPT (driving `qp` when given) and wait for ESTABLISHED; returns
    /// its parameters.
    pub fn accept_blocking(
        &self,
        qp: Option<&QueuePair>,
        param: &ConnectionParameters,
        timeout: Duration,
    ) -> Result<ConnectionParameters> {
        match qp {
            Some(qp) => self.accept_qp(qp, param)?,
            None => self.accept(param)?,
        }
        match self.wait_for("ESTABLISHED", timeout)? {
            CmEvent::Established { param } => {
                if let Some(qp) = qp {
                    self.note_established_qp(qp);
                }
                Ok(param)
            }
            other => {
                if let Some(qp) = qp {
                    let _ = qp.to_error();
                }
                Err(self.event_error("ESTABLISHED", other))
            }
        }
    }

    /// DISCONNECT (moving `qp` out of RTS first when given) and wait for DISCONNECTED.
    pub fn disconnect_blocking(&self, qp: Option<&QueuePair>, timeout: Duration) -> Result<()> {
        match qp {
            Some(qp) => self.disconnect_qp(qp)?,
            None => self.disconnect()?,
        }
        self.wait_disconnected(None, timeout)
    }

    /// Wait for DISCONNECTED (skipping TIMEWAIT_EXIT), then answer with DISCONNECT (the DREP
    /// on IB; harmless when we started it) after moving `qp` to ERR when given.
    pub fn wait_disconnected(&self, qp: Option<&QueuePair>, timeout: Duration) -> Result<()> {
        loop {
            match self.wait_for("DISCONNECTED", timeout)? {
                CmEvent::Disconnected { .. } => break,
                CmEvent::TimewaitExit => continue,
                other => return Err(self.event_error("DISCONNECTED", other)),
            }
        }
        if let Some(qp) = qp {
            let _ = qp.to_error();
        }
        match self.disconnect() {
            Ok(()) => Ok(()),
            // Already disconnected by our own DISCONNECT: nothing left to answer.
            Err(Error::Command { source, .. }) if source.raw_os_error() == Some(libc::EINVAL) => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}
