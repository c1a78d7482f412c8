//! [`Context`] (an open device) and [`ProtectionDomain`].

use super::{CompletionChannel, CompletionQueue, MemoryRegion, QueuePair, SharedReceiveQueue};
use crate::attr::{DeviceAttributes, PortAttributes};
use crate::device::DeviceInfo;
use crate::error::{Error, Result};
use crate::event::AsyncEvent;
use crate::memory::{AccessFlags, RegisteredMemory};
use crate::provider::{ContextOps, PdOps, ProviderRegistry};
use crate::qp_attr::{QpInitAttributes, SrqInitAttributes};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

/// An open RDMA device: the root every other object hangs from.
///
/// Cheap to clone; the device is closed when the last clone and every object made from it
/// are gone.
#[derive(Clone, Debug)]
pub struct Context {
    ops: Arc<dyn ContextOps>,
}

impl Context {
    /// Opens `device` with the first provider of `registry` that drives it.
    pub fn open(device: &DeviceInfo, registry: &ProviderRegistry) -> Result<Context> {
        crate::fork::note_owner();
        let provider = registry.find(device)?;
        Ok(Context {
            ops: provider.open(device)?,
        })
    }

    /// Wraps a provider's context.
    pub fn from_ops(ops: Arc<dyn ContextOps>) -> Context {
        Context { ops }
    }

    /// The provider's context object.
    pub fn ops(&self) -> &Arc<dyn ContextOps> {
        &self.ops
    }

    /// The device.
    pub fn device(&self) -> &DeviceInfo {
        self.ops.device()
    }

    /// Whether queue pairs of this device send large inline payloads from the caller's memory
    /// (see [`crate::QueuePair::lends_inline`]): then a queue pair may ask for a large
    /// `max_inline_data`.
    pub fn lends_inline(&self) -> bool {
        self.ops.lends_inline()
    }

    /// Whether the device may read an unsignalled send's memory after a later completion
    /// (siw; see [`crate::provider::ContextOps::unsignaled_sends_borrow_memory`]): then
    /// every send must be signalled before its memory is reused.
    pub fn unsignaled_sends_borrow_memory(&self) -> bool {
        self.ops.unsignaled_sends_borrow_memory()
    }

    /// The provider's name (`rxe`, `siw`, `uiwarp`, ...).
    pub fn provider_name(&self) -> &'static str {
        self.ops.provider_name()
    }

    /// What the device can do.
    pub fn query_device(&self) -> Result<DeviceAttributes> {
        self.ops.query_device()
    }

    /// A port's attributes (1-based).
    pub fn query_port(&self, port: u8) -> Result<PortAttributes> {
        if port == 0 {
            return Err(Error::InvalidArgument(
                "port numbers start at 1".to_string(),
            ));
        }
        self.ops.query_port(port)
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        Ok(ProtectionDomain {
            ops: self.ops.alloc_pd()?,
            context: self.clone(),
        })
    }

    /// Creates a completion channel (a pollable fd for CQ events).
    pub fn create_comp_channel(&self) -> Result<CompletionChannel> {
        Ok(CompletionChannel::new(self.ops.create_comp_channel()?))
    }

    /// Creates a completion queue with at least `depth` entries, optionally reporting to
    /// `channel` when armed with [`CompletionQueue::req_notify`].
    pub fn create_cq(
        &self,
        depth: u32,
        channel: Option<&CompletionChannel>,
    ) -> Result<CompletionQueue> {
        if depth == 0 {
            return Err(Error::InvalidArgument(
                "a completion queue needs at least one entry".into(),
            ));
        }
        let ops = self
            .ops
            .create_cq(depth, channel.map(|c| c.ops().clone()), 0)?;
        Ok(CompletionQueue::new(ops, channel.cloned()))
    }

    /// Reads one async event without blocking (port up/down, QP fatal, ...).
    pub fn read_async_event(&self) -> Result<Option<AsyncEvent>> {
        self.ops.read_async_event()
    }
}

impl AsFd for Context {
    /// The async event fd: readable when [`Context::read_async_event`] has an event.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.ops.async_fd()
    }
}

/// A protection domain: memory regions and queue pairs of one domain may work together.
#[derive(Clone, Debug)]
pub struct ProtectionDomain {
    ops: Arc<dyn PdOps>,
    context: Context,
}

impl ProtectionDomain {
    /// The provider's object.
    pub fn ops(&self) -> &Arc<dyn PdOps> {
        &self.ops
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// Allocates `len` zeroed, page-aligned bytes and registers them.
    pub fn register(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        self.register_memory(RegisteredMemory::allocate(len)?, access)
    }

    /// Registers memory described by a [`RegisteredMemory`] (owned, or caller memory made with
    /// the `unsafe` [`RegisteredMemory::from_raw`]).
    pub fn register_memory(
        &self,
        memory: RegisteredMemory,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(Error::InvalidArgument(
                "REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE too (the verbs spec requires it)"
                    .into(),
            ));
        }
        let memory = Arc::new(memory);
        let len = memory.len();
        let ops = self
            .ops
            .reg_mr(memory.clone(), access)
            .map_err(|e| memlock_error(e, len))?;
        Ok(MemoryRegion::new(ops, memory, access, self.clone()))
    }

    /// Creates a reliable-connected queue pair.
    pub fn create_qp(
        &self,
        init: &QpInitAttributes,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
    ) -> Result<QueuePair> {
        let ops = self
            .ops
            .create_qp(init, send_cq.ops().clone(), recv_cq.ops().clone())?;
        Ok(QueuePair::new(ops, self.context.clone(), init.sq_sig_all))
    }

    /// Creates a shared receive queue (CREATE_SRQ). Devices without them (`max_srq = 0`)
    /// get [`Error::Unsupported`]; sizes beyond the device's `max_srq_wr`/`max_srq_sge` get
    /// an error naming the limit.
    pub fn create_srq(&self, init: &SrqInitAttributes) -> Result<SharedReceiveQueue> {
        let device = &self.context.device().name;
        let attr = self.context.query_device()?;
        if attr.max_srq == 0 {
            return Err(Error::Unsupported {
                device: device.clone(),
                operation: "shared receive queues (the device reports max_srq = 0)".into(),
            });
        }
        if init.max_wr == 0 || init.max_wr > attr.max_srq_wr || init.max_sge > attr.max_srq_sge {
            return Err(Error::InvalidArgument(format!(
                "a shared receive queue of {} receives with {} scatter/gather entries on {device}: \
                 the device allows 1..={} receives and at most {} entries",
                init.max_wr, init.max_sge, attr.max_srq_wr, attr.max_srq_sge
            )));
        }
        if init.limit > init.max_wr {
            return Err(Error::InvalidArgument(format!(
                "a shared receive queue's limit ({}) cannot exceed its size ({})",
                init.limit, init.max_wr
            )));
        }
        let ops = self.ops.create_srq(init)?;
        Ok(SharedReceiveQueue::new(ops, self.context.clone()))
    }

    /// Creates a reliable-connected queue pair whose receives come from `srq` (which it keeps
    /// alive); `init.caps.max_recv_wr` and `max_recv_sge` are ignored.
    pub fn create_qp_with_srq(
        &self,
        init: &QpInitAttributes,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        srq: &SharedReceiveQueue,
    ) -> Result<QueuePair> {
        let mut init = *init;
        init.caps.max_recv_wr = 0;
        init.caps.max_recv_sge = 0;
        let ops = self.ops.create_qp_with_srq(
            &init,
            send_cq.ops().clone(),
            recv_cq.ops().clone(),
            srq.ops().clone(),
        )?;
        Ok(QueuePair::new(ops, self.context.clone(), init.sq_sig_all))
    }
}

/// Turns ENOMEM from a registration into the memlock explanation when the limit is the cause.
fn memlock_error(e: Error, requested: usize) -> Error {
    let enomem =
        matches!(&e, Error::Kernel { source, .. } if source.raw_os_error() == Some(libc::ENOMEM));
    if !enomem {
        return e;
    }
    match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK) {
        Ok((soft, _)) if soft != libc::RLIM_INFINITY => Error::MemlockLimit {
            requested,
            limit: format!("{soft} bytes"),
        },
        _ => e,
    }
}
