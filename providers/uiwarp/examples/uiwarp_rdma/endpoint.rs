//! The endpoint of `uiwarp_rdma` as librdmacm's `rdma_create_ep` makes it (a queue pair with a
//! send CQ and a receive CQ, each on its own completion channel, and a registered buffer) and
//! its `rdma_get_send_comp` / `rdma_get_recv_comp` waits; shared with the example's test
//! (providers/uiwarp/tests/uiwarp_rdma_example.rs).
//!
//! One CQ for both directions lost the reply: when the peer's reply had already arrived, the
//! send wait polled both completions at once, kept the SEND's and dropped the other, and the
//! receive wait slept forever. Each wait now has a queue of its own.

use rdmasock_uiwarp::{device_info, UiwarpProvider};
use rdmasock_verbs::provider::Provider;
use rdmasock_verbs::qp_attr::{QpAttrMask, QpAttributes};
use rdmasock_verbs::{
    AccessFlags, CompletionChannel, CompletionQueue, Context, MemoryRegion, QpCapabilities,
    QpInitAttributes, QpState, QueuePair, RecvRequest, SendFlags, SendOp, SendRequest, WcStatus,
    WorkCompletion,
};
use std::time::{Duration, Instant};

/// Bytes of each message.
pub const MSG_LEN: usize = 16;
/// How long the example waits for a completion: as long as it takes, like librdmacm.
pub const FOREVER: Duration = Duration::from_secs(3600);

/// What `rdma_create_ep` gives the C examples, on uiwarp.
pub struct Endpoint {
    _context: Context,
    send: Queue,
    recv: Queue,
    /// The queue pair.
    pub qp: QueuePair,
    mr: MemoryRegion,
    patience: Duration,
}

/// A completion queue and the channel it reports to.
struct Queue {
    channel: CompletionChannel,
    cq: CompletionQueue,
}

impl Queue {
    fn new(context: &Context) -> Result<Queue, String> {
        let channel = context
            .create_comp_channel()
            .map_err(step("ibv_create_comp_channel"))?;
        let cq = context
            .create_cq(1, Some(&channel))
            .map_err(step("ibv_create_cq"))?;
        Ok(Queue { channel, cq })
    }

    /// Arms, polls, waits on the channel until `wr_id` completes (by `deadline`); checks its
    /// status. The queue holds only this request's completions: any other is an error.
    fn wait_for(&self, wr_id: u64, name: &'static str, deadline: Instant) -> Result<(), String> {
        let mut wc = [WorkCompletion::default(); 1];
        loop {
            self.cq.req_notify(false).map_err(step(name))?;
            if let Some(c) = self.cq.poll(&mut wc).map_err(step(name))?.first() {
                if c.wr_id != wr_id {
                    return Err(format!(
                        "{name}: a completion for work request {} came, {wr_id} was expected",
                        c.wr_id
                    ));
                }
                if c.status() != WcStatus::Success {
                    return Err(format!(
                        "{name}: work completion failed: {} (vendor error {:#x})",
                        c.status().text(),
                        c.vendor_err
                    ));
                }
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("{name}: no completion in time"));
            }
            if self.channel.wait(Some(left)).map_err(step(name))?.is_some() {
                self.cq.ack_events(1);
            }
        }
    }
}

/// Prefixes an error with the name of the step that failed.
pub fn step<E: std::fmt::Display>(name: &'static str) -> impl Fn(E) -> String {
    move |e| format!("{name}: {e}")
}

impl Endpoint {
    /// An endpoint whose completion waits give up after `patience`.
    pub fn new(patience: Duration) -> Result<Endpoint, String> {
        let ops = UiwarpProvider::new()
            .open(&device_info())
            .map_err(step("ibv_open_device"))?;
        let context = Context::from_ops(ops);
        let pd = context.alloc_pd().map_err(step("ibv_alloc_pd"))?;
        let send = Queue::new(&context)?;
        let recv = Queue::new(&context)?;
        let init = QpInitAttributes {
            caps: QpCapabilities {
                max_send_wr: 1,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: MSG_LEN as u32,
            },
            sq_sig_all: true,
        };
        let qp = pd
            .create_qp(&init, &send.cq, &recv.cq)
            .map_err(step("rdma_create_qp"))?;
        qp.modify(
            &QpAttributes {
                qp_state: QpState::Init,
                port_num: 1,
                qp_access_flags: AccessFlags::LOCAL_WRITE,
                ..Default::default()
            },
            QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
        )
        .map_err(step("rdma_create_qp"))?;
        let mr = pd
            .register(2 * MSG_LEN, AccessFlags::LOCAL_WRITE)
            .map_err(step("rdma_reg_msgs"))?;
        Ok(Endpoint {
            _context: context,
            send,
            recv,
            qp,
            mr,
            patience,
        })
    }

    /// Posts the receive of one message (wr_id 1).
    pub fn post_recv(&self) -> Result<(), String> {
        let sg = [self.mr.slice(0, MSG_LEN).map_err(step("rdma_post_recv"))?];
        self.qp
            .post_recv(&[RecvRequest {
                wr_id: 1,
                sg_list: &sg,
            }])
            .map_err(step("rdma_post_recv"))
    }

    /// Posts the SEND of one message (wr_id 2).
    pub fn post_send(&self) -> Result<(), String> {
        let sg = [self
            .mr
            .slice(MSG_LEN, MSG_LEN)
            .map_err(step("rdma_post_send"))?];
        let wr = SendRequest::new(2, SendOp::Send, &sg)
            .with_flags(SendFlags::SIGNALED | SendFlags::INLINE);
        self.qp.post_send(&[wr]).map_err(step("rdma_post_send"))
    }

    /// Waits for the SEND's completion (`rdma_get_send_comp`).
    pub fn wait_send(&self) -> Result<(), String> {
        let deadline = Instant::now() + self.patience;
        self.send.wait_for(2, "rdma_get_send_comp", deadline)
    }

    /// Waits for the receive's completion (`rdma_get_recv_comp`).
    pub fn wait_recv(&self) -> Result<(), String> {
        let deadline = Instant::now() + self.patience;
        self.recv.wait_for(1, "rdma_get_recv_comp", deadline)
    }
}
