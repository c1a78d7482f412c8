//! The connect of [`RdmaStream`](super::RdmaStream): resolution on the runtime, the
//! connection set-up off its workers.
#![forbid(unsafe_code)]

use crate::socket::{RdmaSocket, SocketOptions};
use ::tokio::net::ToSocketAddrs;
use std::io;
use std::net::SocketAddr;

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

/// One address: the blocking connect on the runtime's blocking pool.
async fn connect_one(dst: SocketAddr, opts: &SocketOptions) -> io::Result<RdmaSocket> {
    let opts = opts.clone();
    ::tokio::task::spawn_blocking(move || RdmaSocket::connect_with(dst, &opts))
        .await
        .map_err(|e| io::Error::other(format!("connecting to {dst}: {e}")))?
}
