//! The kernel objects every kernel provider shares: PD, MR and completion channel (complete
//! [`PdOps`]/[`MrOps`]/[`ChannelOps`] implementations), and the CQ and QP handles a
//! provider's own CQ and QP types wrap.
//!
//! Each handle destroys its kernel object on drop and holds what that object depends on, so
//! Rust's drop order is the kernel's required destroy order.
#![forbid(unsafe_code)]

use super::convert::attributes_from_query;
use super::{DriverData, KernelContext};
use crate::error::{Error, Result};
use crate::memory::{AccessFlags, RegisteredMemory};
use crate::provider::{ChannelOps, CqOps, MrOps, PdOps, QpOps, SrqOps};
use crate::qp_attr::{
    QpAttrMask, QpAttributes, QpCapabilities, QpInitAttributes, SrqInitAttributes,
};
use crate::sys::abi::CompEventDesc;
use crate::sys::abi_qp::{CreateQpRequest, CreateQpResponse};
use crate::sys::uverbs::{poll_readable, read_record, set_fd_blocking, set_nonblocking};
use crate::types::{LocalKey, QpNumber, RemoteKey};
use std::any::Any;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

/// A protection domain; DEALLOC_PD when the last clone (and every MR and QP in it) is gone.
#[derive(Clone, Debug)]
pub struct KernelPd {
    inner: Arc<PdInner>,
}

#[derive(Debug)]
struct PdInner {
    context: KernelContext,
    handle: u32,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        // Nothing to report to: a failure here means the context is already gone.
        let _ = self.context.dealloc_pd(self.handle);
    }
}

impl KernelPd {
    /// ALLOC_PD.
    pub fn alloc(context: &KernelContext) -> Result<KernelPd> {
        let handle = context.alloc_pd_raw(&[], &mut [])?;
        Ok(KernelPd {
            inner: Arc::new(PdInner {
                context: context.clone(),
                handle,
            }),
        })
    }

    /// The kernel handle.
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// The context.
    pub fn context(&self) -> &KernelContext {
        &self.inner.context
    }
}

impl PdOps for KernelPd {
    fn reg_mr(&self, memory: Arc<RegisteredMemory>, access: AccessFlags) -> Result<Box<dyn MrOps>> {
        Ok(Box::new(KernelMr::register(self, memory, access)?))
    }

    fn create_qp(
        &self,
        init: &QpInitAttributes,
        send_cq: Arc<dyn CqOps>,
        recv_cq: Arc<dyn CqOps>,
    ) -> Result<Box<dyn QpOps>> {
        let driver = self.inner.context.driver().clone();
        driver.create_qp(self, init, send_cq, recv_cq)
    }

    fn create_srq(&self, init: &SrqInitAttributes) -> Result<Arc<dyn SrqOps>> {
        let driver = self.inner.context.driver().clone();
        driver.create_srq(self, init)
    }

    fn create_qp_with_srq(
        &self,
        init: &QpInitAttributes,
        send_cq: Arc<dyn CqOps>,
        recv_cq: Arc<dyn CqOps>,
        srq: Arc<dyn SrqOps>,
    ) -> Result<Box<dyn QpOps>> {
        let driver = self.inner.context.driver().clone();
        driver.create_qp_with_srq(self, init, send_cq, recv_cq, srq)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A registered memory region; DEREG_MR on drop, before its PD can go.
#[derive(Debug)]
pub struct KernelMr {
    pd: KernelPd,
    handle: u32,
    lkey: LocalKey,
    rkey: RemoteKey,
    driver_response: Vec<u8>,
    _memory: Arc<RegisteredMemory>,
}

impl KernelMr {
    /// REG_MR over `memory` with the driver's REG_MR data.
    pub fn register(
        pd: &KernelPd,
        memory: Arc<RegisteredMemory>,
        access: AccessFlags,
    ) -> Result<KernelMr> {
        let context = pd.context();
        let data: DriverData = context.driver().reg_mr_data();
        let mut out = vec![0u8; data.output_len];
        let r = context.reg_mr_raw(
            pd.handle(),
            memory.addr(),
            memory.len() as u64,
            access.bits(),
            &data,
            &mut out,
        )?;
        Ok(KernelMr {
            pd: pd.clone(),
            handle: r.mr_handle,
            lkey: LocalKey(r.lkey),
            rkey: RemoteKey(r.rkey),
            driver_response: out,
            _memory: memory,
        })
    }

    /// The kernel handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The driver's REG_MR response bytes.
    pub fn driver_response(&self) -> &[u8] {
        &self.driver_response
    }
}

impl Drop for KernelMr {
    fn drop(&mut self) {
        let _ = self.pd.context().dereg_mr(self.handle);
    }
}

impl MrOps for KernelMr {
    fn lkey(&self) -> LocalKey {
        self.lkey
    }
    fn rkey(&self) -> RemoteKey {
        self.rkey
    }
}

/// A completion channel: a non-blocking fd (blocking on request, like rdma-core's) yielding
/// one record per CQ event. Closed when the last CQ using it is destroyed.
#[derive(Debug)]
pub struct KernelChannel {
    fd: OwnedFd,
    context: KernelContext,
    /// The fd is blocking ([`ChannelOps::set_blocking`]).
    blocking: AtomicBool,
}

impl KernelChannel {
    /// CREATE_COMP_CHANNEL.
    pub fn create(context: &KernelContext) -> Result<KernelChannel> {
        let name = &context.device_info().name;
        let fd = context
            .file()
            .create_comp_channel()
            .map_err(|e| Error::kernel("CREATE_COMP_CHANNEL", name, e))?;
        set_nonblocking(fd.as_fd())
            .map_err(|e| Error::io("making a completion channel non-blocking", e))?;
        Ok(KernelChannel {
            fd,
            context: context.clone(),
            blocking: AtomicBool::new(false),
        })
    }

    fn read_event(&self) -> Result<Option<u64>> {
        read_record::<CompEventDesc>(self.fd.as_fd())
            .map(|d| d.map(|d| d.cq_handle))
            .map_err(|e| {
                Error::io(
                    format!(
                        "reading a completion channel of {}",
                        self.context.device_info().name
                    ),
                    e,
                )
            })
    }
}

impl ChannelOps for KernelChannel {
    fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
    fn get_event(&self) -> Result<Option<u64>> {
        if self.blocking.load(Ordering::Relaxed)
            && !poll_readable(self.fd.as_fd())
                .map_err(|e| Error::io("polling a completion channel", e))?
        {
            // A read would block: there is no event.
            return Ok(None);
        }
        self.read_event()
    }
    fn set_blocking(&self, blocking: bool) -> Result<()> {
        set_fd_blocking(self.fd.as_fd(), blocking)
            .map_err(|e| Error::io("changing a completion channel's blocking mode", e))?;
        self.blocking.store(blocking, Ordering::Relaxed);
        Ok(())
    }
    fn wait_blocking(&self) -> Result<Option<u64>> {
        if !self.blocking.load(Ordering::Relaxed) {
            return Ok(None);
        }
        self.read_event()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A kernel CQ handle: what a provider's CQ type wraps next to its ring. DESTROY_CQ on drop,
/// then the channel reference goes.
#[derive(Debug)]
pub struct KernelCq {
    context: KernelContext,
    handle: u32,
    cookie: u64,
    depth: u32,
    acked: AtomicU32,
    _channel: Option<Arc<dyn ChannelOps>>,
}

impl KernelCq {
    /// CREATE_CQ with at least `depth` entries; returns the handle and fills `driver_out`
    /// with the driver's response. No driver request bytes go in: the kernel allocates the
    /// queue (rxe, siw) and the provider maps it, so no caller can hand the kernel an address
    /// of process memory to write completions into.
    pub fn create(
        context: &KernelContext,
        depth: u32,
        channel: Option<Arc<dyn ChannelOps>>,
        comp_vector: u32,
        driver_out: &mut [u8],
    ) -> Result<KernelCq> {
        let channel_fd = match &channel {
            None => None,
            Some(c) => Some(
                c.as_any()
                    .downcast_ref::<KernelChannel>()
                    .ok_or_else(|| {
                        Error::InvalidArgument(
                            "the completion channel belongs to a non-kernel provider".into(),
                        )
                    })?
                    .fd(),
            ),
        };
        let cookie = context.next_cookie();
        let r = context.create_cq_raw(cookie, depth, comp_vector, channel_fd, &[], driver_out)?;
        Ok(KernelCq {
            context: context.clone(),
            handle: r.cq_handle,
            cookie,
            depth: r.cqe,
            acked: AtomicU32::new(0),
            _channel: channel,
        })
    }

    /// The kernel handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }
    /// The `user_handle` channel and async events carry.
    pub fn cookie(&self) -> u64 {
        self.cookie
    }
    /// The capacity the kernel granted.
    pub fn depth(&self) -> u32 {
        self.depth
    }
    /// The context.
    pub fn context(&self) -> &KernelContext {
        &self.context
    }
    /// REQ_NOTIFY_CQ.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        self.context.req_notify_cq(self.handle, solicited_only)
    }
    /// Counts `n` channel events as handled.
    pub fn ack_events(&self, n: u32) {
        self.acked.fetch_add(n, Ordering::Relaxed);
    }
    /// Events acknowledged so far.
    pub fn acked_events(&self) -> u32 {
        self.acked.load(Ordering::Relaxed)
    }
}

impl Drop for KernelCq {
    fn drop(&mut self) {
        // The CQ is only dropped when no QP and no user handle refers to it, so no reader can
        // still be processing one of its events: there is nothing to wait for.
        let _ = self.context.destroy_cq(self.handle);
    }
}

/// A kernel QP handle: what a provider's QP type wraps next to its rings, and what its
/// `as_any` returns so the connection manager can find the handle. DESTROY_QP on drop; the
/// CQs and PD it holds go after.
#[derive(Debug)]
pub struct KernelQp {
    pd: KernelPd,
    handle: u32,
    qp_num: QpNumber,
    caps: QpCapabilities,
    cookie: u64,
    _send_cq: Arc<dyn CqOps>,
    _recv_cq: Arc<dyn CqOps>,
    _srq: Option<Arc<dyn SrqOps>>,
}

impl KernelQp {
    /// CREATE_QP (RC) on the kernel CQs `send_cq_handle`/`recv_cq_handle`, which belong to
    /// `send_cq`/`recv_cq` (kept alive by the QP). No driver request bytes go in, as in
    /// [`KernelCq::create`]: the kernel allocates the queues.
    pub fn create(
        pd: &KernelPd,
        init: &QpInitAttributes,
        send_cq: (Arc<dyn CqOps>, u32),
        recv_cq: (Arc<dyn CqOps>, u32),
        driver_out: &mut [u8],
    ) -> Result<KernelQp> {
        Self::create_with_srq(pd, init, send_cq, recv_cq, None, driver_out)
    }

    /// [`create`](Self::create), with the receives from the SRQ `srq.0` (kernel handle
    /// `srq.1`, kept alive by the QP) when given: the kernel then makes no receive queue.
    pub fn create_with_srq(
        pd: &KernelPd,
        init: &QpInitAttributes,
        send_cq: (Arc<dyn CqOps>, u32),
        recv_cq: (Arc<dyn CqOps>, u32),
        srq: Option<(Arc<dyn SrqOps>, u32)>,
        driver_out: &mut [u8],
    ) -> Result<KernelQp> {
        let context = pd.context();
        let cookie = context.next_cookie();
        let c = &init.caps;
        let req = CreateQpRequest {
            user_handle: cookie,
            pd_handle: pd.handle(),
            send_cq_handle: send_cq.1,
            recv_cq_handle: recv_cq.1,
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
            sq_sig_all: u8::from(init.sq_sig_all),
            qp_type: 2,
            srq_handle: srq.as_ref().map_or(0, |s| s.1),
            is_srq: u8::from(srq.is_some()),
            ..Default::default()
        };
        let r: CreateQpResponse = context.create_qp_raw(&req, &[], driver_out)?;
        Ok(KernelQp {
            pd: pd.clone(),
            handle: r.qp_handle,
            qp_num: QpNumber(r.qpn),
            caps: QpCapabilities {
                max_send_wr: r.max_send_wr,
                max_recv_wr: r.max_recv_wr,
                max_send_sge: r.max_send_sge,
                max_recv_sge: r.max_recv_sge,
                max_inline_data: r.max_inline_data,
            },
            cookie,
            _send_cq: send_cq.0,
            _recv_cq: recv_cq.0,
            _srq: srq.map(|s| s.0),
        })
    }

    /// The kernel handle (what rdma_cm and every QP command take).
    pub fn handle(&self) -> u32 {
        self.handle
    }
    /// The QP number.
    pub fn qp_num(&self) -> QpNumber {
        self.qp_num
    }
    /// The capabilities the kernel granted.
    pub fn caps(&self) -> QpCapabilities {
        self.caps
    }
    /// The `user_handle` async events carry.
    pub fn cookie(&self) -> u64 {
        self.cookie
    }
    /// The context.
    pub fn context(&self) -> &KernelContext {
        self.pd.context()
    }
    /// MODIFY_QP.
    pub fn modify(&self, attr: &QpAttributes, mask: QpAttrMask) -> Result<()> {
        self.context().modify_qp(self.handle, attr, mask)
    }
    /// QUERY_QP.
    pub fn query(&self, mask: QpAttrMask) -> Result<QpAttributes> {
        Ok(attributes_from_query(
            &self.context().query_qp(self.handle, mask)?,
        ))
    }
    /// The POST_SEND doorbell.
    #[inline]
    pub fn doorbell(&self) -> Result<()> {
        self.context().post_send_doorbell(self.handle)
    }
}

impl Drop for KernelQp {
    fn drop(&mut self) {
        let _ = self.context().destroy_qp(self.handle);
    }
}
