//! The connect of [`RdmaStream`](super::RdmaStream): [`Connecting`] driven by the reactor
//! (its fd) and a timer (its deadline), so that no runtime thread ever blocks in it.
#![forbid(unsafe_code)]

use crate::socket::{Connecting, RdmaSocket, SocketOptions};
use ::tokio::io::unix::AsyncFd;
use ::tokio::io::Interest;
use ::tokio::net::ToSocketAddrs;
use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{ready, Poll};

/// Connects to each address `addr` resolves to in turn (like `RdmaSocket::connect_with`);
/// the error is the last address's.
pub(crate) async fn connect(
    addr: impl ToSocketAddrs,
    opts: &SocketOptions,
) -> io::Result<RdmaSocket> {
    let mut last = None;
    for dst in ::tokio::net::lookup_host(addr).await? {
        match connect_one(dst, opts).await {
            Ok(socket) => return Ok(socket),
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

/// One address: [`RdmaSocket::connect_start`], then `poll_connect` whenever its fd turns
/// readable, and once more at its deadline (which then fails it unless it is connected).
/// Dropped half-way, the future drops the `Connecting`, which releases everything at once.
async fn connect_one(dst: SocketAddr, opts: &SocketOptions) -> io::Result<RdmaSocket> {
    let connecting = RdmaSocket::connect_start(dst, opts)?;
    let deadline = connecting.deadline();
    let mut connecting = watch(connecting)?;
    let mut deadline = pin!(::tokio::time::sleep_until(deadline.into()));
    poll_fn(|cx| loop {
        if deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(match connecting.get_mut().poll_connect() {
                Ok(Some(socket)) => Ok(socket),
                Err(e) => Err(e),
                Ok(None) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connecting to {dst}: not connected at the connect timeout"),
                )),
            });
        }
        let mut guard = ready!(connecting.poll_read_ready_mut(cx))?;
        let step = guard.try_io(|c| match c.get_mut().poll_connect() {
            Ok(Some(socket)) => Ok(socket),
            Ok(None) => Err(io::ErrorKind::WouldBlock.into()),
            Err(e) => Err(e),
        });
        match step {
            Ok(result) => return Poll::Ready(result),
            Err(_would_block) => continue,
        }
    })
    .await
}

/// Registers the connect's fd with the reactor. The `Connecting` owns that fd, the same one
/// for its whole life (what the reactor needs, and why tokio deprecates this constructor for
/// fds it cannot vouch for).
#[allow(deprecated)]
fn watch(connecting: Connecting) -> io::Result<AsyncFd<Connecting>> {
    AsyncFd::with_interest(connecting, Interest::READABLE)
}
