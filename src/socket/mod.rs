//! The socket face: [`RdmaSocket`] and [`RdmaListener`], `std::net`'s `TcpStream` and
//! `TcpListener` over RDMA, speaking rsocket's stream protocol ([`crate::stream`]).
//!
//! A connection is the stream engine plus the verbs objects it drives (context, protection
//! domain, memory regions, a completion queue with a completion channel, an RC queue pair)
//! and a connection-manager endpoint ([`ConnectionManager`]; the kernel's rdma_cm through
//! [`KernelCm`] today). Progress is made whenever a call comes in; blocking calls sleep in
//! poll(2) on the completion channel and the endpoint's event fd, sending keepalives while
//! they wait when enabled.
//!
//! With [`mio`], a socket registers its completion channel, its rdma_cm fd and an internal
//! eventfd under one token. Events arrive flagged readable whichever direction became
//! possible: on any event for the token, retry both reads and writes until `WouldBlock`.
//! Before a call returns `WouldBlock` the completion queue is re-armed and polled once more,
//! so an event always follows once progress is possible.
#![forbid(unsafe_code)]

mod cm;
mod conn;
mod listener;
mod options;
mod shared;
mod source;
mod stream;
mod uiwarp;

pub use cm::{CmEndpoint, CmListener, CmNotice, ConnectionManager, IncomingRequest, KernelCm};
pub use listener::{Incoming, RdmaListener};
pub use options::{SocketOptions, SocketOptionsBuilder};
pub use stream::RdmaSocket;
pub use uiwarp::{AutoCm, UiwarpCm};
