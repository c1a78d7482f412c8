//! Completion channels and completion queues.

use super::super::abi::*;
use super::context::RawContext;
use super::{abi_mismatch, check, errno, set_nonblocking};
use std::ffi::{c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::{self, NonNull};
use std::sync::Arc;

/// A completion channel.
#[derive(Debug)]
pub(crate) struct RawChannel {
    ptr: NonNull<IbvCompChannel>,
    context: Arc<RawContext>,
}

// SAFETY: see RawContext.
unsafe impl Send for RawChannel {}
// SAFETY: see RawContext.
unsafe impl Sync for RawChannel {}

impl RawChannel {
    /// `ibv_create_comp_channel`, its fd made non-blocking.
    pub(crate) fn create(context: &Arc<RawContext>) -> io::Result<RawChannel> {
        // SAFETY: live context.
        let ch = unsafe { (context.lib.create_comp_channel)(context.raw()) };
        let ptr = NonNull::new(ch).ok_or_else(errno)?;
        let channel = RawChannel {
            ptr,
            context: context.clone(),
        };
        // SAFETY: plain field of a live channel.
        if unsafe { (*ptr.as_ptr()).context } != context.raw() {
            return Err(abi_mismatch(
                "ibv_comp_channel.context does not point at its context",
            ));
        }
        set_nonblocking(channel.fd().as_raw_fd())?;
        Ok(channel)
    }

    /// The channel's fd.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: plain field of a live channel; the fd stays open until
        // ibv_destroy_comp_channel, which runs only when this handle is dropped.
        unsafe { BorrowedFd::borrow_raw((*self.ptr.as_ptr()).fd) }
    }

    /// `ibv_get_cq_event` without blocking: the cookie of the CQ, or `None`.
    pub(crate) fn get_event(&self) -> io::Result<Option<u64>> {
        let mut cq: *mut IbvCq = ptr::null_mut();
        let mut cq_context: *mut c_void = ptr::null_mut();
        // SAFETY: live channel with a non-blocking fd; both out-pointers are writable.
        let rc =
            unsafe { (self.context.lib.get_cq_event)(self.ptr.as_ptr(), &mut cq, &mut cq_context) };
        if rc != 0 {
            let e = errno();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(cq_context as u64))
    }
}

impl Drop for RawChannel {
    fn drop(&mut self) {
        // SAFETY: every CQ using the channel holds an Arc of it, so none is left.
        unsafe { (self.context.lib.destroy_comp_channel)(self.ptr.as_ptr()) };
    }
}

/// A completion queue whose `cq_context` is a cookie.
#[derive(Debug)]
pub(crate) struct RawCq {
    pub(super) ptr: NonNull<IbvCq>,
    context: Arc<RawContext>,
    _channel: Option<Arc<RawChannel>>,
}

// SAFETY: see RawContext.
unsafe impl Send for RawCq {}
// SAFETY: see RawContext.
unsafe impl Sync for RawCq {}

impl RawCq {
    /// `ibv_create_cq`.
    pub(crate) fn create(
        context: &Arc<RawContext>,
        depth: u32,
        cookie: u64,
        channel: Option<Arc<RawChannel>>,
        comp_vector: u32,
    ) -> io::Result<RawCq> {
        let depth =
            c_int::try_from(depth).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let ch = channel.as_ref().map_or(ptr::null_mut(), |c| c.ptr.as_ptr());
        // SAFETY: live context and channel (or NULL); the cookie is stored, never
        // dereferenced.
        let cq = unsafe {
            (context.lib.create_cq)(
                context.raw(),
                depth,
                cookie as usize as *mut c_void,
                ch,
                comp_vector as c_int,
            )
        };
        let ptr = NonNull::new(cq).ok_or_else(errno)?;
        let cq = RawCq {
            ptr,
            context: context.clone(),
            _channel: channel,
        };
        // SAFETY: plain fields of a live CQ.
        let (cq_ctx, cq_ch, cq_cookie) = unsafe {
            let c = &*ptr.as_ptr();
            (c.context, c.channel, c.cq_context)
        };
        if cq_ctx != context.raw() || cq_ch != ch || cq_cookie as u64 != cookie {
            return Err(abi_mismatch(
                "ibv_cq.context/channel/cq_context do not match what was created",
            ));
        }
        Ok(cq)
    }

    /// The number of entries the CQ got.
    pub(crate) fn cqe(&self) -> u32 {
        // SAFETY: plain field of a live CQ.
        unsafe { (*self.ptr.as_ptr()).cqe }.max(0) as u32
    }

    /// `ibv_poll_cq` through the context's ops table.
    pub(crate) fn poll(&self, wc: &mut [IbvWc]) -> io::Result<usize> {
        let poll = self.context.ops().poll_cq.expect("checked at open");
        let n = c_int::try_from(wc.len()).unwrap_or(c_int::MAX);
        // SAFETY: the provider's poll_cq on a live CQ, writing at most `n` entries.
        let rc = unsafe { poll(self.ptr.as_ptr(), n, wc.as_mut_ptr()) };
        if rc < 0 {
            return Err(io::Error::from_raw_os_error(rc.abs()));
        }
        Ok(rc as usize)
    }

    /// `ibv_req_notify_cq` through the context's ops table.
    pub(crate) fn req_notify(&self, solicited_only: bool) -> io::Result<()> {
        let notify = self.context.ops().req_notify_cq.expect("checked at open");
        // SAFETY: the provider's req_notify_cq on a live CQ.
        check(unsafe { notify(self.ptr.as_ptr(), c_int::from(solicited_only)) })
    }

    /// `ibv_ack_cq_events`.
    pub(crate) fn ack_events(&self, n: u32) {
        if n > 0 {
            // SAFETY: live CQ; the caller acknowledges only events it took from the channel.
            unsafe { (self.context.lib.ack_cq_events)(self.ptr.as_ptr(), n) };
        }
    }
}

impl Drop for RawCq {
    fn drop(&mut self) {
        // SAFETY: every QP using the CQ holds an Arc of it; the owner has acknowledged every
        // event it took (ibv_destroy_cq waits for that).
        unsafe { (self.context.lib.destroy_cq)(self.ptr.as_ptr()) };
    }
}
