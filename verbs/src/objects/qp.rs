//! [`QueuePair`] with checked state transitions.

use super::Context;
use crate::error::{Error, Result};
use crate::provider::QpOps;
use crate::qp_attr::{
    InitAttributes, QpAttrMask, QpAttributes, QpCapabilities, RtrAttributes, RtsAttributes,
};
use crate::types::{QpNumber, QpState};
use crate::wr::{PostError, RecvRequest, ScatterGather, SendFlags, SendRequest};
use std::sync::Mutex;

/// A reliable-connected queue pair.
///
/// The state it believes the QP is in is tracked so that a transition missing a required
/// attribute fails here with the attribute names, never as a bare EINVAL from the kernel.
#[derive(Debug)]
pub struct QueuePair {
    ops: Box<dyn QpOps>,
    state: Mutex<QpState>,
    context: Context,
    sq_sig_all: bool,
}

impl QueuePair {
    pub(crate) fn new(ops: Box<dyn QpOps>, context: Context, sq_sig_all: bool) -> Self {
        QueuePair {
            ops,
            state: Mutex::new(QpState::Reset),
            context,
            sq_sig_all,
        }
    }

    /// The provider's object.
    pub fn ops(&self) -> &dyn QpOps {
        &*self.ops
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// The QP number.
    pub fn qp_num(&self) -> QpNumber {
        self.ops.qp_num()
    }

    /// Queue sizes the QP got.
    pub fn caps(&self) -> QpCapabilities {
        self.ops.caps()
    }

    /// Whether every send request completes with a work completion.
    pub fn sq_sig_all(&self) -> bool {
        self.sq_sig_all
    }

    /// The state this handle last moved the QP to (or learnt by [`QueuePair::query`]).
    pub fn state(&self) -> QpState {
        *self.state.lock().expect("qp state lock")
    }

    /// MODIFY_QP with an explicit mask. Transitions to a new state are checked against the
    /// attributes the RC state machine requires.
    pub fn modify(&self, attr: &QpAttributes, mask: QpAttrMask) -> Result<()> {
        let mut state = self.state.lock().expect("qp state lock");
        if mask.contains(QpAttrMask::STATE) {
            let from = if mask.contains(QpAttrMask::CUR_STATE) {
                attr.cur_qp_state
            } else {
                *state
            };
            let to = attr.qp_state;
            match QpAttrMask::required_rc(from, to) {
                None => {
                    return Err(Error::InvalidArgument(format!(
                        "QP {} cannot go from {} to {}",
                        self.qp_num(),
                        from.name(),
                        to.name()
                    )))
                }
                Some(mut required) => {
                    if self.context.device().transport == crate::device::Transport::Iwarp {
                        // iWARP has no partitions: its CM (INIT_QP_ATTR) gives no P_Key index.
                        required -= QpAttrMask::PKEY_INDEX;
                    }
                    let missing = required - mask;
                    if !missing.is_empty() {
                        return Err(Error::MissingAttributes {
                            qp_num: self.qp_num(),
                            from: from.name(),
                            to: to.name(),
                            missing: missing.names(),
                        });
                    }
                }
            }
        }
        self.ops.modify(attr, mask)?;
        if mask.contains(QpAttrMask::STATE) {
            *state = attr.qp_state;
        }
        Ok(())
    }

    /// RESET → INIT.
    pub fn to_init(&self, attr: &InitAttributes) -> Result<()> {
        let (a, m) = attr.to_modify();
        self.modify(&a, m)
    }

    /// INIT → RTR.
    pub fn to_rtr(&self, attr: &RtrAttributes) -> Result<()> {
        let (a, m) = attr.to_modify();
        self.modify(&a, m)
    }

    /// RTR → RTS.
    pub fn to_rts(&self, attr: &RtsAttributes) -> Result<()> {
        let (a, m) = attr.to_modify();
        self.modify(&a, m)
    }

    /// Any state → ERR: every outstanding work request is flushed.
    pub fn to_error(&self) -> Result<()> {
        let a = QpAttributes {
            qp_state: QpState::Error,
            ..Default::default()
        };
        self.modify(&a, QpAttrMask::STATE)
    }

    /// Any state → RESET.
    pub fn to_reset(&self) -> Result<()> {
        let a = QpAttributes {
            qp_state: QpState::Reset,
            ..Default::default()
        };
        self.modify(&a, QpAttrMask::STATE)
    }

    /// QUERY_QP; also refreshes [`QueuePair::state`] (the kernel may have moved the QP, as
    /// iWARP connection setup and fatal errors do).
    pub fn query(&self, mask: QpAttrMask) -> Result<QpAttributes> {
        let a = self.ops.query(mask | QpAttrMask::STATE)?;
        *self.state.lock().expect("qp state lock") = a.qp_state;
        Ok(a)
    }

    /// Records a state the QP was moved to outside this handle (by the connection manager).
    pub fn assume_state(&self, state: QpState) {
        *self.state.lock().expect("qp state lock") = state;
    }

    /// Posts send requests as one chained list. A request carrying a
    /// [`ScatterGather::borrowed`] entry must be [`SendFlags::INLINE`]; none of the list is
    /// posted otherwise.
    #[inline]
    pub fn post_send(&self, wrs: &[SendRequest<'_>]) -> std::result::Result<(), PostError> {
        if let Some(index) = wrs
            .iter()
            .position(|wr| !wr.flags.contains(SendFlags::INLINE) && has_borrowed(wr.sg_list))
        {
            return Err(borrowed_refused(
                index,
                wrs[index].wr_id,
                "a send without INLINE",
            ));
        }
        self.ops.post_send(wrs)
    }

    /// Posts receive requests as one chained list (none may carry a
    /// [`ScatterGather::borrowed`] entry: a receive needs registered memory).
    #[inline]
    pub fn post_recv(&self, wrs: &[RecvRequest<'_>]) -> std::result::Result<(), PostError> {
        if let Some(index) = wrs.iter().position(|wr| has_borrowed(wr.sg_list)) {
            return Err(borrowed_refused(index, wrs[index].wr_id, "a receive"));
        }
        self.ops.post_recv(wrs)
    }

    /// Whether inline sends go out from the caller's memory (see [`QpOps::lends_inline`]):
    /// then an inline send of a large payload costs no copy when the transport takes it at
    /// once.
    pub fn lends_inline(&self) -> bool {
        self.ops.lends_inline()
    }

    /// Bytes of posted sends still waiting for the transport, where the provider knows (see
    /// [`QpOps::send_backlog`]).
    pub fn send_backlog(&self) -> Option<usize> {
        self.ops.send_backlog()
    }

    /// Whether sends posted in quick succession may be handed to the transport together (see
    /// [`QpOps::set_send_coalescing`]); returns whether this QP's provider coalesces at all.
    pub fn set_send_coalescing(&self, on: bool) -> bool {
        self.ops.set_send_coalescing(on)
    }
}

#[inline]
pub(super) fn has_borrowed(sg_list: &[ScatterGather<'_>]) -> bool {
    sg_list.iter().any(|s| s.borrowed_bytes().is_some())
}

#[cold]
#[inline(never)]
pub(super) fn borrowed_refused(index: usize, wr_id: u64, what: &str) -> PostError {
    PostError {
        index,
        wr_id,
        error: Error::InvalidArgument(format!(
            "{what} carries a borrowed gather entry (ScatterGather::borrowed), which only an INLINE send may: register the memory and use MemoryRegion::slice, or set SendFlags::INLINE"
        )),
    }
}
