//! The out-of-band address exchange of rdma-core's pingpong examples: one TCP connection on
//! which each side sends `"%04x:%06x:%06x:%s"` (LID, QPN, PSN, 32-hex-digit wire GID) as a
//! 52-byte NUL-padded message, and the client ends with `"done\0"`.

use rdmasock::verbs::Gid;
use std::io::{Read, Write};
use std::net::{Ipv6Addr, SocketAddr, TcpListener, TcpStream};

/// The size of the address message: `sizeof "0000:000000:000000:" + 32 hex digits`, NUL included.
pub(crate) const MESSAGE_LEN: usize = 52;

/// One side's address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Destination {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// First PSN (24 bits).
    pub psn: u32,
    /// GID (zero when `-g` was not given).
    pub gid: Gid,
}

impl Destination {
    /// The wire message, NUL-padded to [`MESSAGE_LEN`].
    pub(crate) fn to_message(self) -> [u8; MESSAGE_LEN] {
        let text = format!(
            "{:04x}:{:06x}:{:06x}:{}",
            self.lid,
            self.qpn,
            self.psn,
            self.gid.to_pingpong_wire()
        );
        let mut msg = [0u8; MESSAGE_LEN];
        let n = text.len().min(MESSAGE_LEN - 1);
        msg[..n].copy_from_slice(&text.as_bytes()[..n]);
        msg
    }

    /// Parses a peer's message (`sscanf("%x:%x:%x:%s")`).
    pub(crate) fn from_message(msg: &[u8]) -> Option<Destination> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end]).ok()?;
        let mut parts = text.splitn(4, ':');
        let lid = u16::from_str_radix(parts.next()?, 16).ok()?;
        let qpn = u32::from_str_radix(parts.next()?, 16).ok()?;
        let psn = u32::from_str_radix(parts.next()?, 16).ok()?;
        let gid = Gid::from_pingpong_wire(parts.next()?.trim())?;
        Some(Destination { lid, qpn, psn, gid })
    }

    /// `  local address:  LID 0x0000, QPN 0x000011, PSN 0x2f0a1c, GID ::ffff:10.99.0.2`
    pub(crate) fn describe(&self) -> String {
        format!(
            "LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
            self.lid,
            self.qpn,
            self.psn,
            Ipv6Addr::from(self.gid.0)
        )
    }
}

/// Client side: connects to `server:port`, sends ours, reads theirs, sends `done`.
pub(crate) fn client_exchange(
    server: &str,
    port: u16,
    mine: &Destination,
) -> Result<Destination, String> {
    let mut stream = TcpStream::connect((server, port))
        .map_err(|e| format!("Couldn't connect to {server}:{port}: {e}"))?;
    stream
        .write_all(&mine.to_message())
        .map_err(|e| format!("Couldn't send local address: {e}"))?;
    let mut msg = [0u8; MESSAGE_LEN];
    stream
        .read_exact(&mut msg)
        .and_then(|_| stream.write_all(b"done\0"))
        .map_err(|e| format!("Couldn't read/write remote address: {e}"))?;
    Destination::from_message(&msg).ok_or_else(|| {
        format!(
            "Couldn't parse remote address {:?}",
            String::from_utf8_lossy(&msg)
        )
    })
}

/// Server side: listens on `port` (all addresses), takes one connection, reads the client's
/// address, calls `connect` with it (the QP must be ready before we answer), sends ours and
/// waits for `done`.
pub(crate) fn server_exchange(
    port: u16,
    mine: &Destination,
    connect: impl FnOnce(&Destination) -> Result<(), String>,
) -> Result<Destination, String> {
    // Dual-stack [::] first (takes IPv4 clients too), then IPv4 only.
    let listener = TcpListener::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .map_err(|e| format!("Couldn't listen to port {port}: {e}"))?;
    let (mut stream, _) = listener
        .accept()
        .map_err(|e| format!("accept() failed: {e}"))?;
    drop(listener);
    let mut msg = [0u8; MESSAGE_LEN];
    stream
        .read_exact(&mut msg)
        .map_err(|e| format!("Couldn't read remote address: {e}"))?;
    let remote = Destination::from_message(&msg).ok_or_else(|| {
        format!(
            "Couldn't parse remote address {:?}",
            String::from_utf8_lossy(&msg)
        )
    })?;
    connect(&remote).map_err(|e| format!("Couldn't connect to remote QP: {e}"))?;
    let mut done = [0u8; 5];
    stream
        .write_all(&mine.to_message())
        .and_then(|_| stream.read_exact(&mut done))
        .map_err(|e| format!("Couldn't send/recv local address: {e}"))?;
    Ok(remote)
}
