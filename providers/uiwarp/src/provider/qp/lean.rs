//! The lean path's side of a post: a chain of small inline requests made ready for
//! `Connection::post_inline_chain`, which frames them before the post returns.

use super::UiwarpQp;
use crate::protocol::{InlineOperation, InlineSend};
use rdmasock_verbs::{AccessFlags, SendFlags, SendOp, SendRequest};

/// The most requests of one post that the lean path frames (the socket layer posts a WRITE
/// and its SEND together).
pub(super) const LEAN_CHAIN: usize = 4;

impl UiwarpQp {
    /// `wrs` as a chain for the lean path (see `Connection::post_inline_chain`), written
    /// into the front of `chain`, and its payload bytes, when every request is an inline SEND
    /// or RDMA WRITE within the QP's limits: a payload of one borrowed entry is framed from
    /// the caller's bytes, any other is gathered into `staged` first (cleared; registered
    /// entries read as the general path reads them). `None` sends them the general way,
    /// which also says what is wrong with one.
    pub(super) fn inline_chain<'a>(
        &self,
        wrs: &[SendRequest<'a>],
        staged: &'a mut Vec<u8>,
        chain: &mut [InlineSend<'a>; LEAN_CHAIN],
    ) -> Option<u64> {
        if wrs.is_empty() || wrs.len() > LEAN_CHAIN {
            return None;
        }
        // Each payload: borrowed as it is, or `staged[start..start + len]`.
        let mut payloads: [Option<&'a [u8]>; LEAN_CHAIN] = [None; LEAN_CHAIN];
        let mut ranges = [(0usize, 0usize); LEAN_CHAIN];
        let mut regions = None;
        staged.clear();
        for (i, wr) in wrs.iter().enumerate() {
            if !wr.flags.contains(SendFlags::INLINE)
                || !matches!(wr.op, SendOp::Send | SendOp::RdmaWrite { .. })
                || wr.sg_list.len() > self.endpoint.caps.max_send_sge as usize
                || wr.total_length() > u64::from(self.endpoint.caps.max_inline_data)
            {
                return None;
            }
            if let [entry] = wr.sg_list {
                if let Some(bytes) = entry.borrowed_bytes() {
                    payloads[i] = Some(bytes);
                    continue;
                }
            }
            let start = staged.len();
            for entry in wr.sg_list {
                if let Some(bytes) = entry.borrowed_bytes() {
                    staged.extend_from_slice(bytes);
                    continue;
                }
                let regions = regions.get_or_insert_with(|| {
                    self.endpoint.regions.read().expect("uiwarp regions lock")
                });
                let at = staged.len();
                staged.resize(at + entry.length() as usize, 0);
                regions
                    .local_view(entry.lkey())?
                    .read(entry.addr(), &mut staged[at..], AccessFlags::empty())
                    .ok()?;
            }
            ranges[i] = (start, staged.len() - start);
        }
        drop(regions);
        let staged: &'a [u8] = staged;
        let mut bytes = 0;
        for (i, wr) in wrs.iter().enumerate() {
            let (start, len) = ranges[i];
            let payload = payloads[i].unwrap_or(&staged[start..start + len]);
            bytes += payload.len() as u64;
            let operation = match wr.op {
                SendOp::RdmaWrite { remote_addr, rkey } => {
                    InlineOperation::RdmaWrite { remote_addr, rkey }
                }
                _ => InlineOperation::Send {
                    solicited: wr.flags.contains(SendFlags::SOLICITED),
                },
            };
            chain[i] = InlineSend {
                wr_id: wr.wr_id,
                operation,
                payload,
                signaled: wr.flags.contains(SendFlags::SIGNALED) || self.sq_sig_all,
                fence: wr.flags.contains(SendFlags::FENCE),
            };
        }
        Some(bytes)
    }
}
