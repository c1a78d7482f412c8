//! [`mio::event::Source`] for [`RdmaSocket`] and [`RdmaListener`].
#![forbid(unsafe_code)]

use super::listener::RdmaListener;
use super::stream::RdmaSocket;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};

impl RdmaSocket {
    fn fds(&self) -> [RawFd; 3] {
        [
            self.shared.cq_channel().as_raw_fd(),
            self.shared.endpoint().event_fd().as_raw_fd(),
            self.shared.waker.as_fd().as_raw_fd(),
        ]
    }

    /// Arms the completion queue and, when progress is already possible, makes the waker
    /// readable so that the new registration sees an event.
    fn prime(&self) -> io::Result<()> {
        let mut g = self.shared.lock();
        g.arm()?;
        let r = g.readiness();
        if r.readable || r.writable || r.error {
            let _ = self.shared.waker.write(1);
        }
        Ok(())
    }
}

impl mio::event::Source for RdmaSocket {
    fn register(&mut self, registry: &Registry, token: Token, _: Interest) -> io::Result<()> {
        for fd in self.fds() {
            SourceFd(&fd).register(registry, token, Interest::READABLE)?;
        }
        self.prime()
    }

    fn reregister(&mut self, registry: &Registry, token: Token, _: Interest) -> io::Result<()> {
        for fd in self.fds() {
            SourceFd(&fd).reregister(registry, token, Interest::READABLE)?;
        }
        self.prime()
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        for fd in self.fds() {
            SourceFd(&fd).deregister(registry)?;
        }
        Ok(())
    }
}

impl mio::event::Source for RdmaListener {
    fn register(&mut self, registry: &Registry, token: Token, _: Interest) -> io::Result<()> {
        SourceFd(&self.cm.event_fd().as_raw_fd()).register(registry, token, Interest::READABLE)
    }

    fn reregister(&mut self, registry: &Registry, token: Token, _: Interest) -> io::Result<()> {
        SourceFd(&self.cm.event_fd().as_raw_fd()).reregister(registry, token, Interest::READABLE)
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        SourceFd(&self.cm.event_fd().as_raw_fd()).deregister(registry)
    }
}
