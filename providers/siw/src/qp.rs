//! [`SiwQp`]: a kernel QP handle with its mapped send and receive arrays.
#![forbid(unsafe_code)]

use crate::check::{check_send, SendShape};
use crate::cq::{map_elements, SiwCq};
use crate::element::{
    encode_rqe, encode_sqe, flags, SendDescriptor, Sge, MAX_SGE, RQE_LEN, SQE_LEN,
};
use crate::ring::ElementRing;
use rdmasock_verbs::__private::gather;
use rdmasock_verbs::kernel::{KernelPd, KernelQp};
use rdmasock_verbs::provider::{CqOps, QpOps, SrqOps};
use rdmasock_verbs::qp_attr::{QpAttrMask, QpAttributes, QpCapabilities, QpInitAttributes};
use rdmasock_verbs::wr::PostError;
use rdmasock_verbs::{Error, QpNumber, QpState, RecvRequest, Result, SendRequest};
use std::any::Any;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of `struct siw_uresp_create_qp`.
const CREATE_QP_RESPONSE_LEN: usize = 32;
/// How long a doorbell refused with ENOTCONN on a connected QP is retried (see
/// `SiwQp::ring_connected`).
const DOORBELL_RETRY: Duration = Duration::from_millis(50);

/// A siw reliable-connected queue pair. Its `as_any` returns the [`KernelQp`].
#[derive(Debug)]
pub struct SiwQp {
    // Field order is drop order: DESTROY_QP (and the CQ/PD references) first, then unmap.
    kernel: KernelQp,
    sq: Mutex<Producer>,
    /// `None` when the QP was created with `max_recv_wr = 0` (siw then has no receive array)
    /// or on a shared receive queue.
    rq: Option<Mutex<Producer>>,
    state: Mutex<QpState>,
    signal_all: bool,
    device: String,
}

#[derive(Debug)]
pub(crate) struct Producer {
    pub(crate) ring: ElementRing,
    /// Free-running count of elements posted.
    put: u32,
    pub(crate) scratch: Vec<u8>,
}

impl Producer {
    pub(crate) fn new(ring: ElementRing) -> Producer {
        let scratch = vec![0u8; ring.stride()];
        Producer {
            ring,
            put: 0,
            scratch,
        }
    }

    /// Whether the next slot still belongs to the kernel. siw takes a send element (and
    /// clears its flags) when it starts on it, a receive element when a SEND consumes it.
    pub(crate) fn full(&self) -> bool {
        self.ring.producer_slot_busy(self.put, flags::VALID)
    }

    /// Publishes `scratch` into the next slot with `flags`.
    pub(crate) fn publish(&mut self, element_flags: u16) {
        self.ring.publish(self.put, &self.scratch, element_flags);
        self.put = self.put.wrapping_add(1);
    }
}

fn kernel_cq_handle(cq: &Arc<dyn CqOps>) -> Result<u32> {
    cq.as_any()
        .downcast_ref::<SiwCq>()
        .map(|c| c.kernel().handle())
        .ok_or_else(|| {
            Error::InvalidArgument(
                "a siw queue pair needs completion queues created on a siw device".into(),
            )
        })
}

fn post_error(index: usize, wr_id: u64, error: Error) -> PostError {
    PostError {
        index,
        wr_id,
        error,
    }
}

impl SiwQp {
    /// CREATE_QP (no driver input; driver response `siw_uresp_create_qp`: QP id, element
    /// counts and mmap keys) and the mappings of both arrays.
    pub fn create(
        pd: &KernelPd,
        init: &QpInitAttributes,
        send_cq: Arc<dyn CqOps>,
        recv_cq: Arc<dyn CqOps>,
    ) -> Result<SiwQp> {
        Self::create_with_srq(pd, init, send_cq, recv_cq, None)
    }

    /// [`create`](Self::create), on the shared receive queue `srq` when given: then siw
    /// makes no receive array (it reports `num_rqe = 0`), and [`QpOps::post_recv`] refuses.
    pub fn create_with_srq(
        pd: &KernelPd,
        init: &QpInitAttributes,
        send_cq: Arc<dyn CqOps>,
        recv_cq: Arc<dyn CqOps>,
        srq: Option<Arc<dyn SrqOps>>,
    ) -> Result<SiwQp> {
        let device = pd.context().device_info().name.clone();
        check_init(&device, init)?;
        let send = kernel_cq_handle(&send_cq)?;
        let recv = kernel_cq_handle(&recv_cq)?;
        let srq = srq
            .map(|s| crate::srq::kernel_srq_handle(&s).map(|handle| (s, handle)))
            .transpose()?;
        let on_srq = srq.is_some();
        let mut out = [0u8; CREATE_QP_RESPONSE_LEN];
        let kernel =
            KernelQp::create_with_srq(pd, init, (send_cq, send), (recv_cq, recv), srq, &mut out)?;
        let word = |at: usize| u32::from_le_bytes(out[at..at + 4].try_into().expect("4 bytes"));
        let key = |at: usize| u64::from_le_bytes(out[at..at + 8].try_into().expect("8 bytes"));
        let (num_sqe, num_rqe) = (word(4), word(8));
        let context = pd.context();
        let sq = map_elements(context, key(16), num_sqe, SQE_LEN, 0, "send queue")?;
        let rq = match num_rqe {
            _ if on_srq => None,
            0 => None,
            n => Some(map_elements(
                context,
                key(24),
                n,
                RQE_LEN,
                0,
                "receive queue",
            )?),
        };
        Ok(SiwQp {
            kernel,
            sq: Mutex::new(Producer::new(sq)),
            rq: rq.map(|r| Mutex::new(Producer::new(r))),
            state: Mutex::new(QpState::Reset),
            signal_all: init.sq_sig_all,
            device,
        })
    }

    /// The state as far as it can be known. siw's QUERY_QP does not report the state (it
    /// always reads RESET), and on iWARP the kernel's connection manager moves the QP to RTS
    /// behind this handle's back. So while the cached state is before RTS, the send doorbell
    /// is rung as a probe: the kernel refuses it with ENOTCONN in every state but RTS and
    /// ERROR, and it has no effect on an empty send array. Once accepted, the QP is connected.
    fn refreshed_state(&self) -> Result<QpState> {
        let mut state = self.state.lock().expect("qp state lock");
        if matches!(
            *state,
            QpState::Reset | QpState::Init | QpState::ReadyToReceive
        ) {
            match self.kernel.doorbell() {
                Ok(()) => *state = QpState::ReadyToSend,
                Err(Error::Kernel { source, .. })
                    if source.raw_os_error() == Some(libc::ENOTCONN) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(*state)
    }

    /// Rings the doorbell of a QP known to be in RTS. siw's post_send only try-locks the QP's
    /// state and answers ENOTCONN while another path holds it for writing (the connection
    /// manager finishing a transition): the requests are in the ring already, so ring again
    /// for a short while before reporting the QP as not connected. (Rare: the first write
    /// after ESTABLISHED can meet it, about once in a thousand connect/write cycles.)
    fn ring_connected(&self) -> Result<()> {
        let deadline = Instant::now() + DOORBELL_RETRY;
        loop {
            match self.kernel.doorbell() {
                Err(Error::Kernel { source, .. })
                    if source.raw_os_error() == Some(libc::ENOTCONN)
                        && Instant::now() < deadline =>
                {
                    std::thread::yield_now();
                }
                other => return other,
            }
        }
    }

    fn doorbell_error(&self, e: Error) -> Error {
        match &e {
            Error::Kernel { source, .. } if source.raw_os_error() == Some(libc::ENOTCONN) => {
                Error::InvalidArgument(format!(
                    "QP {} on {} is not connected (the send doorbell got ENOTCONN): the \
                     requests are queued but will only run once the connection manager has \
                     established the connection",
                    self.kernel.qp_num(),
                    self.device
                ))
            }
            _ => e,
        }
    }
}

/// Refuses queue sizes siw rejects with a bare EINVAL, naming the limit.
fn check_init(device: &str, init: &QpInitAttributes) -> Result<()> {
    let c = &init.caps;
    let problem = if c.max_send_wr == 0 {
        Some("max_send_wr = 0 (siw needs a send queue of at least one entry)".to_string())
    } else if c.max_send_sge as usize > MAX_SGE || c.max_recv_sge as usize > MAX_SGE {
        Some(format!(
            "max_send_sge = {} / max_recv_sge = {} (siw allows at most {MAX_SGE})",
            c.max_send_sge, c.max_recv_sge
        ))
    } else if c.max_inline_data as usize > crate::element::MAX_INLINE {
        Some(format!(
            "max_inline_data = {} (siw allows at most {})",
            c.max_inline_data,
            crate::element::MAX_INLINE
        ))
    } else {
        None
    };
    match problem {
        Some(p) => Err(Error::Unsupported {
            device: device.to_string(),
            operation: format!("queue pairs with {p}"),
        }),
        None => Ok(()),
    }
}

impl QpOps for SiwQp {
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

    /// QUERY_QP, with the state this provider knows (see `refreshed_state`): siw's answer
    /// always says RESET.
    fn query(&self, mask: QpAttrMask) -> Result<QpAttributes> {
        let mut a = self.kernel.query(mask)?;
        a.qp_state = self.refreshed_state()?;
        a.cur_qp_state = a.qp_state;
        Ok(a)
    }

    fn post_send(&self, wrs: &[SendRequest<'_>]) -> std::result::Result<(), PostError> {
        let Some(first) = wrs.first() else {
            return Ok(());
        };
        let state = self
            .refreshed_state()
            .map_err(|e| post_error(0, first.wr_id, e))?;
        if matches!(
            state,
            QpState::Reset | QpState::Init | QpState::ReadyToReceive
        ) {
            let e = Error::InvalidArgument(format!(
                "QP {} on {} is in {}: sends can be posted once the connection manager has \
                 established the connection (iWARP QPs reach RTS only through rdma_cm)",
                self.kernel.qp_num(),
                self.device,
                state.name()
            ));
            return Err(post_error(0, first.wr_id, e));
        }
        let caps = self.kernel.caps();
        let mut sq = self.sq.lock().expect("send queue lock");
        let first_put = sq.put;
        let mut sges: Vec<Sge> = Vec::with_capacity(MAX_SGE);
        let mut payload = Vec::new();
        let mut result = Ok(());
        let mut posted = 0;
        for (index, wr) in wrs.iter().enumerate() {
            let inline = match check_send(
                &self.device,
                self.kernel.qp_num(),
                &caps,
                &SendShape::of(wr),
            ) {
                Ok(i) => i,
                Err(e) => {
                    result = Err(post_error(index, wr.wr_id, e));
                    break;
                }
            };
            if sq.full() {
                let e = Error::QueueFull {
                    queue: "send queue",
                    qp_num: self.kernel.qp_num(),
                    depth: sq.ring.count(),
                };
                result = Err(post_error(index, wr.wr_id, e));
                break;
            }
            sges.clear();
            sges.extend(wr.sg_list.iter().map(Sge::from));
            let desc = SendDescriptor {
                wr_id: wr.wr_id,
                op: wr.op,
                flags: wr.flags,
                signal_all: self.signal_all,
                sges: &sges,
            };
            sq.scratch.fill(0);
            let element_flags = match inline {
                Some(n) => {
                    payload.resize(n, 0);
                    gather(wr.sg_list, &mut payload);
                    encode_sqe(&desc, Some(&payload), &mut sq.scratch)
                }
                None => encode_sqe(&desc, None, &mut sq.scratch),
            };
            sq.publish(element_flags);
            posted += 1;
        }
        // The doorbell, unless the element posted just before these is still untaken: the
        // kernel's transmit engine is then busy and reaches these after it (libsiw's rule,
        // docs/kernel-abi.md#siw-doorbell). When it is idle, the kernel sends in our context.
        let engine_busy = (posted as u32) < sq.ring.count()
            && sq
                .ring
                .earlier_slot_untaken(first_put.wrapping_sub(1), flags::VALID);
        if posted > 0 && !engine_busy {
            if let Err(e) = self.ring_connected() {
                return Err(post_error(0, first.wr_id, self.doorbell_error(e)));
            }
        }
        result
    }

    fn post_recv(&self, wrs: &[RecvRequest<'_>]) -> std::result::Result<(), PostError> {
        let Some(first) = wrs.first() else {
            return Ok(());
        };
        let qpn = self.kernel.qp_num();
        let Some(rq) = &self.rq else {
            let e = Error::InvalidArgument(format!(
                "QP {qpn} on {} has no receive queue (it was created with max_recv_wr = 0, \
                 or on a shared receive queue: post there)",
                self.device
            ));
            return Err(post_error(0, first.wr_id, e));
        };
        if *self.state.lock().expect("qp state lock") == QpState::Reset {
            let e = Error::InvalidArgument(format!(
                "QP {qpn} is in RESET: move it to INIT (rdma_cm's init_qp) before posting receives"
            ));
            return Err(post_error(0, first.wr_id, e));
        }
        let caps = self.kernel.caps();
        let mut rq = rq.lock().expect("receive queue lock");
        let mut sges: Vec<Sge> = Vec::with_capacity(MAX_SGE);
        for (index, wr) in wrs.iter().enumerate() {
            let n = wr.sg_list.len();
            if n > caps.max_recv_sge as usize || n > MAX_SGE {
                let e = Error::InvalidArgument(format!(
                    "receive on QP {qpn} has {n} scatter/gather entries; the QP allows \
                     max_recv_sge = {} (ask for more in QpCapabilities when creating it; siw \
                     allows at most {MAX_SGE})",
                    caps.max_recv_sge
                ));
                return Err(post_error(index, wr.wr_id, e));
            }
            if rq.full() {
                let e = Error::QueueFull {
                    queue: "receive queue",
                    qp_num: qpn,
                    depth: rq.ring.count(),
                };
                return Err(post_error(index, wr.wr_id, e));
            }
            sges.clear();
            sges.extend(wr.sg_list.iter().map(Sge::from));
            rq.scratch.fill(0);
            let element_flags = encode_rqe(wr.wr_id, &sges, &mut rq.scratch);
            rq.publish(element_flags);
        }
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        &self.kernel
    }
}
