//! Driving a [`QueuePair`] through the states the connection manager chooses: INIT_QP_ATTR for
//! INIT, RTR and RTS, applied with `QueuePair::modify` — librdmacm's exact sequence
//! (docs/kernel-abi.md#rdma_cm-queue-pair-states). On iWARP user space does INIT only; the kernel's
//! iWARP CM moves the QP to RTS during connect/accept.
#![forbid(unsafe_code)]

use crate::error::Result;
use crate::event::ConnectionParameters;
use crate::id::CmId;
use rdmasock_verbs::qp_attr::{QpAttrMask, QpAttributes};
use rdmasock_verbs::{QpState, QueuePair, Transport};

/// Whether the QP's device is iWARP (the kernel drives RTR/RTS).
pub fn is_iwarp(qp: &QueuePair) -> bool {
    qp.context().device().transport == Transport::Iwarp
}

/// The most transport retries a QP on rxe may be given. The IBA reads a retry count of 7 as
/// 7 retries (only the RNR retry count's 7 means "retry forever"), but rxe's completer never
/// counts 7 down: a QP whose peer vanished retries for ever and its sends never fail, so a
/// keepalive cannot notice. rsocket asks for 7 and the passive side takes the active side's
/// count; on rxe the QP gets 6, which ends in `RETRY_EXC_ERR` as the IBA's 7 would.
pub const RXE_MAX_RETRY_COUNT: u8 = 6;

/// `retry_cnt` for a QP on rxe (see [`RXE_MAX_RETRY_COUNT`]).
fn finite_retry_count(asked: u8) -> u8 {
    asked.min(RXE_MAX_RETRY_COUNT)
}

impl CmId {
    fn apply_qp_attr(
        &self,
        qp: &QueuePair,
        state: QpState,
        tweak: impl FnOnce(&mut QpAttributes, QpAttrMask),
    ) -> Result<()> {
        let (mut attr, mask) = self.init_qp_attr(state)?;
        tweak(&mut attr, mask);
        qp.modify(&attr, mask)?;
        Ok(())
    }

    /// RESET → INIT with the CM's attributes (port, P_Key index, access). Do it right after
    /// creating the QP (`rdma_create_qp`); receives may be posted afterwards.
    pub fn init_qp(&self, qp: &QueuePair) -> Result<()> {
        self.apply_qp_attr(qp, QpState::Init, |_, _| ())
    }

    /// INIT (refreshing the access flags the peer's request allows), RTR and RTS with the
    /// CM's attributes. `responder_resources` / `initiator_depth` override the CM's
    /// `max_dest_rd_atomic` / `max_rd_atomic` (librdmacm does so on accept). On rxe the
    /// retry count is at most [`RXE_MAX_RETRY_COUNT`]. On iWARP only the INIT refresh is
    /// done here.
    pub fn ready_qp(
        &self,
        qp: &QueuePair,
        responder_resources: Option<u8>,
        initiator_depth: Option<u8>,
    ) -> Result<()> {
        self.apply_qp_attr(qp, QpState::Init, |_, _| ())?;
        if is_iwarp(qp) {
            return Ok(());
        }
        self.apply_qp_attr(qp, QpState::ReadyToReceive, |a, m| {
            if let (Some(r), true) = (
                responder_resources,
                m.contains(QpAttrMask::MAX_DEST_RD_ATOMIC),
            ) {
                a.max_dest_rd_atomic = r;
            }
        })?;
        let rxe = qp.context().device().driver.as_deref() == Some("rxe");
        self.apply_qp_attr(qp, QpState::ReadyToSend, |a, m| {
            if let (Some(d), true) = (initiator_depth, m.contains(QpAttrMask::MAX_QP_RD_ATOMIC)) {
                a.max_rd_atomic = d;
            }
            if rxe && m.contains(QpAttrMask::RETRY_CNT) {
                a.retry_cnt = finite_retry_count(a.retry_cnt);
            }
        })
    }

    /// Passive side: drive `qp` (IB/RoCE: to RTS) and ACCEPT with its QP number and `param`
    /// (whose depths override the CM's). On failure the QP is moved to ERR.
    pub fn accept_qp(&self, qp: &QueuePair, param: &ConnectionParameters) -> Result<()> {
        let param = ConnectionParameters {
            qp_num: qp.qp_num(),
            ..param.clone()
        };
        let result = self
            .ready_qp(
                qp,
                Some(param.responder_resources),
                Some(param.initiator_depth),
            )
            .and_then(|()| self.accept(&param));
        if result.is_err() {
            let _ = qp.to_error();
        }
        result
    }

    /// Active side, on CONNECT_RESPONSE (IB/RoCE): drive `qp` to RTS with the values of the
    /// REP, then send the RTU (ACCEPT with `valid = 0`). On failure the QP is moved to ERR.
    pub fn establish_qp(&self, qp: &QueuePair) -> Result<()> {
        let result = self
            .ready_qp(qp, None, None)
            .and_then(|()| self.establish());
        if result.is_err() {
            let _ = qp.to_error();
        }
        result
    }

    /// On ESTABLISHED: on iWARP the kernel has moved the QP to RTS; record it in `qp`.
    pub fn note_established_qp(&self, qp: &QueuePair) {
        if is_iwarp(qp) {
            qp.assume_state(QpState::ReadyToSend);
        }
    }

    /// Move `qp` out of RTS (ERR on IB/RoCE, SQD on iWARP, where siw turns it into a
    /// graceful close) and DISCONNECT.
    pub fn disconnect_qp(&self, qp: &QueuePair) -> Result<()> {
        if is_iwarp(qp) {
            let attr = QpAttributes {
                qp_state: QpState::SendQueueDrain,
                ..QpAttributes::default()
            };
            qp.modify(&attr, QpAttrMask::STATE)?;
        } else {
            qp.to_error()?;
        }
        self.disconnect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rxe_retry_count_is_finite() {
        assert_eq!(finite_retry_count(7), 6);
        assert_eq!(finite_retry_count(6), 6);
        assert_eq!(finite_retry_count(3), 3);
        assert_eq!(finite_retry_count(0), 0);
    }
}
