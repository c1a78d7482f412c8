//! Owning handles to libibverbs objects. Each method is one verb; errors are the errno
//! libibverbs reports. Layout assumptions are checked where a returned object points back
//! at its parent (an "ABI mismatch" error instead of undefined behaviour later).

use super::abi::*;
use super::library::Library;
use rdmasock_verbs::RegisteredMemory;
use std::ffi::{c_int, c_void, CStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::ptr::{self, NonNull};
use std::sync::Arc;

fn errno() -> io::Error {
    io::Error::last_os_error()
}

/// A verb's return value: 0 is success, anything else an errno (some providers return it
/// negated).
fn check(rc: c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc.abs()))
    }
}

fn abi_mismatch(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "ABI mismatch: {what}; this libibverbs does not lay out its structs as rdma-core's \
             stable ABI (verbs.h, libibverbs.so.1) does"
        ),
    )
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd libibverbs owns and keeps open while its object lives; only
    // the O_NONBLOCK status flag changes (what rdma-core documents for polling these fds).
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(errno());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(errno());
    }
    Ok(())
}

/// The devices libibverbs lists (those whose provider library it could load): name and
/// node GUID (the big-endian value, as sysfs prints it).
pub fn list_devices(lib: &'static Library) -> io::Result<Vec<(String, u64)>> {
    with_device_list(lib, |list| Ok(list.iter().map(|d| d.0.clone()).collect()))
}

/// Runs `f` over `(name, guid)` and the device pointers, freeing the list afterwards.
fn with_device_list<T>(
    lib: &'static Library,
    f: impl FnOnce(&[((String, u64), *mut IbvDevice)]) -> io::Result<T>,
) -> io::Result<T> {
    let mut n: c_int = 0;
    // SAFETY: ibv_get_device_list writes the count and returns a NULL-terminated array (or
    // NULL with errno set).
    let list = unsafe { (lib.get_device_list)(&mut n) };
    if list.is_null() {
        // ENOSYS: the kernel has no uverbs support at all, so there is no device to list.
        let e = errno();
        return match e.raw_os_error() {
            Some(libc::ENOSYS) => f(&[]),
            _ => Err(e),
        };
    }
    let mut devices = Vec::with_capacity(n.max(0) as usize);
    for i in 0..n.max(0) as usize {
        // SAFETY: the array has `n` valid entries before its NULL terminator.
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: dev is a device of the live list; the name is a NUL-terminated string
        // inside it (copied at once), the GUID a plain value.
        let (name, guid) = unsafe {
            let name = (lib.get_device_name)(dev);
            let name = if name.is_null() {
                String::new()
            } else {
                CStr::from_ptr(name).to_string_lossy().into_owned()
            };
            (name, u64::from_be((lib.get_device_guid)(dev)))
        };
        devices.push(((name, guid), dev));
    }
    let result = f(&devices);
    // SAFETY: the list came from ibv_get_device_list and is freed once; opened contexts
    // stay valid after the list is freed (verbs.h).
    unsafe { (lib.free_device_list)(list) };
    result
}

/// An open device (`struct ibv_context`).
#[derive(Debug)]
pub struct RawContext {
    ptr: NonNull<IbvContext>,
    lib: &'static Library,
}

// SAFETY: a libibverbs context may be used from any thread (rdma-core locks internally);
// this handle hands out no references into it.
unsafe impl Send for RawContext {}
// SAFETY: as above.
unsafe impl Sync for RawContext {}

impl RawContext {
    /// Opens the device libibverbs lists as `name`, or else the one whose node GUID is
    /// `guid` (when non-zero). `Ok(None)` when libibverbs lists neither.
    pub fn open(lib: &'static Library, name: &str, guid: u64) -> io::Result<Option<RawContext>> {
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

    fn raw(&self) -> *mut IbvContext {
        self.ptr.as_ptr()
    }

    fn ops(&self) -> IbvContextOps {
        // SAFETY: the context is live; the ops table is set during ibv_open_device and never
        // changes afterwards.
        unsafe { (*self.raw()).ops }
    }

    /// The path of the library in use.
    pub fn library(&self) -> &'static Library {
        self.lib
    }

    /// The async event fd (non-blocking).
    pub fn async_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: plain field of a live context; libibverbs keeps the fd open until
        // ibv_close_device, which runs only when this handle is dropped, after the borrow.
        unsafe { BorrowedFd::borrow_raw((*self.raw()).async_fd) }
    }

    /// Completion vectors the device offers.
    pub fn num_comp_vectors(&self) -> i32 {
        // SAFETY: plain field of a live context.
        unsafe { (*self.raw()).num_comp_vectors }
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> io::Result<IbvDeviceAttr> {
        // SAFETY: IbvDeviceAttr is plain data; zeroed is valid.
        let mut attr: IbvDeviceAttr = unsafe { std::mem::zeroed() };
        // SAFETY: live context, writable struct of the ABI's size.
        check(unsafe { (self.lib.query_device)(self.raw(), &mut attr) })?;
        Ok(attr)
    }

    /// `ibv_query_port` as verbs.h's inline does it: the extended context's `query_port`
    /// with the struct size when the context has one, else the exported compat function.
    pub fn query_port(&self, port: u8) -> io::Result<IbvPortAttr> {
        let mut attr = IbvPortAttr::default();
        let ctx = self.raw();
        // SAFETY: plain field of a live context.
        let extended = unsafe { (*ctx).abi_compat } as usize == VERBS_ABI_IS_EXTENDED;
        if extended {
            let offset = std::mem::offset_of!(VerbsContext, context);
            // SAFETY: an extended context is the last field of a verbs_context (verbs.h's
            // verbs_get_ctx); `sz` says how much of it precedes the context, and query_port,
            // the first field, exists when sz covers the whole struct (verbs_get_ctx_op).
            let query_port = unsafe {
                let vctx = (ctx as *mut u8).sub(offset) as *const VerbsContext;
                if (*vctx).sz >= std::mem::size_of::<VerbsContext>() {
                    (*vctx).query_port
                } else {
                    None
                }
            };
            if let Some(query_port) = query_port {
                // SAFETY: the provider's query_port, given a live context and a writable
                // struct of the size passed.
                return check(unsafe {
                    query_port(ctx, port, &mut attr, std::mem::size_of::<IbvPortAttr>())
                })
                .map(|()| attr);
            }
        }
        // SAFETY: the compat function writes a prefix of ibv_port_attr; the rest stays zero.
        check(unsafe { (self.lib.query_port)(ctx, port, &mut attr) })?;
        Ok(attr)
    }

    /// `ibv_query_gid`.
    pub fn query_gid(&self, port: u8, index: i32) -> io::Result<IbvGid> {
        let mut gid = IbvGid::default();
        // SAFETY: live context, writable 16-byte gid.
        check(unsafe { (self.lib.query_gid)(self.raw(), port, index, &mut gid) })?;
        Ok(gid)
    }

    /// `ibv_get_async_event` without blocking, acknowledged at once: the event type and its
    /// element (the CQ's or QP's cookie, or the port number).
    pub fn get_async_event(&self) -> io::Result<Option<(i32, u64)>> {
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

/// A protection domain.
#[derive(Debug)]
pub struct RawPd {
    ptr: NonNull<IbvPd>,
    context: Arc<RawContext>,
}

// SAFETY: see RawContext.
unsafe impl Send for RawPd {}
// SAFETY: see RawContext.
unsafe impl Sync for RawPd {}

impl RawPd {
    /// `ibv_alloc_pd`.
    pub fn alloc(context: &Arc<RawContext>) -> io::Result<RawPd> {
        // SAFETY: live context.
        let pd = unsafe { (context.lib.alloc_pd)(context.raw()) };
        let ptr = NonNull::new(pd).ok_or_else(errno)?;
        let pd = RawPd {
            ptr,
            context: context.clone(),
        };
        // SAFETY: plain field of a live PD.
        if unsafe { (*pd.ptr.as_ptr()).context } != context.raw() {
            return Err(abi_mismatch("ibv_pd.context does not point at its context"));
        }
        Ok(pd)
    }

    /// The context.
    pub fn context(&self) -> &Arc<RawContext> {
        &self.context
    }
}

impl Drop for RawPd {
    fn drop(&mut self) {
        // SAFETY: every MR and QP of the PD holds an Arc of it, so none is left.
        unsafe { (self.context.lib.dealloc_pd)(self.ptr.as_ptr()) };
    }
}

/// A memory region over memory it keeps alive.
#[derive(Debug)]
pub struct RawMr {
    ptr: NonNull<IbvMr>,
    pd: Arc<RawPd>,
    _memory: Arc<RegisteredMemory>,
}

// SAFETY: see RawContext.
unsafe impl Send for RawMr {}
// SAFETY: see RawContext.
unsafe impl Sync for RawMr {}

impl RawMr {
    /// `ibv_reg_mr` of all of `memory` with `access` (`IBV_ACCESS_*`, the kernel's bits).
    pub fn register(
        pd: &Arc<RawPd>,
        memory: Arc<RegisteredMemory>,
        access: u32,
    ) -> io::Result<RawMr> {
        let lib = pd.context.lib;
        // SAFETY: the memory stays valid while this MR lives (it holds the Arc), so the
        // device may read and write it until ibv_dereg_mr in drop.
        let mr = unsafe {
            (lib.reg_mr)(
                pd.ptr.as_ptr(),
                memory.addr() as *mut c_void,
                memory.len(),
                access as c_int,
            )
        };
        let ptr = NonNull::new(mr).ok_or_else(errno)?;
        let mr = RawMr {
            ptr,
            pd: pd.clone(),
            _memory: memory,
        };
        // SAFETY: plain fields of a live MR.
        let (mr_pd, addr) = unsafe { ((*ptr.as_ptr()).pd, (*ptr.as_ptr()).addr) };
        if mr_pd != pd.ptr.as_ptr() || addr as u64 != mr._memory.addr() {
            return Err(abi_mismatch("ibv_mr.pd/addr do not match the registration"));
        }
        Ok(mr)
    }

    /// The local and remote keys.
    pub fn keys(&self) -> (u32, u32) {
        // SAFETY: plain fields of a live MR.
        unsafe { ((*self.ptr.as_ptr()).lkey, (*self.ptr.as_ptr()).rkey) }
    }
}

impl Drop for RawMr {
    fn drop(&mut self) {
        // SAFETY: a live MR, deregistered once; its memory outlives this call.
        unsafe { (self.pd.context.lib.dereg_mr)(self.ptr.as_ptr()) };
    }
}

/// A completion channel.
#[derive(Debug)]
pub struct RawChannel {
    ptr: NonNull<IbvCompChannel>,
    context: Arc<RawContext>,
}

// SAFETY: see RawContext.
unsafe impl Send for RawChannel {}
// SAFETY: see RawContext.
unsafe impl Sync for RawChannel {}

impl RawChannel {
    /// `ibv_create_comp_channel`, its fd made non-blocking.
    pub fn create(context: &Arc<RawContext>) -> io::Result<RawChannel> {
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
    pub fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: plain field of a live channel; the fd stays open until
        // ibv_destroy_comp_channel, which runs only when this handle is dropped.
        unsafe { BorrowedFd::borrow_raw((*self.ptr.as_ptr()).fd) }
    }

    /// `ibv_get_cq_event` without blocking: the cookie of the CQ, or `None`.
    pub fn get_event(&self) -> io::Result<Option<u64>> {
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
pub struct RawCq {
    ptr: NonNull<IbvCq>,
    context: Arc<RawContext>,
    _channel: Option<Arc<RawChannel>>,
}

// SAFETY: see RawContext.
unsafe impl Send for RawCq {}
// SAFETY: see RawContext.
unsafe impl Sync for RawCq {}

impl RawCq {
    /// `ibv_create_cq`.
    pub fn create(
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
    pub fn cqe(&self) -> u32 {
        // SAFETY: plain field of a live CQ.
        unsafe { (*self.ptr.as_ptr()).cqe }.max(0) as u32
    }

    /// `ibv_poll_cq` through the context's ops table.
    pub fn poll(&self, wc: &mut [IbvWc]) -> io::Result<usize> {
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
    pub fn req_notify(&self, solicited_only: bool) -> io::Result<()> {
        let notify = self.context.ops().req_notify_cq.expect("checked at open");
        // SAFETY: the provider's req_notify_cq on a live CQ.
        check(unsafe { notify(self.ptr.as_ptr(), c_int::from(solicited_only)) })
    }

    /// `ibv_ack_cq_events`.
    pub fn ack_events(&self, n: u32) {
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

/// A reliable-connected queue pair whose `qp_context` is a cookie.
#[derive(Debug)]
pub struct RawQp {
    ptr: NonNull<IbvQp>,
    pd: Arc<RawPd>,
    _send_cq: Arc<RawCq>,
    _recv_cq: Arc<RawCq>,
}

// SAFETY: see RawContext.
unsafe impl Send for RawQp {}
// SAFETY: see RawContext.
unsafe impl Sync for RawQp {}

impl RawQp {
    /// `ibv_create_qp` (RC): the QP and the capabilities it got.
    pub fn create(
        pd: &Arc<RawPd>,
        send_cq: Arc<RawCq>,
        recv_cq: Arc<RawCq>,
        cap: IbvQpCap,
        sq_sig_all: bool,
        cookie: u64,
    ) -> io::Result<(RawQp, IbvQpCap)> {
        let mut init = IbvQpInitAttr {
            qp_context: cookie as usize as *mut c_void,
            send_cq: send_cq.ptr.as_ptr(),
            recv_cq: recv_cq.ptr.as_ptr(),
            srq: ptr::null_mut(),
            cap,
            qp_type: IBV_QPT_RC,
            sq_sig_all: c_int::from(sq_sig_all),
        };
        // SAFETY: live PD and CQs of its context; init is a valid, writable attribute
        // struct (libibverbs writes the granted caps back).
        let qp = unsafe { (pd.context.lib.create_qp)(pd.ptr.as_ptr(), &mut init) };
        let ptr = NonNull::new(qp).ok_or_else(errno)?;
        let raw = RawQp {
            ptr,
            pd: pd.clone(),
            _send_cq: send_cq,
            _recv_cq: recv_cq,
        };
        // SAFETY: plain fields of a live QP.
        let q = unsafe { &*ptr.as_ptr() };
        if q.context != pd.context.raw()
            || q.pd != pd.ptr.as_ptr()
            || q.send_cq != init.send_cq
            || q.recv_cq != init.recv_cq
            || q.qp_context as u64 != cookie
        {
            return Err(abi_mismatch(
                "ibv_qp.context/pd/send_cq/recv_cq/qp_context do not match what was created",
            ));
        }
        Ok((raw, init.cap))
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: plain field of a live QP.
        unsafe { (*self.ptr.as_ptr()).qp_num }
    }

    /// `ibv_modify_qp`.
    pub fn modify(&self, attr: &IbvQpAttr, mask: u32) -> io::Result<()> {
        let mut attr = *attr;
        // SAFETY: live QP; the attribute struct is valid for the ABI's size.
        check(unsafe {
            (self.pd.context.lib.modify_qp)(self.ptr.as_ptr(), &mut attr, mask as c_int)
        })
    }

    /// `ibv_query_qp`: the attributes and the capabilities.
    pub fn query(&self, mask: u32) -> io::Result<(IbvQpAttr, IbvQpCap)> {
        let mut attr = IbvQpAttr::default();
        let mut init = IbvQpInitAttr {
            qp_context: ptr::null_mut(),
            send_cq: ptr::null_mut(),
            recv_cq: ptr::null_mut(),
            srq: ptr::null_mut(),
            cap: IbvQpCap::default(),
            qp_type: 0,
            sq_sig_all: 0,
        };
        // SAFETY: live QP; both structs are writable and of the ABI's size.
        check(unsafe {
            (self.pd.context.lib.query_qp)(self.ptr.as_ptr(), &mut attr, mask as c_int, &mut init)
        })?;
        Ok((attr, init.cap))
    }

    /// `ibv_post_send` through the context's ops table: `wrs` are chained in order, each
    /// taking its `num_sge` entries of `sges` in turn. On failure, the index of the request
    /// libibverbs reports as `bad_wr` and the errno.
    pub fn post_send(
        &self,
        wrs: &mut [IbvSendWr],
        sges: &mut [IbvSge],
    ) -> Result<(), (usize, io::Error)> {
        if wrs.is_empty() {
            return Ok(());
        }
        let mut offset = 0usize;
        let base = sges.as_mut_ptr();
        let n = wrs.len();
        let wr_base = wrs.as_mut_ptr();
        for (i, wr) in wrs.iter_mut().enumerate() {
            let count = wr.num_sge.max(0) as usize;
            if offset + count > sges.len() {
                return Err((i, io::Error::from_raw_os_error(libc::EINVAL)));
            }
            // SAFETY: offset + count <= sges.len(), so the pointer stays inside `sges`;
            // `wr_base.add(i + 1)` is inside `wrs` when i + 1 < n.
            unsafe {
                wr.sg_list = if count == 0 {
                    ptr::null_mut()
                } else {
                    base.add(offset)
                };
                wr.next = if i + 1 < n {
                    wr_base.add(i + 1)
                } else {
                    ptr::null_mut()
                };
            }
            offset += count;
        }
        let post = self.pd.context.ops().post_send.expect("checked at open");
        let mut bad: *mut IbvSendWr = ptr::null_mut();
        // SAFETY: the provider's post_send on a live QP with a chain that lives in `wrs`
        // and `sges` (borrowed mutably for the call); SGE addresses are registered memory
        // (the callers' ScatterGather contract).
        let rc = unsafe { post(self.ptr.as_ptr(), wr_base, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        let index = (bad as usize)
            .checked_sub(wr_base as usize)
            .map(|d| d / std::mem::size_of::<IbvSendWr>())
            .filter(|&i| i < n)
            .unwrap_or(0);
        Err((index, io::Error::from_raw_os_error(rc.abs())))
    }

    /// `ibv_post_recv` through the context's ops table; like [`RawQp::post_send`].
    pub fn post_recv(
        &self,
        wrs: &mut [IbvRecvWr],
        sges: &mut [IbvSge],
    ) -> Result<(), (usize, io::Error)> {
        if wrs.is_empty() {
            return Ok(());
        }
        let mut offset = 0usize;
        let base = sges.as_mut_ptr();
        let n = wrs.len();
        let wr_base = wrs.as_mut_ptr();
        for (i, wr) in wrs.iter_mut().enumerate() {
            let count = wr.num_sge.max(0) as usize;
            if offset + count > sges.len() {
                return Err((i, io::Error::from_raw_os_error(libc::EINVAL)));
            }
            // SAFETY: as in post_send.
            unsafe {
                wr.sg_list = if count == 0 {
                    ptr::null_mut()
                } else {
                    base.add(offset)
                };
                wr.next = if i + 1 < n {
                    wr_base.add(i + 1)
                } else {
                    ptr::null_mut()
                };
            }
            offset += count;
        }
        let post = self.pd.context.ops().post_recv.expect("checked at open");
        let mut bad: *mut IbvRecvWr = ptr::null_mut();
        // SAFETY: as in post_send.
        let rc = unsafe { post(self.ptr.as_ptr(), wr_base, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        let index = (bad as usize)
            .checked_sub(wr_base as usize)
            .map(|d| d / std::mem::size_of::<IbvRecvWr>())
            .filter(|&i| i < n)
            .unwrap_or(0);
        Err((index, io::Error::from_raw_os_error(rc.abs())))
    }
}

impl Drop for RawQp {
    fn drop(&mut self) {
        // SAFETY: a live QP destroyed once; its async events were acknowledged as read.
        unsafe { (self.pd.context.lib.destroy_qp)(self.ptr.as_ptr()) };
    }
}
