//! [`CmEvent`]: every rdma_cm event, decoded, with private data copied out; and
//! [`ConnectionParameters`], what CONNECT/ACCEPT send and CONNECT_REQUEST/RESPONSE carry.
#![forbid(unsafe_code)]

use crate::id::CmId;
use crate::sys::abi::{ConnParam, EventResp};
use crate::sys::Pod;
use rdmasock_verbs::QpNumber;
use std::fmt;
use std::io;

/// Identifies the [`CmId`] an event belongs to (unique in the process, never reused; an id
/// keeps it when it moves to another [`crate::EventChannel`]). Compare with [`CmId::token`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct CmIdToken(pub(crate) u64);

/// Connection parameters: sent with CONNECT/ACCEPT, received with CONNECT_REQUEST (already
/// turned to the receiver's perspective by the kernel), CONNECT_RESPONSE and ESTABLISHED.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionParameters {
    /// The QP number (the peer programs it as its destination QP).
    pub qp_num: QpNumber,
    /// Whether the QP uses a shared receive queue.
    pub srq: bool,
    /// Inbound RDMA READ/atomic operations this side accepts (→ `max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// Outbound RDMA READ/atomic operations this side issues (→ `max_rd_atomic`).
    pub initiator_depth: u8,
    /// Exchanged, not used.
    pub flow_control: u8,
    /// Transport retries, 0..=7 (used by the active side).
    pub retry_count: u8,
    /// RNR retries, 0..=7 (7 = infinite).
    pub rnr_retry_count: u8,
    /// The private data. Limits on IB/RoCE: CONNECT 56, ACCEPT 196, REJECT 148 bytes; a
    /// received REQ always shows 56 bytes and a REP 196 (zero padded); iWARP keeps lengths.
    pub private_data: Vec<u8>,
}

impl Default for ConnectionParameters {
    /// librdmacm's defaults without a `conn_param`: retry 7, RNR retry 7, depths 1.
    fn default() -> Self {
        ConnectionParameters {
            qp_num: QpNumber(0),
            srq: false,
            responder_resources: 1,
            initiator_depth: 1,
            flow_control: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            private_data: Vec::new(),
        }
    }
}

impl ConnectionParameters {
    pub(crate) fn to_raw(&self, valid: bool) -> ConnParam {
        let mut p = ConnParam::zeroed();
        p.qp_num = self.qp_num.0 & 0x00ff_ffff;
        let n = self.private_data.len().min(p.private_data.len());
        p.private_data[..n].copy_from_slice(&self.private_data[..n]);
        p.private_data_len = n as u8;
        p.srq = self.srq as u8;
        p.responder_resources = self.responder_resources;
        p.initiator_depth = self.initiator_depth;
        p.flow_control = self.flow_control;
        p.retry_count = self.retry_count;
        p.rnr_retry_count = self.rnr_retry_count;
        p.valid = valid as u8;
        p
    }

    pub(crate) fn from_raw(p: &ConnParam) -> Self {
        let n = (p.private_data_len as usize).min(p.private_data.len());
        ConnectionParameters {
            qp_num: QpNumber(p.qp_num),
            srq: p.srq != 0,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            flow_control: p.flow_control,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            private_data: p.private_data[..n].to_vec(),
        }
    }
}

/// Why a connection was rejected: an IB CM reject reason (IB/RoCE) or an errno (iWARP).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RejectReason {
    /// IB CM REJ reason code (IBTA table 112): 8 = invalid service ID (nobody listening),
    /// 28 = consumer defined (the application called reject).
    Ib(u32),
    /// A (positive) errno: ECONNREFUSED or ECONNRESET on iWARP.
    Errno(i32),
}

impl RejectReason {
    /// From REJECTED's `status`: positive = IB reason, negative = -errno.
    pub fn from_status(status: i32) -> RejectReason {
        if status < 0 {
            RejectReason::Errno(-status)
        } else {
            RejectReason::Ib(status as u32)
        }
    }

    /// Whether this means "no listener at that port".
    pub fn is_no_listener(self) -> bool {
        matches!(
            self,
            RejectReason::Ib(8) | RejectReason::Errno(libc::ECONNREFUSED)
        )
    }

    /// Whether the peer's application rejected (consumer-defined reason).
    pub fn is_consumer(self) -> bool {
        matches!(self, RejectReason::Ib(28))
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RejectReason::Ib(code) => {
                let text = match code {
                    1 => "no QP",
                    3 => "no resources",
                    4 => "timeout",
                    5 => "unsupported request",
                    6 => "invalid communication id",
                    7 => "invalid communication instance",
                    8 => "invalid service ID",
                    9 => "invalid transport type",
                    10 => "stale connection",
                    12 => "invalid GID",
                    13 => "invalid LID",
                    26 => "invalid class version",
                    28 => "consumer defined",
                    29 => "invalid RNR NAK timer",
                    35 => "vendor option not supported",
                    _ => "other",
                };
                write!(f, "IB CM reject reason {code}, {text}")
            }
            RejectReason::Errno(libc::ECONNRESET) => write!(
                f,
                "iWARP: an MPA reject, or the peer closed the TCP connection ({})",
                io::Error::from_raw_os_error(libc::ECONNRESET)
            ),
            RejectReason::Errno(e) => write!(f, "{}", io::Error::from_raw_os_error(e)),
        }
    }
}

/// A connection request that arrived at a listener: the new id (accept or reject it; dropping
/// it destroys it, which the peer sees as a timeout) and the peer's parameters.
#[derive(Debug)]
pub struct ConnectRequest {
    /// The new connection's id, on the listener's channel.
    pub id: CmId,
    /// The peer's parameters (depths already in our perspective) and private data.
    pub param: ConnectionParameters,
}

/// An rdma_cm event (`enum rdma_cm_event_type`). Statuses are kept as the kernel gave them:
/// negative errnos, except REJECTED's reason.
#[derive(Debug)]
pub enum CmEvent {
    /// 0: the address resolved; the id is now bound to a device.
    AddrResolved,
    /// 1: address resolution failed.
    AddrError {
        /// -errno.
        status: i32,
    },
    /// 2: the route resolved; connect now.
    RouteResolved,
    /// 3: route resolution failed.
    RouteError {
        /// -errno.
        status: i32,
    },
    /// 4: a connection request arrived at a listener.
    ConnectRequest(Box<ConnectRequest>),
    /// 5: the peer accepted (IB/RoCE, active side): drive the QP to RTS, then establish.
    ConnectResponse {
        /// The peer's parameters and its REP private data (196 bytes on IB).
        param: ConnectionParameters,
    },
    /// 6: connection establishment failed.
    ConnectError {
        /// -errno.
        status: i32,
    },
    /// 7: the request or reply timed out.
    Unreachable {
        /// -errno (-ETIMEDOUT).
        status: i32,
    },
    /// 8: the peer (or its CM) rejected the connection.
    Rejected {
        /// Why.
        reason: RejectReason,
        /// The REJ private data.
        private_data: Vec<u8>,
    },
    /// 9: connected (passive side; and active side on iWARP).
    Established {
        /// Parameters (iWARP carries private data here).
        param: ConnectionParameters,
    },
    /// 10: the connection is down; call `disconnect` if you did not start it.
    Disconnected {
        /// 0, or -ETIMEDOUT when the DREQ got no reply.
        status: i32,
    },
    /// 11: the device went away.
    DeviceRemoval,
    /// 12: a multicast join completed.
    MulticastJoin,
    /// 13: a multicast join failed.
    MulticastError {
        /// -errno.
        status: i32,
    },
    /// 14: the bound netdev's address changed.
    AddrChange,
    /// 15: (IB CM) the QP may be reused.
    TimewaitExit,
    /// An event number this library does not know.
    Other {
        /// The event number.
        event: u32,
        /// Its status.
        status: i32,
    },
}

impl CmEvent {
    /// librdmacm's name (`RDMA_CM_EVENT_ESTABLISHED` without the prefix).
    pub fn name(&self) -> &'static str {
        match self {
            CmEvent::AddrResolved => "ADDR_RESOLVED",
            CmEvent::AddrError { .. } => "ADDR_ERROR",
            CmEvent::RouteResolved => "ROUTE_RESOLVED",
            CmEvent::RouteError { .. } => "ROUTE_ERROR",
            CmEvent::ConnectRequest(_) => "CONNECT_REQUEST",
            CmEvent::ConnectResponse { .. } => "CONNECT_RESPONSE",
            CmEvent::ConnectError { .. } => "CONNECT_ERROR",
            CmEvent::Unreachable { .. } => "UNREACHABLE",
            CmEvent::Rejected { .. } => "REJECTED",
            CmEvent::Established { .. } => "ESTABLISHED",
            CmEvent::Disconnected { .. } => "DISCONNECTED",
            CmEvent::DeviceRemoval => "DEVICE_REMOVAL",
            CmEvent::MulticastJoin => "MULTICAST_JOIN",
            CmEvent::MulticastError { .. } => "MULTICAST_ERROR",
            CmEvent::AddrChange => "ADDR_CHANGE",
            CmEvent::TimewaitExit => "TIMEWAIT_EXIT",
            CmEvent::Other { .. } => "unknown event",
        }
    }

    /// The event's status as an OS error, when it carries a negative errno.
    pub fn os_error(&self) -> Option<io::Error> {
        let status = match *self {
            CmEvent::AddrError { status }
            | CmEvent::RouteError { status }
            | CmEvent::ConnectError { status }
            | CmEvent::Unreachable { status }
            | CmEvent::Disconnected { status }
            | CmEvent::MulticastError { status }
            | CmEvent::Other { status, .. } => status,
            CmEvent::Rejected {
                reason: RejectReason::Errno(e),
                ..
            } => -e,
            _ => 0,
        };
        (status < 0).then(|| io::Error::from_raw_os_error(-status))
    }

    /// Decodes a GET_EVENT response; `new_id` builds the id of a CONNECT_REQUEST.
    pub(crate) fn decode(raw: &EventResp, new_id: impl FnOnce() -> CmId) -> CmEvent {
        let status = raw.status as i32;
        let conn = || ConnectionParameters::from_raw(&raw.param.conn());
        match raw.event {
            0 => CmEvent::AddrResolved,
            1 => CmEvent::AddrError { status },
            2 => CmEvent::RouteResolved,
            3 => CmEvent::RouteError { status },
            4 => CmEvent::ConnectRequest(Box::new(ConnectRequest {
                id: new_id(),
                param: conn(),
            })),
            5 => CmEvent::ConnectResponse { param: conn() },
            6 => CmEvent::ConnectError { status },
            7 => CmEvent::Unreachable { status },
            8 => CmEvent::Rejected {
                reason: RejectReason::from_status(status),
                private_data: conn().private_data,
            },
            9 => CmEvent::Established { param: conn() },
            10 => CmEvent::Disconnected { status },
            11 => CmEvent::DeviceRemoval,
            12 => CmEvent::MulticastJoin,
            13 => CmEvent::MulticastError { status },
            14 => CmEvent::AddrChange,
            15 => CmEvent::TimewaitExit,
            event => CmEvent::Other { event, status },
        }
    }
}

impl fmt::Display for CmEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        if let CmEvent::Rejected { reason, .. } = self {
            write!(f, " ({reason})")?;
        } else if let Some(e) = self.os_error() {
            write!(f, " ({e})")?;
        }
        Ok(())
    }
}

/// An event and the id it belongs to, as an [`crate::EventChannel`] hands it out.
#[derive(Debug)]
pub struct ChannelEvent {
    /// The id (for CONNECT_REQUEST: the listener).
    pub id: CmIdToken,
    /// The event.
    pub event: CmEvent,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(event: u32, status: i32) -> EventResp {
        let mut r = EventResp::zeroed();
        r.uid = 7;
        r.id = 3;
        r.event = event;
        r.status = status as u32;
        r
    }

    fn no_id() -> CmId {
        panic!("only CONNECT_REQUEST makes an id")
    }

    #[test]
    fn parameters_round_trip_and_mask_the_qp_number() {
        let p = ConnectionParameters {
            qp_num: QpNumber(0x7f12_3456),
            srq: true,
            responder_resources: 4,
            initiator_depth: 2,
            flow_control: 1,
            retry_count: 6,
            rnr_retry_count: 5,
            private_data: b"hello".to_vec(),
        };
        let raw = p.to_raw(true);
        assert_eq!(raw.qp_num, 0x12_3456);
        assert_eq!(raw.valid, 1);
        assert_eq!(raw.private_data_len, 5);
        assert_eq!(&raw.private_data[..5], b"hello");
        let back = ConnectionParameters::from_raw(&raw);
        assert_eq!(back.qp_num, QpNumber(0x12_3456));
        assert_eq!(back.private_data, b"hello");
        assert_eq!(
            (back.srq, back.responder_resources, back.initiator_depth),
            (true, 4, 2)
        );
        assert_eq!((back.retry_count, back.rnr_retry_count), (6, 5));
        assert_eq!(p.to_raw(false).valid, 0);
    }

    #[test]
    fn every_simple_event_decodes() {
        let names = [
            (0, "ADDR_RESOLVED"),
            (1, "ADDR_ERROR"),
            (2, "ROUTE_RESOLVED"),
            (3, "ROUTE_ERROR"),
            (5, "CONNECT_RESPONSE"),
            (6, "CONNECT_ERROR"),
            (7, "UNREACHABLE"),
            (8, "REJECTED"),
            (9, "ESTABLISHED"),
            (10, "DISCONNECTED"),
            (11, "DEVICE_REMOVAL"),
            (12, "MULTICAST_JOIN"),
            (13, "MULTICAST_ERROR"),
            (14, "ADDR_CHANGE"),
            (15, "TIMEWAIT_EXIT"),
            (99, "unknown event"),
        ];
        for (n, name) in names {
            assert_eq!(CmEvent::decode(&resp(n, 0), no_id).name(), name);
        }
    }

    #[test]
    fn statuses_and_reject_reasons() {
        let ev = CmEvent::decode(&resp(1, -libc::ETIMEDOUT), no_id);
        assert_eq!(ev.os_error().unwrap().raw_os_error(), Some(libc::ETIMEDOUT));
        assert!(ev.to_string().starts_with("ADDR_ERROR ("), "{ev}");

        let mut r = resp(8, 8);
        let mut conn = ConnParam::zeroed();
        conn.private_data[..4].copy_from_slice(b"nope");
        conn.private_data_len = 148;
        r.param = crate::sys::abi::EventParam::from_conn(conn);
        match CmEvent::decode(&r, no_id) {
            CmEvent::Rejected {
                reason,
                private_data,
            } => {
                assert_eq!(reason, RejectReason::Ib(8));
                assert!(reason.is_no_listener());
                assert_eq!(private_data.len(), 148);
                assert!(private_data.starts_with(b"nope"));
            }
            other => panic!("{other}"),
        }
        let iwarp = RejectReason::from_status(-libc::ECONNREFUSED);
        assert!(iwarp.is_no_listener());
        assert!(RejectReason::Ib(28).is_consumer());
        assert_eq!(
            RejectReason::Ib(28).to_string(),
            "IB CM reject reason 28, consumer defined"
        );
        let ev = CmEvent::decode(&resp(8, 28), no_id);
        assert_eq!(
            ev.to_string(),
            "REJECTED (IB CM reject reason 28, consumer defined)"
        );
        assert!(ev.os_error().is_none());
    }
}
