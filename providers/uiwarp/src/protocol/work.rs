//! Work requests as the engine keeps them (owned, so a driver can queue them across calls),
//! and the completions it gives back.

use super::{ProtocolError, Segments};
use rdmasock_verbs::{
    LocalKey, RecvRequest, RemoteKey, SendFlags, SendOp, SendRequest, WorkCompletion,
};

/// One scatter/gather entry: `length` bytes at `addr` in the region `lkey` names.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LocalSegment {
    /// Address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The region's local key.
    pub lkey: LocalKey,
}

/// What a send work request does. iWARP (and siw) has no immediate data and no atomics.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SendOperation {
    /// A SEND, consuming one receive at the peer.
    Send {
        /// Raise a solicited event at the peer.
        solicited: bool,
        /// Ask the peer to invalidate this STag (SEND with invalidate).
        invalidate: Option<RemoteKey>,
    },
    /// An RDMA WRITE into the peer's region.
    RdmaWrite {
        /// The peer address (tagged offset).
        remote_addr: u64,
        /// The peer region's STag.
        rkey: RemoteKey,
    },
    /// An RDMA READ of the peer's region into one local segment (siw's `max_sge_rd` is 1).
    RdmaRead {
        /// The peer address (tagged offset).
        remote_addr: u64,
        /// The peer region's STag.
        rkey: RemoteKey,
    },
}

/// The most payload bytes a [`SmallPayload`] holds: enough for the socket layer's 4-byte
/// messages, small enough that a request still moves without a `memcpy` call (64 made every
/// move of a request a call, ~350 instructions a 4 KiB message).
pub const SMALL_PAYLOAD: usize = 16;

/// The payload of a small inline SEND or WRITE, held by the request itself: framed from here,
/// with no region to look up (the socket layer's 4-byte messages and small writes).
#[derive(Copy, Clone, PartialEq, Eq)]
pub struct SmallPayload {
    len: u8,
    bytes: [u8; SMALL_PAYLOAD],
}

impl SmallPayload {
    /// A copy of `bytes`, or `None` when they are longer than [`SMALL_PAYLOAD`].
    pub fn new(bytes: &[u8]) -> Option<SmallPayload> {
        let mut small = SmallPayload {
            len: u8::try_from(bytes.len()).ok()?,
            bytes: [0; SMALL_PAYLOAD],
        };
        small.bytes.get_mut(..bytes.len())?.copy_from_slice(bytes);
        Some(small)
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::fmt::Debug for SmallPayload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SmallPayload({:02x?})", self.as_slice())
    }
}

/// A send work request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendWork {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOperation,
    /// Gather list (SEND, WRITE) or the single scatter entry (READ); empty when `small`
    /// holds the payload.
    pub segments: Segments,
    /// The payload itself, for a small inline SEND or WRITE (instead of `segments`).
    pub small: Option<SmallPayload>,
    /// Give a completion on success too.
    pub signaled: bool,
    /// Wait until earlier READs have completed before starting.
    pub fence: bool,
}

impl SendWork {
    /// Converts a verbs send request. Immediate data and atomics are refused: iWARP has
    /// neither. `INLINE` is treated as a normal gather (the entries must be registered).
    pub fn from_request(req: &SendRequest<'_>) -> Result<SendWork, ProtocolError> {
        let solicited = req.flags.contains(SendFlags::SOLICITED);
        let op = match req.op {
            SendOp::Send => SendOperation::Send {
                solicited,
                invalidate: None,
            },
            SendOp::RdmaWrite { remote_addr, rkey } => SendOperation::RdmaWrite { remote_addr, rkey },
            SendOp::RdmaRead { remote_addr, rkey } => SendOperation::RdmaRead { remote_addr, rkey },
            other => {
                return Err(ProtocolError::Unsupported {
                    operation: other.name(),
                    why: "iWARP has no immediate data and no atomics (as siw); use SEND, RDMA_WRITE or RDMA_READ",
                })
            }
        };
        Ok(SendWork {
            wr_id: req.wr_id,
            op,
            segments: req
                .sg_list
                .iter()
                .map(|s| LocalSegment {
                    addr: s.addr(),
                    length: s.length(),
                    lkey: s.lkey(),
                })
                .collect(),
            small: None,
            signaled: req.flags.contains(SendFlags::SIGNALED),
            fence: req.flags.contains(SendFlags::FENCE),
        })
    }

    /// Total bytes of the payload.
    pub fn total_length(&self) -> u64 {
        match &self.small {
            Some(small) => small.as_slice().len() as u64,
            None => self.segments.iter().map(|s| u64::from(s.length)).sum(),
        }
    }
}

/// A receive work request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvWork {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where an incoming SEND is scattered.
    pub segments: Segments,
}

impl RecvWork {
    /// Converts a verbs receive request.
    pub fn from_request(req: &RecvRequest<'_>) -> RecvWork {
        RecvWork {
            wr_id: req.wr_id,
            segments: req
                .sg_list
                .iter()
                .map(|s| LocalSegment {
                    addr: s.addr(),
                    length: s.length(),
                    lkey: s.lkey(),
                })
                .collect(),
        }
    }

    /// Total bytes of the segments.
    pub fn capacity(&self) -> u64 {
        self.segments.iter().map(|s| u64::from(s.length)).sum()
    }
}

/// Which queue a completion belongs to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WorkQueue {
    /// The send queue.
    Send,
    /// The receive queue.
    Receive,
}

/// A work completion with the queue it came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The queue (and so the completion queue) it belongs to.
    pub queue: WorkQueue,
    /// The completion. Every status is meaningful: flushed requests carry
    /// `WorkRequestFlushError`, and a request that failed carries why.
    pub completion: WorkCompletion,
    /// A receive completion of a SEND with solicited event (wakes a solicited-only CQ arm).
    pub solicited: bool,
}
