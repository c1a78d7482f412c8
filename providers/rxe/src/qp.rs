//! [`RxeQp`]: a kernel QP handle with its mapped send and receive rings.
#![forbid(unsafe_code)]

use crate::cq::{map_ring, MmapInfo, RxeCq};
use crate::ring::{next_index, queued, Ring};
use crate::wqe::{
    encode_recv, encode_send, SendDescriptor, RECV_HEADER_LEN, SEND_HEADER_LEN, SGE_LEN,
};
use rdmasock_verbs::__private::gather;
use rdmasock_verbs::kernel::{KernelPd, KernelQp};
use rdmasock_verbs::provider::{CqOps, QpOps, SrqOps};
use rdmasock_verbs::qp_attr::{QpAttrMask, QpAttributes, QpCapabilities, QpInitAttributes};
use rdmasock_verbs::wr::PostError;
use rdmasock_verbs::{
    Error, QpNumber, QpState, RecvRequest, Result, SendFlags, SendOp, SendRequest,
};
use std::any::Any;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

/// An rxe reliable-connected queue pair. Its `as_any` returns the [`KernelQp`].
#[derive(Debug)]
pub struct RxeQp {
    // Field order is drop order: DESTROY_QP (and the CQ/PD references) first, then unmap.
    kernel: KernelQp,
    sq: Mutex<Producer>,
    /// `None` on a shared receive queue.
    rq: Option<Mutex<Producer>>,
    /// The [`QpState`] as its `u8` value: read without a lock on every post.
    state: AtomicU8,
    /// Serialises `modify`/`query` so the state stored matches the kernel's order.
    modify_lock: Mutex<()>,
}

/// One work queue we produce into, with the QP's limits for it fixed at creation so a post
/// checks them without recomputing anything.
#[derive(Debug)]
pub(crate) struct Producer {
    ring: Ring,
    producer: u32,
    /// The consumer index last read: reloaded only when the queue looks full.
    consumer: u32,
    /// max_send_wr / max_recv_wr: the most elements outstanding.
    pub(crate) depth: u32,
    /// max_send_sge / max_recv_sge, capped at what fits the slot.
    pub(crate) max_sge: usize,
    /// Inline bytes a send may carry (max_inline_data, capped at what fits the slot).
    max_inline: u64,
}

impl Producer {
    pub(crate) fn new(
        ring: Ring,
        depth: u32,
        max_sge: u32,
        header: usize,
        max_inline: u32,
    ) -> Producer {
        let producer = ring.producer(Ordering::Relaxed);
        let consumer = ring.consumer(Ordering::Acquire);
        let room = ring.stride().saturating_sub(header);
        Producer {
            producer,
            consumer,
            depth: depth.min(ring.mask()),
            max_sge: (max_sge as usize).min(room / SGE_LEN),
            max_inline: u64::from(max_inline).min(room as u64),
            ring,
        }
    }

    /// Whether `depth` elements are outstanding (the ring holds at most `mask` ≥ depth).
    #[inline]
    pub(crate) fn full(&mut self) -> bool {
        let mask = self.ring.mask();
        if queued(self.producer, self.consumer, mask) < self.depth {
            return false;
        }
        self.consumer = self.ring.consumer(Ordering::Acquire);
        queued(self.producer, self.consumer, mask) >= self.depth
    }

    /// The slot to encode the next element into (published by [`Producer::publish`]).
    #[inline]
    pub(crate) fn next_slot(&mut self) -> &mut [u8] {
        let index = self.producer;
        self.producer = next_index(index, self.ring.mask());
        self.ring.slot_mut(index)
    }

    /// Publishes every slot handed out by `next_slot` with one release store.
    #[inline]
    pub(crate) fn publish(&self) {
        self.ring.release_producer(self.producer);
    }
}

pub(crate) fn kernel_cq_handle(cq: &Arc<dyn CqOps>) -> Result<u32> {
    cq.as_any()
        .downcast_ref::<RxeCq>()
        .map(|c| c.kernel().handle())
        .ok_or_else(|| {
            Error::InvalidArgument(
                "an rxe queue pair needs completion queues created on an rxe device".into(),
            )
        })
}

/// The CREATE_QP driver response, `struct rxe_create_qp_resp` (`rdma_user_rxe.h`): where to
/// map the receive ring (`rq_mi`, at 0) and the send ring (`sq_mi`, at 16).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct CreateQpResponse {
    rq: MmapInfo,
    sq: MmapInfo,
}

impl CreateQpResponse {
    /// Its size in bytes.
    const LEN: usize = 32;

    fn parse(out: &[u8; Self::LEN]) -> CreateQpResponse {
        CreateQpResponse {
            rq: MmapInfo::parse(out, 0),
            sq: MmapInfo::parse(out, 16),
        }
    }
}

impl RxeQp {
    /// CREATE_QP (no driver input; driver response `rxe_create_qp_resp`, 32 bytes) and the
    /// mappings of both rings.
    pub fn create(
        pd: &KernelPd,
        init: &QpInitAttributes,
        send_cq: Arc<dyn CqOps>,
        recv_cq: Arc<dyn CqOps>,
    ) -> Result<RxeQp> {
        Self::create_with_srq(pd, init, send_cq, recv_cq, None)
    }

    /// [`create`](Self::create), on the shared receive queue `srq` when given: then the
    /// kernel makes no receive ring, and [`QpOps::post_recv`] refuses (post to the SRQ).
    pub fn create_with_srq(
        pd: &KernelPd,
        init: &QpInitAttributes,
        send_cq: Arc<dyn CqOps>,
        recv_cq: Arc<dyn CqOps>,
        srq: Option<Arc<dyn SrqOps>>,
    ) -> Result<RxeQp> {
        let send = kernel_cq_handle(&send_cq)?;
        let recv = kernel_cq_handle(&recv_cq)?;
        let srq = srq
            .map(|s| crate::srq::kernel_srq_handle(&s).map(|handle| (s, handle)))
            .transpose()?;
        let on_srq = srq.is_some();
        let mut out = [0u8; CreateQpResponse::LEN];
        let kernel =
            KernelQp::create_with_srq(pd, init, (send_cq, send), (recv_cq, recv), srq, &mut out)?;
        let rings = CreateQpResponse::parse(&out);
        let rq = match on_srq {
            true => None,
            false => Some(map_ring(pd.context(), rings.rq, "receive queue")?),
        };
        let sq = map_ring(pd.context(), rings.sq, "send queue")?;
        let caps = kernel.caps();
        let sq = Producer::new(
            sq,
            caps.max_send_wr,
            caps.max_send_sge,
            SEND_HEADER_LEN,
            caps.max_inline_data,
        );
        let rq =
            rq.map(|rq| Producer::new(rq, caps.max_recv_wr, caps.max_recv_sge, RECV_HEADER_LEN, 0));
        Ok(RxeQp {
            kernel,
            sq: Mutex::new(sq),
            rq: rq.map(Mutex::new),
            state: AtomicU8::new(QpState::Reset as u8),
            modify_lock: Mutex::new(()),
        })
    }

    fn state(&self) -> QpState {
        QpState::from_raw(u32::from(self.state.load(Ordering::Acquire))).unwrap_or(QpState::Error)
    }

    fn set_state(&self, state: QpState) {
        self.state.store(state as u8, Ordering::Release);
    }

    /// Whether `wr` is the common request that needs no more checks: no INLINE, not an
    /// atomic, within max_send_sge (three compares). The others go through
    /// [`RxeQp::check_send`].
    #[inline]
    fn plain_send(wr: &SendRequest<'_>, sq: &Producer) -> bool {
        wr.sg_list.len() <= sq.max_sge
            && !wr.op.is_atomic()
            && !wr.flags.contains(SendFlags::INLINE)
    }

    /// Checks one send request against the QP's limits (fixed in `sq` at creation); returns
    /// the inline length if inline. The messages are built only on failure.
    #[inline(never)]
    fn check_send(&self, wr: &SendRequest<'_>, sq: &Producer) -> Result<Option<u32>> {
        let qpn = self.kernel.qp_num();
        if wr.sg_list.len() > sq.max_sge {
            return Err(Error::InvalidArgument(format!(
                "{} on QP {qpn} has {} scatter/gather entries; the QP allows max_send_sge = {} \
                 (ask for more in QpCapabilities when creating it)",
                wr.op.name(),
                wr.sg_list.len(),
                sq.max_sge
            )));
        }
        if wr.op.is_atomic() {
            if wr.total_length() != 8 || wr.sg_list.len() != 1 {
                return Err(Error::InvalidArgument(format!(
                    "{} on QP {qpn} needs exactly one 8-byte local buffer for the old value, got {} \
                     entries of {} bytes in total",
                    wr.op.name(),
                    wr.sg_list.len(),
                    wr.total_length()
                )));
            }
            let (addr, _) = wr.op.remote().expect("atomics have a remote address");
            if addr % 8 != 0 {
                return Err(Error::InvalidArgument(format!(
                    "{} on QP {qpn}: remote address {addr:#x} is not 8-byte aligned",
                    wr.op.name()
                )));
            }
        }
        if !wr.flags.contains(SendFlags::INLINE) {
            return Ok(None);
        }
        if matches!(wr.op, SendOp::RdmaRead { .. }) || wr.op.is_atomic() {
            return Err(Error::InvalidArgument(format!(
                "{} on QP {qpn} cannot be INLINE: it writes into its local buffers",
                wr.op.name()
            )));
        }
        let len = wr.total_length();
        if len > sq.max_inline {
            return Err(Error::InvalidArgument(format!(
                "inline {} of {len} bytes on QP {qpn} exceeds max_inline_data = {} \
                 (ask for more in QpCapabilities, or send it from a registered buffer without INLINE)",
                wr.op.name(),
                sq.max_inline
            )));
        }
        Ok(Some(len as u32))
    }

    /// Whether the state lets sends be posted: past RTR (RTS, SQD, SQE and ERR accept them,
    /// the last two to flush them).
    #[inline]
    fn sends_allowed(&self) -> bool {
        self.state.load(Ordering::Acquire) > QpState::ReadyToReceive as u8
    }

    #[cold]
    #[inline(never)]
    fn send_state_error(&self, wr_id: u64) -> PostError {
        post_error(
            0,
            wr_id,
            Error::InvalidArgument(format!(
                "QP {} is in {}: sends can be posted once it is in RTS",
                self.kernel.qp_num(),
                self.state().name()
            )),
        )
    }

    #[cold]
    #[inline(never)]
    fn recv_state_error(&self, wr_id: u64) -> PostError {
        post_error(
            0,
            wr_id,
            Error::InvalidArgument(format!(
                "QP {} is in RESET: move it to INIT before posting receives",
                self.kernel.qp_num()
            )),
        )
    }

    #[cold]
    #[inline(never)]
    fn recv_on_srq_error(&self, wr_id: u64) -> PostError {
        post_error(
            0,
            wr_id,
            Error::InvalidArgument(format!(
                "QP {} takes its receives from a shared receive queue: post them there",
                self.kernel.qp_num()
            )),
        )
    }

    #[cold]
    #[inline(never)]
    fn recv_sge_error(&self, index: usize, wr: &RecvRequest<'_>, max_sge: usize) -> PostError {
        post_error(
            index,
            wr.wr_id,
            Error::InvalidArgument(format!(
                "receive on QP {} has {} scatter/gather entries; the QP allows \
                 max_recv_sge = {max_sge} (ask for more in QpCapabilities when creating it)",
                self.kernel.qp_num(),
                wr.sg_list.len(),
            )),
        )
    }

    #[cold]
    #[inline(never)]
    fn queue_full(&self, queue: &'static str, depth: u32) -> Error {
        Error::QueueFull {
            queue,
            qp_num: self.kernel.qp_num(),
            depth,
        }
    }
}

fn post_error(index: usize, wr_id: u64, error: Error) -> PostError {
    PostError {
        index,
        wr_id,
        error,
    }
}

impl QpOps for RxeQp {
    fn qp_num(&self) -> QpNumber {
        self.kernel.qp_num()
    }

    fn caps(&self) -> QpCapabilities {
        self.kernel.caps()
    }

    fn modify(&self, attr: &QpAttributes, mask: QpAttrMask) -> Result<()> {
        let _serial = self.modify_lock.lock().expect("qp modify lock");
        self.kernel.modify(attr, mask)?;
        if mask.contains(QpAttrMask::STATE) {
            self.set_state(attr.qp_state);
        }
        Ok(())
    }

    fn query(&self, mask: QpAttrMask) -> Result<QpAttributes> {
        let _serial = self.modify_lock.lock().expect("qp modify lock");
        let a = self.kernel.query(mask)?;
        self.set_state(a.qp_state);
        Ok(a)
    }

    fn post_send(&self, wrs: &[SendRequest<'_>]) -> std::result::Result<(), PostError> {
        let Some(first) = wrs.first() else {
            return Ok(());
        };
        if !self.sends_allowed() {
            return Err(self.send_state_error(first.wr_id));
        }
        let mut guard = self.sq.lock().expect("send queue lock");
        let sq = &mut *guard;
        // Why the request at index `posted` was refused, if one was: the loop stops there.
        let mut refused = None;
        let mut posted = 0;
        for wr in wrs {
            let inline = if Self::plain_send(wr, sq) {
                None
            } else {
                match self.check_send(wr, sq) {
                    Ok(i) => i,
                    Err(e) => {
                        refused = Some(e);
                        break;
                    }
                }
            };
            if sq.full() {
                refused = Some(self.queue_full("send queue", sq.depth));
                break;
            }
            let desc = SendDescriptor {
                wr_id: wr.wr_id,
                op: wr.op,
                flags: wr.flags,
                sges: wr.sg_list,
            };
            let slot = sq.next_slot();
            encode_send(&desc, inline, slot);
            if let Some(n) = inline {
                gather(
                    wr.sg_list,
                    &mut slot[SEND_HEADER_LEN..SEND_HEADER_LEN + n as usize],
                );
            }
            posted += 1;
        }
        if posted > 0 {
            sq.publish();
            drop(guard);
            if let Err(e) = self.kernel.doorbell() {
                // The requests sit in the ring; only the kick failed.
                return Err(post_error(0, first.wr_id, e));
            }
        }
        match refused {
            None => Ok(()),
            Some(e) => Err(post_error(posted, wrs[posted].wr_id, e)),
        }
    }

    fn post_recv(&self, wrs: &[RecvRequest<'_>]) -> std::result::Result<(), PostError> {
        let Some(first) = wrs.first() else {
            return Ok(());
        };
        if self.state.load(Ordering::Acquire) == QpState::Reset as u8 {
            return Err(self.recv_state_error(first.wr_id));
        }
        let Some(rq) = &self.rq else {
            return Err(self.recv_on_srq_error(first.wr_id));
        };
        let mut guard = rq.lock().expect("receive queue lock");
        let rq = &mut *guard;
        let mut result = Ok(());
        for (index, wr) in wrs.iter().enumerate() {
            if wr.sg_list.len() > rq.max_sge {
                result = Err(self.recv_sge_error(index, wr, rq.max_sge));
                break;
            }
            if rq.full() {
                let e = self.queue_full("receive queue", rq.depth);
                result = Err(post_error(index, wr.wr_id, e));
                break;
            }
            encode_recv(wr.wr_id, wr.sg_list, rq.next_slot());
        }
        // Those before a failed one are posted, as with verbs.
        rq.publish();
        result
    }

    fn as_any(&self) -> &dyn Any {
        &self.kernel
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `struct rxe_create_qp_resp` built byte by byte from the kernel's layout (see
    /// docs/kernel-abi.md#rxe-driver-data, `rdma/rdma_user_rxe.h`): `rq_mi` then `sq_mi`, each a
    /// `struct mminfo` of `__aligned_u64 offset`, `__u32 size`, `__u32 pad`, little-endian. The
    /// pads hold garbage and the offsets use their high bytes, so a misread shows.
    #[test]
    fn create_qp_response_has_the_receive_ring_first() {
        let mut out = [0u8; 32];
        // rq_mi
        out[0..8].copy_from_slice(&[0x00, 0x10, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00]);
        out[8..12].copy_from_slice(&[0x00, 0x30, 0x00, 0x00]);
        out[12..16].copy_from_slice(&[0xee; 4]);
        // sq_mi
        out[16..24].copy_from_slice(&[0x00, 0x50, 0x00, 0x00, 0x02, 0x00, 0x00, 0x80]);
        out[24..28].copy_from_slice(&[0x00, 0x10, 0x02, 0x00]);
        out[28..32].copy_from_slice(&[0xdd; 4]);
        assert_eq!(
            CreateQpResponse::parse(&out),
            CreateQpResponse {
                rq: MmapInfo {
                    offset: 0x1_0000_1000,
                    size: 0x3000,
                },
                sq: MmapInfo {
                    offset: 0x8000_0002_0000_5000,
                    size: 0x2_1000,
                },
            }
        );
    }
}
