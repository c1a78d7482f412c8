//! Everything `unsafe` of the connection-manager layer: the `#[repr(C)]` structs of the
//! `/dev/infiniband/rdma_cm` write ABI (`rdma_user_cm.h`; docs/kernel-abi.md#rdma_cm), and the one
//! place that hands the kernel a command with a response pointer in it ([`fd::CmFd`]).
//!
//! The contract this module gives the safe layers above:
//!
//! * [`fd::CmFd`] owns one open `rdma_cm` file (one event channel), always `O_NONBLOCK`;
//! * every command is a method taking plain values and returning plain values (`io::Result`
//!   with the errno intact); no pointer ever leaves this module;
//! * [`sockaddr`] converts `SocketAddr` to and from the kernel's address slots.
//!
//! INIT_QP_ATTR's answer (`ib_uverbs_qp_attr`) is the verbs layer's `QpAttrDesc`, turned into
//! `QpAttributes` by `rdmasock_verbs::kernel::attributes_from_cm`.
#![allow(unsafe_code)]

pub(crate) mod abi;
pub(crate) mod fd;
#[cfg(test)]
mod layout_tests;
pub(crate) mod sockaddr;

/// The workspace's one plain-old-data trait (its contract: `#[repr(C)]`, integers and arrays
/// of integers, no padding, every byte of every value initialised), from the verbs layer.
pub(crate) use rdmasock_verbs::__private::Pod;
