//! Work requests: what `post_send` and `post_recv` take.
#![deny(unsafe_code)] // one documented `unsafe fn` constructor

use crate::types::{LocalKey, RemoteKey};
use bitflags::bitflags;
use std::marker::PhantomData;

/// One scatter/gather entry: a piece of a registered memory region, or borrowed bytes of an
/// inline send.
///
/// Made with [`crate::MemoryRegion::slice`] (bounds-checked, borrows the region so it stays
/// registered while the request is posted), [`ScatterGather::borrowed`] (any bytes, for
/// [`SendFlags::INLINE`] requests only) or the `unsafe` [`ScatterGather::from_raw`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ScatterGather<'a> {
    addr: u64,
    length: u32,
    lkey: LocalKey,
    /// The bytes of a borrowed entry (no registration behind it).
    borrowed: Option<&'a [u8]>,
    _region: PhantomData<&'a ()>,
}

impl<'a> ScatterGather<'a> {
    /// Used by [`crate::MemoryRegion::slice`], which has checked the range.
    pub(crate) fn checked(addr: u64, length: u32, lkey: LocalKey) -> ScatterGather<'a> {
        ScatterGather {
            addr,
            length,
            lkey,
            borrowed: None,
            _region: PhantomData,
        }
    }

    /// An entry for bytes that are not registered, valid only in a send request with
    /// [`SendFlags::INLINE`]: the provider takes the bytes while `post_send` runs (copies
    /// them, or, where [`crate::QueuePair::lends_inline`] says so, sends them from here and
    /// copies what is left), so they need no registration and may change once it returns.
    /// `post_send` refuses a request without `INLINE` that carries one, and `post_recv`
    /// refuses them all. Its local key is 0; `bytes` longer than `u32::MAX` are cut there
    /// (the send then fails its length check).
    #[inline]
    pub fn borrowed(bytes: &'a [u8]) -> ScatterGather<'a> {
        let bytes = &bytes[..bytes.len().min(u32::MAX as usize)];
        ScatterGather {
            addr: bytes.as_ptr() as u64,
            length: bytes.len() as u32,
            lkey: LocalKey(0),
            borrowed: Some(bytes),
            _region: PhantomData,
        }
    }

    /// The bytes of an entry made with [`ScatterGather::borrowed`].
    pub fn borrowed_bytes(&self) -> Option<&'a [u8]> {
        self.borrowed
    }

    /// An entry from raw parts.
    ///
    /// # Safety
    /// `addr..addr+length` must be memory registered under `lkey` and stay valid (readable for
    /// sends, writable for receives) until the work request completes: inline sends and the
    /// userspace provider read and write it directly.
    #[allow(unsafe_code)]
    pub unsafe fn from_raw(addr: u64, length: u32, lkey: LocalKey) -> ScatterGather<'static> {
        ScatterGather::checked(addr, length, lkey)
    }

    /// The address of the first byte.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// The length in bytes.
    pub fn length(&self) -> u32 {
        self.length
    }
    /// The local key of the region.
    pub fn lkey(&self) -> LocalKey {
        self.lkey
    }
}

bitflags! {
    /// Flags of a send work request (`IB_SEND_*`).
    #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u32 {
        /// Wait for earlier RDMA READs and atomics to finish before starting this one.
        const FENCE = 1 << 0;
        /// Generate a completion (otherwise only on error, when the QP is not `sq_sig_all`).
        const SIGNALED = 1 << 1;
        /// Raise a solicited event at the receiver.
        const SOLICITED = 1 << 2;
        /// Copy the payload into the work request now; the buffer may be reused at once
        /// and needs no registration.
        const INLINE = 1 << 3;
    }
}

/// What a send work request does.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// Consumes one receive at the peer.
    Send,
    /// A SEND carrying 32 bits of immediate data (host order here; big-endian on the wire).
    SendWithImm(u32),
    /// Writes into the peer's memory.
    RdmaWrite {
        /// Peer virtual address.
        remote_addr: u64,
        /// Peer region's key.
        rkey: RemoteKey,
    },
    /// Writes into the peer's memory and consumes one receive there, carrying immediate data.
    RdmaWriteWithImm {
        /// Peer virtual address.
        remote_addr: u64,
        /// Peer region's key.
        rkey: RemoteKey,
        /// Immediate data (host order).
        imm: u32,
    },
    /// Reads the peer's memory into the local scatter list.
    RdmaRead {
        /// Peer virtual address.
        remote_addr: u64,
        /// Peer region's key.
        rkey: RemoteKey,
    },
    /// 64-bit compare-and-swap at the peer; the old value lands in the local 8-byte buffer.
    AtomicCompareSwap {
        /// Peer virtual address (8-byte aligned).
        remote_addr: u64,
        /// Peer region's key.
        rkey: RemoteKey,
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
    /// 64-bit fetch-and-add at the peer; the old value lands in the local 8-byte buffer.
    AtomicFetchAdd {
        /// Peer virtual address (8-byte aligned).
        remote_addr: u64,
        /// Peer region's key.
        rkey: RemoteKey,
        /// Addend.
        add: u64,
    },
}

impl SendOp {
    /// The kernel's `ib_uverbs_wr_opcode` number.
    pub fn opcode(&self) -> u32 {
        match self {
            SendOp::RdmaWrite { .. } => 0,
            SendOp::RdmaWriteWithImm { .. } => 1,
            SendOp::Send => 2,
            SendOp::SendWithImm(_) => 3,
            SendOp::RdmaRead { .. } => 4,
            SendOp::AtomicCompareSwap { .. } => 5,
            SendOp::AtomicFetchAdd { .. } => 6,
        }
    }
    /// rdma-core's name of the opcode, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            SendOp::RdmaWrite { .. } => "RDMA_WRITE",
            SendOp::RdmaWriteWithImm { .. } => "RDMA_WRITE_WITH_IMM",
            SendOp::Send => "SEND",
            SendOp::SendWithImm(_) => "SEND_WITH_IMM",
            SendOp::RdmaRead { .. } => "RDMA_READ",
            SendOp::AtomicCompareSwap { .. } => "ATOMIC_CMP_AND_SWP",
            SendOp::AtomicFetchAdd { .. } => "ATOMIC_FETCH_AND_ADD",
        }
    }
    /// The immediate data, if the opcode carries one.
    pub fn imm(&self) -> Option<u32> {
        match *self {
            SendOp::SendWithImm(imm) | SendOp::RdmaWriteWithImm { imm, .. } => Some(imm),
            _ => None,
        }
    }
    /// The remote address and key, if the opcode targets peer memory.
    pub fn remote(&self) -> Option<(u64, RemoteKey)> {
        match *self {
            SendOp::RdmaWrite { remote_addr, rkey }
            | SendOp::RdmaWriteWithImm {
                remote_addr, rkey, ..
            }
            | SendOp::RdmaRead { remote_addr, rkey }
            | SendOp::AtomicCompareSwap {
                remote_addr, rkey, ..
            }
            | SendOp::AtomicFetchAdd {
                remote_addr, rkey, ..
            } => Some((remote_addr, rkey)),
            _ => None,
        }
    }
    /// Whether this is an atomic operation.
    pub fn is_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::AtomicCompareSwap { .. } | SendOp::AtomicFetchAdd { .. }
        )
    }
}

/// One send work request. A slice of them is posted as one chained list.
#[derive(Copy, Clone, Debug)]
pub struct SendRequest<'a> {
    /// Returned in the work completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// The local buffers (gather list for sends/writes, scatter list for reads/atomics).
    pub sg_list: &'a [ScatterGather<'a>],
    /// Flags.
    pub flags: SendFlags,
}

impl<'a> SendRequest<'a> {
    /// A signaled request with no other flags.
    #[inline]
    pub fn new(wr_id: u64, op: SendOp, sg_list: &'a [ScatterGather<'a>]) -> Self {
        SendRequest {
            wr_id,
            op,
            sg_list,
            flags: SendFlags::SIGNALED,
        }
    }
    /// Sets the flags.
    #[inline]
    pub fn with_flags(mut self, flags: SendFlags) -> Self {
        self.flags = flags;
        self
    }
    /// Total bytes of the gather list.
    #[inline]
    pub fn total_length(&self) -> u64 {
        self.sg_list.iter().map(|s| u64::from(s.length())).sum()
    }
}

/// One receive work request.
#[derive(Copy, Clone, Debug)]
pub struct RecvRequest<'a> {
    /// Returned in the work completion.
    pub wr_id: u64,
    /// Where an incoming message is scattered.
    pub sg_list: &'a [ScatterGather<'a>],
}

/// A failed post: which request of the list (like `bad_wr`) and why. Requests before it were
/// posted; it and those after were not.
#[derive(Debug, thiserror::Error)]
#[error("work request #{index} (wr_id {wr_id:#x}) was not posted: {error}")]
pub struct PostError {
    /// Index in the posted slice.
    pub index: usize,
    /// The request's id.
    pub wr_id: u64,
    /// Why.
    #[source]
    pub error: crate::Error,
}

impl From<PostError> for crate::Error {
    fn from(e: PostError) -> crate::Error {
        crate::Error::InvalidArgument(e.to_string())
    }
}
