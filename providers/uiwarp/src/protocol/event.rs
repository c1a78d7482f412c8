//! What a connection reports besides completions.

use super::config::{Negotiated, Rtr};
use crate::wire::rdmap::TerminateCode;

/// A connection event, in the order it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Responder: an MPA Request arrived; call `accept` or `reject`.
    ConnectRequest(ConnectRequest),
    /// The connection is established: work requests flow.
    Established(Established),
    /// Initiator: the responder rejected the connection (MPA Reply with R set).
    Rejected {
        /// The responder's private data.
        private_data: Vec<u8>,
    },
    /// A TERMINATE was sent (we found the error) or received (the peer did). The QP is in
    /// the error state and its work requests are flushed.
    Terminated(Termination),
    /// The connection is over; the driver closes the TCP socket once the transmit bytes are
    /// written (see `Connection::should_close`).
    Closed(CloseReason),
}

/// The contents of an MPA Request, for the application to judge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectRequest {
    /// The initiator's private data (without the IRD/ORD block).
    pub private_data: Vec<u8>,
    /// The MPA revision the initiator asked for.
    pub revision: u8,
    /// The initiator asked for CRC.
    pub crc: bool,
    /// The initiator's IRD, if it sent the enhanced block.
    pub ird: Option<u16>,
    /// The initiator's ORD, if it sent the enhanced block.
    pub ord: Option<u16>,
    /// The initiator asked for peer-to-peer mode.
    pub peer_to_peer: bool,
}

/// What an established connection settled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Established {
    /// The peer's private data (from its request or reply).
    pub private_data: Vec<u8>,
    /// The negotiated parameters.
    pub negotiated: Negotiated,
}

impl Established {
    /// The ready-to-receive operation used, if any.
    pub fn rtr(&self) -> Option<Rtr> {
        self.negotiated.rtr
    }
}

/// Which side found the error.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// We did, and sent the TERMINATE.
    Local,
    /// The peer did; we received its TERMINATE.
    Remote,
}

/// A TERMINATE, sent or received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Termination {
    /// Who found the error.
    pub origin: Origin,
    /// Layer, type and code.
    pub code: TerminateCode,
    /// What happened, in words.
    pub reason: String,
}

/// Why a connection ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// The peer closed TCP (FIN).
    PeerClosed,
    /// The peer reset TCP, or the stream failed.
    PeerReset,
    /// TCP ended in the middle of a frame.
    PeerClosedMidFrame,
    /// The MPA Request or Reply did not come in time.
    HandshakeTimeout,
    /// We closed it (`Connection::close`).
    LocalClose,
    /// The connection was rejected (either way).
    Rejected,
    /// A TERMINATE ended it.
    Terminated,
}
