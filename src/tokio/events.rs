//! The fds a stream hands tokio's reactor: its socket's read and write readiness eventfds.
#![forbid(unsafe_code)]

use crate::socket::RdmaSocket;
use ::tokio::io::unix::AsyncFd;
use ::tokio::io::Interest;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

/// A socket registered with tokio's reactor: its read eventfd (readable) and write eventfd
/// (writable), after putting the socket under the readiness thread.
#[derive(Debug)]
pub(crate) struct Readiness {
    pub(crate) read: AsyncFd<OwnedFd>,
    pub(crate) write: AsyncFd<OwnedFd>,
}

impl Readiness {
    /// Registers `socket` (nonblocking from now on) with the current runtime's reactor.
    pub(crate) fn register(socket: &RdmaSocket) -> io::Result<Readiness> {
        socket.set_nonblocking(true)?;
        socket.shared.enroll()?;
        Ok(Readiness {
            read: register(socket.shared.ready.read_fd()?, Interest::READABLE)?,
            write: register(socket.shared.ready.write_fd()?, Interest::WRITABLE)?,
        })
    }
}

/// Registers a duplicate of `fd` (the same eventfd) with the reactor. The registration owns
/// its fd, so that it stays open and the same for the registration's whole life, which is
/// what the reactor needs from it (the reason tokio deprecates the constructor for fds it
/// cannot vouch for: this one it owns).
#[allow(deprecated)]
fn register(fd: BorrowedFd<'_>, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    AsyncFd::with_interest(fd.try_clone_to_owned()?, interest)
}
