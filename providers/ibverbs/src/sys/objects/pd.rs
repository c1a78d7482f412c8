//! Protection domains and the memory regions registered in them.

use super::super::abi::*;
use super::context::RawContext;
use super::{abi_mismatch, errno};
use rdmasock_verbs::RegisteredMemory;
use std::ffi::{c_int, c_void};
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

/// A protection domain.
#[derive(Debug)]
pub(crate) struct RawPd {
    pub(super) ptr: NonNull<IbvPd>,
    pub(super) context: Arc<RawContext>,
}

// SAFETY: see RawContext.
unsafe impl Send for RawPd {}
// SAFETY: see RawContext.
unsafe impl Sync for RawPd {}

impl RawPd {
    /// `ibv_alloc_pd`.
    pub(crate) fn alloc(context: &Arc<RawContext>) -> io::Result<RawPd> {
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
}

impl Drop for RawPd {
    fn drop(&mut self) {
        // SAFETY: every MR and QP of the PD holds an Arc of it, so none is left.
        unsafe { (self.context.lib.dealloc_pd)(self.ptr.as_ptr()) };
    }
}

/// A memory region over memory it keeps alive.
#[derive(Debug)]
pub(crate) struct RawMr {
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
    pub(crate) fn register(
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
    pub(crate) fn keys(&self) -> (u32, u32) {
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
