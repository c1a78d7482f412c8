//! # rdmasock
//!
//! RDMA with the face of a socket.
#![deny(missing_docs)]

pub use rdmasock_verbs as verbs;
