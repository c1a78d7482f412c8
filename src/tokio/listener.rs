//! [`RdmaListener`]: accepts RDMA streams for tokio, like `tokio::net::TcpListener`.
#![forbid(unsafe_code)]

use super::stream::RdmaStream;
use crate::socket::{RdmaSocket, SocketOptions};
use ::tokio::io::unix::AsyncFd;
use ::tokio::io::Interest;
use ::tokio::net::ToSocketAddrs;
use mio::{Events, Poll as MioPoll, Token};
use std::fmt;
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Mutex;
use std::task::{ready, Context, Poll};
use std::time::Duration;

/// Listens for RDMA stream connections on the tokio runtime (rsocket peers and rdmasock
/// alike). `accept().await` never blocks a worker, and a client that stalls its handshake
/// holds up no other (see [`crate::RdmaListener::accept`]).
pub struct RdmaListener {
    watch: AsyncFd<Watch>,
    listener: crate::RdmaListener,
}

impl fmt::Debug for RdmaListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RdmaListener")
            .field("listener", &self.listener)
            .finish()
    }
}

/// An epoll instance of the listener's own (a [`mio::Poll`]) watching its rdma_cm fd, the
/// fds of the handshakes under way and their timer: readable when `accept` may go on.
struct Watch {
    poll: Mutex<(MioPoll, Events)>,
    fd: RawFd,
}

impl AsRawFd for Watch {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl Watch {
    /// Takes the events the epoll instance holds (its registrations are edge-triggered:
    /// once taken, the next edge makes it readable again).
    fn drain(&self) -> io::Result<()> {
        let mut guard = self.poll.lock().unwrap_or_else(|p| p.into_inner());
        let (poll, events) = &mut *guard;
        loop {
            match poll.poll(events, Some(Duration::ZERO)) {
                Ok(()) if events.is_empty() => return Ok(()),
                Ok(()) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

const LISTENER: Token = Token(0);

impl RdmaListener {
    /// Binds to `addr` (the first resolved address that works; port 0 picks one) and
    /// listens, with the default options.
    pub async fn bind(addr: impl ToSocketAddrs) -> io::Result<RdmaListener> {
        Self::bind_with(addr, &SocketOptions::default()).await
    }

    /// Binds with `opts`, which every accepted stream uses.
    pub async fn bind_with(
        addr: impl ToSocketAddrs,
        opts: &SocketOptions,
    ) -> io::Result<RdmaListener> {
        let mut last = None;
        for a in ::tokio::net::lookup_host(addr).await? {
            match crate::RdmaListener::bind_with(a, opts) {
                Ok(listener) => return RdmaListener::from_std(listener),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the address resolved to no socket address",
            )
        }))
    }

    /// Takes over a blocking listener: it becomes nonblocking (with its clones) and
    /// registers with the current runtime's reactor. Panics outside a runtime. A mio
    /// registration of the listener (or a clone) ends: the two share the handshakes' watch.
    pub fn from_std(mut listener: crate::RdmaListener) -> io::Result<RdmaListener> {
        listener.set_nonblocking(true)?;
        let poll = MioPoll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, mio::Interest::READABLE)?;
        let fd = poll.as_raw_fd();
        let watch = Watch {
            poll: Mutex::new((poll, Events::with_capacity(16))),
            fd,
        };
        // The watch owns the epoll fd it hands the reactor (open and the same for the
        // registration's whole life, which tokio's deprecation of this constructor is about).
        #[allow(deprecated)]
        let watch = AsyncFd::with_interest(watch, Interest::READABLE)?;
        Ok(RdmaListener { watch, listener })
    }

    /// Gives the blocking listener back, still in nonblocking mode.
    pub fn into_std(self) -> io::Result<crate::RdmaListener> {
        let RdmaListener {
            watch,
            mut listener,
        } = self;
        let watch = watch.into_inner();
        let (poll, _) = watch.poll.into_inner().unwrap_or_else(|p| p.into_inner());
        mio::event::Source::deregister(&mut listener, poll.registry())?;
        Ok(listener)
    }

    /// Accepts the next connection whose handshake has finished. Cancellation safe: a
    /// connection is taken only when this completes.
    pub async fn accept(&self) -> io::Result<(RdmaStream, SocketAddr)> {
        poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// Polls to accept a connection; only the last task that polled is woken.
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(RdmaStream, SocketAddr)>> {
        let (socket, peer) = ready!(self.poll_accept_std(cx))?;
        Poll::Ready(Ok((RdmaStream::from_std(socket)?, peer)))
    }

    fn poll_accept_std(&self, cx: &mut Context<'_>) -> Poll<io::Result<(RdmaSocket, SocketAddr)>> {
        loop {
            let mut guard = ready!(self.watch.poll_read_ready(cx))?;
            // Events first, then the look: an edge after the look is one the next poll sees.
            self.watch.get_ref().drain()?;
            match guard.try_io(|_| self.listener.accept()) {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The last handshake that failed after a request was taken (see
    /// [`crate::RdmaListener::take_error`]).
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.listener.take_error()
    }
}

impl AsFd for RdmaListener {
    /// The listener's readiness fd ([`crate::RdmaListener`]'s `AsFd`): readable while
    /// `accept` may go on.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.listener.as_fd()
    }
}

impl AsRawFd for RdmaListener {
    /// The raw form of [`as_fd`](AsFd::as_fd).
    fn as_raw_fd(&self) -> RawFd {
        self.listener.as_raw_fd()
    }
}

impl TryFrom<crate::RdmaListener> for RdmaListener {
    type Error = io::Error;

    /// [`RdmaListener::from_std`].
    fn try_from(listener: crate::RdmaListener) -> io::Result<RdmaListener> {
        RdmaListener::from_std(listener)
    }
}
