//! Reliable-connected queue pairs and their data path.

use super::super::abi::*;
use super::cq::RawCq;
use super::pd::RawPd;
use super::{abi_mismatch, check, errno};
use std::ffi::{c_int, c_void};
use std::io;
use std::ptr::{self, NonNull};
use std::sync::Arc;

/// A reliable-connected queue pair whose `qp_context` is a cookie.
#[derive(Debug)]
pub(crate) struct RawQp {
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
    pub(crate) fn create(
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
    pub(crate) fn qp_num(&self) -> u32 {
        // SAFETY: plain field of a live QP.
        unsafe { (*self.ptr.as_ptr()).qp_num }
    }

    /// `ibv_modify_qp`.
    pub(crate) fn modify(&self, attr: &IbvQpAttr, mask: u32) -> io::Result<()> {
        let mut attr = *attr;
        // SAFETY: live QP; the attribute struct is valid for the ABI's size.
        check(unsafe {
            (self.pd.context.lib.modify_qp)(self.ptr.as_ptr(), &mut attr, mask as c_int)
        })
    }

    /// `ibv_query_qp`: the attributes and the capabilities.
    pub(crate) fn query(&self, mask: u32) -> io::Result<(IbvQpAttr, IbvQpCap)> {
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
    pub(crate) fn post_send(
        &self,
        wrs: &mut [IbvSendWr],
        sges: &mut [IbvSge],
    ) -> Result<(), (usize, io::Error)> {
        if wrs.is_empty() {
            return Ok(());
        }
        let head = chain(wrs, sges)?;
        let post = self.pd.context.ops().post_send.expect("checked at open");
        let mut bad: *mut IbvSendWr = ptr::null_mut();
        // SAFETY: the provider's post_send on a live QP with a chain that lives in `wrs`
        // and `sges` (borrowed mutably for the call); SGE addresses are registered memory
        // (the callers' ScatterGather contract).
        let rc = unsafe { post(self.ptr.as_ptr(), head, &mut bad) };
        posted(rc, bad, head, wrs.len())
    }

    /// `ibv_post_recv` through the context's ops table; like [`RawQp::post_send`].
    pub(crate) fn post_recv(
        &self,
        wrs: &mut [IbvRecvWr],
        sges: &mut [IbvSge],
    ) -> Result<(), (usize, io::Error)> {
        if wrs.is_empty() {
            return Ok(());
        }
        let head = chain(wrs, sges)?;
        let post = self.pd.context.ops().post_recv.expect("checked at open");
        let mut bad: *mut IbvRecvWr = ptr::null_mut();
        // SAFETY: as in post_send.
        let rc = unsafe { post(self.ptr.as_ptr(), head, &mut bad) };
        posted(rc, bad, head, wrs.len())
    }
}

impl Drop for RawQp {
    fn drop(&mut self) {
        // SAFETY: a live QP destroyed once; its async events were acknowledged as read.
        unsafe { (self.pd.context.lib.destroy_qp)(self.ptr.as_ptr()) };
    }
}

/// A work request libibverbs takes as a chain: its SGE count and its two link fields.
trait ChainedRequest {
    fn num_sge(&self) -> c_int;
    fn link(&mut self, sg_list: *mut IbvSge, next: *mut Self);
}

impl ChainedRequest for IbvSendWr {
    fn num_sge(&self) -> c_int {
        self.num_sge
    }
    fn link(&mut self, sg_list: *mut IbvSge, next: *mut Self) {
        self.sg_list = sg_list;
        self.next = next;
    }
}

impl ChainedRequest for IbvRecvWr {
    fn num_sge(&self) -> c_int {
        self.num_sge
    }
    fn link(&mut self, sg_list: *mut IbvSge, next: *mut Self) {
        self.sg_list = sg_list;
        self.next = next;
    }
}

/// Links `wrs` (not empty) into one chain, each request taking its `num_sge` entries of
/// `sges` in turn; returns the head. A request asking past the end of `sges` is EINVAL.
fn chain<W: ChainedRequest>(
    wrs: &mut [W],
    sges: &mut [IbvSge],
) -> Result<*mut W, (usize, io::Error)> {
    let mut offset = 0usize;
    let base = sges.as_mut_ptr();
    let n = wrs.len();
    let wr_base = wrs.as_mut_ptr();
    for (i, wr) in wrs.iter_mut().enumerate() {
        let count = wr.num_sge().max(0) as usize;
        if offset + count > sges.len() {
            return Err((i, io::Error::from_raw_os_error(libc::EINVAL)));
        }
        // SAFETY: offset + count <= sges.len(), so the pointer stays inside `sges`;
        // `wr_base.add(i + 1)` is inside `wrs` when i + 1 < n.
        let (sg_list, next) = unsafe {
            (
                if count == 0 {
                    ptr::null_mut()
                } else {
                    base.add(offset)
                },
                if i + 1 < n {
                    wr_base.add(i + 1)
                } else {
                    ptr::null_mut()
                },
            )
        };
        wr.link(sg_list, next);
        offset += count;
    }
    Ok(wr_base)
}

/// The outcome of a post: `rc` 0 is success, else the index of `bad` in the chain at
/// `head` of `n` requests (0 when libibverbs named none of them) and the errno.
fn posted<W>(rc: c_int, bad: *mut W, head: *mut W, n: usize) -> Result<(), (usize, io::Error)> {
    if rc == 0 {
        return Ok(());
    }
    let index = (bad as usize)
        .checked_sub(head as usize)
        .map(|d| d / std::mem::size_of::<W>())
        .filter(|&i| i < n)
        .unwrap_or(0);
    Err((index, io::Error::from_raw_os_error(rc.abs())))
}
