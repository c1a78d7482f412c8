//! The fds a stream hands tokio's reactor, and the loop that drives the stream's progress on
//! the task that polls it ([`Readiness::drive`]).
//!
//! Each direction watches three fds of its own: the connection's completion channel and its
//! connection manager's event fd (duplicates, so that the reader's and the writer's
//! registrations each get their edge), and the socket's readiness eventfd for that
//! direction, which another handle's progress raises when it took the event this direction
//! waited for (a reader that fed the completion a writer waits on). No thread stands between
//! the device and the task: the channel's edge wakes the task, and its next poll reaps the
//! completions, feeds the engine and posts.
#![forbid(unsafe_code)]

use crate::socket::RdmaSocket;
use ::tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};
use ::tokio::io::Interest;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::task::{Context, Poll};

/// Which way a call moves bytes: which of a stream's watches it waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    Read,
    Write,
}

/// One direction's fds, registered with the reactor.
#[derive(Debug)]
struct Watch {
    /// The connection's completion channel (a duplicate of its fd).
    channel: AsyncFd<OwnedFd>,
    /// The connection manager's event fd (a duplicate): a disconnect, a lost connection.
    notices: AsyncFd<OwnedFd>,
    /// The socket's readiness eventfd for this direction (readable for reads, writable for
    /// writes).
    raised: AsyncFd<OwnedFd>,
}

/// The ready guards of one look at a [`Watch`]: each is cleared after the next attempt (one
/// that came after the edge it reported) found nothing, never before, so that no edge is
/// lost.
type Guards<'a> = [Option<AsyncFdReadyGuard<'a, OwnedFd>>; 3];

impl Watch {
    fn register(socket: &RdmaSocket, raised: BorrowedFd<'_>, way: Way) -> io::Result<Watch> {
        let interest = match way {
            Way::Read => Interest::READABLE,
            Way::Write => Interest::WRITABLE,
        };
        let shared = &socket.shared;
        Ok(Watch {
            channel: register(shared.cq_channel().as_fd(), Interest::READABLE)?,
            notices: register(shared.endpoint().event_fd(), Interest::READABLE)?,
            raised: register(raised, interest)?,
        })
    }

    /// Polls the three fds: the guards of those that are ready; the others will wake `cx`.
    fn poll<'a>(&'a self, cx: &mut Context<'_>, way: Way) -> io::Result<Guards<'a>> {
        let ready = |p: Poll<io::Result<AsyncFdReadyGuard<'a, OwnedFd>>>| match p {
            Poll::Ready(Ok(guard)) => Ok(Some(guard)),
            Poll::Ready(Err(e)) => Err(e),
            Poll::Pending => Ok(None),
        };
        let raised = match way {
            Way::Read => self.raised.poll_read_ready(cx),
            Way::Write => self.raised.poll_write_ready(cx),
        };
        Ok([
            ready(self.channel.poll_read_ready(cx))?,
            ready(self.notices.poll_read_ready(cx))?,
            ready(raised)?,
        ])
    }
}

/// A socket registered with tokio's reactor: each direction's [`Watch`].
#[derive(Debug)]
pub(crate) struct Readiness {
    read: Watch,
    write: Watch,
}

impl Readiness {
    /// Registers `socket` (nonblocking from now on) with the current runtime's reactor.
    pub(crate) fn register(socket: &RdmaSocket) -> io::Result<Readiness> {
        socket.set_nonblocking(true)?;
        let ready = &socket.shared.ready;
        Ok(Readiness {
            read: Watch::register(socket, ready.read_fd()?, Way::Read)?,
            write: Watch::register(socket, ready.write_fd()?, Way::Write)?,
        })
    }

    /// Runs `attempt` (a nonblocking call on the socket: it makes the progress there is and
    /// arms the completion queue before it returns `WouldBlock`) until it does not return
    /// `WouldBlock`; `Pending` when it does and none of `way`'s fds has had an edge since the
    /// attempt armed the queue (one wakes the task then).
    ///
    /// The attempt comes before the look at the fds: bytes that came before the stream was
    /// registered are read at once, and a stream in full flow makes no look at all. A ready
    /// guard is cleared only after an attempt that came after its edge found nothing.
    pub(crate) fn drive<T>(
        &self,
        cx: &mut Context<'_>,
        way: Way,
        mut attempt: impl FnMut() -> io::Result<T>,
    ) -> Poll<io::Result<T>> {
        let watch = match way {
            Way::Read => &self.read,
            Way::Write => &self.write,
        };
        let mut seen: Guards<'_> = [None, None, None];
        loop {
            match attempt() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                result => return Poll::Ready(result),
            }
            for guard in seen.iter_mut().filter_map(Option::take) {
                let mut guard = guard;
                guard.clear_ready();
            }
            seen = match watch.poll(cx, way) {
                Ok(guards) => guards,
                Err(e) => return Poll::Ready(Err(e)),
            };
            if seen.iter().all(Option::is_none) {
                return Poll::Pending;
            }
        }
    }
}

/// Registers a duplicate of `fd` (the same open file) with the reactor. The registration
/// owns its fd, so that it stays open and the same for the registration's whole life, which
/// is what the reactor needs from it (the reason tokio deprecates the constructor for fds it
/// cannot vouch for: this one it owns).
#[allow(deprecated)]
fn register(fd: BorrowedFd<'_>, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    AsyncFd::with_interest(fd.try_clone_to_owned()?, interest)
}
