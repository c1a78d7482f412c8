//! [`SharedReceiveQueue`]: receives shared by the queue pairs created on it.

use super::qp::{borrowed_refused, has_borrowed};
use super::Context;
use crate::error::Result;
use crate::provider::SrqOps;
use crate::qp_attr::SrqCapabilities;
use crate::wr::{PostError, RecvRequest};
use std::sync::Arc;

/// A shared receive queue (SRQ): the queue pairs created on it
/// ([`ProtectionDomain::create_qp_with_srq`](crate::ProtectionDomain::create_qp_with_srq))
/// have no receive queue of their own, and an incoming message that needs a receive takes the
/// next one posted here. Its completion comes on the receive completion queue of the queue
/// pair the message arrived on, naming that queue pair (`WorkCompletion::qp_num`).
///
/// Cheap to clone; destroyed (DESTROY_SRQ) when the last clone and every queue pair on it
/// are gone.
#[derive(Clone, Debug)]
pub struct SharedReceiveQueue {
    ops: Arc<dyn SrqOps>,
    context: Context,
}

impl SharedReceiveQueue {
    pub(crate) fn new(ops: Arc<dyn SrqOps>, context: Context) -> Self {
        SharedReceiveQueue { ops, context }
    }

    /// The provider's object.
    pub fn ops(&self) -> &Arc<dyn SrqOps> {
        &self.ops
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// What the queue got: the receives it holds and the scatter/gather entries of each.
    pub fn caps(&self) -> SrqCapabilities {
        self.ops.caps()
    }

    /// The value async events about this queue carry (`AsyncEvent::element`).
    pub fn cookie(&self) -> u64 {
        self.ops.cookie()
    }

    /// Posts a chained list of receive requests, in order. Those before a failed one are
    /// posted.
    pub fn post_recv(&self, wrs: &[RecvRequest<'_>]) -> std::result::Result<(), PostError> {
        if let Some(index) = wrs.iter().position(|wr| has_borrowed(wr.sg_list)) {
            return Err(borrowed_refused(index, wrs[index].wr_id, "a receive"));
        }
        self.ops.post_recv(wrs)
    }

    /// Arms the limit: once fewer than `limit` receives remain posted, the device reports
    /// one `AsyncEventKind::SrqLimitReached` event for this queue and disarms; 0 disarms.
    pub fn set_limit(&self, limit: u32) -> Result<()> {
        self.ops.set_limit(limit)
    }

    /// The armed limit (QUERY_SRQ): 0 when it was never armed; once it fired, rxe reports 0
    /// and siw the value it was armed with.
    pub fn limit(&self) -> Result<u32> {
        self.ops.query_limit()
    }
}
