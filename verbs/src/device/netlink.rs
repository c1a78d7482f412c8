//! The driver id of each device from NETLINK_RDMA (docs/kernel-abi.md#driver-ids-from-netlink): an
//! NLDEV GET dump for the device indexes, then GET_CHARDEV("uverbs") per device for
//! `UVERBS_DRIVER_ID`. The messages are built and parsed here in safe code; the socket comes from
//! nix.
#![forbid(unsafe_code)]

use nix::sys::socket::{self, sockopt, AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType};
use nix::sys::time::TimeVal;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// `RDMA_NL_NLDEV`: the netlink client of the nldev commands.
const RDMA_NL_NLDEV: u16 = 5;
/// `RDMA_NLDEV_CMD_GET`.
const CMD_GET: u16 = 1;
/// `RDMA_NLDEV_CMD_GET_CHARDEV`.
const CMD_GET_CHARDEV: u16 = 15;
/// `RDMA_NLDEV_CMD_SYS_GET`: the RDMA subsystem's settings.
const CMD_SYS_GET: u16 = 6;

/// `RDMA_NLDEV_ATTR_DEV_INDEX` (u32).
const ATTR_DEV_INDEX: u16 = 1;
/// `RDMA_NLDEV_ATTR_DEV_NAME` (string).
const ATTR_DEV_NAME: u16 = 2;
/// `RDMA_NLDEV_ATTR_CHARDEV_TYPE` (string).
const ATTR_CHARDEV_TYPE: u16 = 69;
/// `RDMA_NLDEV_ATTR_CHARDEV_NAME` (string).
const ATTR_CHARDEV_NAME: u16 = 70;
/// `RDMA_NLDEV_ATTR_CHARDEV_ABI` (u64).
const ATTR_CHARDEV_ABI: u16 = 71;
/// `RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID` (u32).
const ATTR_UVERBS_DRIVER_ID: u16 = 73;
/// `RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK` (u8): 1 where `fork` copies pinned pages for the child
/// (Linux 5.13 on; older kernels leave it out of SYS_GET's reply).
const SYS_ATTR_COPY_ON_FORK: u16 = 93;

/// `NLM_F_REQUEST`.
const NLM_F_REQUEST: u16 = 0x1;
/// `NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`).
const NLM_F_DUMP: u16 = 0x300;
/// `NLMSG_ERROR`.
const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`.
const NLMSG_DONE: u16 = 3;
/// Size of `struct nlmsghdr`.
const NLMSG_HDR_LEN: usize = 16;
/// Attribute type bits that are flags (`NLA_F_NESTED`, `NLA_F_NET_BYTEORDER`).
const NLA_TYPE_MASK: u16 = 0x3fff;

/// What netlink says about one device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NetlinkDevice {
    /// The kernel's device index.
    pub index: u32,
    /// `enum rdma_driver_id` of its uverbs device.
    pub driver_id: Option<u32>,
    /// `uverbsN`.
    pub chardev_name: Option<String>,
    /// The driver ABI version.
    pub abi: Option<u32>,
}

/// rdma-core's provider name for `enum rdma_driver_id` value `id`
/// (docs/kernel-abi.md#driver-names-and-the-fallback).
pub fn driver_name(id: u32) -> Option<&'static str> {
    Some(match id {
        1 => "mlx5",
        2 => "mlx4",
        3 => "cxgb3",
        4 => "cxgb4",
        5 => "mthca",
        6 => "bnxt_re",
        7 => "ocrdma",
        8 => "nes",
        9 => "irdma",
        10 => "vmw_pvrdma",
        11 => "qedr",
        12 => "hns",
        13 => "usnic",
        14 => "rxe",
        15 => "hfi1",
        16 => "qib",
        17 => "efa",
        18 => "siw",
        19 => "erdma",
        20 => "mana",
        21 => "ionic",
        _ => return None,
    })
}

/// One parsed netlink message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Message<'a> {
    /// A reply carrying attributes.
    Data {
        /// `nlmsg_seq`.
        seq: u32,
        /// The attribute bytes.
        attrs: &'a [u8],
    },
    /// `NLMSG_ERROR`: 0 is an acknowledgement, otherwise a negative errno.
    Error {
        /// `nlmsg_seq`.
        seq: u32,
        /// The error code.
        code: i32,
    },
    /// `NLMSG_DONE`: the end of a dump.
    Done,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Splits a datagram into messages; a malformed length ends the walk with an error.
pub(crate) fn parse_messages(buf: &[u8]) -> io::Result<Vec<Message<'_>>> {
    let mut out = Vec::new();
    let mut rest = buf;
    while rest.len() >= NLMSG_HDR_LEN {
        let len = u32_at(rest, 0) as usize;
        if len < NLMSG_HDR_LEN || len > rest.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "netlink message length {len} outside the {}-byte datagram",
                    rest.len()
                ),
            ));
        }
        let kind = u16_at(rest, 4);
        let seq = u32_at(rest, 8);
        let payload = &rest[NLMSG_HDR_LEN..len];
        out.push(match kind {
            NLMSG_DONE => Message::Done,
            NLMSG_ERROR if payload.len() >= 4 => Message::Error {
                seq,
                code: u32_at(payload, 0) as i32,
            },
            NLMSG_ERROR => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "truncated netlink error message",
                ))
            }
            _ => Message::Data {
                seq,
                attrs: payload,
            },
        });
        rest = &rest[align4(len).min(rest.len())..];
    }
    Ok(out)
}

/// The attributes of a message as (type, value) pairs; stops at a malformed one.
pub(crate) fn parse_attrs(mut buf: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while buf.len() >= 4 {
        let len = u16_at(buf, 0) as usize;
        if len < 4 || len > buf.len() {
            break;
        }
        out.push((u16_at(buf, 2) & NLA_TYPE_MASK, &buf[4..len]));
        buf = &buf[align4(len).min(buf.len())..];
    }
    out
}

fn attr_u32(v: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?))
}

fn attr_u64(v: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?))
}

fn attr_string(v: &[u8]) -> String {
    let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
    String::from_utf8_lossy(&v[..end]).into_owned()
}

/// Builds one request: header plus attributes (each value already encoded).
pub(crate) fn build_request(op: u16, flags: u16, seq: u32, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (kind, value) in attrs {
        let len = 4 + value.len();
        body.extend_from_slice(&(len as u16).to_ne_bytes());
        body.extend_from_slice(&kind.to_ne_bytes());
        body.extend_from_slice(value);
        body.resize(align4(body.len()), 0);
    }
    let mut msg = Vec::with_capacity(NLMSG_HDR_LEN + body.len());
    msg.extend_from_slice(&((NLMSG_HDR_LEN + body.len()) as u32).to_ne_bytes());
    msg.extend_from_slice(&((RDMA_NL_NLDEV << 10) | op).to_ne_bytes());
    msg.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(&body);
    msg
}

/// Reads the (index, name) pairs of a GET dump reply.
pub(crate) fn dump_entry(attrs: &[u8]) -> Option<(u32, String)> {
    let mut index = None;
    let mut name = None;
    for (kind, v) in parse_attrs(attrs) {
        match kind {
            ATTR_DEV_INDEX => index = attr_u32(v),
            ATTR_DEV_NAME => name = Some(attr_string(v)),
            _ => {}
        }
    }
    Some((index?, name?))
}

/// Fills the chardev fields of `dev` from a GET_CHARDEV reply.
pub(crate) fn chardev_reply(attrs: &[u8], dev: &mut NetlinkDevice) {
    for (kind, v) in parse_attrs(attrs) {
        match kind {
            ATTR_UVERBS_DRIVER_ID => dev.driver_id = attr_u32(v),
            ATTR_CHARDEV_NAME => dev.chardev_name = Some(attr_string(v)),
            ATTR_CHARDEV_ABI => dev.abi = attr_u64(v).map(|a| a as u32),
            _ => {}
        }
    }
}

/// Whether a SYS_GET reply says the kernel copies pinned pages for a child made by `fork`:
/// an attribute of 1; a reply without it comes from a kernel that does not.
pub(crate) fn sys_reply_copy_on_fork(attrs: &[u8]) -> bool {
    parse_attrs(attrs)
        .into_iter()
        .any(|(kind, v)| kind == SYS_ATTR_COPY_ON_FORK && v.first() == Some(&1))
}

/// Asks the kernel whether `fork` copies pinned (registered) pages for the child
/// (`RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK`). An error where the kernel has no RDMA netlink (no
/// RDMA core loaded).
pub(crate) fn copy_on_fork() -> io::Result<bool> {
    let mut sock = Socket::open()?;
    sock.send(&build_request(CMD_SYS_GET, 0, 1, &[]))?;
    loop {
        for m in parse_messages(sock.recv()?)? {
            match m {
                Message::Data { seq: 1, attrs } => return Ok(sys_reply_copy_on_fork(attrs)),
                Message::Error { seq: 1, code } if code != 0 => {
                    return Err(kernel_error(code, "system settings"))
                }
                _ => {}
            }
        }
    }
}

/// A NETLINK_RDMA socket with a receive timeout.
struct Socket {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl Socket {
    fn open() -> io::Result<Socket> {
        let fd = socket::socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkRDMA,
        )?;
        socket::setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(1, 0))?;
        Ok(Socket {
            fd,
            buf: vec![0; 64 * 1024],
        })
    }

    /// Sends `msg` to the kernel (an unaddressed netlink send goes to port 0, the kernel).
    fn send(&self, msg: &[u8]) -> io::Result<()> {
        let n = socket::send(self.fd.as_raw_fd(), msg, MsgFlags::empty())?;
        if n != msg.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "short netlink send",
            ));
        }
        Ok(())
    }

    fn recv(&mut self) -> io::Result<&[u8]> {
        let n = socket::recv(self.fd.as_raw_fd(), &mut self.buf, MsgFlags::empty())?;
        Ok(&self.buf[..n])
    }
}

fn kernel_error(code: i32, what: &str) -> io::Error {
    let e = io::Error::from_raw_os_error(-code);
    io::Error::new(e.kind(), format!("netlink {what}: {e}"))
}

/// Asks the kernel for every device and its uverbs driver id, keyed by device name.
pub(crate) fn query() -> io::Result<HashMap<String, NetlinkDevice>> {
    let mut sock = Socket::open()?;
    sock.send(&build_request(CMD_GET, NLM_F_DUMP, 1, &[]))?;
    let mut devices: Vec<(u32, String)> = Vec::new();
    'dump: loop {
        for m in parse_messages(sock.recv()?)? {
            match m {
                Message::Done => break 'dump,
                Message::Error { code, .. } if code != 0 => {
                    return Err(kernel_error(code, "device dump"))
                }
                Message::Data { seq: 1, attrs } => devices.extend(dump_entry(attrs)),
                _ => {}
            }
        }
    }
    let mut map = HashMap::new();
    for (n, (index, name)) in devices.into_iter().enumerate() {
        let seq = 2 + n as u32;
        let mut dev = NetlinkDevice {
            index,
            ..Default::default()
        };
        let idx = index.to_ne_bytes();
        let req = build_request(
            CMD_GET_CHARDEV,
            0,
            seq,
            &[(ATTR_DEV_INDEX, &idx), (ATTR_CHARDEV_TYPE, b"uverbs\0")],
        );
        sock.send(&req)?;
        // One reply (data or error) per request; a device without uverbs answers an error.
        'reply: loop {
            for m in parse_messages(sock.recv()?)? {
                match m {
                    Message::Data { seq: s, attrs } if s == seq => {
                        chardev_reply(attrs, &mut dev);
                        break 'reply;
                    }
                    Message::Error { seq: s, .. } if s == seq => break 'reply,
                    _ => {}
                }
            }
        }
        map.insert(name, dev);
    }
    Ok(map)
}

/// A reply the kernel could send: a message of type `kind` with `attrs` (for tests).
#[cfg(test)]
pub(crate) fn reply(kind: u16, seq: u32, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let mut m = build_request(0, 0, seq, attrs);
    m[4..6].copy_from_slice(&kind.to_ne_bytes());
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_layout() {
        let idx = 7u32.to_ne_bytes();
        let m = build_request(
            CMD_GET_CHARDEV,
            0,
            9,
            &[(ATTR_DEV_INDEX, &idx), (ATTR_CHARDEV_TYPE, b"uverbs\0")],
        );
        // 16 header + 8 (u32 attr) + 12 (4 + 7 bytes, padded to 12).
        assert_eq!(m.len(), 36);
        assert_eq!(u32_at(&m, 0), 36);
        assert_eq!(u16_at(&m, 4), 5135);
        assert_eq!(u16_at(&m, 6), NLM_F_REQUEST);
        assert_eq!(u32_at(&m, 8), 9);
        assert_eq!(u16_at(&m, 16), 8);
        assert_eq!(u16_at(&m, 18), ATTR_DEV_INDEX);
        assert_eq!(u32_at(&m, 20), 7);
        assert_eq!(u16_at(&m, 24), 11);
        assert_eq!(&m[28..35], b"uverbs\0");
        assert_eq!(
            u16_at(&build_request(CMD_GET, NLM_F_DUMP, 1, &[]), 6),
            0x301
        );
    }

    #[test]
    fn parses_a_dump_and_a_chardev_reply() {
        let mut dgram = reply(
            5121,
            1,
            &[
                (ATTR_DEV_INDEX, &3u32.to_ne_bytes()),
                (ATTR_DEV_NAME, b"rxe0\0"),
            ],
        );
        dgram.extend(reply(
            5121,
            1,
            &[
                (ATTR_DEV_NAME, b"siw0\0"),
                (ATTR_DEV_INDEX, &4u32.to_ne_bytes()),
            ],
        ));
        dgram.extend(reply(NLMSG_DONE, 1, &[]));
        let msgs = parse_messages(&dgram).unwrap();
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[2], Message::Done);
        let entries: Vec<_> = msgs
            .iter()
            .filter_map(|m| match m {
                Message::Data { attrs, .. } => dump_entry(attrs),
                _ => None,
            })
            .collect();
        assert_eq!(
            entries,
            vec![(3, "rxe0".to_string()), (4, "siw0".to_string())]
        );

        // Nested/byte-order flag bits on the type are ignored.
        let r = reply(
            5135,
            2,
            &[
                (ATTR_CHARDEV_NAME, b"uverbs0\0"),
                (ATTR_CHARDEV_ABI, &2u64.to_ne_bytes()),
                (ATTR_UVERBS_DRIVER_ID | 0x4000, &14u32.to_ne_bytes()),
            ],
        );
        let msgs = parse_messages(&r).unwrap();
        let Message::Data { seq, attrs } = msgs[0] else {
            panic!("expected data, got {msgs:?}")
        };
        assert_eq!(seq, 2);
        let mut dev = NetlinkDevice::default();
        chardev_reply(attrs, &mut dev);
        assert_eq!(dev.driver_id, Some(14));
        assert_eq!(dev.abi, Some(2));
        assert_eq!(dev.chardev_name.as_deref(), Some("uverbs0"));
        assert_eq!(driver_name(14), Some("rxe"));
        assert_eq!(driver_name(18), Some("siw"));
        assert_eq!(driver_name(1), Some("mlx5"));
        assert_eq!(driver_name(0), None);
    }

    #[test]
    fn copy_on_fork_is_read_from_a_sys_get_reply() {
        let request = build_request(CMD_SYS_GET, 0, 1, &[]);
        assert_eq!(u16_at(&request, 4), (5 << 10) | 6);
        assert_eq!(request.len(), NLMSG_HDR_LEN);
        let with = |v: u8| {
            let r = reply(5126, 1, &[(66, &[1]), (SYS_ATTR_COPY_ON_FORK, &[v])]);
            let msgs = parse_messages(&r).unwrap();
            let Message::Data { attrs, .. } = msgs[0] else {
                panic!("expected data, got {msgs:?}")
            };
            sys_reply_copy_on_fork(attrs)
        };
        assert!(with(1));
        assert!(!with(0));
        let old_kernel = reply(5126, 1, &[(66, &[1])]);
        let msgs = parse_messages(&old_kernel).unwrap();
        let Message::Data { attrs, .. } = msgs[0] else {
            panic!("expected data, got {msgs:?}")
        };
        assert!(
            !sys_reply_copy_on_fork(attrs),
            "no attribute: no copy on fork"
        );
    }

    #[test]
    fn errors_and_malformed_input() {
        let mut e = reply(NLMSG_ERROR, 5, &[]);
        e.extend_from_slice(&(-95i32).to_ne_bytes());
        let len = e.len() as u32;
        e[0..4].copy_from_slice(&len.to_ne_bytes());
        assert_eq!(
            parse_messages(&e).unwrap(),
            vec![Message::Error { seq: 5, code: -95 }]
        );
        let mut bad = reply(5121, 1, &[]);
        bad[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(parse_messages(&bad).is_err());
        // An attribute claiming more bytes than there are ends the walk.
        assert!(parse_attrs(&[200, 0, 1, 0, 0, 0]).is_empty());
    }
}
