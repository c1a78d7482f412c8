//! Post-time checks of a send request against what siw can do and what the QP was given.
//!
//! siw refuses some requests only when its transmit engine reaches them (an opcode it does
//! not know, a fenced READ, a READ with several SGEs, too much inline data): the QP then
//! breaks with a bare error. Everything that can be known at post time is refused here, with
//! the device and the operation named.
#![forbid(unsafe_code)]

use crate::element::{send_opcode, MAX_INLINE, MAX_SGE};
use rdmasock_verbs::qp_attr::QpCapabilities;
use rdmasock_verbs::{Error, QpNumber, Result, SendFlags, SendOp};

/// The parts of a send request the checks look at.
#[derive(Copy, Clone, Debug)]
pub(crate) struct SendShape {
    /// The operation.
    pub op: SendOp,
    /// Its flags.
    pub flags: SendFlags,
    /// Scatter/gather entries.
    pub num_sge: usize,
    /// Their total length in bytes.
    pub total_length: u64,
}

impl SendShape {
    /// The shape of `wr`.
    pub(crate) fn of(wr: &rdmasock_verbs::SendRequest<'_>) -> SendShape {
        SendShape {
            op: wr.op,
            flags: wr.flags,
            num_sge: wr.sg_list.len(),
            total_length: wr.total_length(),
        }
    }
}

/// Why siw cannot do `op`, for an [`Error::Unsupported`].
fn unsupported_reason(op: &SendOp) -> &'static str {
    match op {
        SendOp::SendWithImm(_) | SendOp::RdmaWriteWithImm { .. } => {
            "soft-iWARP carries no immediate data; send the value in the payload, or follow an \
             RDMA_WRITE with a SEND"
        }
        _ => "soft-iWARP has no atomic operations",
    }
}

/// Checks `wr`; returns the inline payload length when the request is INLINE.
pub(crate) fn check_send(
    device: &str,
    qpn: QpNumber,
    caps: &QpCapabilities,
    wr: &SendShape,
) -> Result<Option<usize>> {
    let name = wr.op.name();
    let unsupported = |what: String| Error::Unsupported {
        device: device.to_string(),
        operation: what,
    };
    if send_opcode(&wr.op).is_none() {
        return Err(unsupported(format!(
            "{name} (posted on QP {qpn}): {}",
            unsupported_reason(&wr.op)
        )));
    }
    let n = wr.num_sge;
    if n > caps.max_send_sge as usize || n > MAX_SGE {
        return Err(Error::InvalidArgument(format!(
            "{name} on QP {qpn} has {n} scatter/gather entries; the QP allows max_send_sge = {} \
             (ask for more in QpCapabilities when creating it; siw allows at most {MAX_SGE})",
            caps.max_send_sge
        )));
    }
    let is_read = matches!(wr.op, SendOp::RdmaRead { .. });
    if is_read && n != 1 {
        return Err(unsupported(format!(
            "RDMA_READ into {n} scatter/gather entries (posted on QP {qpn}): siw reads into \
             exactly one; post one READ per local buffer"
        )));
    }
    if is_read && wr.flags.contains(SendFlags::FENCE) {
        return Err(unsupported(format!(
            "a fenced RDMA_READ (posted on QP {qpn}): siw fences only requests that follow \
             READs; fence the request after this READ instead"
        )));
    }
    if !wr.flags.contains(SendFlags::INLINE) {
        return Ok(None);
    }
    if is_read {
        return Err(Error::InvalidArgument(format!(
            "{name} on QP {qpn} cannot be INLINE: it writes into its local buffer"
        )));
    }
    let len = wr.total_length;
    let limit = u64::from(caps.max_inline_data).min(MAX_INLINE as u64);
    if len > limit {
        return Err(Error::InvalidArgument(format!(
            "inline {name} of {len} bytes on QP {qpn} exceeds max_inline_data = {limit} (ask \
             for more in QpCapabilities, at most {MAX_INLINE} on siw, or send it from a \
             registered buffer without INLINE)"
        )));
    }
    Ok(Some(len as usize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmasock_verbs::RemoteKey;

    fn caps() -> QpCapabilities {
        QpCapabilities {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 6,
            max_recv_sge: 6,
            max_inline_data: 80,
        }
    }

    /// A scatter list by its entries' lengths.
    fn sge(len: u64) -> u64 {
        len
    }

    fn check(op: SendOp, sg: &[u64], flags: SendFlags) -> Result<Option<usize>> {
        let wr = SendShape {
            op,
            flags,
            num_sge: sg.len(),
            total_length: sg.iter().sum(),
        };
        check_send("siw0", QpNumber(17), &caps(), &wr)
    }

    const REMOTE: (u64, RemoteKey) = (0x2000, RemoteKey(5));

    #[test]
    fn unsupported_opcodes_name_the_device_and_operation() {
        let sg = [sge(8)];
        let ops = [
            SendOp::SendWithImm(1),
            SendOp::RdmaWriteWithImm {
                remote_addr: REMOTE.0,
                rkey: REMOTE.1,
                imm: 1,
            },
            SendOp::AtomicCompareSwap {
                remote_addr: REMOTE.0,
                rkey: REMOTE.1,
                compare: 1,
                swap: 2,
            },
            SendOp::AtomicFetchAdd {
                remote_addr: REMOTE.0,
                rkey: REMOTE.1,
                add: 1,
            },
        ];
        for op in ops {
            let err = check(op, &sg, SendFlags::SIGNALED).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, Error::Unsupported { .. }), "{text}");
            assert!(text.contains("device `siw0` does not support"), "{text}");
            assert!(text.contains(op.name()), "{text}");
            assert!(text.contains("QP 0x11"), "{text}");
        }
    }

    #[test]
    fn supported_opcodes_pass() {
        let sg = [sge(8), sge(8)];
        let write = SendOp::RdmaWrite {
            remote_addr: REMOTE.0,
            rkey: REMOTE.1,
        };
        assert_eq!(check(SendOp::Send, &sg, SendFlags::SIGNALED).unwrap(), None);
        assert_eq!(check(write, &sg, SendFlags::FENCE).unwrap(), None);
        assert_eq!(check(write, &sg, SendFlags::INLINE).unwrap(), Some(16));
        let read = SendOp::RdmaRead {
            remote_addr: REMOTE.0,
            rkey: REMOTE.1,
        };
        assert_eq!(check(read, &sg[..1], SendFlags::SIGNALED).unwrap(), None);
    }

    #[test]
    fn read_limits_are_refused_at_post_time() {
        let read = SendOp::RdmaRead {
            remote_addr: REMOTE.0,
            rkey: REMOTE.1,
        };
        let two = [sge(8), sge(8)];
        let err = check(read, &two, SendFlags::empty()).unwrap_err();
        assert!(err.to_string().contains("exactly one"), "{err}");
        let err = check(read, &two[..1], SendFlags::FENCE).unwrap_err();
        assert!(err.to_string().contains("fenced RDMA_READ"), "{err}");
        let err = check(read, &two[..1], SendFlags::INLINE).unwrap_err();
        assert!(err.to_string().contains("cannot be INLINE"), "{err}");
    }

    #[test]
    fn sge_and_inline_limits() {
        let seven: Vec<_> = (0..7).map(|_| sge(1)).collect();
        let err = check(SendOp::Send, &seven, SendFlags::empty()).unwrap_err();
        assert!(err.to_string().contains("max_send_sge = 6"), "{err}");
        let big = [sge(81)];
        let err = check(SendOp::Send, &big, SendFlags::INLINE).unwrap_err();
        assert!(err.to_string().contains("max_inline_data = 80"), "{err}");
        let max = [sge(40), sge(40)];
        assert_eq!(
            check(SendOp::Send, &max, SendFlags::INLINE).unwrap(),
            Some(80)
        );
    }
}
