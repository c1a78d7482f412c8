//! [`RxeQp`]: a kernel QP handle with its mapped send and receive rings.
#![forbid(unsafe_code)]

use crate::cq::{map_ring, MmapInfo, RxeCq};
use crate::ring::{is_full, next_index, queued, Ring};
use crate::wqe::{encode_recv, encode_send, recv_len, send_len, SendDescriptor, Sge};
use rdmasock_verbs::kernel::{KernelPd, KernelQp};
use rdmasock_verbs::provider::{CqOps, QpOps};
use rdmasock_verbs::qp_attr::{QpAttrMask, QpAttributes, QpCapabilities, QpInitAttributes};
use rdmasock_verbs::sys::sge::gather;
use rdmasock_verbs::wr::PostError;
use rdmasock_verbs::{
    Error, QpNumber, QpState, RecvRequest, Result, SendFlags, SendOp, SendRequest,
};
use std::any::Any;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// An rxe reliable-connected queue pair. Its `as_any` returns the [`KernelQp`].
#[derive(Debug)]
pub struct RxeQp {
    // Field order is drop order: DESTROY_QP (and the CQ/PD references) first, then unmap.
    kernel: KernelQp,
    sq: Mutex<Producer>,
    rq: Mutex<Producer>,
    state: Mutex<QpState>,
}

#[derive(Debug)]
struct Producer {
    ring: Ring,
    producer: u32,
    /// One slot's worth of bytes, encoded here and copied into the ring.
    scratch: Vec<u8>,
    /// Reused per request: the SGEs in WQE form and gathered inline bytes.
    sges: Vec<Sge>,
    inline: Vec<u8>,
}

impl Producer {
    fn new(ring: Ring) -> Producer {
        let producer = ring.producer(Ordering::Relaxed);
        let scratch = vec![0u8; ring.stride()];
        Producer {
            ring,
            producer,
            scratch,
            sges: Vec::new(),
            inline: Vec::new(),
        }
    }

    /// Whether `depth` elements (the QP's max_*_wr) are outstanding or the ring is full.
    fn full(&self, depth: u32) -> bool {
        let consumer = self.ring.consumer(Ordering::Acquire);
        let mask = self.ring.mask();
        is_full(self.producer, consumer, mask) || queued(self.producer, consumer, mask) >= depth
    }

    /// Writes the element in `scratch[..len]` into the next slot and publishes it.
    fn publish(&mut self, len: usize) {
        self.ring.write_slot(self.producer, &self.scratch[..len]);
        self.producer = next_index(self.producer, self.ring.mask());
        self.ring.release_producer(self.producer);
    }
}

fn kernel_cq_handle(cq: &Arc<dyn CqOps>) -> Result<u32> {
    cq.as_any()
        .downcast_ref::<RxeCq>()
        .map(|c| c.kernel().handle())
        .ok_or_else(|| {
            Error::InvalidArgument(
                "an rxe queue pair needs completion queues created on an rxe device".into(),
            )
        })
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
        let send = kernel_cq_handle(&send_cq)?;
        let recv = kernel_cq_handle(&recv_cq)?;
        let mut out = [0u8; 32];
        let kernel = KernelQp::create(pd, init, (send_cq, send), (recv_cq, recv), &[], &mut out)?;
        let rq = map_ring(pd.context(), MmapInfo::parse(&out, 0), "receive queue")?;
        let sq = map_ring(pd.context(), MmapInfo::parse(&out, 16), "send queue")?;
        Ok(RxeQp {
            kernel,
            sq: Mutex::new(Producer::new(sq)),
            rq: Mutex::new(Producer::new(rq)),
            state: Mutex::new(QpState::Reset),
        })
    }

    fn state(&self) -> QpState {
        *self.state.lock().expect("qp state lock")
    }

    /// Checks one send request against the QP's limits; returns the inline length if inline.
    fn check_send(&self, wr: &SendRequest<'_>, stride: usize) -> Result<Option<usize>> {
        let caps = self.kernel.caps();
        let qpn = self.kernel.qp_num();
        if wr.sg_list.len() > caps.max_send_sge as usize {
            return Err(Error::InvalidArgument(format!(
                "{} on QP {qpn} has {} scatter/gather entries; the QP allows max_send_sge = {} \
                 (ask for more in QpCapabilities when creating it)",
                wr.op.name(),
                wr.sg_list.len(),
                caps.max_send_sge
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
        let limit = u64::from(caps.max_inline_data).min((stride - send_len(0, Some(0))) as u64);
        if len > limit {
            return Err(Error::InvalidArgument(format!(
                "inline {} of {len} bytes on QP {qpn} exceeds max_inline_data = {limit} \
                 (ask for more in QpCapabilities, or send it from a registered buffer without INLINE)",
                wr.op.name()
            )));
        }
        Ok(Some(len as usize))
    }

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
        let mut state = self.state.lock().expect("qp state lock");
        self.kernel.modify(attr, mask)?;
        if mask.contains(QpAttrMask::STATE) {
            *state = attr.qp_state;
        }
        Ok(())
    }

    fn query(&self, mask: QpAttrMask) -> Result<QpAttributes> {
        let a = self.kernel.query(mask)?;
        *self.state.lock().expect("qp state lock") = a.qp_state;
        Ok(a)
    }

    fn post_send(&self, wrs: &[SendRequest<'_>]) -> std::result::Result<(), PostError> {
        let Some(first) = wrs.first() else {
            return Ok(());
        };
        let state = self.state();
        if matches!(
            state,
            QpState::Reset | QpState::Init | QpState::ReadyToReceive
        ) {
            return Err(post_error(
                0,
                first.wr_id,
                Error::InvalidArgument(format!(
                    "QP {} is in {}: sends can be posted once it is in RTS",
                    self.kernel.qp_num(),
                    state.name()
                )),
            ));
        }
        let mut guard = self.sq.lock().expect("send queue lock");
        let sq = &mut *guard;
        let stride = sq.ring.stride();
        let mut result = Ok(());
        let mut posted = 0;
        for (index, wr) in wrs.iter().enumerate() {
            let inline = match self.check_send(wr, stride) {
                Ok(i) => i,
                Err(e) => {
                    result = Err(post_error(index, wr.wr_id, e));
                    break;
                }
            };
            if inline.is_none() && send_len(wr.sg_list.len(), None) > stride {
                let e = Error::InvalidArgument(format!(
                    "{} scatter/gather entries do not fit the {stride}-byte send queue slot",
                    wr.sg_list.len()
                ));
                result = Err(post_error(index, wr.wr_id, e));
                break;
            }
            if sq.full(self.kernel.caps().max_send_wr) {
                let e = self.queue_full("send queue", self.kernel.caps().max_send_wr);
                result = Err(post_error(index, wr.wr_id, e));
                break;
            }
            sq.sges.clear();
            sq.sges.extend(wr.sg_list.iter().map(Sge::from));
            let desc = SendDescriptor {
                wr_id: wr.wr_id,
                op: wr.op,
                flags: wr.flags,
                sges: &sq.sges,
            };
            let len = send_len(sq.sges.len(), inline);
            sq.scratch.fill(0);
            match inline {
                Some(n) => {
                    sq.inline.resize(n, 0);
                    gather(wr.sg_list, &mut sq.inline);
                    encode_send(&desc, Some(&sq.inline), &mut sq.scratch);
                }
                None => encode_send(&desc, None, &mut sq.scratch),
            }
            sq.publish(len);
            posted += 1;
        }
        if posted > 0 {
            if let Err(e) = self.kernel.doorbell() {
                // The requests sit in the ring; only the kick failed.
                return Err(post_error(0, first.wr_id, e));
            }
        }
        result
    }

    fn post_recv(&self, wrs: &[RecvRequest<'_>]) -> std::result::Result<(), PostError> {
        let Some(first) = wrs.first() else {
            return Ok(());
        };
        if self.state() == QpState::Reset {
            return Err(post_error(
                0,
                first.wr_id,
                Error::InvalidArgument(format!(
                    "QP {} is in RESET: move it to INIT before posting receives",
                    self.kernel.qp_num()
                )),
            ));
        }
        let caps = self.kernel.caps();
        let mut guard = self.rq.lock().expect("receive queue lock");
        let rq = &mut *guard;
        let stride = rq.ring.stride();
        for (index, wr) in wrs.iter().enumerate() {
            let n = wr.sg_list.len();
            if n > caps.max_recv_sge as usize || recv_len(n) > stride {
                let e = Error::InvalidArgument(format!(
                    "receive on QP {} has {n} scatter/gather entries; the QP allows \
                     max_recv_sge = {} (ask for more in QpCapabilities when creating it)",
                    self.kernel.qp_num(),
                    caps.max_recv_sge
                ));
                return Err(post_error(index, wr.wr_id, e));
            }
            if rq.full(caps.max_recv_wr) {
                let e = self.queue_full("receive queue", caps.max_recv_wr);
                return Err(post_error(index, wr.wr_id, e));
            }
            rq.sges.clear();
            rq.sges.extend(wr.sg_list.iter().map(Sge::from));
            rq.scratch.fill(0);
            encode_recv(wr.wr_id, &rq.sges, &mut rq.scratch);
            rq.publish(recv_len(n));
        }
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        &self.kernel
    }
}
