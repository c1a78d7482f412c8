//! What librdmacm's `rdma_server` and `rdma_client` twins share: the endpoint
//! `rdma_create_ep` + `rdma_reg_msgs` make (a QP with one 16-byte message buffer each way),
//! posting, and waiting for a completion as `rdma_get_{send,recv}_comp` do.

use rdmasock::cm::{CmId, Error as CmError, EventChannel};
use rdmasock::verbs::{
    AccessFlags, CompletionChannel, CompletionQueue, Context, MemoryRegion, ProtectionDomain,
    QpCapabilities, QpInitAttributes, QueuePair, RecvRequest, SendFlags, SendOp, SendRequest,
    WcStatus, WorkCompletion,
};
use std::cell::RefCell;

/// The message size of both examples.
pub const MSG_LEN: usize = 16;
/// The receive's work request id.
pub const RECV_WR_ID: u64 = 1;
/// The send's work request id.
pub const SEND_WR_ID: u64 = 2;

/// `perror`-style: the librdmacm call's name, then our error.
pub fn step<E: std::fmt::Display>(name: &'static str) -> impl Fn(E) -> String {
    move |e| format!("{name}: {e}")
}

/// `rdma_create_event_channel`; on a kernel without RDMA the error also names this
/// example's twin on the userspace iWARP provider.
pub fn open_channel(example: &str, role: &str) -> Result<EventChannel, String> {
    EventChannel::open().map_err(|e| {
        let twin = match e {
            CmError::NotLoaded {
                kernel_has_rdma: false,
                ..
            } => format!(
                ". This example's twin on the userspace provider: `cargo run --release -p \
                 rdmasock-uiwarp --example uiwarp_rdma -- {role}` (the same exchange as {example})"
            ),
            _ => String::new(),
        };
        format!("rdma_create_event_channel: {e}{twin}")
    })
}

/// What `rdma_create_ep` + `rdma_reg_msgs` make: the QP and its resources on the id's device.
pub struct Endpoint {
    _context: Context,
    _pd: ProtectionDomain,
    channel: CompletionChannel,
    cq: CompletionQueue,
    pub qp: QueuePair,
    /// Receive buffer at 0, send buffer at `MSG_LEN`.
    mr: MemoryRegion,
    send_flags: SendFlags,
    /// Completions polled while waiting for another one.
    seen: RefCell<Vec<WorkCompletion>>,
}

impl Endpoint {
    pub fn new(id: &CmId, program: &str) -> Result<Endpoint, String> {
        let device = id.device().map_err(step("rdma_create_qp"))?;
        let context = rdmasock::open_device(Some(&device.name)).map_err(step("ibv_open_device"))?;
        let pd = context.alloc_pd().map_err(step("ibv_alloc_pd"))?;
        let channel = context
            .create_comp_channel()
            .map_err(step("ibv_create_comp_channel"))?;
        let cq = context
            .create_cq(2, Some(&channel))
            .map_err(step("ibv_create_cq"))?;
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
            .create_qp(&init, &cq, &cq)
            .map_err(step("rdma_create_qp"))?;
        id.init_qp(&qp).map_err(step("rdma_create_qp"))?;
        let send_flags = if qp.caps().max_inline_data >= MSG_LEN as u32 {
            SendFlags::INLINE
        } else {
            println!("{program}: device doesn't support IBV_SEND_INLINE, using sge sends");
            SendFlags::empty()
        };
        let mr = pd
            .register(2 * MSG_LEN, AccessFlags::LOCAL_WRITE)
            .map_err(step("rdma_reg_msgs"))?;
        Ok(Endpoint {
            _context: context,
            _pd: pd,
            channel,
            cq,
            qp,
            mr,
            send_flags,
            seen: RefCell::new(Vec::new()),
        })
    }

    pub fn post_recv(&self) -> Result<(), String> {
        let sg = [self.mr.slice(0, MSG_LEN).map_err(step("rdma_post_recv"))?];
        self.qp
            .post_recv(&[RecvRequest {
                wr_id: RECV_WR_ID,
                sg_list: &sg,
            }])
            .map_err(step("rdma_post_recv"))
    }

    /// Sends the (zeroed) 16-byte message, as the C example does.
    pub fn post_send(&self) -> Result<(), String> {
        let sg = [self
            .mr
            .slice(MSG_LEN, MSG_LEN)
            .map_err(step("rdma_post_send"))?];
        let wr = SendRequest::new(SEND_WR_ID, SendOp::Send, &sg)
            .with_flags(SendFlags::SIGNALED | self.send_flags);
        self.qp.post_send(&[wr]).map_err(step("rdma_post_send"))
    }

    fn take(&self, wr_id: u64) -> Result<Option<WorkCompletion>, String> {
        let mut wc = [WorkCompletion::default(), WorkCompletion::default()];
        let polled = self.cq.poll(&mut wc).map_err(step("ibv_poll_cq"))?;
        let mut seen = self.seen.borrow_mut();
        seen.extend_from_slice(polled);
        Ok(seen
            .iter()
            .position(|c| c.wr_id == wr_id)
            .map(|i| seen.remove(i)))
    }

    /// `rdma_get_{send,recv}_comp`: arm, poll, wait on the channel; checks the status.
    pub fn wait_for(&self, wr_id: u64, name: &'static str) -> Result<WorkCompletion, String> {
        let wc = loop {
            if let Some(wc) = self.take(wr_id)? {
                break wc;
            }
            self.cq.req_notify(false).map_err(step(name))?;
            if let Some(wc) = self.take(wr_id)? {
                break wc;
            }
            if self.channel.wait(None).map_err(step(name))?.is_some() {
                self.cq.ack_events(1);
            }
        };
        let status = WcStatus::from_raw(wc.status);
        if status != WcStatus::Success {
            return Err(format!(
                "{name}: work completion failed: {} (status {}, vendor error {:#x})",
                status.text(),
                wc.status,
                wc.vendor_err
            ));
        }
        Ok(wc)
    }
}
