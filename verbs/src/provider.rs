//! The provider interface: the one seam every device kind plugs into.
//!
//! A provider is the data path (and, for non-kernel devices, also the control path) of one
//! kind of device. Kernel soft devices (rxe, siw) build on [`crate::kernel`], the shared
//! uverbs control path, and add their mmap'd rings; the userspace iWARP engine implements
//! everything itself; a bridge to rdma-core would forward to libibverbs. Nothing above the
//! provider layer knows which one runs: [`crate::Context`] and the objects it creates hold
//! these trait objects.
//!
//! Objects are destroyed when their last handle drops. Implementations keep what they depend
//! on alive (a QP holds its CQs and PD, every object holds its context), so drop order is
//! never the user's problem.
#![forbid(unsafe_code)]

use crate::attr::{DeviceAttributes, PortAttributes};
use crate::device::DeviceInfo;
use crate::error::Result;
use crate::event::AsyncEvent;
use crate::memory::{AccessFlags, RegisteredMemory};
use crate::qp_attr::{
    QpAttrMask, QpAttributes, QpCapabilities, QpInitAttributes, SrqCapabilities, SrqInitAttributes,
};
use crate::types::{LocalKey, QpNumber, RemoteKey};
use crate::wc::WorkCompletion;
use crate::wr::{PostError, RecvRequest, SendRequest};
use std::any::Any;
use std::fmt::Debug;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

/// A device kind's implementation.
pub trait Provider: Send + Sync + Debug + 'static {
    /// Short name: `rxe`, `siw`, `uiwarp`, `ibverbs`.
    fn name(&self) -> &'static str;
    /// Whether this provider drives `device` (by its driver name).
    fn matches(&self, device: &DeviceInfo) -> bool;
    /// Opens a context on the device.
    fn open(&self, device: &DeviceInfo) -> Result<Arc<dyn ContextOps>>;
}

/// An open device.
pub trait ContextOps: Send + Sync + Debug {
    /// The device this context is on.
    fn device(&self) -> &DeviceInfo;
    /// The provider's name.
    fn provider_name(&self) -> &'static str;
    /// QUERY_DEVICE.
    fn query_device(&self) -> Result<DeviceAttributes>;
    /// QUERY_PORT (1-based).
    fn query_port(&self, port: u8) -> Result<PortAttributes>;
    /// ALLOC_PD.
    fn alloc_pd(&self) -> Result<Arc<dyn PdOps>>;
    /// CREATE_COMP_CHANNEL.
    fn create_comp_channel(&self) -> Result<Arc<dyn ChannelOps>>;
    /// CREATE_CQ with at least `depth` entries, reporting to `channel` when armed.
    fn create_cq(
        &self,
        depth: u32,
        channel: Option<Arc<dyn ChannelOps>>,
        comp_vector: u32,
    ) -> Result<Arc<dyn CqOps>>;
    /// The async event file descriptor (readable when [`ContextOps::read_async_event`] has one).
    fn async_fd(&self) -> BorrowedFd<'_>;
    /// Reads one async event without blocking; `Ok(None)` when there is none. The provider
    /// acknowledges the event itself.
    fn read_async_event(&self) -> Result<Option<AsyncEvent>>;
    /// The completion vectors the device offers (GET_CONTEXT's `num_comp_vectors`);
    /// `None` where there is no such notion (a userspace device).
    fn num_comp_vectors(&self) -> Option<u32> {
        None
    }
    /// Whether this device's queue pairs lend inline sends (see [`QpOps::lends_inline`]), so
    /// that asking for a large `max_inline_data` pays.
    fn lends_inline(&self) -> bool {
        false
    }
    /// Whether the device may still read the memory of an unsignalled send after a later
    /// request's completion: siw sends an unsignalled request of a page or more straight
    /// from the caller's pages (zero copy), and its completions mean only that TCP took the
    /// bytes, which TCP may send again from those pages until the peer acknowledges them.
    /// Where this holds, a caller that reuses send memory once completions retire it must
    /// signal every request (then siw copies).
    fn unsignaled_sends_borrow_memory(&self) -> bool {
        false
    }
    /// For downcasting by providers that need their own concrete type back.
    fn as_any(&self) -> &dyn Any;
}

/// A protection domain.
pub trait PdOps: Send + Sync + Debug {
    /// REG_MR over `memory` (kept alive by the region).
    fn reg_mr(&self, memory: Arc<RegisteredMemory>, access: AccessFlags) -> Result<Box<dyn MrOps>>;
    /// CREATE_QP (RC). The QP keeps `send_cq` and `recv_cq` alive.
    fn create_qp(
        &self,
        init: &QpInitAttributes,
        send_cq: Arc<dyn CqOps>,
        recv_cq: Arc<dyn CqOps>,
    ) -> Result<Box<dyn QpOps>>;
    /// CREATE_SRQ: a shared receive queue in this domain. The default: the provider has none.
    fn create_srq(&self, init: &SrqInitAttributes) -> Result<Arc<dyn SrqOps>> {
        let _ = init;
        Err(no_srq())
    }
    /// CREATE_QP (RC) whose receives come from `srq` (kept alive by the QP) instead of a
    /// receive queue of its own; `init.caps.max_recv_wr` and `max_recv_sge` are ignored. The
    /// default: the provider has no shared receive queues.
    fn create_qp_with_srq(
        &self,
        init: &QpInitAttributes,
        send_cq: Arc<dyn CqOps>,
        recv_cq: Arc<dyn CqOps>,
        srq: Arc<dyn SrqOps>,
    ) -> Result<Box<dyn QpOps>> {
        let _ = (init, send_cq, recv_cq, srq);
        Err(no_srq())
    }
    /// For downcasting.
    fn as_any(&self) -> &dyn Any;
}

/// The error of a provider without shared receive queues.
fn no_srq() -> crate::Error {
    crate::Error::Unsupported {
        device: "this provider".into(),
        operation: "shared receive queues (the device reports max_srq = 0 or the provider \
                    does not implement them); use a receive queue per queue pair"
            .into(),
    }
}

/// A shared receive queue: receives posted here serve every queue pair created on it, and
/// each consumed one completes on the completion queue of the queue pair that took it.
pub trait SrqOps: Send + Sync + Debug {
    /// What the queue actually got.
    fn caps(&self) -> SrqCapabilities;
    /// The value async events (SRQ limit reached, SRQ error) carry for this queue.
    fn cookie(&self) -> u64;
    /// Posts a chained list of receive requests, in order.
    fn post_recv(&self, wrs: &[RecvRequest<'_>]) -> std::result::Result<(), PostError>;
    /// MODIFY_SRQ of the limit: once fewer than `limit` receives are posted, the device
    /// reports one SRQ limit event and disarms (0 disarms now).
    fn set_limit(&self, limit: u32) -> Result<()>;
    /// QUERY_SRQ's limit: the armed limit, 0 when it was never armed; once it fired, rxe
    /// reports 0 and siw the value it was armed with.
    fn query_limit(&self) -> Result<u32>;
    /// For downcasting (a provider's QP needs its own SRQ type back).
    fn as_any(&self) -> &dyn Any;
}

/// A registered memory region; dropping it deregisters.
pub trait MrOps: Send + Sync + Debug {
    /// The local key.
    fn lkey(&self) -> LocalKey;
    /// The remote key.
    fn rkey(&self) -> RemoteKey;
}

/// What the holder of a completion channel's input watch saw on the watched fd (see
/// [`ChannelOps::get_event_watched`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputEdge {
    /// An edge since the last read: read the input.
    Seen,
    /// No edge since the input was last read to its end: the input holds nothing new.
    None,
}

/// A completion channel.
pub trait ChannelOps: Send + Sync + Debug {
    /// Readable when a completion event is waiting.
    fn fd(&self) -> BorrowedFd<'_>;
    /// Takes one event without blocking: the cookie of the CQ it is for
    /// ([`CqOps::cookie`]), or `None` when there is none.
    fn get_event(&self) -> Result<Option<u64>>;
    /// [`get_event`](Self::get_event) for the holder of a [`watch_input`](Self::watch_input)
    /// watch that waits on the watched fd with edge-triggered readiness (an async runtime),
    /// as `input` says: [`InputEdge::Seen`], an edge woke it (the provider may stop reading at
    /// a read that did not fill its buffer: later bytes raise a new edge, and the end of the
    /// input shows in the holder's readiness); [`InputEdge::None`], no edge came since the
    /// holder last read the input this way (the provider need not read it at all). The
    /// default ignores `input`.
    fn get_event_watched(&self, input: InputEdge) -> Result<Option<u64>> {
        let _ = input;
        self.get_event()
    }
    /// Makes the channel's fd blocking (rdma-core's default) or non-blocking (ours). Providers
    /// whose channel cannot block in read(2) keep the default: an `Unsupported` error.
    fn set_blocking(&self, blocking: bool) -> Result<()> {
        let _ = blocking;
        Err(crate::error::Error::InvalidArgument(
            "this provider's completion channel cannot block in read(2); \
             CompletionChannel::wait polls its non-blocking fd instead"
                .into(),
        ))
    }
    /// On a blocking channel: waits for one event in read(2) and returns its cookie. `None`:
    /// the channel is non-blocking, the caller polls the fd instead (the default).
    fn wait_blocking(&self) -> Result<Option<u64>> {
        Ok(None)
    }
    /// Whether [`get_event`](Self::get_event) itself moves the data that raises events (a
    /// userspace provider reading its sockets), so that a thread woken on the channel should
    /// take its events before polling the queues. `false` (the default): the kernel raised
    /// the event, and reading it first would only cost a system call.
    fn events_make_progress(&self) -> bool {
        false
    }
    /// Whether [`wake`](Self::wake) works on this channel. `false` (the default): a thread
    /// that sleeps on the channel and must be woken by another needs a wake fd of its own.
    fn can_wake(&self) -> bool {
        false
    }
    /// Makes the channel's fd readable with no event, to wake a thread that sleeps on it,
    /// until [`take_wake`](Self::take_wake) (taking events leaves it). Does nothing where
    /// [`can_wake`](Self::can_wake) is `false` (the default).
    fn wake(&self) {}
    /// Takes back what [`wake`](Self::wake) raised (the woken thread calls it).
    fn take_wake(&self) {}
    /// For a thread about to sleep on the channel: the fd whose input raises its events (the
    /// socket of the one queue pair a userspace provider's channel serves), for the thread to
    /// poll beside [`fd`](Self::fd) and take the bytes itself once woken. While the returned
    /// watch lives, the provider leaves arrivals on that fd to its holder and does not raise
    /// the channel for them; dropping it (after taking the events, so that bytes the holder
    /// reads wake nobody else) hands them back, and bytes that came in between are not lost.
    /// `None` (the default): the channel serves several queue pairs, or the kernel raises
    /// its events. The watch owns what it needs (it may outlive this borrow): an async
    /// runtime holds it while a task waits on the channel.
    fn watch_input(&self) -> Option<Box<dyn AsFd + Send>> {
        None
    }
    /// For downcasting.
    fn as_any(&self) -> &dyn Any;
}

/// A completion queue.
pub trait CqOps: Send + Sync + Debug {
    /// Moves up to `out.len()` completions into `out`; returns how many.
    fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize>;
    /// Arms the CQ: the next completion (or the next solicited one) raises one channel event.
    fn req_notify(&self, solicited_only: bool) -> Result<()>;
    /// Acknowledges `n` events taken from the channel for this CQ.
    fn ack_events(&self, n: u32);
    /// The number of entries it holds.
    fn depth(&self) -> u32;
    /// The value channel events carry for this CQ.
    fn cookie(&self) -> u64;
    /// For downcasting (a provider's QP needs its own CQ type back).
    fn as_any(&self) -> &dyn Any;
}

/// A reliable-connected queue pair.
pub trait QpOps: Send + Sync + Debug {
    /// Its number.
    fn qp_num(&self) -> QpNumber;
    /// What the queues actually got.
    fn caps(&self) -> QpCapabilities;
    /// MODIFY_QP. The caller ([`crate::QueuePair`]) has already checked required attributes.
    fn modify(&self, attr: &QpAttributes, mask: QpAttrMask) -> Result<()>;
    /// QUERY_QP.
    fn query(&self, mask: QpAttrMask) -> Result<QpAttributes>;
    /// Posts a chained list of send requests, in order.
    fn post_send(&self, wrs: &[SendRequest<'_>]) -> std::result::Result<(), PostError>;
    /// Posts a chained list of receive requests, in order.
    fn post_recv(&self, wrs: &[RecvRequest<'_>]) -> std::result::Result<(), PostError>;
    /// Whether inline sends of any length up to `caps().max_inline_data` go out from the
    /// caller's memory while `post_send` runs, with only what the transport could not take
    /// at once copied (the userspace provider); kernel providers copy inline data into the
    /// work queue entry, and only a few hundred bytes of it.
    fn lends_inline(&self) -> bool {
        false
    }
    /// Bytes of posted sends still waiting for the transport (a provider that writes to a
    /// socket, as the userspace one does, knows this; `None` where the hardware or kernel
    /// takes them). A hint: a sender may lend only while nothing waits, since waiting bytes
    /// will be copied anyway.
    fn send_backlog(&self) -> Option<usize> {
        None
    }
    /// Lets the provider hold back the transmission of sends posted in quick succession, to
    /// hand them to the transport together (`true`), or makes every post go out before
    /// `post_send` returns (`false`). Held sends go out at the latest when a thread polls or
    /// arms one of the QP's completion queues, or shortly after, and nothing is held while
    /// one of them is armed (the userspace provider: a system call per batch instead of per
    /// post). Returns whether the provider does this at all: kernel providers hand every
    /// post to the device at once, and ignore it.
    fn set_send_coalescing(&self, on: bool) -> bool {
        let _ = on;
        false
    }
    /// For downcasting (the connection manager needs a kernel QP's handle).
    fn as_any(&self) -> &dyn Any;
}

/// The providers a program can use, tried in order.
#[derive(Debug, Default, Clone)]
pub struct ProviderRegistry {
    providers: Vec<Arc<dyn Provider>>,
}

impl ProviderRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds a provider (later ones are tried after earlier ones).
    pub fn register(&mut self, provider: Arc<dyn Provider>) -> &mut Self {
        self.providers.push(provider);
        self
    }
    /// The providers, in order.
    pub fn providers(&self) -> &[Arc<dyn Provider>] {
        &self.providers
    }
    /// The provider for `device`, or an error naming its driver.
    pub fn find(&self, device: &DeviceInfo) -> Result<&Arc<dyn Provider>> {
        self.providers
            .iter()
            .find(|p| p.matches(device))
            .ok_or_else(|| crate::Error::NoProvider {
                device: device.name.clone(),
                driver: device.driver.clone().unwrap_or_else(|| "unknown".into()),
                known: self
                    .providers
                    .iter()
                    .map(|p| p.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}
