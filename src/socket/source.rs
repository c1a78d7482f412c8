//! [`mio::event::Source`] for [`RdmaSocket`] and [`RdmaListener`].
#![forbid(unsafe_code)]

use super::listener::RdmaListener;
use super::rdma_socket::RdmaSocket;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use std::io;
use std::os::fd::AsRawFd;

impl mio::event::Source for RdmaSocket {
    /// Registers the socket's readiness fds for `interests`: a readable event when a read
    /// that returned `WouldBlock` can go on, a writable one when a write can. The first event
    /// after registration reports what is possible already.
    fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        self.shared
            .register_ready(registry, token, interests, false)
    }

    /// Changes the registration to `interests` (mio's `tcp_server` example drops `WRITABLE`
    /// once it has written: no writable events follow then).
    fn reregister(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        self.shared.register_ready(registry, token, interests, true)
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        self.shared.deregister_ready(registry)
    }
}

impl mio::event::Source for RdmaListener {
    /// Registers the listener's fd, and with it the fds of the connections whose handshake
    /// still runs and a timer for their bounds: a readable event means `accept` may go on.
    fn register(&mut self, registry: &Registry, token: Token, _: Interest) -> io::Result<()> {
        SourceFd(&self.cm.event_fd().as_raw_fd()).register(registry, token, Interest::READABLE)?;
        self.backlog().register(registry, token)
    }

    fn reregister(&mut self, registry: &Registry, token: Token, _: Interest) -> io::Result<()> {
        SourceFd(&self.cm.event_fd().as_raw_fd()).reregister(
            registry,
            token,
            Interest::READABLE,
        )?;
        self.backlog().register(registry, token)
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        self.backlog().deregister(registry);
        SourceFd(&self.cm.event_fd().as_raw_fd()).deregister(registry)
    }
}
