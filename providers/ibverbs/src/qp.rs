//! [`BridgeQp`]: an RC queue pair through libibverbs. Requests are checked against the QP's
//! limits first (so errors name the limit), then translated into libibverbs' structs in
//! per-queue scratch buffers (no allocation per post once warm) and posted through the
//! context's ops table.
#![forbid(unsafe_code)]

use crate::context::{BridgeContext, BridgePd};
use crate::convert::{capabilities, ibv_cap, ibv_qp_attr, qp_attributes, send_wr};
use crate::cq::{BridgeCq, ReceiveAccount};
use crate::sys::abi::{IbvRecvWr, IbvSendWr, IbvSge};
use crate::sys::{RawCq, RawQp};
use rdmasock_verbs::provider::{CqOps, QpOps};
use rdmasock_verbs::qp_attr::{QpAttrMask, QpAttributes, QpCapabilities, QpInitAttributes};
use rdmasock_verbs::wr::{PostError, RecvRequest, ScatterGather, SendRequest};
use rdmasock_verbs::{Error, QpNumber, QpState, Result, SendFlags, SendOp};
use std::any::Any;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// Work requests and SGEs being built for one post.
#[derive(Debug, Default)]
struct Scratch<W> {
    wrs: Vec<W>,
    sges: Vec<IbvSge>,
}

/// A reliable-connected queue pair through libibverbs.
#[derive(Debug)]
pub struct BridgeQp {
    raw: RawQp,
    context: BridgeContext,
    qp_num: QpNumber,
    caps: QpCapabilities,
    send: Mutex<Scratch<IbvSendWr>>,
    recv: Mutex<Scratch<IbvRecvWr>>,
    receives: Arc<ReceiveAccount>,
    _send_cq: Arc<dyn CqOps>,
    recv_cq: Arc<dyn CqOps>,
}

impl Drop for BridgeQp {
    fn drop(&mut self) {
        if let Some(cq) = self.recv_cq.as_any().downcast_ref::<BridgeCq>() {
            cq.untrack_receives(self.qp_num.0);
        }
    }
}

fn bridge_cq(cq: &Arc<dyn CqOps>) -> Result<Arc<RawCq>> {
    cq.as_any()
        .downcast_ref::<BridgeCq>()
        .map(|c| c.raw().clone())
        .ok_or_else(|| {
            Error::InvalidArgument(
                "the completion queue belongs to another provider than the rdma-core bridge".into(),
            )
        })
}

fn sge(s: &ScatterGather<'_>) -> IbvSge {
    IbvSge {
        addr: s.addr(),
        length: s.length(),
        lkey: s.lkey().0,
    }
}

impl BridgeQp {
    /// `ibv_create_qp` (RC) on this provider's CQs.
    pub(crate) fn create(
        pd: &BridgePd,
        init: &QpInitAttributes,
        send_cq: Arc<dyn CqOps>,
        recv_cq: Arc<dyn CqOps>,
    ) -> Result<BridgeQp> {
        let context = pd.context().clone();
        let (raw, cap) = RawQp::create(
            pd.raw(),
            bridge_cq(&send_cq)?,
            bridge_cq(&recv_cq)?,
            ibv_cap(&init.caps),
            init.sq_sig_all,
            context.next_cookie(),
        )
        .map_err(|e| context.error("ibv_create_qp", e))?;
        let receives = Arc::new(ReceiveAccount {
            outstanding: Default::default(),
            shared_with_sends: Arc::ptr_eq(&send_cq, &recv_cq),
        });
        if let Some(cq) = recv_cq.as_any().downcast_ref::<BridgeCq>() {
            cq.track_receives(raw.qp_num(), receives.clone());
        }
        Ok(BridgeQp {
            qp_num: QpNumber(raw.qp_num()),
            raw,
            context,
            caps: capabilities(&cap),
            send: Mutex::default(),
            recv: Mutex::default(),
            receives,
            _send_cq: send_cq,
            recv_cq,
        })
    }

    /// Checks one send request against the QP's limits.
    fn check_send(&self, wr: &SendRequest<'_>) -> Result<()> {
        let qpn = self.qp_num;
        if wr.sg_list.len() > self.caps.max_send_sge as usize {
            return Err(Error::InvalidArgument(format!(
                "{} on QP {qpn} has {} scatter/gather entries; the QP allows max_send_sge = {} \
                 (ask for more in QpCapabilities when creating it)",
                wr.op.name(),
                wr.sg_list.len(),
                self.caps.max_send_sge
            )));
        }
        if !wr.flags.contains(SendFlags::INLINE) {
            return Ok(());
        }
        if matches!(wr.op, SendOp::RdmaRead { .. }) || wr.op.is_atomic() {
            return Err(Error::InvalidArgument(format!(
                "{} on QP {qpn} cannot be INLINE: it writes into its local buffers",
                wr.op.name()
            )));
        }
        let len = wr.total_length();
        if len > u64::from(self.caps.max_inline_data) {
            return Err(Error::InvalidArgument(format!(
                "inline {} of {len} bytes on QP {qpn} exceeds max_inline_data = {} \
                 (ask for more in QpCapabilities, or send it from a registered buffer without INLINE)",
                wr.op.name(),
                self.caps.max_inline_data
            )));
        }
        Ok(())
    }

    fn check_recv(&self, wr: &RecvRequest<'_>) -> Result<()> {
        if wr.sg_list.len() > self.caps.max_recv_sge as usize {
            return Err(Error::InvalidArgument(format!(
                "a receive on QP {} has {} scatter/gather entries; the QP allows max_recv_sge = {} \
                 (ask for more in QpCapabilities when creating it)",
                self.qp_num,
                wr.sg_list.len(),
                self.caps.max_recv_sge
            )));
        }
        Ok(())
    }

    fn post_failure(&self, verb: &'static str, queue: &'static str, e: io::Error) -> Error {
        if e.raw_os_error() == Some(libc::ENOMEM) {
            let depth = if queue == "send queue" {
                self.caps.max_send_wr
            } else {
                self.caps.max_recv_wr
            };
            return Error::QueueFull {
                queue,
                qp_num: self.qp_num,
                depth,
            };
        }
        self.context.error(verb, e)
    }

    fn post_send_checked(&self, wrs: &[SendRequest<'_>]) -> std::result::Result<(), PostError> {
        if wrs.is_empty() {
            return Ok(());
        }
        let mut scratch = self.send.lock().expect("send scratch lock");
        let Scratch { wrs: out, sges } = &mut *scratch;
        out.clear();
        sges.clear();
        for wr in wrs {
            out.push(send_wr(wr));
            sges.extend(wr.sg_list.iter().map(sge));
        }
        self.raw
            .post_send(out, sges)
            .map_err(|(index, e)| PostError {
                index,
                wr_id: wrs[index].wr_id,
                error: self.post_failure("ibv_post_send", "send queue", e),
            })
    }

    fn post_recv_checked(&self, wrs: &[RecvRequest<'_>]) -> std::result::Result<(), PostError> {
        if wrs.is_empty() {
            return Ok(());
        }
        let mut scratch = self.recv.lock().expect("recv scratch lock");
        let outstanding = self.receives.outstanding.load(Ordering::Acquire);
        let room = self.caps.max_recv_wr.saturating_sub(outstanding) as usize;
        let fits = wrs.len().min(room);
        let full = (fits < wrs.len()).then(|| PostError {
            index: fits,
            wr_id: wrs[fits].wr_id,
            error: Error::QueueFull {
                queue: "receive queue",
                qp_num: self.qp_num,
                depth: self.caps.max_recv_wr,
            },
        });
        let wrs = &wrs[..fits];
        let Scratch { wrs: out, sges } = &mut *scratch;
        out.clear();
        sges.clear();
        for wr in wrs {
            out.push(IbvRecvWr {
                wr_id: wr.wr_id,
                num_sge: wr.sg_list.len() as i32,
                ..IbvRecvWr::default()
            });
            sges.extend(wr.sg_list.iter().map(sge));
        }
        let posted = self.raw.post_recv(out, sges);
        let count = match &posted {
            Ok(()) => wrs.len(),
            Err((index, _)) => *index,
        };
        self.receives
            .outstanding
            .fetch_add(count as u32, Ordering::AcqRel);
        posted.map_err(|(index, e)| PostError {
            index,
            wr_id: wrs[index].wr_id,
            error: self.post_failure("ibv_post_recv", "receive queue", e),
        })?;
        full.map_or(Ok(()), Err)
    }
}

/// Posts the valid prefix of `wrs`; then reports the first invalid request, if any (the
/// requests before it were posted, as [`PostError`] promises).
fn post_prefix<T>(
    wrs: &[T],
    check: impl Fn(&T) -> Result<()>,
    wr_id: impl Fn(&T) -> u64,
    post: impl FnOnce(&[T]) -> std::result::Result<(), PostError>,
) -> std::result::Result<(), PostError> {
    let invalid = wrs
        .iter()
        .enumerate()
        .find_map(|(i, wr)| check(wr).err().map(|e| (i, e)));
    let end = invalid.as_ref().map_or(wrs.len(), |(i, _)| *i);
    post(&wrs[..end])?;
    match invalid {
        None => Ok(()),
        Some((index, error)) => Err(PostError {
            index,
            wr_id: wr_id(&wrs[index]),
            error,
        }),
    }
}

impl QpOps for BridgeQp {
    fn qp_num(&self) -> QpNumber {
        self.qp_num
    }

    fn caps(&self) -> QpCapabilities {
        self.caps
    }

    fn modify(&self, attr: &QpAttributes, mask: QpAttrMask) -> Result<()> {
        self.raw
            .modify(&ibv_qp_attr(attr), mask.bits())
            .map_err(|e| self.context.error("ibv_modify_qp", e))?;
        if mask.contains(QpAttrMask::STATE) && attr.qp_state == QpState::Reset {
            // RESET empties the work queues.
            self.receives.outstanding.store(0, Ordering::Release);
        }
        Ok(())
    }

    fn query(&self, mask: QpAttrMask) -> Result<QpAttributes> {
        let (attr, cap) = self
            .raw
            .query(mask.bits())
            .map_err(|e| self.context.error("ibv_query_qp", e))?;
        Ok(qp_attributes(&attr, &cap))
    }

    fn post_send(&self, wrs: &[SendRequest<'_>]) -> std::result::Result<(), PostError> {
        post_prefix(
            wrs,
            |wr| self.check_send(wr),
            |wr| wr.wr_id,
            |ok| self.post_send_checked(ok),
        )
    }

    fn post_recv(&self, wrs: &[RecvRequest<'_>]) -> std::result::Result<(), PostError> {
        post_prefix(
            wrs,
            |wr| self.check_recv(wr),
            |wr| wr.wr_id,
            |ok| self.post_recv_checked(ok),
        )
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
