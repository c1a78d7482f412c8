//! The halves of an [`RdmaStream`]: borrowed ([`RdmaStream::split`]) and owned
//! ([`RdmaStream::into_split`]), like `tokio::net::tcp`'s.
#![forbid(unsafe_code)]

use super::stream::RdmaStream;
use ::tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf, Ready};
use std::error::Error;
use std::fmt;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The read half of a borrowed [`RdmaStream`] ([`RdmaStream::split`]).
#[derive(Debug)]
pub struct ReadHalf<'a>(&'a RdmaStream);

/// The write half of a borrowed [`RdmaStream`] ([`RdmaStream::split`]); its
/// `shutdown().await` half-closes the stream.
#[derive(Debug)]
pub struct WriteHalf<'a>(&'a RdmaStream);

pub(crate) fn split(stream: &mut RdmaStream) -> (ReadHalf<'_>, WriteHalf<'_>) {
    (ReadHalf(stream), WriteHalf(stream))
}

/// The read half of an [`RdmaStream`] owned by two tasks ([`RdmaStream::into_split`]).
#[derive(Debug)]
pub struct OwnedReadHalf {
    inner: Arc<RdmaStream>,
}

/// The write half of an [`RdmaStream`] owned by two tasks ([`RdmaStream::into_split`]).
/// Dropping it shuts down writing (end-of-stream after the data written), unless
/// [`forget`](Self::forget) was called, like `tokio::net::tcp::OwnedWriteHalf`.
#[derive(Debug)]
pub struct OwnedWriteHalf {
    inner: Arc<RdmaStream>,
    shutdown_on_drop: bool,
}

pub(crate) fn into_split(stream: RdmaStream) -> (OwnedReadHalf, OwnedWriteHalf) {
    let inner = Arc::new(stream);
    (
        OwnedReadHalf {
            inner: inner.clone(),
        },
        OwnedWriteHalf {
            inner,
            shutdown_on_drop: true,
        },
    )
}

/// The halves given to [`OwnedReadHalf::reunite`] came from different streams.
#[derive(Debug)]
pub struct ReuniteError(pub OwnedReadHalf, pub OwnedWriteHalf);

impl fmt::Display for ReuniteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tried to reunite halves of different RdmaStreams: pass the write half that came \
             from the same into_split"
        )
    }
}

impl Error for ReuniteError {}

fn reunite(read: OwnedReadHalf, mut write: OwnedWriteHalf) -> Result<RdmaStream, ReuniteError> {
    if !Arc::ptr_eq(&read.inner, &write.inner) {
        return Err(ReuniteError(read, write));
    }
    write.shutdown_on_drop = false;
    drop(write);
    Ok(Arc::into_inner(read.inner).expect("the two halves were the only handles"))
}

impl OwnedReadHalf {
    /// Puts the stream back together with its write half.
    pub fn reunite(self, other: OwnedWriteHalf) -> Result<RdmaStream, ReuniteError> {
        reunite(self, other)
    }

    /// See [`RdmaStream::peer_addr`].
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// See [`RdmaStream::local_addr`].
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// See [`RdmaStream::readable`].
    pub async fn readable(&self) -> io::Result<()> {
        self.inner.readable().await
    }

    /// See [`RdmaStream::ready`].
    pub async fn ready(&self, interest: Interest) -> io::Result<Ready> {
        self.inner.ready(interest).await
    }

    /// See [`RdmaStream::try_read`].
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.try_read(buf)
    }

    /// See [`RdmaStream::peek`].
    pub async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.peek(buf).await
    }

    /// See [`RdmaStream::poll_peek`].
    pub fn poll_peek(
        &self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<usize>> {
        self.inner.poll_peek(cx, buf)
    }
}

impl OwnedWriteHalf {
    /// Puts the stream back together with its read half.
    pub fn reunite(self, other: OwnedReadHalf) -> Result<RdmaStream, ReuniteError> {
        reunite(other, self)
    }

    /// Drops the half without shutting down writing.
    pub fn forget(mut self) {
        self.shutdown_on_drop = false;
    }

    /// See [`RdmaStream::peer_addr`].
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// See [`RdmaStream::local_addr`].
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// See [`RdmaStream::writable`].
    pub async fn writable(&self) -> io::Result<()> {
        self.inner.writable().await
    }

    /// See [`RdmaStream::ready`].
    pub async fn ready(&self, interest: Interest) -> io::Result<Ready> {
        self.inner.ready(interest).await
    }

    /// See [`RdmaStream::try_write`].
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.inner.try_write(buf)
    }
}

impl Drop for OwnedWriteHalf {
    fn drop(&mut self) {
        if self.shutdown_on_drop {
            self.inner.shutdown_write_now();
        }
    }
}

impl ReadHalf<'_> {
    /// See [`RdmaStream::peer_addr`].
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.0.peer_addr()
    }

    /// See [`RdmaStream::local_addr`].
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }

    /// See [`RdmaStream::readable`].
    pub async fn readable(&self) -> io::Result<()> {
        self.0.readable().await
    }

    /// See [`RdmaStream::try_read`].
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }

    /// See [`RdmaStream::peek`].
    pub async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.peek(buf).await
    }
}

impl WriteHalf<'_> {
    /// See [`RdmaStream::peer_addr`].
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.0.peer_addr()
    }

    /// See [`RdmaStream::local_addr`].
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }

    /// See [`RdmaStream::writable`].
    pub async fn writable(&self) -> io::Result<()> {
        self.0.writable().await
    }

    /// See [`RdmaStream::try_write`].
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }
}

macro_rules! async_read {
    ($half:ty) => {
        impl AsyncRead for $half {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                self.stream().poll_read_priv(cx, buf)
            }
        }
    };
}

macro_rules! async_write {
    ($half:ty) => {
        impl AsyncWrite for $half {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                self.stream().poll_write_priv(cx, buf)
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                self.stream().poll_write_vectored_priv(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                true
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                self.stream().poll_flush_priv(cx)
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                self.stream().poll_shutdown_priv(cx)
            }
        }
    };
}

/// The stream a half reads or writes.
trait Half {
    fn stream(&self) -> &RdmaStream;
}

impl Half for ReadHalf<'_> {
    fn stream(&self) -> &RdmaStream {
        self.0
    }
}

impl Half for WriteHalf<'_> {
    fn stream(&self) -> &RdmaStream {
        self.0
    }
}

impl Half for OwnedReadHalf {
    fn stream(&self) -> &RdmaStream {
        &self.inner
    }
}

impl Half for OwnedWriteHalf {
    fn stream(&self) -> &RdmaStream {
        &self.inner
    }
}

async_read!(ReadHalf<'_>);
async_read!(OwnedReadHalf);
async_write!(WriteHalf<'_>);
async_write!(OwnedWriteHalf);

impl AsRef<RdmaStream> for ReadHalf<'_> {
    fn as_ref(&self) -> &RdmaStream {
        self.0
    }
}

impl AsRef<RdmaStream> for WriteHalf<'_> {
    fn as_ref(&self) -> &RdmaStream {
        self.0
    }
}

impl AsRef<RdmaStream> for OwnedReadHalf {
    fn as_ref(&self) -> &RdmaStream {
        &self.inner
    }
}

impl AsRef<RdmaStream> for OwnedWriteHalf {
    fn as_ref(&self) -> &RdmaStream {
        &self.inner
    }
}
