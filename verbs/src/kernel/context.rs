//! [`KernelContext`]: an open uverbs device and every write command on it.
#![forbid(unsafe_code)]

use super::convert::{
    device_attributes, device_attributes_ex, modify_request, port_attributes, port_attributes_ex,
};
use super::objects::{KernelChannel, KernelPd};
use super::{DriverData, KernelDriver};
use crate::attr::{DeviceAttributes, PortAttributes};
use crate::device::DeviceInfo;
use crate::error::{Error, Result};
use crate::event::{AsyncEvent, AsyncEventKind};
use crate::provider::{ChannelOps, ContextOps, CqOps, PdOps};
use crate::qp_attr::{QpAttrMask, QpAttributes};
use crate::sys::abi::{
    AllocPdRequest, AsyncEventDesc, CreateCqRequest, CreateCqResponse, DeallocPdRequest,
    DeregMrRequest, DestroyCqRequest, DestroyCqResponse, QueryDeviceRequest, QueryPortRequest,
    RegMrRequest, RegMrResponse, ReqNotifyCqRequest, WriteCommand,
};
use crate::sys::abi_qp::{
    CreateQpRequest, CreateQpResponse, DestroyQpRequest, PostSendRequest, QueryQpRequest,
    QueryQpResponse,
};
use crate::sys::abi_srq::{
    CreateSrqRequest, CreateSrqResponse, DestroySrqRequest, ModifySrqRequest, QuerySrqRequest,
    SRQ_ATTR_LIMIT,
};
use crate::sys::mmap::SharedMapping;
use crate::sys::uverbs::{read_record, set_nonblocking, UverbsFile};
use std::any::Any;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// An open uverbs device with its GET_CONTEXT done: the [`ContextOps`] of every kernel
/// provider. Cloning is cheap (an `Arc`); the fd closes when the last clone and every object
/// made from it are gone.
#[derive(Clone, Debug)]
pub struct KernelContext {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    device: DeviceInfo,
    driver: Arc<dyn KernelDriver>,
    // Declared before `file`: both close on drop, the async fd first.
    async_fd: OwnedFd,
    num_comp_vectors: u32,
    next_cookie: AtomicU64,
    file: UverbsFile,
}

impl KernelContext {
    /// Opens the device's uverbs node and runs GET_CONTEXT with the driver's data. The async
    /// event fd is made non-blocking.
    pub fn open(device: &DeviceInfo, driver: Arc<dyn KernelDriver>) -> Result<KernelContext> {
        let path = device
            .uverbs_path
            .as_ref()
            .ok_or_else(|| Error::Unsupported {
                device: device.name.clone(),
                operation: "kernel verbs (it has no /dev/infiniband/uverbsN node)".into(),
            })?;
        let file = super::open_uverbs(path)?;
        let data = driver.get_context_data();
        let mut out = vec![0u8; data.output_len];
        let (resp, async_fd) = file
            .get_context(&data.input, &mut out)
            .map_err(|e| Error::kernel("GET_CONTEXT", &device.name, e))?;
        set_nonblocking(async_fd.as_fd())
            .map_err(|e| Error::io("making the async event fd non-blocking", e))?;
        Ok(KernelContext {
            inner: Arc::new(Inner {
                device: device.clone(),
                driver,
                async_fd,
                num_comp_vectors: resp.num_comp_vectors,
                next_cookie: AtomicU64::new(1),
                file,
            }),
        })
    }

    /// The device.
    pub fn device_info(&self) -> &DeviceInfo {
        &self.inner.device
    }

    /// The driver.
    pub fn driver(&self) -> &Arc<dyn KernelDriver> {
        &self.inner.driver
    }

    /// The uverbs file (for mmap).
    pub(crate) fn file(&self) -> &UverbsFile {
        &self.inner.file
    }

    /// Completion vectors the device offers (GET_CONTEXT).
    pub fn num_comp_vectors(&self) -> u32 {
        self.inner.num_comp_vectors
    }

    /// A fresh `user_handle` cookie for a CQ or QP (never 0).
    pub fn next_cookie(&self) -> u64 {
        self.inner.next_cookie.fetch_add(1, Ordering::Relaxed)
    }

    /// Runs one write command; errors name the command and the device.
    pub(crate) fn execute<C: WriteCommand>(
        &self,
        request: &C,
        driver_in: &[u8],
        driver_out: &mut [u8],
    ) -> Result<C::Response> {
        self.inner
            .file
            .execute(request, driver_in, driver_out)
            .map_err(|e| Error::kernel(C::COMMAND.name(), &self.inner.device.name, e))
    }

    /// Maps a queue the kernel handed out at `offset`/`len` in a create response.
    pub fn map_queue(&self, offset: u64, len: usize) -> Result<SharedMapping> {
        SharedMapping::map(self.inner.file.as_fd(), offset, len).map_err(|e| {
            Error::io(
                format!(
                    "mapping a {len}-byte queue at offset {offset:#x} of {}",
                    self.inner.device.name
                ),
                e,
            )
        })
    }

    /// ALLOC_PD: the PD handle.
    pub(crate) fn alloc_pd_raw(&self, driver_in: &[u8], driver_out: &mut [u8]) -> Result<u32> {
        Ok(self
            .execute(&AllocPdRequest::default(), driver_in, driver_out)?
            .pd_handle)
    }

    /// DEALLOC_PD.
    pub fn dealloc_pd(&self, pd_handle: u32) -> Result<()> {
        self.execute(&DeallocPdRequest { pd_handle }, &[], &mut [])?;
        Ok(())
    }

    /// REG_MR of `addr..addr+len` (also the I/O virtual address) in PD `pd_handle`.
    pub(crate) fn reg_mr_raw(
        &self,
        pd_handle: u32,
        addr: u64,
        len: u64,
        access: u32,
        data: &DriverData,
        driver_out: &mut [u8],
    ) -> Result<RegMrResponse> {
        let req = RegMrRequest {
            start: addr,
            length: len,
            hca_va: addr,
            pd_handle,
            access_flags: access,
            ..Default::default()
        };
        self.execute(&req, &data.input, driver_out)
    }

    /// DEREG_MR.
    pub fn dereg_mr(&self, mr_handle: u32) -> Result<()> {
        self.execute(&DeregMrRequest { mr_handle }, &[], &mut [])?;
        Ok(())
    }

    /// CREATE_CQ reporting to `channel` (an fd from CREATE_COMP_CHANNEL), if any.
    pub(crate) fn create_cq_raw(
        &self,
        user_handle: u64,
        cqe: u32,
        comp_vector: u32,
        channel: Option<BorrowedFd<'_>>,
        driver_in: &[u8],
        driver_out: &mut [u8],
    ) -> Result<CreateCqResponse> {
        if comp_vector >= self.inner.num_comp_vectors.max(1) {
            return Err(Error::InvalidArgument(format!(
                "completion vector {comp_vector} does not exist: {} has {}",
                self.inner.device.name, self.inner.num_comp_vectors
            )));
        }
        let req = CreateCqRequest {
            user_handle,
            cqe,
            comp_vector,
            comp_channel: channel.map_or(-1, |fd| fd.as_raw_fd()),
            ..Default::default()
        };
        self.execute(&req, driver_in, driver_out)
    }

    /// DESTROY_CQ: the event counts the kernel reported for it.
    pub fn destroy_cq(&self, cq_handle: u32) -> Result<DestroyCqResponse> {
        self.execute(
            &DestroyCqRequest {
                cq_handle,
                ..Default::default()
            },
            &[],
            &mut [],
        )
    }

    /// REQ_NOTIFY_CQ.
    pub fn req_notify_cq(&self, cq_handle: u32, solicited_only: bool) -> Result<()> {
        let req = ReqNotifyCqRequest {
            cq_handle,
            solicited_only: u32::from(solicited_only),
        };
        self.execute(&req, &[], &mut [])?;
        Ok(())
    }

    /// CREATE_QP with a complete request (its `response` field is filled in here).
    pub(crate) fn create_qp_raw(
        &self,
        request: &CreateQpRequest,
        driver_in: &[u8],
        driver_out: &mut [u8],
    ) -> Result<CreateQpResponse> {
        self.execute(request, driver_in, driver_out)
    }

    /// MODIFY_QP.
    pub fn modify_qp(&self, qp_handle: u32, attr: &QpAttributes, mask: QpAttrMask) -> Result<()> {
        self.execute(&modify_request(qp_handle, attr, mask), &[], &mut [])?;
        Ok(())
    }

    /// QUERY_QP.
    pub fn query_qp(&self, qp_handle: u32, mask: QpAttrMask) -> Result<QueryQpResponse> {
        let req = QueryQpRequest {
            qp_handle,
            attr_mask: mask.bits(),
            ..Default::default()
        };
        self.execute(&req, &[], &mut [])
    }

    /// DESTROY_QP: the number of async events reported for it.
    pub fn destroy_qp(&self, qp_handle: u32) -> Result<u32> {
        let req = DestroyQpRequest {
            qp_handle,
            ..Default::default()
        };
        Ok(self.execute(&req, &[], &mut [])?.events_reported)
    }

    /// CREATE_SRQ with a complete request (its `response` field is filled in here).
    pub(crate) fn create_srq_raw(
        &self,
        request: &CreateSrqRequest,
        driver_out: &mut [u8],
    ) -> Result<CreateSrqResponse> {
        self.execute(request, &[], driver_out)
    }

    /// MODIFY_SRQ of the limit alone, with the driver's MODIFY_SRQ data.
    pub fn modify_srq_limit(&self, srq_handle: u32, limit: u32) -> Result<()> {
        let req = ModifySrqRequest {
            srq_handle,
            attr_mask: SRQ_ATTR_LIMIT,
            max_wr: 0,
            srq_limit: limit,
        };
        let data = self.driver().modify_srq_data();
        let mut out = vec![0u8; data.output_len];
        self.execute(&req, &data.input, &mut out)?;
        Ok(())
    }

    /// QUERY_SRQ: its size, entries and armed limit.
    pub fn query_srq(&self, srq_handle: u32) -> Result<(u32, u32, u32)> {
        let req = QuerySrqRequest {
            srq_handle,
            ..Default::default()
        };
        let r = self.execute(&req, &[], &mut [])?;
        Ok((r.max_wr, r.max_sge, r.srq_limit))
    }

    /// DESTROY_SRQ: the number of async events reported for it.
    pub fn destroy_srq(&self, srq_handle: u32) -> Result<u32> {
        let req = DestroySrqRequest {
            srq_handle,
            ..Default::default()
        };
        Ok(self.execute(&req, &[], &mut [])?.events_reported)
    }

    /// The send doorbell of rxe and siw: POST_SEND with no work requests ("process the
    /// mapped send queue now").
    #[inline]
    pub fn post_send_doorbell(&self, qp_handle: u32) -> Result<()> {
        match self.inner.file.post_send_doorbell(qp_handle, 128) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.doorbell_error(e)),
        }
    }

    #[cold]
    #[inline(never)]
    fn doorbell_error(&self, e: std::io::Error) -> Error {
        Error::kernel(PostSendRequest::COMMAND.name(), &self.inner.device.name, e)
    }
}

/// Whether `e` is one of the `errnos` by which a kernel says it lacks a command or method.
fn unsupported(e: &std::io::Error, errnos: &[i32]) -> bool {
    e.raw_os_error().is_some_and(|n| errnos.contains(&n))
}

impl ContextOps for KernelContext {
    fn num_comp_vectors(&self) -> Option<u32> {
        Some(self.inner.num_comp_vectors)
    }
    fn device(&self) -> &DeviceInfo {
        &self.inner.device
    }

    fn provider_name(&self) -> &'static str {
        self.inner.driver.name()
    }

    fn unsignaled_sends_borrow_memory(&self) -> bool {
        self.inner.driver.unsignaled_sends_borrow_memory()
    }

    /// EX_QUERY_DEVICE, or QUERY_DEVICE where the kernel has no extended query (as
    /// `ibv_query_device_ex` does).
    fn query_device(&self) -> Result<DeviceAttributes> {
        let fw_ver = &self.inner.device.fw_ver;
        match self.inner.file.ex_query_device() {
            Ok(r) => return Ok(device_attributes_ex(&r, fw_ver)),
            Err(e) if !unsupported(&e, &[libc::EOPNOTSUPP, libc::ENOSYS]) => {
                return Err(Error::kernel("EX_QUERY_DEVICE", &self.inner.device.name, e))
            }
            Err(_) => {}
        }
        let r = self.execute(&QueryDeviceRequest::default(), &[], &mut [])?;
        Ok(device_attributes(&r, fw_ver))
    }

    /// The ioctl QUERY_PORT (which adds `port_cap_flags2`), or the write command where the
    /// kernel has no such ioctl (before 5.0) or the device's driver id is unknown (no
    /// netlink answer: the ioctl header must carry it), as `ibv_query_port` does.
    fn query_port(&self, port: u8) -> Result<PortAttributes> {
        let no_ioctl = [libc::ENOTTY, libc::EPROTONOSUPPORT, libc::EOPNOTSUPP];
        if let Some(driver_id) = self.inner.device.driver_id {
            match self.inner.file.query_port_ex(driver_id, port) {
                Ok(r) => return Ok(port_attributes_ex(&r)),
                Err(e) if !unsupported(&e, &no_ioctl) => {
                    return Err(Error::kernel("QUERY_PORT", &self.inner.device.name, e))
                }
                Err(_) => {}
            }
        }
        let req = QueryPortRequest {
            port_num: port,
            ..Default::default()
        };
        Ok(port_attributes(&self.execute(&req, &[], &mut [])?))
    }

    fn alloc_pd(&self) -> Result<Arc<dyn PdOps>> {
        Ok(Arc::new(KernelPd::alloc(self)?))
    }

    fn create_comp_channel(&self) -> Result<Arc<dyn ChannelOps>> {
        Ok(Arc::new(KernelChannel::create(self)?))
    }

    fn create_cq(
        &self,
        depth: u32,
        channel: Option<Arc<dyn ChannelOps>>,
        comp_vector: u32,
    ) -> Result<Arc<dyn CqOps>> {
        self.inner
            .driver
            .clone()
            .create_cq(self, depth, channel, comp_vector)
    }

    fn async_fd(&self) -> BorrowedFd<'_> {
        self.inner.async_fd.as_fd()
    }

    fn read_async_event(&self) -> Result<Option<AsyncEvent>> {
        let desc = read_record::<AsyncEventDesc>(self.inner.async_fd.as_fd()).map_err(|e| {
            Error::io(
                format!("reading async events of {}", self.inner.device.name),
                e,
            )
        })?;
        Ok(desc.map(|d| AsyncEvent {
            kind: AsyncEventKind::from_raw(d.event_type),
            element: d.element,
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
