//! rdmasock provider: siw (soft-iWARP).
//!
//! The control path is the verbs layer's shared uverbs code ([`rdmasock_verbs::kernel`]);
//! this crate adds siw's driver data (GET_CONTEXT and REG_MR carry 8 bytes each way) and its
//! data path on the kernel's mmap'd element arrays (docs/kernel-abi.md#siw): send elements written
//! into the send array and a POST_SEND doorbell, receive elements into the receive array (no
//! system call), completions taken from the completion array, and CQ arming through the
//! shared word after it. Ownership of every element is a VALID flag inside it; the `ring`
//! module, the only place with `unsafe`, does those accesses.
//!
//! What siw can do, and what this provider refuses at post time with
//! [`rdmasock_verbs::Error::Unsupported`] naming the device and the operation: SEND,
//! RDMA_WRITE and RDMA_READ (into one buffer) are supported, with SIGNALED, SOLICITED, INLINE
//! (up to 80 bytes) and FENCE (not on a READ itself); there is no immediate data
//! (SEND_WITH_IMM, RDMA_WRITE_WITH_IMM) and there are no atomics. siw QPs reach RTS only
//! through the connection manager (rdma_cm), which the kernel drives on iWARP.
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod check;
mod cq;
mod element;
mod qp;
#[allow(unsafe_code)]
mod ring;
mod srq;

pub use cq::SiwCq;
pub use qp::SiwQp;
pub use srq::SiwSrq;

use rdmasock_verbs::kernel::{DriverData, KernelContext, KernelDriver, KernelPd};
use rdmasock_verbs::provider::{ChannelOps, ContextOps, CqOps, Provider, QpOps, SrqOps};
use rdmasock_verbs::qp_attr::{QpInitAttributes, SrqInitAttributes};
use rdmasock_verbs::{DeviceInfo, Result};
use std::sync::Arc;

/// Bytes of `struct siw_uresp_alloc_ctx` (GET_CONTEXT response; the kernel requires room).
const ALLOC_CONTEXT_RESPONSE_LEN: usize = 8;
/// Bytes of `struct siw_ureq_reg_mr` and of `struct siw_uresp_reg_mr`.
const REG_MR_DATA_LEN: usize = 8;

/// The soft-iWARP (siw) provider.
#[derive(Debug, Default)]
pub struct SiwProvider;

impl SiwProvider {
    /// The provider.
    pub fn new() -> Self {
        SiwProvider
    }
}

impl Provider for SiwProvider {
    fn name(&self) -> &'static str {
        "siw"
    }
    fn matches(&self, device: &DeviceInfo) -> bool {
        device.driver.as_deref() == Some("siw")
    }
    fn open(&self, device: &DeviceInfo) -> Result<Arc<dyn ContextOps>> {
        Ok(Arc::new(KernelContext::open(device, Arc::new(SiwDriver))?))
    }
}

/// siw's part of the kernel control path: its driver data and its CQs and QPs with mapped
/// element arrays.
#[derive(Debug, Default, Clone, Copy)]
pub struct SiwDriver;

// SAFETY: SiwDriver's only driver request bytes are REG_MR's `siw_ureq_reg_mr`, eight zero
// bytes (a key byte and padding): plain values, no address, length or offset, to siw or to
// any other kernel driver that would read them. GET_CONTEXT carries none.
#[allow(unsafe_code)]
unsafe impl KernelDriver for SiwDriver {
    fn name(&self) -> &'static str {
        "siw"
    }

    /// siw (`zcopy_tx`, on in 6.1) hands an unsignalled request of a page or more to TCP by
    /// sendpage, from the caller's pages; a signalled one it copies.
    fn unsignaled_sends_borrow_memory(&self) -> bool {
        true
    }

    /// `siw_uresp_alloc_ctx` (device id, pad): the kernel fails GET_CONTEXT without room
    /// for it.
    fn get_context_data(&self) -> DriverData {
        DriverData {
            input: Vec::new(),
            output_len: ALLOC_CONTEXT_RESPONSE_LEN,
        }
    }

    /// `siw_ureq_reg_mr` with `stag_key` 0 (the low byte of the keys, as rdma-core passes),
    /// and room for `siw_uresp_reg_mr` (the STag, which REG_MR's lkey/rkey already carry).
    fn reg_mr_data(&self) -> DriverData {
        DriverData {
            input: vec![0u8; REG_MR_DATA_LEN],
            output_len: REG_MR_DATA_LEN,
        }
    }

    fn create_cq(
        &self,
        context: &KernelContext,
        depth: u32,
        channel: Option<Arc<dyn ChannelOps>>,
        comp_vector: u32,
    ) -> Result<Arc<dyn CqOps>> {
        Ok(Arc::new(SiwCq::create(
            context,
            depth,
            channel,
            comp_vector,
        )?))
    }

    fn create_qp(
        &self,
        pd: &KernelPd,
        init: &QpInitAttributes,
        send_cq: Arc<dyn CqOps>,
        recv_cq: Arc<dyn CqOps>,
    ) -> Result<Box<dyn QpOps>> {
        Ok(Box::new(SiwQp::create(pd, init, send_cq, recv_cq)?))
    }

    fn create_srq(&self, pd: &KernelPd, init: &SrqInitAttributes) -> Result<Arc<dyn SrqOps>> {
        Ok(Arc::new(SiwSrq::create(pd, init)?))
    }

    fn create_qp_with_srq(
        &self,
        pd: &KernelPd,
        init: &QpInitAttributes,
        send_cq: Arc<dyn CqOps>,
        recv_cq: Arc<dyn CqOps>,
        srq: Arc<dyn SrqOps>,
    ) -> Result<Box<dyn QpOps>> {
        Ok(Box::new(SiwQp::create_with_srq(
            pd,
            init,
            send_cq,
            recv_cq,
            Some(srq),
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmasock_verbs::device::{NodeType, Transport};

    #[test]
    fn driver_data_matches_the_abi() {
        let d = SiwDriver;
        assert_eq!(d.get_context_data().output_len, 8);
        assert!(d.get_context_data().input.is_empty());
        assert_eq!(
            d.reg_mr_data().input,
            vec![0u8; 8],
            "stag_key 0, reserved, pad"
        );
        assert_eq!(d.reg_mr_data().output_len, 8);
        assert_eq!(d.name(), "siw");
    }

    #[test]
    fn matches_siw_devices_only() {
        let mut info = DeviceInfo {
            name: "siw0".into(),
            node_guid: 0x5254_00ff_fe12_3456,
            node_type: NodeType::Rnic,
            transport: Transport::Iwarp,
            driver: Some("siw".into()),
            driver_id: Some(18),
            uverbs_path: None,
            uverbs_sysfs: None,
            uverbs_abi: Some(1),
            sysfs: None,
            parent_netdev: Some("eth1".into()),
            fw_ver: "0.0.0".into(),
            ports: Vec::new(),
        };
        assert!(SiwProvider::new().matches(&info));
        info.driver = Some("rxe".into());
        assert!(!SiwProvider::new().matches(&info));
        info.driver = None;
        assert!(!SiwProvider::new().matches(&info));
    }
}
