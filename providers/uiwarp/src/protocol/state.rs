//! The bookkeeping a connection keeps between calls: send slots, outstanding READs both
//! ways, the message being received, and how an error is charged.

use super::work::{LocalSegment, RecvWork};
use crate::wire::ddp::Opcode;
use crate::wire::rdmap::TerminateCode;
use rdmasock_verbs::{WcOpcode, WcStatus};

/// One posted send request, kept until it completes so completions come out in order.
#[derive(Clone, Debug)]
pub(crate) struct SqSlot {
    pub seq: u64,
    pub wr_id: u64,
    pub opcode: WcOpcode,
    pub signaled: bool,
    pub byte_len: u32,
    pub status: Option<WcStatus>,
    pub vendor_err: u32,
}

/// A READ we sent and whose response has not fully arrived.
#[derive(Clone, Debug)]
pub(crate) struct OutstandingRead {
    /// The send slot, or `None` for the peer-to-peer RTR.
    pub seq: Option<u64>,
    pub sink: Option<LocalSegment>,
    pub sink_stag: u32,
    pub sink_offset: u64,
    pub size: u32,
    pub received: u32,
}

/// A READ request from the peer, waiting for (or in) its response.
#[derive(Clone, Debug)]
pub(crate) struct InboundRead {
    pub sink_stag: u32,
    pub sink_offset: u64,
    pub size: u32,
    pub source_stag: u32,
    pub source_offset: u64,
}

/// The SEND being received.
#[derive(Clone, Debug)]
pub(crate) struct ReceiveProgress {
    pub work: RecvWork,
    pub received: u32,
}

/// The tagged message being received, for continuity checks.
#[derive(Copy, Clone, Debug)]
pub(crate) struct TaggedProgress {
    pub opcode: Opcode,
    pub stag: u32,
    pub next_offset: u64,
}

/// Who an error is charged to, beyond flushing everything.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Blame {
    None,
    /// The receive in progress (or, if none, nothing).
    Receive(WcStatus),
    /// The oldest outstanding READ (or, if none, the SEND or WRITE being transmitted).
    OldestRead(WcStatus),
    /// A given send request.
    Send(u64, WcStatus),
}

/// A protocol error found locally.
#[derive(Clone, Debug)]
pub(crate) struct Fault {
    pub code: TerminateCode,
    pub reason: String,
    /// ULPDU length and header copies for the TERMINATE.
    pub copy: Option<(u16, Vec<u8>, Option<Vec<u8>>)>,
    pub blame: Blame,
}

impl Fault {
    pub(crate) fn new(code: TerminateCode, reason: impl Into<String>) -> Fault {
        Fault {
            code,
            reason: reason.into(),
            copy: None,
            blame: Blame::None,
        }
    }
    pub(crate) fn blame(mut self, blame: Blame) -> Fault {
        self.blame = blame;
        self
    }
}
