//! [`RdmaStream`]: a connected RDMA byte stream for tokio, like `tokio::net::TcpStream`.
#![forbid(unsafe_code)]

use super::events::{Readiness, Way};
use super::split::{self, OwnedReadHalf, OwnedWriteHalf, ReadHalf, WriteHalf};
use super::zero_copy::Returns;
use crate::socket::{RdmaSocket, SocketOptions};
use ::tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf, Ready};
use ::tokio::net::ToSocketAddrs;
use std::fmt;
use std::future::poll_fn;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

/// A connected RDMA stream driven by the tokio runtime: [`AsyncRead`], [`AsyncWrite`] and
/// `TcpStream`'s readiness API (`readable`, `try_read`, ...). Made by
/// [`connect`](Self::connect), by [`RdmaListener::accept`](super::RdmaListener::accept), or
/// from a blocking [`RdmaSocket`] with [`from_std`](Self::from_std). See the
/// [module](super) for how it differs from `TcpStream` (flush, shutdown, drop).
pub struct RdmaStream {
    /// Registered with the reactor; `None` only while [`into_std`](Self::into_std) or the
    /// drop takes the stream apart.
    events: Option<Readiness>,
    socket: Option<RdmaSocket>,
    /// `shutdown().await` sent end-of-stream already.
    write_shut: AtomicBool,
    /// Zero-copy buffers handed back outside the socket's queue.
    returns: Mutex<Returns>,
}

impl fmt::Debug for RdmaStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RdmaStream")
            .field("socket", &self.socket)
            .finish()
    }
}

impl RdmaStream {
    /// Connects to `addr` (resolved as `tokio::net::lookup_host` does; each address in
    /// turn) with the default options. It never blocks the runtime's threads; the options'
    /// connect timeout (10 s by default) bounds each address.
    pub async fn connect(addr: impl ToSocketAddrs) -> io::Result<RdmaStream> {
        Self::connect_with(addr, &SocketOptions::default()).await
    }

    /// Connects to `addr` with `opts` (which also set up the stream: ring sizes, wait mode,
    /// keepalive, timeouts).
    pub async fn connect_with(
        addr: impl ToSocketAddrs,
        opts: &SocketOptions,
    ) -> io::Result<RdmaStream> {
        let socket = super::connect::connect(addr, opts).await?;
        RdmaStream::from_std(socket)
    }

    /// Takes over a connected blocking socket: it becomes nonblocking (with its clones) and
    /// registers with the current runtime's reactor. Panics outside a runtime, like
    /// `TcpStream::from_std`.
    pub fn from_std(socket: RdmaSocket) -> io::Result<RdmaStream> {
        let events = Readiness::register(&socket)?;
        if socket.keepalive()?.is_some() {
            // The readiness thread sends them (see `set_keepalive`).
            socket.shared.enroll()?;
        }
        Ok(RdmaStream {
            events: Some(events),
            socket: Some(socket),
            write_shut: AtomicBool::new(false),
            returns: Mutex::default(),
        })
    }

    /// Gives the blocking socket back, still in nonblocking mode (call
    /// [`RdmaSocket::set_nonblocking`]`(false)` to block again), like
    /// `TcpStream::into_std`. Submitted zero-copy buffers the socket still holds come back
    /// from its [`completed_registered`](RdmaSocket::completed_registered); those the
    /// stream had already taken back for its own
    /// [`completed_registered`](Self::completed_registered) are dropped.
    pub fn into_std(mut self) -> io::Result<RdmaSocket> {
        drop(self.events.take());
        Ok(self
            .socket
            .take()
            .expect("a stream holds its socket until it is dropped"))
    }

    pub(crate) fn socket(&self) -> &RdmaSocket {
        self.socket
            .as_ref()
            .expect("a stream holds its socket until it is dropped")
    }

    pub(crate) fn returns(&self) -> &Mutex<Returns> {
        &self.returns
    }

    pub(crate) fn events(&self) -> &Readiness {
        self.events
            .as_ref()
            .expect("a stream is registered until it is dropped")
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket().local_addr()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.socket().peer_addr()
    }

    /// Like TCP_NODELAY (see [`RdmaSocket::set_nodelay`]).
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.socket().set_nodelay(nodelay)
    }

    /// The value [`set_nodelay`](Self::set_nodelay) set.
    pub fn nodelay(&self) -> io::Result<bool> {
        self.socket().nodelay()
    }

    /// Sets the keepalive interval (see [`RdmaSocket::set_keepalive`]): the readiness
    /// thread sends them, and a vanished peer fails the stream's reads and writes.
    pub fn set_keepalive(&self, interval: Option<Duration>) -> io::Result<()> {
        self.socket().set_keepalive(interval)?;
        if interval.is_some() {
            self.socket().shared.enroll()?;
        }
        Ok(())
    }

    /// Always `None`, as [`RdmaSocket::take_error`].
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.socket().take_error()
    }

    /// Waits until any of `interest` may make progress, and says which (false positives are
    /// possible, as with `TcpStream::ready`: the next `try_*` call then returns
    /// `WouldBlock`). Cancellation safe.
    pub async fn ready(&self, interest: Interest) -> io::Result<Ready> {
        poll_fn(|cx| {
            let mut ready = Ready::EMPTY;
            if interest.is_readable() {
                if let Poll::Ready(r) = self.poll_read_ready(cx) {
                    r?;
                    ready |= Ready::READABLE;
                }
            }
            if interest.is_writable() {
                if let Poll::Ready(r) = self.poll_write_ready(cx) {
                    r?;
                    ready |= Ready::WRITABLE;
                }
            }
            if ready.is_empty() {
                Poll::Pending
            } else {
                Poll::Ready(Ok(ready))
            }
        })
        .await
    }

    /// Waits until a read may make progress (then [`try_read`](Self::try_read)).
    /// Cancellation safe.
    pub async fn readable(&self) -> io::Result<()> {
        poll_fn(|cx| self.poll_read_ready(cx)).await
    }

    /// Waits until a write may make progress (then [`try_write`](Self::try_write)).
    /// Cancellation safe.
    pub async fn writable(&self) -> io::Result<()> {
        poll_fn(|cx| self.poll_write_ready(cx)).await
    }

    /// Polls for read readiness: `Ready` when a read may make progress. Only the last task
    /// that polled is woken.
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.events().drive(cx, Way::Read, || {
            would_block(self.socket().shared.try_ready(false)?)
        })
    }

    /// Polls for write readiness: `Ready` when a write may make progress.
    pub fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.events().drive(cx, Way::Write, || {
            would_block(self.socket().shared.try_ready(true)?)
        })
    }

    /// Reads what is there without waiting: `WouldBlock` when nothing is (and read readiness
    /// is cleared until bytes come), `Ok(0)` at end-of-stream.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        (&mut self.socket()).read(buf)
    }

    /// [`try_read`](Self::try_read) into several buffers.
    pub fn try_read_vectored(&self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        (&mut self.socket()).read_vectored(bufs)
    }

    /// Writes what fits without waiting: `WouldBlock` when nothing does (and write
    /// readiness is cleared until room comes).
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        (&mut self.socket()).write(buf)
    }

    /// [`try_write`](Self::try_write) from several buffers.
    pub fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        (&mut self.socket()).write_vectored(bufs)
    }

    /// Receives bytes without removing them from the stream, waiting until there are some
    /// (or end-of-stream: `Ok(0)`). Cancellation safe.
    pub async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        poll_fn(|cx| {
            let mut read = ReadBuf::new(buf);
            ready!(self.poll_peek(cx, &mut read))?;
            Poll::Ready(Ok(read.filled().len()))
        })
        .await
    }

    /// Polls for a [`peek`](Self::peek) into `buf`; `Ready(Ok(n))` with `n` bytes peeked.
    pub fn poll_peek(
        &self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<usize>> {
        let unfilled = buf.initialize_unfilled();
        let n = ready!(self
            .events()
            .drive(cx, Way::Read, || self.socket().peek(unfilled)))?;
        buf.advance(n);
        Poll::Ready(Ok(n))
    }

    /// Splits the stream into a read half and a write half borrowing it, for use in one
    /// task (like `TcpStream::split`).
    pub fn split(&mut self) -> (ReadHalf<'_>, WriteHalf<'_>) {
        split::split(self)
    }

    /// Splits the stream into halves that own it, for use in two tasks (like
    /// `TcpStream::into_split`). Dropping the write half shuts down writing.
    pub fn into_split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        split::into_split(self)
    }

    pub(crate) fn poll_read_priv(
        &self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let unfilled = buf.initialize_unfilled();
        let n = ready!(self
            .events()
            .drive(cx, Way::Read, || (&mut self.socket()).read(unfilled)))?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }

    pub(crate) fn poll_write_priv(
        &self,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.events()
            .drive(cx, Way::Write, || (&mut self.socket()).write(buf))
    }

    pub(crate) fn poll_write_vectored_priv(
        &self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.events()
            .drive(cx, Way::Write, || (&mut self.socket()).write_vectored(bufs))
    }

    /// Ready once every byte written was placed in the peer's memory.
    pub(crate) fn poll_flush_priv(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.events().drive(cx, Way::Write, || {
            would_block(self.socket().shared.try_flush()?)
        })
    }

    /// Half-close: end-of-stream after the data written (sent once), then a flush.
    pub(crate) fn poll_shutdown_priv(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.write_shut.load(Ordering::Acquire) {
            self.socket().shutdown(Shutdown::Write)?;
            self.write_shut.store(true, Ordering::Release);
        }
        self.poll_flush_priv(cx)
    }

    /// Shuts down writing without waiting (the owned write half's drop).
    pub(crate) fn shutdown_write_now(&self) {
        if !self.write_shut.swap(true, Ordering::AcqRel) {
            let _ = self.socket().shutdown(Shutdown::Write);
        }
    }
}

impl AsyncRead for RdmaStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.poll_read_priv(cx, buf)
    }
}

impl AsyncWrite for RdmaStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_priv(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored_priv(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush_priv(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_shutdown_priv(cx)
    }
}

impl AsFd for RdmaStream {
    /// The socket's readiness fd ([`RdmaSocket`]'s `AsFd`), for code that watches fds
    /// itself; the stream's own readiness does not depend on it. On the userspace provider
    /// the stream's tasks then no longer keep the socket's input to themselves, so that
    /// arrivals raise that fd at once.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.events().lend_input();
        self.socket().as_fd()
    }
}

impl AsRawFd for RdmaStream {
    /// The raw form of [`as_fd`](AsFd::as_fd).
    fn as_raw_fd(&self) -> RawFd {
        self.events().lend_input();
        self.socket().as_raw_fd()
    }
}

impl TryFrom<RdmaSocket> for RdmaStream {
    type Error = io::Error;

    /// [`RdmaStream::from_std`].
    fn try_from(socket: RdmaSocket) -> io::Result<RdmaStream> {
        RdmaStream::from_std(socket)
    }
}

impl Drop for RdmaStream {
    /// Deregisters from the reactor; the last handle to the connection closes it gracefully
    /// on the runtime's blocking pool (inline when no runtime is current), so that no
    /// worker waits for the peer.
    fn drop(&mut self) {
        if crate::verbs::in_forked_child() {
            // The reactor's registrations and the connection are the parent's: see
            // RdmaSocket's drop.
            std::mem::forget(self.events.take());
            std::mem::forget(self.socket.take());
            return;
        }
        drop(self.events.take());
        if let Some(socket) = self.socket.take() {
            close_in_background(socket);
        }
    }
}

/// `Ok` when `done`, otherwise `WouldBlock` (for [`Readiness::drive`]).
fn would_block(done: bool) -> io::Result<()> {
    if done {
        Ok(())
    } else {
        Err(io::ErrorKind::WouldBlock.into())
    }
}

/// Drops `socket`; when it is the connection's last handle, its graceful close (which waits
/// for the peer, up to the close timeout) runs on the blocking pool.
pub(crate) fn close_in_background(socket: RdmaSocket) {
    let shared = Arc::clone(&socket.shared);
    drop(socket);
    let Some(shared) = Arc::into_inner(shared) else {
        return;
    };
    match ::tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            // A pool that is shutting down drops the task, and with it `shared`: the close
            // then runs where it is dropped.
            drop(runtime.spawn_blocking(move || drop(shared)));
        }
        Err(_) => drop(shared),
    }
}
