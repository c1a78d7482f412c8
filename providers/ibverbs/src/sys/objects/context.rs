//! An open device (`struct ibv_context`): queries and async events.

use super::super::abi::*;
use super::super::library::Library;
use super::with_device_list;
use super::{abi_mismatch, check, errno, set_nonblocking};
use std::io;
use std::os::fd::BorrowedFd;
use std::ptr::{self, NonNull};

/// An open device (`struct ibv_context`).
#[derive(Debug)]
pub(crate) struct RawContext {
    ptr: NonNull<IbvContext>,
    pub(super) lib: &'static Library,
}

// SAFETY: a libibverbs context may be used from any thread (rdma-core locks internally);
// this handle hands out no references into it.
unsafe impl Send for RawContext {}
// SAFETY: as above.
unsafe impl Sync for RawContext {}

impl RawContext {
    /// Opens the device libibverbs lists as `name`, or else the one whose node GUID is
    /// `guid` (when non-zero). `Ok(None)` when libibverbs lists neither.
    pub(crate) fn open(
        lib: &'static Library,
        name: &str,
        guid: u64,
    ) -> io::Result<Option<RawContext>> {
        with_device_list(lib, |devices| {
            let found = devices
                .iter()
                .find(|((n, _), _)| n == name)
                .or_else(|| devices.iter().find(|((_, g), _)| guid != 0 && *g == guid));
            let Some(&(_, dev)) = found else {
                return Ok(None);
            };
            // SAFETY: dev is a device of the live list.
            let ctx = unsafe { (lib.open_device)(dev) };
            let ptr = NonNull::new(ctx).ok_or_else(errno)?;
            let context = RawContext { ptr, lib };
            // SAFETY: ctx is a live context; only plain fields are read.
            let (device, ops, async_fd) = unsafe {
                let c = &*ctx;
                (c.device, c.ops, c.async_fd)
            };
            if device != dev {
                return Err(abi_mismatch(
                    "ibv_context.device does not point at the opened device",
                ));
            }
            if ops.poll_cq.is_none()
                || ops.req_notify_cq.is_none()
                || ops.post_send.is_none()
                || ops.post_recv.is_none()
            {
                return Err(abi_mismatch(
                    "the context's ops table lacks poll_cq, req_notify_cq, post_send or post_recv",
                ));
            }
            set_nonblocking(async_fd)?;
            Ok(Some(context))
        })
    }

    pub(super) fn raw(&self) -> *mut IbvContext {
        self.ptr.as_ptr()
    }

    pub(super) fn ops(&self) -> IbvContextOps {
        // SAFETY: the context is live; the ops table is set during ibv_open_device and never
        // changes afterwards.
        unsafe { (*self.raw()).ops }
    }

    /// The path of the library in use.
    pub(crate) fn library(&self) -> &'static Library {
        self.lib
    }

    /// The async event fd (non-blocking).
    pub(crate) fn async_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: plain field of a live context; libibverbs keeps the fd open until
        // ibv_close_device, which runs only when this handle is dropped, after the borrow.
        unsafe { BorrowedFd::borrow_raw((*self.raw()).async_fd) }
    }

    /// Completion vectors the device offers.
    pub(crate) fn num_comp_vectors(&self) -> i32 {
        // SAFETY: plain field of a live context.
        unsafe { (*self.raw()).num_comp_vectors }
    }

    /// `ibv_query_device`.
    pub(crate) fn query_device(&self) -> io::Result<IbvDeviceAttr> {
        // SAFETY: IbvDeviceAttr is plain data; zeroed is valid.
        let mut attr: IbvDeviceAttr = unsafe { std::mem::zeroed() };
        // SAFETY: live context, writable struct of the ABI's size.
        check(unsafe { (self.lib.query_device)(self.raw(), &mut attr) })?;
        Ok(attr)
    }

    /// The extended context around this one, when it has one (verbs.h's `verbs_get_ctx`),
    /// and its `sz`.
    fn verbs_context(&self) -> Option<*const VerbsContext> {
        let ctx = self.raw();
        // SAFETY: plain field of a live context.
        let extended = unsafe { (*ctx).abi_compat } as usize == VERBS_ABI_IS_EXTENDED;
        let offset = std::mem::offset_of!(VerbsContext, context);
        // SAFETY: an extended context is the last field of a verbs_context (verbs.h's
        // verbs_get_ctx), so the struct starts `offset` bytes before it, in the same
        // allocation; callers read only the fields `sz` says exist.
        extended.then(|| unsafe { (ctx as *mut u8).sub(offset) as *const VerbsContext })
    }

    /// `ibv_query_device_ex` as verbs.h's inline does it: the extended context's
    /// `query_device_ex` when `sz` says the context has it (`verbs_get_ctx_op`) and the
    /// provider implements it, else (or when it answers EOPNOTSUPP or ENOSYS) `ibv_query_device`
    /// with the extended fields zero.
    pub(crate) fn query_device_ex(&self) -> io::Result<IbvDeviceAttrEx> {
        // SAFETY: IbvDeviceAttrEx is plain data; zeroed is valid.
        let mut attr: IbvDeviceAttrEx = unsafe { std::mem::zeroed() };
        let needed = std::mem::size_of::<VerbsContext>()
            - std::mem::offset_of!(VerbsContext, query_device_ex);
        // SAFETY: `sz` says how much of the verbs_context precedes the context's end
        // (verbs_get_ctx_op); the op is read only when sz covers it.
        let op = self.verbs_context().and_then(|v| unsafe {
            if (*v).sz >= needed {
                (*v).query_device_ex
            } else {
                None
            }
        });
        if let Some(op) = op {
            // SAFETY: the provider's query_device_ex, given a live context, no input, and a
            // writable struct of the size passed (it writes at most that many bytes).
            let rc = unsafe {
                op(
                    self.raw(),
                    std::ptr::null(),
                    &mut attr,
                    std::mem::size_of::<IbvDeviceAttrEx>(),
                )
            };
            if rc.abs() != libc::EOPNOTSUPP && rc.abs() != libc::ENOSYS {
                return check(rc).map(|()| attr);
            }
        }
        attr.orig_attr = self.query_device()?;
        Ok(attr)
    }

    /// `ibv_query_port` as verbs.h's inline does it: the extended context's `query_port`
    /// with the struct size when the context has one, else the exported compat function.
    pub(crate) fn query_port(&self, port: u8) -> io::Result<IbvPortAttr> {
        let mut attr = IbvPortAttr::default();
        let ctx = self.raw();
        // SAFETY: query_port, the first field, exists when sz covers the whole struct
        // (verbs_get_ctx_op).
        let op = self.verbs_context().and_then(|v| unsafe {
            if (*v).sz >= std::mem::size_of::<VerbsContext>() {
                (*v).query_port
            } else {
                None
            }
        });
        if let Some(query_port) = op {
            // SAFETY: the provider's query_port, given a live context and a writable
            // struct of the size passed.
            return check(unsafe {
                query_port(ctx, port, &mut attr, std::mem::size_of::<IbvPortAttr>())
            })
            .map(|()| attr);
        }
        // SAFETY: the compat function writes a prefix of ibv_port_attr; the rest stays zero.
        check(unsafe { (self.lib.query_port)(ctx, port, &mut attr) })?;
        Ok(attr)
    }

    /// `ibv_query_gid`.
    pub(crate) fn query_gid(&self, port: u8, index: i32) -> io::Result<IbvGid> {
        let mut gid = IbvGid::default();
        // SAFETY: live context, writable 16-byte gid.
        check(unsafe { (self.lib.query_gid)(self.raw(), port, index, &mut gid) })?;
        Ok(gid)
    }

    /// `ibv_get_async_event` without blocking, acknowledged at once: the event type and its
    /// element (the CQ's or QP's cookie, or the port number).
    pub(crate) fn get_async_event(&self) -> io::Result<Option<(i32, u64)>> {
        let mut event = IbvAsyncEvent {
            element: ptr::null_mut(),
            event_type: 0,
        };
        // SAFETY: live context whose async fd is non-blocking; the struct is writable.
        if unsafe { (self.lib.get_async_event)(self.raw(), &mut event) } != 0 {
            let e = errno();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) => Ok(None),
                _ => Err(e),
            };
        }
        let kind = event.event_type;
        // SAFETY: for CQ events the element is a live ibv_cq, for QP events a live ibv_qp
        // (they cannot be destroyed before this event is acknowledged); their context
        // pointers hold the cookies we stored. Otherwise it is the port number.
        let element = unsafe {
            match kind {
                0 => (*(event.element as *mut IbvCq)).cq_context as u64,
                1..=7 | 16 => (*(event.element as *mut IbvQp)).qp_context as u64,
                _ => u64::from(event.element as usize as u32),
            }
        };
        // SAFETY: the event was returned by ibv_get_async_event and is acknowledged once.
        unsafe { (self.lib.ack_async_event)(&mut event) };
        Ok(Some((kind, element)))
    }
}

impl Drop for RawContext {
    fn drop(&mut self) {
        // SAFETY: every object made from the context holds an Arc of it, so none is left.
        unsafe { (self.lib.close_device)(self.raw()) };
    }
}
