//! Every `unsafe` line of the bridge: the libibverbs ABI ([`abi`]), loading the library
//! (`library`) and owning handles to its objects (`objects`) whose methods are safe.
//!
//! The handles own one libibverbs object each and hold the handles of what it depends on
//! (a QP its PD and CQs, everything its context), so C objects are destroyed in a valid
//! order whatever order Rust drops them in. libibverbs objects may be used from any
//! thread: rdma-core's verbs and its providers lock internally where they need to.
#![allow(unsafe_code)]

pub mod abi;
pub(crate) mod library;
mod objects;

pub(crate) use library::{library, LoadError};
pub(crate) use objects::{list_devices, RawChannel, RawContext, RawCq, RawMr, RawPd, RawQp};
