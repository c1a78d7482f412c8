//! Queue pair attributes: creation parameters, the full modify/query attribute set, and the
//! typed INIT, RTR and RTS transitions that cannot forget a required attribute.
#![forbid(unsafe_code)]

use crate::memory::AccessFlags;
use crate::types::{Gid, Mtu, Psn, QpNumber, QpState};
use bitflags::bitflags;

/// Sizes of a queue pair's work queues.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct QpCapabilities {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive request.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send request.
    pub max_inline_data: u32,
}

impl Default for QpCapabilities {
    fn default() -> Self {
        QpCapabilities {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// Parameters of CREATE_QP for a reliable-connected queue pair.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct QpInitAttributes {
    /// Queue sizes asked for; the created QP reports what it got.
    pub caps: QpCapabilities,
    /// Every send request completes with a work completion, whatever its SIGNALED flag.
    pub sq_sig_all: bool,
}

/// What a shared receive queue is created with (`ib_srq_init_attr`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SrqInitAttributes {
    /// Receives it can hold (at most the device's `max_srq_wr`).
    pub max_wr: u32,
    /// Scatter/gather entries per receive (at most `max_srq_sge`).
    pub max_sge: u32,
    /// The limit armed at creation (0: not armed); see [`crate::SharedReceiveQueue::set_limit`].
    pub limit: u32,
}

/// What a shared receive queue got.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SrqCapabilities {
    /// Receives it can hold.
    pub max_wr: u32,
    /// Scatter/gather entries per receive.
    pub max_sge: u32,
}

bitflags! {
    /// Which attributes a modify or query touches (`IB_QP_*`).
    #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
    pub struct QpAttrMask: u32 {
        /// qp_state
        const STATE = 1 << 0;
        /// cur_qp_state
        const CUR_STATE = 1 << 1;
        /// en_sqd_async_notify
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// qp_access_flags
        const ACCESS_FLAGS = 1 << 3;
        /// pkey_index
        const PKEY_INDEX = 1 << 4;
        /// port_num
        const PORT = 1 << 5;
        /// qkey
        const QKEY = 1 << 6;
        /// ah_attr
        const AV = 1 << 7;
        /// path_mtu
        const PATH_MTU = 1 << 8;
        /// timeout
        const TIMEOUT = 1 << 9;
        /// retry_cnt
        const RETRY_CNT = 1 << 10;
        /// rnr_retry
        const RNR_RETRY = 1 << 11;
        /// rq_psn
        const RQ_PSN = 1 << 12;
        /// max_rd_atomic
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// alt_ah_attr
        const ALT_PATH = 1 << 14;
        /// min_rnr_timer
        const MIN_RNR_TIMER = 1 << 15;
        /// sq_psn
        const SQ_PSN = 1 << 16;
        /// max_dest_rd_atomic
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// path_mig_state
        const PATH_MIG_STATE = 1 << 18;
        /// cap
        const CAP = 1 << 19;
        /// dest_qp_num
        const DEST_QPN = 1 << 20;
    }
}

impl QpAttrMask {
    /// rdma-core's attribute names for the set bits, comma separated.
    pub fn names(self) -> String {
        const NAMES: [&str; 21] = [
            "qp_state",
            "cur_qp_state",
            "en_sqd_async_notify",
            "qp_access_flags",
            "pkey_index",
            "port_num",
            "qkey",
            "ah_attr",
            "path_mtu",
            "timeout",
            "retry_cnt",
            "rnr_retry",
            "rq_psn",
            "max_rd_atomic",
            "alt_ah_attr",
            "min_rnr_timer",
            "sq_psn",
            "max_dest_rd_atomic",
            "path_mig_state",
            "cap",
            "dest_qp_num",
        ];
        NAMES
            .iter()
            .enumerate()
            .filter(|(i, _)| self.bits() & (1 << i) != 0)
            .map(|(_, n)| *n)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The attributes an RC queue pair requires (IB spec table 91) for `from -> to`, or `None`
    /// when the transition is not allowed by modify.
    pub fn required_rc(from: QpState, to: QpState) -> Option<QpAttrMask> {
        use QpState::*;
        let m = QpAttrMask::STATE;
        Some(match (from, to) {
            (_, Reset) | (_, Error) => m,
            (Reset, Init) => m | Self::PKEY_INDEX | Self::PORT | Self::ACCESS_FLAGS,
            (Init, Init) => m,
            (Init, ReadyToReceive) => {
                m | Self::AV
                    | Self::PATH_MTU
                    | Self::DEST_QPN
                    | Self::RQ_PSN
                    | Self::MAX_DEST_RD_ATOMIC
                    | Self::MIN_RNR_TIMER
            }
            (ReadyToReceive, ReadyToSend) => {
                m | Self::SQ_PSN
                    | Self::TIMEOUT
                    | Self::RETRY_CNT
                    | Self::RNR_RETRY
                    | Self::MAX_QP_RD_ATOMIC
            }
            (ReadyToSend, ReadyToSend)
            | (ReadyToSend, SendQueueDrain)
            | (SendQueueDrain, ReadyToSend)
            | (SendQueueDrain, SendQueueDrain)
            | (SendQueueError, ReadyToSend) => m,
            _ => return None,
        })
    }
}

/// The global route header part of an address vector (needed on RoCE).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: Gid,
    /// Flow label.
    pub flow_label: u32,
    /// Index of our source GID in the port's table.
    pub sgid_index: u8,
    /// Hop limit (rdma-core's pingpong uses 1).
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// An address vector: how to reach the peer (`struct ibv_ah_attr`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressVector {
    /// Global route; required on RoCE.
    pub grh: Option<GlobalRoute>,
    /// Destination LID (IB).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// Local port, 1-based.
    pub port_num: u8,
}

/// Every modifiable queue pair attribute (`struct ibv_qp_attr`); which ones count is said by
/// the [`QpAttrMask`] passed alongside.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct QpAttributes {
    pub qp_state: QpState,
    pub cur_qp_state: QpState,
    pub path_mtu: Mtu,
    pub path_mig_state: u8,
    pub qkey: u32,
    pub rq_psn: Psn,
    pub sq_psn: Psn,
    pub dest_qp_num: QpNumber,
    pub qp_access_flags: AccessFlags,
    pub cap: QpCapabilities,
    pub ah_attr: AddressVector,
    pub alt_ah_attr: AddressVector,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
}

impl Default for QpAttributes {
    fn default() -> Self {
        QpAttributes {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: Mtu::Mtu1024,
            path_mig_state: 0,
            qkey: 0,
            rq_psn: Psn(0),
            sq_psn: Psn(0),
            dest_qp_num: QpNumber(0),
            qp_access_flags: AccessFlags::empty(),
            cap: QpCapabilities::default(),
            ah_attr: AddressVector::default(),
            alt_ah_attr: AddressVector::default(),
            pkey_index: 0,
            alt_pkey_index: 0,
            en_sqd_async_notify: 0,
            sq_draining: 0,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            port_num: 0,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            alt_port_num: 0,
            alt_timeout: 0,
        }
    }
}

/// RESET → INIT.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct InitAttributes {
    /// Partition key index (0 on RoCE/iWARP).
    pub pkey_index: u16,
    /// Local port, 1-based.
    pub port_num: u8,
    /// What the peer may do to our memory through this QP.
    pub access: AccessFlags,
}

/// INIT → RTR: where the peer is and how to receive from it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RtrAttributes {
    /// Path MTU.
    pub path_mtu: Mtu,
    /// The peer's QP number.
    pub dest_qp_num: QpNumber,
    /// The first PSN we expect from the peer.
    pub rq_psn: Psn,
    /// RDMA READs/atomics the peer may have outstanding at us (responder resources).
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code (12 = 0.64 ms in rdma-core's pingpong).
    pub min_rnr_timer: u8,
    /// How to reach the peer.
    pub ah_attr: AddressVector,
}

/// RTR → RTS: how to send.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RtsAttributes {
    /// Our first PSN.
    pub sq_psn: Psn,
    /// Local ACK timeout code (4.096 µs × 2^timeout; 14 in rdma-core's pingpong).
    pub timeout: u8,
    /// Transport retries (7 max).
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// RDMA READs/atomics we may have outstanding (initiator depth).
    pub max_rd_atomic: u8,
}

impl InitAttributes {
    /// The attributes and mask for MODIFY_QP.
    pub fn to_modify(self) -> (QpAttributes, QpAttrMask) {
        let a = QpAttributes {
            qp_state: QpState::Init,
            pkey_index: self.pkey_index,
            port_num: self.port_num,
            qp_access_flags: self.access,
            ..Default::default()
        };
        (
            a,
            QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | QpAttrMask::ACCESS_FLAGS,
        )
    }
}

impl RtrAttributes {
    /// The attributes and mask for MODIFY_QP.
    pub fn to_modify(self) -> (QpAttributes, QpAttrMask) {
        let a = QpAttributes {
            qp_state: QpState::ReadyToReceive,
            path_mtu: self.path_mtu,
            dest_qp_num: self.dest_qp_num,
            rq_psn: self.rq_psn,
            max_dest_rd_atomic: self.max_dest_rd_atomic,
            min_rnr_timer: self.min_rnr_timer,
            ah_attr: self.ah_attr,
            ..Default::default()
        };
        (
            a,
            QpAttrMask::required_rc(QpState::Init, QpState::ReadyToReceive).expect("legal"),
        )
    }
}

impl RtsAttributes {
    /// The attributes and mask for MODIFY_QP.
    pub fn to_modify(self) -> (QpAttributes, QpAttrMask) {
        let a = QpAttributes {
            qp_state: QpState::ReadyToSend,
            sq_psn: self.sq_psn,
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            max_rd_atomic: self.max_rd_atomic,
            ..Default::default()
        };
        (
            a,
            QpAttrMask::required_rc(QpState::ReadyToReceive, QpState::ReadyToSend).expect("legal"),
        )
    }
}

impl Default for RtsAttributes {
    /// rdma-core pingpong's values: timeout 14, retry 7, rnr_retry 7, max_rd_atomic 1.
    fn default() -> Self {
        RtsAttributes {
            sq_psn: Psn(0),
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_masks_match_typed_transitions() {
        let init = InitAttributes {
            pkey_index: 0,
            port_num: 1,
            access: AccessFlags::empty(),
        };
        assert_eq!(
            Some(init.to_modify().1),
            QpAttrMask::required_rc(QpState::Reset, QpState::Init)
        );
        assert!(QpAttrMask::required_rc(QpState::Reset, QpState::ReadyToSend).is_none());
        assert_eq!(
            (QpAttrMask::AV | QpAttrMask::DEST_QPN).names(),
            "ah_attr, dest_qp_num"
        );
    }
}
