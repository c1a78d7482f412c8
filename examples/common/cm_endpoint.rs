//! What librdmacm's `rdma_server` and `rdma_client` twins share: the connection manager the
//! registry picks for this machine (the kernel's rdma_cm where a kernel RDMA device serves
//! the address, else the userspace iWARP provider's; `RDMASOCK_PROVIDER` forces either), the
//! blocking steps librdmacm's synchronous ids take, the endpoint `rdma_create_ep` +
//! `rdma_reg_msgs` make (a QP with one 16-byte message buffer each way), posting, and waiting
//! for a completion as `rdma_get_{send,recv}_comp` do.

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rdmasock::cm::{
    CmEndpoint, CmListener, ConnectionManager, ConnectionParameters, Error as CmError,
    IncomingRequest,
};
use rdmasock::verbs::{
    AccessFlags, CompletionChannel, CompletionQueue, Context, MemoryRegion, ProtectionDomain,
    QpCapabilities, QpInitAttributes, QueuePair, RecvRequest, SendFlags, SendOp, SendRequest,
    WcStatus, WorkCompletion,
};
use std::cell::RefCell;
use std::io;
use std::os::fd::BorrowedFd;

/// The message size of both examples.
pub(crate) const MSG_LEN: usize = 16;
/// The receive's work request id.
pub(crate) const RECV_WR_ID: u64 = 1;
/// The send's work request id.
pub(crate) const SEND_WR_ID: u64 = 2;

/// `perror`-style: the librdmacm call's name, then our error.
pub(crate) fn step<E: std::fmt::Display>(name: &'static str) -> impl Fn(E) -> String {
    move |e| format!("{name}: {e}")
}

/// The connection manager both examples use: the registry's automatic choice.
pub(crate) fn manager() -> &'static dyn ConnectionManager {
    rdmasock::connection_manager()
}

/// [`step`] for the connection manager's first call; on a kernel without RDMA (reached only
/// when `RDMASOCK_PROVIDER` forces a kernel provider) the error also says how to run on the
/// userspace iWARP provider.
pub(crate) fn cm_step(name: &'static str) -> impl Fn(io::Error) -> String {
    move |e| {
        let userspace = match e.get_ref().and_then(|r| r.downcast_ref::<CmError>()) {
            Some(CmError::NotLoaded {
                kernel_has_rdma: false,
                ..
            }) => format!(
                ". {} forces a kernel provider: unset it (or set it to `uiwarp`) to run on the \
                 userspace iWARP provider",
                rdmasock::PROVIDER_ENV
            ),
            _ => String::new(),
        };
        format!("{name}: {e}{userspace}")
    }
}

/// Sleeps until `fd` is readable, without a time limit (the C examples block).
fn wait_readable(fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    loop {
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => return Ok(()),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// `rdma_get_request`: the next connection request on `listener`.
pub(crate) fn get_request(listener: &dyn CmListener) -> io::Result<IncomingRequest> {
    loop {
        if let Some(request) = listener.poll_request()? {
            return Ok(request);
        }
        wait_readable(listener.event_fd())?;
    }
}

/// `rdma_accept` on a synchronous id: accepts on `qp` with librdmacm's default parameters
/// and waits until the connection is established.
pub(crate) fn accept(endpoint: &dyn CmEndpoint, qp: &QueuePair) -> io::Result<()> {
    endpoint.start_accept(qp, &ConnectionParameters::default())?;
    while !endpoint.poll_accept(qp)? {
        wait_readable(endpoint.event_fd())?;
    }
    Ok(())
}

/// What `rdma_create_ep` + `rdma_reg_msgs` make: the QP and its resources on the id's device.
pub(crate) struct Endpoint {
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
    /// The QP and its resources on `id`'s device, the QP moved to INIT by the connection
    /// manager.
    pub(crate) fn new(id: &dyn CmEndpoint, program: &str) -> Result<Endpoint, String> {
        let context = id
            .open_context(&rdmasock::default_registry())
            .map_err(step("ibv_open_device"))?;
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

    pub(crate) fn post_recv(&self) -> Result<(), String> {
        let sg = [self.mr.slice(0, MSG_LEN).map_err(step("rdma_post_recv"))?];
        self.qp
            .post_recv(&[RecvRequest {
                wr_id: RECV_WR_ID,
                sg_list: &sg,
            }])
            .map_err(step("rdma_post_recv"))
    }

    /// Sends the (zeroed) 16-byte message, as the C example does.
    pub(crate) fn post_send(&self) -> Result<(), String> {
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
    pub(crate) fn wait_for(
        &self,
        wr_id: u64,
        name: &'static str,
    ) -> Result<WorkCompletion, String> {
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
