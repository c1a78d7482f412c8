//! Gathering sends: pieces of caller bytes and registered memory handed to one
//! `sendmsg(2)`, which reads the memory in place.

use super::RegisteredMemory;
use crate::error::Result;
use std::os::fd::BorrowedFd;

/// One piece of a gathering send ([`send_pieces`]).
#[derive(Clone, Copy, Debug)]
pub enum SendPiece<'a> {
    /// Bytes the caller owns.
    Bytes(&'a [u8]),
    /// `len` bytes of registered memory from `offset`: the kernel reads them, no Rust code
    /// does, so a device or a peer may write them meanwhile.
    Memory {
        /// The memory.
        memory: &'a RegisteredMemory,
        /// The first byte's offset in it.
        offset: usize,
        /// How many bytes.
        len: usize,
    },
}

impl SendPiece<'_> {
    /// The length in bytes.
    pub fn len(&self) -> usize {
        match self {
            SendPiece::Bytes(bytes) => bytes.len(),
            SendPiece::Memory { len, .. } => *len,
        }
    }

    /// Whether the piece is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends a copy of the piece's bytes to `out`. Fails when a memory piece lies outside
    /// its memory.
    pub fn copy_to(&self, out: &mut Vec<u8>) -> Result<()> {
        match *self {
            SendPiece::Bytes(bytes) => out.extend_from_slice(bytes),
            SendPiece::Memory {
                memory,
                offset,
                len,
            } => {
                let start = out.len();
                out.resize(start + len, 0);
                if let Err(e) = memory.read_at(offset, &mut out[start..]) {
                    out.truncate(start);
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

/// Sends up to `N` of `pieces` on the stream socket `socket` in one `sendmsg(2)` with
/// `flags` (`MSG_NOSIGNAL`, ...): a gathering write whose memory pieces the kernel reads in
/// place (no copy, and no Rust reference to memory a device or a peer may be writing).
/// Returns how many bytes were sent, which may be fewer than the pieces hold.
///
/// # Panics
/// When a [`SendPiece::Memory`] range lies outside its memory.
pub fn send_pieces<const N: usize>(
    socket: BorrowedFd<'_>,
    pieces: &[SendPiece<'_>],
    flags: i32,
) -> std::io::Result<usize> {
    crate::sys::send::send_pieces::<N>(socket, pieces, flags)
}
