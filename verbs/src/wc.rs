//! Work completions: what `poll` returns for every finished work request.
#![forbid(unsafe_code)]

use crate::types::QpNumber;
use bitflags::bitflags;
use std::fmt;

/// The status of a work completion (`enum ib_wc_status`).
///
/// [`WcStatus::text`] gives the same text as rdma-core's `ibv_wc_status_str`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// The work request completed.
    Success,
    /// A receive buffer was too small, or a send exceeded the port's message size.
    LocalLengthError,
    /// An internal QP consistency error (for example too many SGEs or inline bytes).
    LocalQpOperationError,
    /// An internal EE context error (RD only).
    LocalEecOperationError,
    /// A local SGE referred to memory not registered for the access it needed.
    LocalProtectionError,
    /// The QP went to the error state; this request was flushed without being executed.
    WorkRequestFlushError,
    /// A memory window bind failed.
    MemoryWindowBindError,
    /// An unexpected transport response.
    BadResponseError,
    /// A protection error on a local buffer touched by an incoming RDMA write or read response.
    LocalAccessError,
    /// The responder saw an invalid request (for example a message too long for its receive).
    RemoteInvalidRequestError,
    /// The responder refused access: wrong rkey, out-of-bounds address or missing permission.
    RemoteAccessError,
    /// The responder could not complete the operation.
    RemoteOperationError,
    /// The transport retry count was exceeded: the peer stopped answering.
    RetryExceededError,
    /// The receiver-not-ready retry count was exceeded: the peer had no receive posted.
    RnrRetryExceededError,
    /// RD domain violation.
    LocalRddViolationError,
    /// Invalid RD request.
    RemoteInvalidRdRequestError,
    /// The operation was aborted.
    RemoteAbortError,
    /// Invalid EE context number.
    InvalidEecnError,
    /// Invalid EE context state.
    InvalidEecStateError,
    /// A fatal error.
    FatalError,
    /// A response timed out.
    ResponseTimeoutError,
    /// A general error.
    GeneralError,
    /// A value this library does not know.
    Unknown(u32),
}

impl WcStatus {
    /// Decodes the kernel's status number.
    #[inline]
    pub fn from_raw(v: u32) -> WcStatus {
        use WcStatus::*;
        match v {
            0 => Success,
            1 => LocalLengthError,
            2 => LocalQpOperationError,
            3 => LocalEecOperationError,
            4 => LocalProtectionError,
            5 => WorkRequestFlushError,
            6 => MemoryWindowBindError,
            7 => BadResponseError,
            8 => LocalAccessError,
            9 => RemoteInvalidRequestError,
            10 => RemoteAccessError,
            11 => RemoteOperationError,
            12 => RetryExceededError,
            13 => RnrRetryExceededError,
            14 => LocalRddViolationError,
            15 => RemoteInvalidRdRequestError,
            16 => RemoteAbortError,
            17 => InvalidEecnError,
            18 => InvalidEecStateError,
            19 => FatalError,
            20 => ResponseTimeoutError,
            21 => GeneralError,
            o => Unknown(o),
        }
    }

    /// The kernel's status number.
    pub fn to_raw(self) -> u32 {
        use WcStatus::*;
        match self {
            Success => 0,
            LocalLengthError => 1,
            LocalQpOperationError => 2,
            LocalEecOperationError => 3,
            LocalProtectionError => 4,
            WorkRequestFlushError => 5,
            MemoryWindowBindError => 6,
            BadResponseError => 7,
            LocalAccessError => 8,
            RemoteInvalidRequestError => 9,
            RemoteAccessError => 10,
            RemoteOperationError => 11,
            RetryExceededError => 12,
            RnrRetryExceededError => 13,
            LocalRddViolationError => 14,
            RemoteInvalidRdRequestError => 15,
            RemoteAbortError => 16,
            InvalidEecnError => 17,
            InvalidEecStateError => 18,
            FatalError => 19,
            ResponseTimeoutError => 20,
            GeneralError => 21,
            Unknown(o) => o,
        }
    }

    /// The text rdma-core's `ibv_wc_status_str` gives for this status.
    pub fn text(self) -> &'static str {
        match self.to_raw() {
            0 => "success",
            1 => "local length error",
            2 => "local QP operation error",
            3 => "local EE context operation error",
            4 => "local protection error",
            5 => "Work Request Flushed Error",
            6 => "memory management operation error",
            7 => "bad response error",
            8 => "local access error",
            9 => "remote invalid request error",
            10 => "remote access error",
            11 => "remote operation error",
            12 => "transport retry counter exceeded",
            13 => "RNR retry counter exceeded",
            14 => "local RDD violation error",
            15 => "remote invalid RD request",
            16 => "aborted error",
            17 => "invalid EE context number",
            18 => "invalid EE context state",
            19 => "fatal error",
            20 => "response timeout error",
            21 => "general error",
            22 => "TM error",
            23 => "TM software rendezvous",
            _ => "unknown",
        }
    }

    /// A hint for the user about what usually causes this status, or `None`.
    pub fn hint(self) -> Option<&'static str> {
        Some(match self {
            WcStatus::RnrRetryExceededError => {
                "the peer had no receive posted (post receives before the sender starts, or raise rnr_retry)"
            }
            WcStatus::RemoteAccessError => {
                "the peer refused the access: wrong rkey, an address outside its memory region, or a region registered without REMOTE_READ/REMOTE_WRITE/REMOTE_ATOMIC"
            }
            WcStatus::RetryExceededError => {
                "the peer stopped answering: it exited, its QP is in error, or the path (GID, MTU, address) is wrong"
            }
            WcStatus::LocalProtectionError => {
                "a local scatter/gather entry is outside its memory region or uses a wrong lkey"
            }
            WcStatus::LocalLengthError => {
                "a message was longer than the receive buffer posted for it"
            }
            WcStatus::WorkRequestFlushError => {
                "the queue pair is in the error state: an earlier work request failed, or the connection closed"
            }
            _ => return None,
        })
    }

    /// Whether the status is [`WcStatus::Success`].
    #[inline]
    pub fn is_success(self) -> bool {
        self == WcStatus::Success
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

/// What kind of work request a completion is for (`enum ib_wc_opcode`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND (with or without immediate) finished.
    Send,
    /// An RDMA WRITE (with or without immediate) finished.
    RdmaWrite,
    /// An RDMA READ finished.
    RdmaRead,
    /// An atomic compare-and-swap finished.
    CompareSwap,
    /// An atomic fetch-and-add finished.
    FetchAdd,
    /// A memory window bind finished.
    BindMemoryWindow,
    /// A local invalidate finished.
    LocalInvalidate,
    /// A receive consumed an incoming SEND.
    Recv,
    /// A receive consumed an incoming RDMA WRITE with immediate.
    RecvRdmaWithImm,
    /// A value this library does not know.
    Unknown(u32),
}

impl WcOpcode {
    /// Decodes the kernel's opcode number.
    #[inline]
    pub fn from_raw(v: u32) -> WcOpcode {
        match v {
            0 => WcOpcode::Send,
            1 => WcOpcode::RdmaWrite,
            2 => WcOpcode::RdmaRead,
            3 => WcOpcode::CompareSwap,
            4 => WcOpcode::FetchAdd,
            5 => WcOpcode::BindMemoryWindow,
            6 => WcOpcode::LocalInvalidate,
            128 => WcOpcode::Recv,
            129 => WcOpcode::RecvRdmaWithImm,
            o => WcOpcode::Unknown(o),
        }
    }
    /// The kernel's opcode number.
    pub fn to_raw(self) -> u32 {
        match self {
            WcOpcode::Send => 0,
            WcOpcode::RdmaWrite => 1,
            WcOpcode::RdmaRead => 2,
            WcOpcode::CompareSwap => 3,
            WcOpcode::FetchAdd => 4,
            WcOpcode::BindMemoryWindow => 5,
            WcOpcode::LocalInvalidate => 6,
            WcOpcode::Recv => 128,
            WcOpcode::RecvRdmaWithImm => 129,
            WcOpcode::Unknown(o) => o,
        }
    }
    /// Whether this completion is for a receive queue entry.
    pub fn is_receive(self) -> bool {
        matches!(self, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
    }
}

bitflags! {
    /// Work completion flags, in the kernel's encoding (`enum ib_wc_flags`).
    #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
    pub struct WcFlags: u32 {
        /// A GRH is present in the first 40 bytes of the receive buffer (UD only).
        const GRH = 1 << 0;
        /// `imm_data` is valid.
        const WITH_IMM = 1 << 1;
        /// `invalidated_rkey` is valid.
        const WITH_INVALIDATE = 1 << 2;
        /// The IP checksum was verified.
        const IP_CSUM_OK = 1 << 3;
    }
}

/// One finished work request, as `poll` returns it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct WorkCompletion {
    /// The caller's id of the work request.
    pub wr_id: u64,
    /// Raw status; see [`WorkCompletion::status`].
    pub status: u32,
    /// Raw opcode; see [`WorkCompletion::opcode`]. Meaningful only on success.
    pub opcode: u32,
    /// The provider's own error detail.
    pub vendor_err: u32,
    /// Bytes received (receive completions) or transferred.
    pub byte_len: u32,
    /// The immediate data, in host order, when [`WcFlags::WITH_IMM`] is set.
    pub imm_data: u32,
    /// The local QP the request belonged to.
    pub qp_num: QpNumber,
    /// The remote QP (UD only).
    pub src_qp: QpNumber,
    /// Flags; see [`WorkCompletion::flags`].
    pub wc_flags: u32,
    /// Partition key index.
    pub pkey_index: u16,
    /// Source LID (IB only).
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// Destination LID path bits.
    pub dlid_path_bits: u8,
}

impl WorkCompletion {
    /// The decoded status.
    #[inline]
    pub fn status(&self) -> WcStatus {
        WcStatus::from_raw(self.status)
    }
    /// The decoded opcode.
    #[inline]
    pub fn opcode(&self) -> WcOpcode {
        WcOpcode::from_raw(self.opcode)
    }
    /// The decoded flags.
    pub fn flags(&self) -> WcFlags {
        WcFlags::from_bits_retain(self.wc_flags)
    }
    /// The immediate data, when present.
    pub fn imm(&self) -> Option<u32> {
        self.flags()
            .contains(WcFlags::WITH_IMM)
            .then_some(self.imm_data)
    }
    /// `Ok(self)` on success, else a [`crate::Error::WorkCompletion`] naming the status, the
    /// vendor error and the work request.
    pub fn ok(&self) -> crate::Result<&Self> {
        if self.status().is_success() {
            Ok(self)
        } else {
            Err(crate::Error::WorkCompletion {
                status: self.status(),
                vendor_err: self.vendor_err,
                wr_id: self.wr_id,
                qp_num: self.qp_num,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_round_trip_and_text() {
        for v in 0..=21 {
            assert_eq!(WcStatus::from_raw(v).to_raw(), v);
            assert_ne!(WcStatus::from_raw(v).text(), "unknown");
        }
        assert_eq!(WcStatus::from_raw(99).text(), "unknown");
        assert_eq!(WcStatus::from_raw(5).text(), "Work Request Flushed Error");
        assert_eq!(WcStatus::from_raw(13).text(), "RNR retry counter exceeded");
    }

    #[test]
    fn opcode_round_trip() {
        for v in [0, 1, 2, 3, 4, 5, 6, 128, 129, 77] {
            assert_eq!(WcOpcode::from_raw(v).to_raw(), v);
        }
    }
}
