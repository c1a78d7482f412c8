//! What the tokio examples share: one listener and one connect for both transports, so that
//! each example's protocol code is written once and runs over `rdmasock::tokio::RdmaStream`
//! or, with `--tcp`, over `tokio::net::TcpStream`.
#![allow(dead_code)] // each example uses a different part

pub(crate) mod cli;

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Which stream carries the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// `rdmasock::tokio::RdmaStream`.
    Rdma,
    /// `tokio::net::TcpStream`.
    Tcp,
}

impl Transport {
    /// `Tcp` when the command line has `--tcp`.
    pub(crate) fn from_flag(tcp: bool) -> Transport {
        if tcp {
            Transport::Tcp
        } else {
            Transport::Rdma
        }
    }

    /// The name the examples print.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Transport::Rdma => "RdmaStream",
            Transport::Tcp => "TcpStream",
        }
    }
}

/// Any connected tokio byte stream.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// A connection over either transport, with its two ends' addresses.
pub(crate) struct Connection {
    io: Box<dyn Io>,
    local: SocketAddr,
    peer: SocketAddr,
}

impl Connection {
    /// The address of this end.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The address of the other end.
    pub(crate) fn peer_addr(&self) -> SocketAddr {
        self.peer
    }
}

/// Connects to `addr` over `transport`.
pub(crate) async fn connect(transport: Transport, addr: SocketAddr) -> io::Result<Connection> {
    let (io, local): (Box<dyn Io>, SocketAddr) = match transport {
        Transport::Rdma => {
            let stream = rdmasock::tokio::RdmaStream::connect(addr).await?;
            let local = stream.local_addr()?;
            (Box::new(stream), local)
        }
        Transport::Tcp => {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let local = stream.local_addr()?;
            (Box::new(stream), local)
        }
    };
    Ok(Connection {
        io,
        local,
        peer: addr,
    })
}

/// A listening socket of either transport.
pub(crate) enum Listener {
    /// Accepts `RdmaStream`s.
    Rdma(Box<rdmasock::tokio::RdmaListener>),
    /// Accepts `TcpStream`s.
    Tcp(tokio::net::TcpListener),
}

impl Listener {
    /// Listens on `addr` (port 0: a free port) over `transport`.
    pub(crate) async fn bind(transport: Transport, addr: SocketAddr) -> io::Result<Listener> {
        Ok(match transport {
            Transport::Rdma => {
                Listener::Rdma(Box::new(rdmasock::tokio::RdmaListener::bind(addr).await?))
            }
            Transport::Tcp => Listener::Tcp(tokio::net::TcpListener::bind(addr).await?),
        })
    }

    /// The address it listens on.
    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Listener::Rdma(l) => l.local_addr(),
            Listener::Tcp(l) => l.local_addr(),
        }
    }

    /// The next connection.
    pub(crate) async fn accept(&self) -> io::Result<Connection> {
        let (io, local, peer): (Box<dyn Io>, _, _) = match self {
            Listener::Rdma(l) => {
                let (stream, peer) = l.accept().await?;
                let local = stream.local_addr()?;
                (Box::new(stream), local, peer)
            }
            Listener::Tcp(l) => {
                let (stream, peer) = l.accept().await?;
                stream.set_nodelay(true)?;
                let local = stream.local_addr()?;
                (Box::new(stream), local, peer)
            }
        };
        Ok(Connection { io, local, peer })
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The address to use when none is given: over RDMA the first RDMA device's IPv4 address
/// (loopback over the userspace provider where the kernel has none), over TCP loopback.
pub(crate) fn default_ip(transport: Transport) -> Result<std::net::IpAddr, String> {
    match transport {
        Transport::Tcp => Ok(std::net::Ipv4Addr::LOCALHOST.into()),
        Transport::Rdma => crate::common::address::device_address(None),
    }
}
