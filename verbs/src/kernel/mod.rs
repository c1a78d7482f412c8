//! The uverbs control path shared by kernel-backed providers (rxe, siw): opening
//! `/dev/infiniband/uverbsN`, GET_CONTEXT, and every write command, with the driver data
//! ("udata") each provider adds.
//!
//! A kernel provider implements only [`KernelDriver`]: the driver data its commands need, and
//! CQ and QP creation with its own rings. Everything else — the context, protection domains,
//! memory regions, completion channels, async events, MODIFY/QUERY/DESTROY of QPs, the send
//! doorbell — is here and identical for every kernel driver:
//!
//! ```text
//! Provider::open ──> KernelContext::open(device, driver) ── implements ContextOps
//!                       ├─ alloc_pd ──> KernelPd ── implements PdOps
//!                       │                ├─ reg_mr ──> KernelMr (MrOps)
//!                       │                ├─ create_srq ──> driver.create_srq ─> uses KernelSrq
//!                       │                └─ create_qp ──> driver.create_qp ─> uses KernelQp
//!                       ├─ create_comp_channel ──> KernelChannel (ChannelOps)
//!                       └─ create_cq ──> driver.create_cq ─> uses KernelCq
//! ```
//!
//! Lifetimes: every object holds what it depends on ([`KernelContext`] is a cheap `Arc`
//! handle), so the kernel objects are destroyed in a valid order whatever order the program
//! drops them in — a QP before its CQs and PD, MRs before their PD, everything before the
//! uverbs fd is closed.
//!
//! The connection manager finds a kernel QP's handle with
//! `qp.ops().as_any().downcast_ref::<KernelQp>()` (every kernel provider's QP returns its
//! [`KernelQp`] from `as_any`), and turns rdma_cm's INIT_QP_ATTR answer into attributes with
//! [`attributes_from_cm`].
//!
//! Implementing [`KernelDriver`] is `unsafe`: its driver data goes to the kernel unchecked.
//! Everything else here forbids `unsafe` code (each submodule says so); this file only
//! declares the trait.
#![deny(unsafe_code)]

mod context;
mod convert;
mod objects;
mod open;
mod srq;

pub use context::KernelContext;
pub use convert::{attributes_from_cm, attributes_from_query, modify_request};
pub use objects::{KernelChannel, KernelCq, KernelMr, KernelPd, KernelQp};
pub use open::open_uverbs;
pub use srq::KernelSrq;

use crate::error::Result;
use crate::provider::{ChannelOps, CqOps, QpOps, SrqOps};
use crate::qp_attr::{QpInitAttributes, SrqInitAttributes};
use std::fmt::Debug;
use std::sync::Arc;

/// Driver data for one command: the bytes after the core request, and how many bytes of
/// driver response to make room for after the core response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverData {
    /// Driver request bytes.
    pub input: Vec<u8>,
    /// Driver response length in bytes.
    pub output_len: usize,
}

impl DriverData {
    /// No driver data either way.
    pub fn none() -> DriverData {
        DriverData::default()
    }
}

/// What differs between kernel drivers: their driver data and their queues.
///
/// # Safety
///
/// The verbs layer writes the driver request bytes of [`get_context_data`] and
/// [`reg_mr_data`] into GET_CONTEXT and REG_MR (and of
/// [`modify_srq_data`](Self::modify_srq_data) into MODIFY_SRQ) unchecked, and its `unsafe` command code
/// relies on the kernel writing no process memory but the command's response buffer. An
/// implementation promises that the `input` bytes of every [`DriverData`] it returns name no
/// memory of the process, for every kernel driver they may reach (any device that
/// [`KernelContext::open`] is given the implementation for): no address, length or offset
/// that makes the kernel or the device read or write process memory, so that the kernel
/// reads them as plain values (keys, flags, sizes) or rejects them.
///
/// Nothing else is trusted: the kernel writes no more driver response than the `output_len`
/// it is told, into a buffer of that size; [`create_cq`](Self::create_cq) and
/// [`create_qp`](Self::create_qp) pass no driver request bytes (see [`KernelCq::create`],
/// [`KernelQp::create`]); the queues an implementation maps with
/// [`KernelContext::map_queue`] are fresh mappings its own code reads and writes, and
/// whatever `unsafe` that code holds is the implementation's own to justify. Its answers to
/// [`name`](Self::name) and
/// [`unsignaled_sends_borrow_memory`](Self::unsignaled_sends_borrow_memory) must be true for
/// the bytes on the wire to be right, but memory safety rests on none of them.
///
/// [`get_context_data`]: Self::get_context_data
/// [`reg_mr_data`]: Self::reg_mr_data
#[allow(unsafe_code)]
pub unsafe trait KernelDriver: Send + Sync + Debug + 'static {
    /// The provider name (`rxe`, `siw`).
    fn name(&self) -> &'static str;

    /// The driver's answer to
    /// [`crate::provider::ContextOps::unsignaled_sends_borrow_memory`] (true for siw).
    fn unsignaled_sends_borrow_memory(&self) -> bool {
        false
    }

    /// Driver data of GET_CONTEXT (siw needs 8 bytes of output).
    fn get_context_data(&self) -> DriverData {
        DriverData::none()
    }

    /// Driver data of REG_MR (siw needs 8 bytes each way).
    fn reg_mr_data(&self) -> DriverData {
        DriverData::none()
    }

    /// CREATE_CQ with the driver's rings ([`KernelCq::create`] does the command).
    fn create_cq(
        &self,
        context: &KernelContext,
        depth: u32,
        channel: Option<Arc<dyn ChannelOps>>,
        comp_vector: u32,
    ) -> Result<Arc<dyn CqOps>>;

    /// CREATE_QP with the driver's rings ([`KernelQp::create`] does the command). The QP must
    /// return its [`KernelQp`] from `as_any`.
    fn create_qp(
        &self,
        pd: &KernelPd,
        init: &QpInitAttributes,
        send_cq: Arc<dyn CqOps>,
        recv_cq: Arc<dyn CqOps>,
    ) -> Result<Box<dyn QpOps>>;

    /// Driver data of MODIFY_SRQ (rxe requires 8 bytes: `rxe_modify_srq_cmd`, whose ring
    /// address the kernel reads only when the size changes, which the verbs layer never asks;
    /// it stays 0).
    fn modify_srq_data(&self) -> DriverData {
        DriverData::none()
    }

    /// CREATE_SRQ with the driver's ring ([`KernelSrq::create`] does the command). The
    /// default: the driver has none.
    fn create_srq(&self, pd: &KernelPd, init: &SrqInitAttributes) -> Result<Arc<dyn SrqOps>> {
        let _ = init;
        Err(unsupported_srq(pd))
    }

    /// CREATE_QP on a shared receive queue ([`KernelQp::create_with_srq`] does the command);
    /// the QP must return its [`KernelQp`] from `as_any`. The default: the driver has none.
    fn create_qp_with_srq(
        &self,
        pd: &KernelPd,
        init: &QpInitAttributes,
        send_cq: Arc<dyn CqOps>,
        recv_cq: Arc<dyn CqOps>,
        srq: Arc<dyn SrqOps>,
    ) -> Result<Box<dyn QpOps>> {
        let _ = (init, send_cq, recv_cq, srq);
        Err(unsupported_srq(pd))
    }
}

fn unsupported_srq(pd: &KernelPd) -> crate::Error {
    crate::Error::Unsupported {
        device: pd.context().device_info().name.clone(),
        operation: "shared receive queues (this kernel driver's provider has none)".into(),
    }
}
