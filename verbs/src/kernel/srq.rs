//! [`KernelSrq`]: the kernel handle of a shared receive queue, which a provider's SRQ type
//! wraps next to its mapped ring.
#![forbid(unsafe_code)]

use super::{KernelContext, KernelPd};
use crate::error::Result;
use crate::qp_attr::{SrqCapabilities, SrqInitAttributes};
use crate::sys::abi_srq::CreateSrqRequest;

/// A kernel SRQ handle. DESTROY_SRQ on drop (after every QP on it, which hold the SRQ), then
/// the PD reference goes.
#[derive(Debug)]
pub struct KernelSrq {
    pd: KernelPd,
    handle: u32,
    caps: SrqCapabilities,
    cookie: u64,
}

impl KernelSrq {
    /// CREATE_SRQ in `pd`; fills `driver_out` with the driver's response. No driver request
    /// bytes go in, as in [`super::KernelCq::create`]: the kernel allocates the ring.
    pub fn create(
        pd: &KernelPd,
        init: &SrqInitAttributes,
        driver_out: &mut [u8],
    ) -> Result<KernelSrq> {
        let context = pd.context();
        let cookie = context.next_cookie();
        let req = CreateSrqRequest {
            user_handle: cookie,
            pd_handle: pd.handle(),
            max_wr: init.max_wr,
            max_sge: init.max_sge,
            srq_limit: init.limit,
            ..Default::default()
        };
        let r = context.create_srq_raw(&req, driver_out)?;
        Ok(KernelSrq {
            pd: pd.clone(),
            handle: r.srq_handle,
            caps: SrqCapabilities {
                max_wr: r.max_wr,
                max_sge: r.max_sge,
            },
            cookie,
        })
    }

    /// The kernel handle (what CREATE_QP's `srq_handle` takes).
    pub fn handle(&self) -> u32 {
        self.handle
    }
    /// What the kernel granted.
    pub fn caps(&self) -> SrqCapabilities {
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
    /// MODIFY_SRQ of the limit.
    pub fn set_limit(&self, limit: u32) -> Result<()> {
        self.context().modify_srq_limit(self.handle, limit)
    }
    /// QUERY_SRQ's armed limit.
    pub fn query_limit(&self) -> Result<u32> {
        Ok(self.context().query_srq(self.handle)?.2)
    }
}

impl Drop for KernelSrq {
    fn drop(&mut self) {
        let _ = self.context().destroy_srq(self.handle);
    }
}
