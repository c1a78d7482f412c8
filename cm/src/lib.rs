//! # rdmasock-cm
//!
//! The RDMA connection manager over `/dev/infiniband/rdma_cm`, with no librdmacm: an
//! [`EventChannel`] (a pollable, non-blocking fd), [`CmId`]s in the TCP port space, every
//! [`CmEvent`], and the QP transitions the CM chooses (INIT_QP_ATTR → `QueuePair::modify`).
//!
//! A non-blocking core (each command returns at once, its result arrives as an event) with
//! blocking helpers on top:
//!
//! ```no_run
//! use rdmasock_cm::{CmId, ConnectionParameters, EventChannel};
//! use std::time::Duration;
//! # fn main() -> Result<(), rdmasock_cm::Error> {
//! let channel = EventChannel::open()?;
//! let id = CmId::new(&channel)?;
//! let t = Duration::from_secs(2);
//! id.resolve(None, "10.99.0.2:7471".parse().unwrap(), t)?;
//! println!("on {}", id.device()?.name);
//! let param = ConnectionParameters { private_data: b"hello".to_vec(), ..Default::default() };
//! let reply = id.connect_blocking(None, &param, t)?;
//! println!("peer QP {}", reply.qp_num);
//! id.disconnect_blocking(None, t)?;
//! # Ok(()) }
//! ```
//!
//! [`manager`] holds the seam every connection manager implements ([`ConnectionManager`],
//! [`CmEndpoint`], [`CmListener`]) and the kernel's implementation of it ([`KernelCm`]).
//!
//! Resource cleanup: a [`CmId`] is destroyed on drop (errors ignored; [`CmId::destroy`]
//! returns them); the channel's fd closes with its last clone and last id. QPs are never
//! destroyed by this crate.
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

mod blocking;
pub mod channel;
mod device;
pub mod error;
pub mod event;
pub mod id;
pub mod manager;
pub mod qp;
mod sys;

pub use channel::EventChannel;
pub use error::{Error, Result};
pub use event::{
    ChannelEvent, CmEvent, CmIdToken, ConnectRequest, ConnectionParameters, RejectReason,
};
pub use id::{AddressInfo, CmId, RouteInfo};
pub use manager::{
    CmEndpoint, CmListener, CmNotice, ConnectionManager, IncomingRequest, KernelCm, Resolving,
};
