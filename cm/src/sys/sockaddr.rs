//! `SocketAddr` to and from the kernel's address slots: `__kernel_sockaddr_storage` (BIND,
//! RESOLVE_ADDR, QUERY) and the legacy `sockaddr_in6` slot (BIND_IP, RESOLVE_IP,
//! QUERY_ROUTE), where an AF_INET `sockaddr_in` simply fills the first 16 bytes.
//!
//! Byte-level encoding, no `unsafe`: family in host order, port (and flow info) in network
//! order, scope id in host order.

use super::abi::{SockaddrIn6, SockaddrStorage};
use super::Pod;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// `AF_INET`.
pub(crate) const AF_INET: u16 = libc::AF_INET as u16;
/// `AF_INET6`.
pub(crate) const AF_INET6: u16 = libc::AF_INET6 as u16;
/// `AF_IB`.
#[cfg(test)]
pub(crate) const AF_IB: u16 = 27;
/// `sizeof(struct sockaddr_in)`.
pub(crate) const SOCKADDR_IN_LEN: u16 = 16;
/// `sizeof(struct sockaddr_in6)`.
pub(crate) const SOCKADDR_IN6_LEN: u16 = 28;

/// Writes `addr` as a `sockaddr_in`/`sockaddr_in6` into `out`; returns its length.
fn encode(addr: &SocketAddr, out: &mut [u8]) -> u16 {
    match addr {
        SocketAddr::V4(a) => {
            out[0..2].copy_from_slice(&AF_INET.to_ne_bytes());
            out[2..4].copy_from_slice(&a.port().to_be_bytes());
            out[4..8].copy_from_slice(&a.ip().octets());
            SOCKADDR_IN_LEN
        }
        SocketAddr::V6(a) => {
            out[0..2].copy_from_slice(&AF_INET6.to_ne_bytes());
            out[2..4].copy_from_slice(&a.port().to_be_bytes());
            out[4..8].copy_from_slice(&a.flowinfo().to_be_bytes());
            out[8..24].copy_from_slice(&a.ip().octets());
            out[24..28].copy_from_slice(&a.scope_id().to_ne_bytes());
            SOCKADDR_IN6_LEN
        }
    }
}

/// Reads a `sockaddr_in`/`sockaddr_in6` from `raw`; `None` for another family (or AF_UNSPEC).
fn decode(raw: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes([raw[0], raw[1]]);
    let port = u16::from_be_bytes([raw[2], raw[3]]);
    match family {
        AF_INET => {
            let ip = Ipv4Addr::new(raw[4], raw[5], raw[6], raw[7]);
            Some(SocketAddr::V4(SocketAddrV4::new(ip, port)))
        }
        AF_INET6 if raw.len() >= 28 => {
            let flowinfo = u32::from_be_bytes(raw[4..8].try_into().ok()?);
            let ip: [u8; 16] = raw[8..24].try_into().ok()?;
            let scope = u32::from_ne_bytes(raw[24..28].try_into().ok()?);
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(ip),
                port,
                flowinfo,
                scope,
            )))
        }
        _ => None,
    }
}

/// The storage form and its exact length (the `addr_size`/`src_size`/`dst_size` to send).
pub(crate) fn to_storage(addr: &SocketAddr) -> (SockaddrStorage, u16) {
    let mut s = SockaddrStorage::zeroed();
    let len = encode(addr, &mut s.bytes);
    (s, len)
}

/// Decodes a storage slot; `None` when it holds no IP address.
pub(crate) fn from_storage(s: &SockaddrStorage) -> Option<SocketAddr> {
    decode(&s.bytes)
}

/// The legacy `sockaddr_in6` slot form.
#[allow(dead_code)] // for BIND_IP/RESOLVE_IP, which the id layer does not send yet
pub(crate) fn to_in6(addr: &SocketAddr) -> SockaddrIn6 {
    let mut raw = [0u8; 28];
    encode(addr, &mut raw);
    SockaddrIn6 {
        family: u16::from_ne_bytes([raw[0], raw[1]]),
        port: u16::from_ne_bytes([raw[2], raw[3]]),
        flowinfo: u32::from_ne_bytes(raw[4..8].try_into().expect("4 bytes")),
        addr: raw[8..24].try_into().expect("16 bytes"),
        scope_id: u32::from_ne_bytes(raw[24..28].try_into().expect("4 bytes")),
    }
}

/// Decodes a legacy slot; `None` when it holds no IP address.
pub(crate) fn from_in6(s: &SockaddrIn6) -> Option<SocketAddr> {
    decode(s.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_round_trip_and_bytes() {
        let a: SocketAddr = "10.99.0.2:7471".parse().unwrap();
        let (s, len) = to_storage(&a);
        assert_eq!(len, 16);
        assert_eq!(&s.bytes[..8], &[2, 0, 0x1d, 0x2f, 10, 99, 0, 2]);
        assert!(s.bytes[8..].iter().all(|&b| b == 0));
        assert_eq!(from_storage(&s), Some(a));
        assert_eq!(from_in6(&to_in6(&a)), Some(a));
    }

    #[test]
    fn ipv6_round_trip_and_bytes() {
        let a = SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 7471, 5, 3));
        let (s, len) = to_storage(&a);
        assert_eq!(len, 28);
        assert_eq!(&s.bytes[..8], &[10, 0, 0x1d, 0x2f, 0, 0, 0, 5]);
        assert_eq!(s.bytes[8], 0xfe);
        assert_eq!(&s.bytes[24..28], &3u32.to_ne_bytes());
        assert_eq!(from_storage(&s), Some(a));
        assert_eq!(from_in6(&to_in6(&a)), Some(a));
    }

    #[test]
    fn unknown_family_is_none() {
        assert_eq!(from_storage(&SockaddrStorage::zeroed()), None);
        let mut s = SockaddrStorage::zeroed();
        s.bytes[0..2].copy_from_slice(&AF_IB.to_ne_bytes());
        assert_eq!(from_storage(&s), None);
    }
}
