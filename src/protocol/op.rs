//! What the engine asks the driver to do, and what the driver tells the engine.
#![forbid(unsafe_code)]

use super::msg::SGE_LEN;

/// The 64-bit work-request id the engine puts on every work request; the driver passes it back
/// unchanged with the completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WrId(pub u64);

const RECV_FLAG: u64 = 1 << 63;

impl WrId {
    pub(crate) fn recv(slot: u32) -> Self {
        WrId(RECV_FLAG | u64::from(slot))
    }
    pub(crate) fn send(seq: u64) -> Self {
        WrId(seq & !RECV_FLAG)
    }
    /// True for ids of posted receives (feed their completions to
    /// [`StreamEngine::on_receive`](super::StreamEngine::on_receive)).
    pub fn is_receive(self) -> bool {
        self.0 & RECV_FLAG != 0
    }
    /// The message slot of a receive id (write+send mode: which 4-byte slot the SEND landed
    /// in, at byte offset `slot * 4` of the message area).
    pub fn message_slot(self) -> u32 {
        self.0 as u32
    }
    pub(crate) fn seq(self) -> u64 {
        self.0 & !RECV_FLAG
    }
}

/// A byte range of one of the driver's registered areas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingSpan {
    /// Offset from the start of the area.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

/// Where the bytes of a work request come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// No bytes (a zero-length write or message).
    Empty,
    /// Bytes already in the send ring: one span, or two when the chunk wraps the ring end
    /// (post them as a two-entry scatter/gather list).
    SendRing {
        /// The first span.
        first: RingSpan,
        /// The wrapped remainder at the ring start, if any.
        second: Option<RingSpan>,
    },
    /// Bytes of the caller's registered buffer (a zero-copy write): post them from the
    /// buffer's registration on this connection's device, `offset..offset + len` of it.
    Registered {
        /// Offset in the caller's buffer.
        offset: usize,
        /// Length in bytes.
        len: usize,
    },
    /// A small payload carried here (a 16-byte buffer advertisement or a 4-byte message word).
    /// Post it inline when the op says so; otherwise copy it into control slot `control_slot`
    /// (16 bytes each, in the area just after the send ring) and post from there.
    Small {
        /// The bytes; only the first `len` count.
        bytes: [u8; SGE_LEN],
        /// How many bytes.
        len: u8,
        /// The control slot to stage it in when not inline.
        control_slot: u8,
    },
}

impl Payload {
    /// Total bytes.
    pub fn len(&self) -> usize {
        match self {
            Payload::Empty => 0,
            Payload::SendRing { first, second } => first.len + second.map_or(0, |s| s.len),
            Payload::Registered { len, .. } => *len,
            Payload::Small { len, .. } => usize::from(*len),
        }
    }
    /// True when there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The bytes of a `Small` payload.
    pub fn small_bytes(&self) -> Option<&[u8]> {
        match self {
            Payload::Small { bytes, len, .. } => Some(&bytes[..usize::from(*len)]),
            _ => None,
        }
    }
}

/// A work request (or local action) for the driver, to be carried out in queue order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Post an RDMA WRITE WITH IMMEDIATE.
    WriteWithImm {
        /// The id to post it with.
        wr_id: WrId,
        /// The local bytes.
        payload: Payload,
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate data (host order).
        imm: u32,
        /// Post with the inline flag.
        inline: bool,
        /// Request a completion.
        signaled: bool,
    },
    /// Post a plain RDMA WRITE (write+send mode's data part; keepalive).
    Write {
        /// The id to post it with.
        wr_id: WrId,
        /// The local bytes.
        payload: Payload,
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Post with the inline flag.
        inline: bool,
        /// Request a completion.
        signaled: bool,
    },
    /// Post a SEND (write+send mode's 4-byte message word, always inline).
    Send {
        /// The id to post it with.
        wr_id: WrId,
        /// The bytes.
        payload: Payload,
        /// Post with the inline flag.
        inline: bool,
        /// Request a completion.
        signaled: bool,
    },
    /// Post a signalled RDMA READ of [`FENCE_READ_LEN`](super::FENCE_READ_LEN) byte, a
    /// placement fence (see
    /// [`StreamEngine::proves_placement_by_read`](super::StreamEngine::proves_placement_by_read)):
    /// it reads the first byte of the peer's target list, and its sink is one entry of that
    /// length in local memory registered for it alone, with local and remote write access
    /// (siw takes exactly one scatter/gather entry for a READ; iWARP wants a READ's sink
    /// remotely writable), which nothing else reads or writes.
    Read {
        /// The id to post it with.
        wr_id: WrId,
        /// Remote address: the start of the peer's target list.
        remote_addr: u64,
        /// Remote key: the peer's target list's.
        rkey: u32,
    },
    /// Post a receive: with no buffer, or in write+send mode a 4-byte buffer at
    /// `message_slot * 4` of the message area.
    PostRecv {
        /// The id to post it with.
        wr_id: WrId,
        /// The message slot, in write+send mode.
        message_slot: Option<u32>,
    },
    /// Zero 16 bytes of our target list at `offset` *before* posting anything that follows:
    /// the entry was used up, and the peer may write a fresh one there once the data after
    /// this point has reached it.
    ClearTargetEntry {
        /// Byte offset in the target list.
        offset: usize,
    },
}

impl Op {
    /// Whether this op is a send work request (posted on the send queue).
    pub fn is_send(&self) -> bool {
        matches!(
            self,
            Op::WriteWithImm { .. } | Op::Write { .. } | Op::Send { .. } | Op::Read { .. }
        )
    }

    /// The work-request id, for posted work requests.
    pub fn wr_id(&self) -> Option<WrId> {
        match *self {
            Op::WriteWithImm { wr_id, .. }
            | Op::Write { wr_id, .. }
            | Op::Send { wr_id, .. }
            | Op::Read { wr_id, .. }
            | Op::PostRecv { wr_id, .. } => Some(wr_id),
            Op::ClearTargetEntry { .. } => None,
        }
    }
}

/// One copy the driver performs between the application's buffer and a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopySpan {
    /// Offset in the application's buffer.
    pub data_offset: usize,
    /// Offset in the ring.
    pub ring_offset: usize,
    /// Bytes to copy.
    pub len: usize,
}

/// What a successful receive completion delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// An RDMA WRITE WITH IMMEDIATE arrived; the immediate data in host order.
    Immediate(u32),
    /// A SEND arrived (write+send mode): the 4 bytes of its message slot, as they lie in memory
    /// (in our announced byte order).
    Message([u8; 4]),
    /// A SEND arrived (write+send mode) carrying fewer bytes than a message (its length):
    /// the peer broke the protocol, and its message slot holds a stale word.
    ShortMessage(u32),
}

/// The addresses and keys of our registered areas that the peer must know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalRegions {
    /// Address of the receive ring (remotely writable, `recv_ring` bytes).
    pub recv_ring_addr: u64,
    /// Remote key of the receive ring.
    pub recv_ring_rkey: u32,
    /// Address of the target list (remotely writable, 32 bytes, zeroed before connecting).
    pub target_list_addr: u64,
    /// Remote key of the target list.
    pub target_list_rkey: u32,
}

/// Which progress is possible now; a mio source reports exactly these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Readiness {
    /// `read` would not block (data, end of stream, or an error to report).
    pub readable: bool,
    /// `write` would not block (space and credits, or an error to report).
    pub writable: bool,
    /// The peer will send no more; reads return 0 once the queued data is read.
    pub read_closed: bool,
    /// No more writes are possible.
    pub write_closed: bool,
    /// Both directions are closed (the driver may run the CM disconnect once
    /// [`StreamEngine::all_sends_done`](super::StreamEngine::all_sends_done)).
    pub disconnected: bool,
    /// The connection failed.
    pub error: bool,
}
