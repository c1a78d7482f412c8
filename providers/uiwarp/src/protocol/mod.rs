//! The sans-IO iWARP engine: one [`Connection`] per TCP connection.
//!
//! A connection never touches a socket or reads a clock. The driver that owns it:
//! * feeds it what TCP delivered: [`Connection::handle_input`], and the end of the stream:
//!   [`Connection::handle_peer_closed`];
//! * writes out what [`Connection::poll_transmit`] appends, in order, and closes TCP once
//!   [`Connection::should_close`] says so and those bytes are written;
//! * calls [`Connection::handle_timeout`] at [`Connection::poll_timeout`] with its own clock;
//! * drains [`Connection::poll_event`] and [`Connection::poll_completion`];
//! * posts work with [`Connection::post_send`] and [`Connection::post_recv`];
//! * passes its table of memory registrations ([`MemoryTable`]) to every call that may touch
//!   memory, so nothing is borrowed across calls.
//!
//! What it implements: MPA revision 2 (RFC 5044 with RFC 6581) request/reply with private
//! data, IRD/ORD negotiation and peer-to-peer mode with the ready-to-receive operation; CRC32c
//! (requested by default, used when either side asks), no markers; DDP tagged and untagged
//! segments cut to [`Config::mulpdu`]; RDMAP SEND (with solicited event and invalidate),
//! RDMA WRITE, RDMA READ request and response, TERMINATE; and the verbs rules on top: STag
//! bounds and access checks, in-order completions, receive consumption, IRD/ORD limits, and
//! on any error a TERMINATE, the QP in the error state and every outstanding request flushed.
//!
//! It behaves as siw and iWARP NICs expect (reference: `wire.md`): the initiator sends nothing
//! after its request until the reply; the peer-to-peer responder sends nothing before the RTR;
//! without peer-to-peer the responder holds its first FPDU for [`Config::first_fpdu_delay`]
//! or until the peer's first FPDU; SEND and WRITE complete when handed to the driver; a READ
//! completes when its last response byte is placed; TERMINATEs are emitted in RFC order and
//! parsed in RFC or siw order.
#![forbid(unsafe_code)]

mod config;
mod connection;
mod event;
mod fast_receive;
mod handshake;
mod lean;
mod memory;
#[cfg(any(test, fuzzing))]
mod pair;
mod receive;
mod recv_queue;
mod segments;
mod state;
mod transmit;
mod txqueue;
mod work;

pub use config::{Config, Negotiated, Role, Rtr, MAX_READ_DEPTH, MIN_MULPDU};
pub use connection::Connection;
pub use event::{CloseReason, ConnectRequest, Established, Event, Origin, Termination};
pub use handshake::{MAX_USER_PRIVATE_DATA, SIW_MAX_USER_PRIVATE_DATA};
pub use lean::{InlineOperation, InlineSend};
pub use memory::{AccessError, MemoryTable, RegionTable, RegionView};
#[cfg(any(test, fuzzing))]
pub(crate) use pair::connected_pair;
pub use recv_queue::RecvQueue;
pub use segments::Segments;
pub use txqueue::TxQueue;
pub use work::{
    Completion, LocalSegment, RecvWork, SendOperation, SendWork, SmallPayload, WorkQueue,
    SMALL_PAYLOAD,
};

/// Why a call on a connection was refused. The connection is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// Private data longer than MPA allows.
    #[error("private data of {len} bytes is too long: MPA allows at most {max} (siw accepts at most 252)")]
    PrivateDataTooLong {
        /// The length given.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The call does not fit the connection's state.
    #[error("cannot {operation} while the connection is {state}")]
    InvalidState {
        /// What was asked.
        operation: &'static str,
        /// The state it is in.
        state: &'static str,
    },
    /// A work queue is full.
    #[error("the {queue} queue is full ({depth} requests outstanding); poll completions first")]
    QueueFull {
        /// Which queue.
        queue: &'static str,
        /// Its depth.
        depth: usize,
    },
    /// The request asks for something iWARP or this engine does not do.
    #[error("{operation} is not supported: {why}")]
    Unsupported {
        /// What was asked.
        operation: &'static str,
        /// Why not, and what to do instead.
        why: &'static str,
    },
}
