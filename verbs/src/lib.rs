//! # rdmasock-verbs
//!
//! The verbs layer of rdmasock: RDMA devices, contexts, protection domains, memory regions,
//! completion channels and queues, and reliable-connected queue pairs, spoken directly to the
//! kernel's `/dev/infiniband/uverbsN` (legacy write ABI, ioctl, mmap) with no libibverbs.
//!
//! The objects in this crate are provider-neutral: each device is driven by a [`Provider`]
//! (the data path of one device kind: rxe, siw, the userspace iWARP engine, a bridge to
//! rdma-core). Kernel-backed providers share the uverbs control path in [`kernel`].
//!
//! The path a first program walks:
//!
//! ```text
//! DeviceList::discover() -> Context::open() -> ProtectionDomain -> MemoryRegion
//!     -> CompletionQueue -> QueuePair (RESET -> INIT -> RTR -> RTS)
//!     -> post_send / post_recv -> poll completions
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod attr;
pub mod device;
pub mod environment;
pub mod error;
mod event;
pub mod fork;
pub mod kernel;
pub mod memory;
pub mod objects;
pub mod provider;
pub mod qp_attr;
#[allow(unsafe_code)]
mod sys;
pub mod tcp;
pub mod types;
pub mod wc;
pub mod wr;

/// Not part of the API: the few binding types and helpers the sibling crates of this
/// workspace (the rxe and siw providers, the connection manager) share with this one. It may
/// change in any release; every item in it is still sound to call from safe code.
#[doc(hidden)]
pub mod __private {
    pub use crate::sys::abi::WorkCompletionDesc;
    pub use crate::sys::abi_qp::{AhAttrDesc, GlobalRouteDesc, QpAttrDesc, QpDest};
    pub use crate::sys::mmap::SharedMapping;
    pub use crate::sys::pod::{as_bytes, from_bytes, Pod};
    pub use crate::sys::sge::gather;
}

pub use attr::{
    CqModerationCaps, DeviceAttributes, ExtendedDeviceAttributes, OdpCaps, PacketPacingCaps,
    PortAttributes, RssCaps, TagMatchingCaps, TsoCaps,
};
pub use device::{
    DeviceInfo, DeviceList, GidEntry, GidTable, GidType, NodeType, PortInfo, Transport,
};
pub use error::{Error, Result};
pub use fork::{fork_safety, in_forked_child, ForkSafety};
pub use memory::{send_pieces, AccessFlags, HugePages, Pages, RegisteredMemory, SendPiece};
pub use objects::{
    AsyncEvent, AsyncEventKind, CompletionChannel, CompletionQueue, Context, MemoryRegion,
    ProtectionDomain, QueuePair, SharedReceiveQueue,
};
pub use provider::{InputEdge, Provider, ProviderRegistry};
pub use qp_attr::{
    InitAttributes, QpAttributes, QpCapabilities, QpInitAttributes, RtrAttributes, RtsAttributes,
    SrqCapabilities, SrqInitAttributes,
};
pub use tcp::{tcp_progress, TcpProgress};
pub use types::{Gid, Lid, LocalKey, Mtu, PortState, Psn, QpNumber, QpState, RemoteKey};
pub use wc::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
pub use wr::{RecvRequest, ScatterGather, SendFlags, SendOp, SendRequest};
