//! [`Connecting`]: a connect that runs without blocking, step by step, for event loops.
#![forbid(unsafe_code)]

use super::options::SocketOptions;
use super::rdma_socket::RdmaSocket;
use crate::cm::ConnectionManager;
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Instant;

/// A connect in progress, made by [`RdmaSocket::connect_start`]: each
/// [`poll_connect`](Self::poll_connect) moves it on as far as it can without blocking.
/// Between calls, wait until its fd ([`AsFd`]) is readable or [`deadline`](Self::deadline)
/// passes. Dropping it at any stage releases everything it holds at once, without blocking.
pub struct Connecting {
    peer: SocketAddr,
    deadline: Instant,
    outcome: Option<io::Result<RdmaSocket>>,
    ready: EventFd,
}

impl fmt::Debug for Connecting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connecting")
            .field("peer", &self.peer)
            .field("deadline", &self.deadline)
            .finish()
    }
}

impl Connecting {
    pub(crate) fn start(
        cm: &dyn ConnectionManager,
        addr: SocketAddr,
        opts: &SocketOptions,
    ) -> io::Result<Connecting> {
        let deadline = Instant::now() + opts.connect_timeout;
        let ready =
            EventFd::from_value_and_flags(1, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?;
        let outcome = Some(RdmaSocket::connect_via(cm, addr, opts));
        Ok(Connecting {
            peer: addr,
            deadline,
            outcome,
            ready,
        })
    }

    /// Moves the connect on without blocking: `Ok(None)` while it is not done (wait until the
    /// fd is readable or the deadline passes, then call again), `Ok(Some(socket))` once
    /// connected, an error when it failed (the same errors as
    /// [`RdmaSocket::connect_with`], the connect timeout's included once
    /// [`deadline`](Self::deadline) has passed). After it returned a socket or an error,
    /// further calls fail with `NotConnected`.
    pub fn poll_connect(&mut self) -> io::Result<Option<RdmaSocket>> {
        match self.outcome.take() {
            Some(r) => r.map(Some),
            None => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                format!(
                    "the connect to {} is over already (poll_connect returned its outcome)",
                    self.peer
                ),
            )),
        }
    }

    /// When the connect timeout ends: a `poll_connect` from then on fails with `TimedOut`
    /// unless the connection is made.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The address being connected to.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }
}

impl AsFd for Connecting {
    /// Level-triggered: readable while [`poll_connect`](Connecting::poll_connect) may make
    /// progress.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.ready.as_fd()
    }
}

impl AsRawFd for Connecting {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}
