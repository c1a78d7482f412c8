//! # rdmasock-cm
//!
//! The RDMA connection manager over `/dev/infiniband/rdma_cm`, with no librdmacm.
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod sys;
