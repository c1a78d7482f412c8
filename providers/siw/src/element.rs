//! siw's queue elements as bytes (`siw-abi.h`, docs/kernel-abi.md#siw-elements): the send element
//! (`struct siw_sqe`, 120 bytes), the receive element (`struct siw_rqe`, 112 bytes), the completion
//! element (`struct siw_cqe`, 32 bytes), and the codes inside them.
//!
//! Encoders fill a buffer with everything but the flags field and return the flags to
//! publish: the ring stores those last, with release semantics (see `ring`).
#![forbid(unsafe_code)]

use rdmasock_verbs::wr::{SendFlags, SendOp};
use rdmasock_verbs::{QpNumber, WcOpcode, WcStatus, WorkCompletion};

/// Bytes of `struct siw_sqe`.
pub(crate) const SQE_LEN: usize = 120;
/// Bytes of `struct siw_rqe`.
pub(crate) const RQE_LEN: usize = 112;
/// Bytes of `struct siw_cqe`.
pub(crate) const CQE_LEN: usize = 32;
/// Bytes of `struct siw_cq_ctrl` after the completion array.
pub(crate) const CQ_CTRL_LEN: usize = 8;
/// `SIW_MAX_SGE`: scatter/gather entries an element holds.
pub(crate) const MAX_SGE: usize = 6;
/// `SIW_MAX_INLINE`: inline payload bytes a send element holds (5 SGE slots).
pub(crate) const MAX_INLINE: usize = 80;
/// `SIW_INVAL_UOBJ_KEY`: the mmap key the first siw reported when it could not prepare a
/// mapping (siw on the kernel's common mmap table fails the call instead, and may hand out
/// this value as a valid key).
pub(crate) const INVALID_MMAP_KEY: u64 = 0x9_0000;

/// `enum siw_wqe_flags`.
pub(crate) mod flags {
    /// Owned by the consumer side (the kernel for SQE/RQE, us for CQE).
    pub(crate) const VALID: u16 = 1;
    /// The payload is inline in the SQE.
    pub(crate) const INLINE: u16 = 2;
    /// Produce a completion on success.
    pub(crate) const SIGNALLED: u16 = 4;
    /// Set the solicited-event bit at the receiver.
    pub(crate) const SOLICITED: u16 = 8;
    /// Wait for outstanding READs first.
    pub(crate) const READ_FENCE: u16 = 16;
}

/// `enum siw_notify_flags`: values of the CQ arming word (0 = disarmed: the kernel stores
/// it when it raises an event).
pub(crate) mod notify {
    /// Fire on the next completion of an SQE that carried SOLICITED.
    pub(crate) const SOLICITED: u32 = 1;
    /// Fire on the next completion.
    pub(crate) const NEXT_COMPLETION: u32 = 2;
}

/// `enum siw_opcode` values user space posts or sees in completions.
pub(crate) mod opcode {
    /// RDMA WRITE.
    pub(crate) const WRITE: u8 = 0;
    /// RDMA READ.
    pub(crate) const READ: u8 = 1;
    /// RDMA READ with local invalidate (kernel only; seen in completions).
    pub(crate) const READ_LOCAL_INV: u8 = 2;
    /// SEND.
    pub(crate) const SEND: u8 = 3;
    /// SEND with immediate (not supported by siw; seen in completions only in theory).
    pub(crate) const SEND_WITH_IMM: u8 = 4;
    /// SEND with remote invalidate.
    pub(crate) const SEND_REMOTE_INV: u8 = 5;
    /// A receive completed.
    pub(crate) const RECEIVE: u8 = 8;
}

// siw_sqe
const SQE_ID: usize = 0;
const SQE_NUM_SGE: usize = 10;
const SQE_OPCODE: usize = 11;
const SQE_RKEY: usize = 12;
const SQE_RADDR: usize = 16;
const SQE_SGE: usize = 24;
/// Where inline payload starts (`&sge[1]`).
const SQE_INLINE: usize = SQE_SGE + SGE_LEN;
// siw_rqe
const RQE_ID: usize = 0;
const RQE_NUM_SGE: usize = 10;
const RQE_SGE: usize = 16;
// siw_sge
const SGE_LEN: usize = 16;
// siw_cqe
const CQE_ID: usize = 0;
const CQE_FLAGS: usize = 8;
const CQE_OPCODE: usize = 9;
const CQE_STATUS: usize = 10;
const CQE_BYTES: usize = 12;
const CQE_QP_ID: usize = 24;

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u16(buf: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([buf[at], buf[at + 1]])
}

fn get_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

fn get_u64(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

/// One scatter/gather entry as an element stores it (`struct siw_sge`, the `ibv_sge` layout).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Sge {
    /// Local virtual address.
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// Local key (STag) of the region.
    pub lkey: u32,
}

impl From<&rdmasock_verbs::ScatterGather<'_>> for Sge {
    fn from(s: &rdmasock_verbs::ScatterGather<'_>) -> Sge {
        Sge {
            addr: s.addr(),
            length: s.length(),
            lkey: s.lkey().0,
        }
    }
}

fn put_sges(buf: &mut [u8], at: usize, sges: &[Sge]) {
    for (i, s) in sges.iter().enumerate() {
        let o = at + i * SGE_LEN;
        put_u64(buf, o, s.addr);
        put_u32(buf, o + 8, s.length);
        put_u32(buf, o + 12, s.lkey);
    }
}

/// The siw opcode for a send operation, or `None` when siw cannot do it (immediate data,
/// atomics).
pub(crate) fn send_opcode(op: &SendOp) -> Option<u8> {
    match op {
        SendOp::Send => Some(opcode::SEND),
        SendOp::RdmaWrite { .. } => Some(opcode::WRITE),
        SendOp::RdmaRead { .. } => Some(opcode::READ),
        SendOp::SendWithImm(_)
        | SendOp::RdmaWriteWithImm { .. }
        | SendOp::AtomicCompareSwap { .. }
        | SendOp::AtomicFetchAdd { .. } => None,
    }
}

/// The fields of a send work request a send element carries.
#[derive(Copy, Clone, Debug)]
pub(crate) struct SendDescriptor<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Operation and its remote fields; must be one [`send_opcode`] accepts.
    pub op: SendOp,
    /// Flags of the request.
    pub flags: SendFlags,
    /// Whether the QP signals every request (`sq_sig_all`).
    pub signal_all: bool,
    /// The gather (or, for READ, scatter) list.
    pub sges: &'a [Sge],
}

/// The element flags for `wr` (always including VALID).
pub(crate) fn send_flags(wr: &SendDescriptor<'_>, inline: bool) -> u16 {
    let mut f = flags::VALID;
    if wr.flags.contains(SendFlags::SIGNALED) || wr.signal_all {
        f |= flags::SIGNALLED;
    }
    if wr.flags.contains(SendFlags::SOLICITED) {
        f |= flags::SOLICITED;
    }
    if wr.flags.contains(SendFlags::FENCE) {
        f |= flags::READ_FENCE;
    }
    if inline {
        f |= flags::INLINE;
    }
    f
}

/// Encodes `wr` into `buf` (zeroed, [`SQE_LEN`] bytes) and returns the flags to publish.
/// With `inline` the payload bytes (already gathered, at most [`MAX_INLINE`]) go to `&sge[1]`
/// and their total length to `sge[0].length`.
///
/// # Panics
/// When the opcode is one siw cannot do (callers check with [`send_opcode`] first), when
/// there are more than [`MAX_SGE`] entries, or when the inline payload is too long.
pub(crate) fn encode_sqe(wr: &SendDescriptor<'_>, inline: Option<&[u8]>, buf: &mut [u8]) -> u16 {
    let code = send_opcode(&wr.op).expect("an opcode siw supports");
    assert!(wr.sges.len() <= MAX_SGE, "too many SGEs for an SQE");
    put_u64(buf, SQE_ID, wr.wr_id);
    buf[SQE_OPCODE] = code;
    if let Some((remote_addr, rkey)) = wr.op.remote() {
        put_u32(buf, SQE_RKEY, rkey.0);
        put_u64(buf, SQE_RADDR, remote_addr);
    }
    match inline {
        Some(data) => {
            assert!(data.len() <= MAX_INLINE, "inline payload too long");
            buf[SQE_NUM_SGE] = 1;
            put_u32(buf, SQE_SGE + 8, data.len() as u32);
            buf[SQE_INLINE..SQE_INLINE + data.len()].copy_from_slice(data);
        }
        None => {
            buf[SQE_NUM_SGE] = wr.sges.len() as u8;
            put_sges(buf, SQE_SGE, wr.sges);
        }
    }
    send_flags(wr, inline.is_some())
}

/// Encodes a receive into `buf` (zeroed, [`RQE_LEN`] bytes) and returns the flags to
/// publish (exactly VALID: the kernel tests `flags == VALID`).
///
/// # Panics
/// With more than [`MAX_SGE`] entries.
pub(crate) fn encode_rqe(wr_id: u64, sges: &[Sge], buf: &mut [u8]) -> u16 {
    assert!(sges.len() <= MAX_SGE, "too many SGEs for an RQE");
    put_u64(buf, RQE_ID, wr_id);
    buf[RQE_NUM_SGE] = sges.len() as u8;
    put_sges(buf, RQE_SGE, sges);
    flags::VALID
}

/// The verbs work completion opcode of a siw completion opcode; unknown codes come out as
/// [`WcOpcode::Unknown`] of `0x100 | code`, which no verbs opcode uses.
pub(crate) fn wc_opcode(code: u8) -> WcOpcode {
    match code {
        opcode::WRITE => WcOpcode::RdmaWrite,
        opcode::READ | opcode::READ_LOCAL_INV => WcOpcode::RdmaRead,
        opcode::SEND | opcode::SEND_WITH_IMM | opcode::SEND_REMOTE_INV => WcOpcode::Send,
        opcode::RECEIVE => WcOpcode::Recv,
        other => WcOpcode::Unknown(0x100 | u32::from(other)),
    }
}

/// The verbs status of a siw completion status (`enum siw_wc_status`); an unknown one is a
/// general error.
pub(crate) fn wc_status(status: u16) -> WcStatus {
    match status {
        0 => WcStatus::Success,
        1 => WcStatus::LocalLengthError,
        2 => WcStatus::LocalProtectionError,
        3 => WcStatus::LocalQpOperationError,
        4 => WcStatus::WorkRequestFlushError,
        5 => WcStatus::BadResponseError,
        6 => WcStatus::LocalAccessError,
        7 => WcStatus::RemoteAccessError,
        8 => WcStatus::RemoteInvalidRequestError,
        _ => WcStatus::GeneralError,
    }
}

/// Decodes a completion element. The siw status code itself is kept in `vendor_err` for
/// failed completions.
pub(crate) fn decode_cqe(bytes: &[u8; CQE_LEN]) -> WorkCompletion {
    debug_assert!(bytes[CQE_FLAGS] & flags::VALID as u8 != 0);
    let siw_status = get_u16(bytes, CQE_STATUS);
    let status = wc_status(siw_status);
    WorkCompletion {
        wr_id: get_u64(bytes, CQE_ID),
        status: status.to_raw(),
        opcode: wc_opcode(bytes[CQE_OPCODE]).to_raw(),
        vendor_err: if status.is_success() {
            0
        } else {
            u32::from(siw_status)
        },
        byte_len: get_u32(bytes, CQE_BYTES),
        // siw has no immediate data: imm_data is always 0 and WITH_IMM never set.
        imm_data: 0,
        qp_num: QpNumber(get_u64(bytes, CQE_QP_ID) as u32),
        wc_flags: 0,
        ..WorkCompletion::default()
    }
}

#[cfg(test)]
#[path = "element_tests.rs"]
mod tests;
