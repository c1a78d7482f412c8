//! rdmasock provider: rxe (Soft-RoCE).
//!
//! The control path is the verbs layer's shared uverbs code ([`rdmasock_verbs::kernel`]); this
//! crate adds rxe's driver data and its data path on the kernel's mmap'd rings (`rdma_user_rxe.h`,
//! docs/kernel-abi.md#rxe): send WQEs written into the send ring and a POST_SEND doorbell, receive
//! WQEs into the receive ring (no syscall), completions read from the CQ ring. The `ring` module is
//! the only place with `unsafe`.
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod cq;
mod qp;
#[allow(unsafe_code)]
mod ring;
mod srq;
mod wqe;

pub use cq::RxeCq;
pub use qp::RxeQp;
pub use srq::RxeSrq;

use rdmasock_verbs::kernel::{DriverData, KernelContext, KernelDriver, KernelPd};
use rdmasock_verbs::provider::{ChannelOps, ContextOps, CqOps, Provider, QpOps, SrqOps};
use rdmasock_verbs::qp_attr::{QpInitAttributes, SrqInitAttributes};
use rdmasock_verbs::{DeviceInfo, Result};
use std::sync::Arc;

/// The Soft-RoCE (rxe) provider.
#[derive(Debug, Default)]
pub struct RxeProvider;

impl RxeProvider {
    /// The provider.
    pub fn new() -> Self {
        RxeProvider
    }
}

impl Provider for RxeProvider {
    fn name(&self) -> &'static str {
        "rxe"
    }
    fn matches(&self, device: &DeviceInfo) -> bool {
        device.driver.as_deref() == Some("rxe")
    }
    fn open(&self, device: &DeviceInfo) -> Result<Arc<dyn ContextOps>> {
        Ok(Arc::new(KernelContext::open(device, Arc::new(RxeDriver))?))
    }
}

/// rxe's part of the kernel control path: its CQs, QPs and SRQs with mapped rings, and
/// MODIFY_SRQ's driver data. No other command carries rxe driver data.
#[derive(Debug, Default, Clone, Copy)]
pub struct RxeDriver;

// SAFETY: RxeDriver's only driver request bytes are MODIFY_SRQ's `rxe_modify_srq_cmd`, eight
// zero bytes: its one field is a ring address the kernel reads only when MODIFY_SRQ resizes
// the queue, which the verbs layer never asks (it modifies the limit alone), and 0 names no
// memory anyway. GET_CONTEXT and REG_MR carry none.
#[allow(unsafe_code)]
unsafe impl KernelDriver for RxeDriver {
    fn name(&self) -> &'static str {
        "rxe"
    }

    fn create_cq(
        &self,
        context: &KernelContext,
        depth: u32,
        channel: Option<Arc<dyn ChannelOps>>,
        comp_vector: u32,
    ) -> Result<Arc<dyn CqOps>> {
        Ok(Arc::new(RxeCq::create(
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
        Ok(Box::new(RxeQp::create(pd, init, send_cq, recv_cq)?))
    }

    fn modify_srq_data(&self) -> DriverData {
        DriverData {
            input: vec![0u8; srq::MODIFY_SRQ_DATA_LEN],
            output_len: 0,
        }
    }

    fn create_srq(&self, pd: &KernelPd, init: &SrqInitAttributes) -> Result<Arc<dyn SrqOps>> {
        Ok(Arc::new(RxeSrq::create(pd, init)?))
    }

    fn create_qp_with_srq(
        &self,
        pd: &KernelPd,
        init: &QpInitAttributes,
        send_cq: Arc<dyn CqOps>,
        recv_cq: Arc<dyn CqOps>,
        srq: Arc<dyn SrqOps>,
    ) -> Result<Box<dyn QpOps>> {
        Ok(Box::new(RxeQp::create_with_srq(
            pd,
            init,
            send_cq,
            recv_cq,
            Some(srq),
        )?))
    }
}
