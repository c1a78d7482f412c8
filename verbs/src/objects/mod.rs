//! The verbs objects a program holds: [`Context`], [`ProtectionDomain`], [`MemoryRegion`],
//! [`CompletionChannel`], [`CompletionQueue`], [`QueuePair`], [`SharedReceiveQueue`]. Each wraps the provider's object
//! and adds what is the same for every provider: argument checks, typed state transitions,
//! error messages.
#![forbid(unsafe_code)]

mod context;
mod cq;
mod mr;
mod qp;
mod srq;

pub use crate::event::{AsyncEvent, AsyncEventKind};
pub use context::{Context, ProtectionDomain};
pub use cq::{CompletionChannel, CompletionQueue};
pub use mr::MemoryRegion;
pub use qp::QueuePair;
pub use srq::SharedReceiveQueue;
