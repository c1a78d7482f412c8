//! # rdmasock-cm
//!
//! The RDMA connection manager over `/dev/infiniband/rdma_cm`.
#![deny(missing_docs)]
