//! The socket face: [`RdmaSocket`] and [`RdmaListener`], `std::net`'s `TcpStream` and
//! `TcpListener` over RDMA, speaking rsocket's stream protocol ([`crate::protocol`]).
//!
//! A connection is the stream engine plus the verbs objects it drives (memory regions, a
//! completion queue with a completion channel, an RC queue pair, on a device context and
//! protection domain that the process's connections on one device share)
//! and a connection-manager endpoint ([`ConnectionManager`], whichever the registry picks:
//! [`crate::connection_manager`]). Progress is made whenever a call comes in; blocking calls sleep in
//! poll(2) on the completion channel and the endpoint's event fd, sending keepalives while
//! they wait when enabled.
//!
//! With [`mio`], a socket registers two eventfds under its token: a readable event means a
//! read that returned `WouldBlock` can go on, a writable one that a write can (send-ring
//! space, a send-queue slot, a credit and a target buffer). A per-process thread waits on the
//! completion channels and rdma_cm fds of registered sockets, drains the completion queue,
//! re-arms it and drains it again, and raises those fds; every call also reports what its
//! own progress made possible before it returns. Edge-triggered as mio is: once a call returned `WouldBlock`, an event for that
//! direction follows when progress becomes possible (the first event after registering
//! reports what is possible already). A listener registers its rdma_cm fd, the fds of the
//! connections whose handshake still runs and a timer for their bounds: a readable event
//! means `accept` may go on.
//!
//! For other event loops each socket and listener has one readiness fd (`AsFd`), an epoll
//! instance over those same pieces: a socket's read eventfd and a write notice (raised when a
//! write that returned `WouldBlock` can go on, lowered by the next write call), a listener's
//! rdma_cm fd, handshake fds and a timer of its own; see the crate's documentation for what
//! readable means.
#![forbid(unsafe_code)]

mod answering;
mod call_wait;
mod census;
#[cfg(test)]
mod cm_disconnected_tests;
mod completions;
mod conn;
mod connecting;
mod data_path;
mod devices;
mod fd;
// The completion feed's fuzz entry point: built only for `cargo fuzz` (which sets
// `--cfg fuzzing`) and for the seeded smoke test that `tests/run.sh` builds the same way.
#[cfg(fuzzing)]
pub mod fuzzing;
mod handshake;
#[cfg(test)]
mod hub_close_tests;
mod iomap;
mod lend;
mod listener;
mod options;
mod pool;
mod post;
mod rdma_socket;
mod readiness;
#[cfg(test)]
mod ready_fds_tests;
mod resources;
mod shared;
mod source;
mod srq;
mod vectored;
mod wait;
mod warm;
#[cfg(test)]
mod wrapped_cm;
mod zero_copy;

pub use crate::cm::{
    CmEndpoint, CmListener, CmNotice, ConnectionManager, IncomingRequest, Resolving,
};
pub(crate) use census::Entry as CensusEntry;
pub use census::{census, Census};
pub use connecting::Connecting;
pub use devices::open_device_contexts;
pub(crate) use devices::OpenDevice;
pub use iomap::MappedWindow;
pub use listener::{Incoming, RdmaListener};
pub use options::{
    SocketOptions, SocketOptionsBuilder, DEFAULT_RING_MIN, RING_IDLE, UNPINNED_RING,
    UNPINNED_SIGNAL_INTERVAL,
};
pub use rdma_socket::RdmaSocket;
#[cfg(feature = "tokio")]
pub(crate) use shared::Shared;
pub use wait::WaitStats;
#[cfg(feature = "tokio")]
pub(crate) use zero_copy::bounds;
pub use zero_copy::{CompletedWrite, Refused};
