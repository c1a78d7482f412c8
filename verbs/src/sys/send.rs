//! Gathering sends whose pieces may lie in registered memory: the kernel reads those bytes
//! (sendmsg(2) with an iovec per piece), never a Rust reference, so a device or a peer may
//! write them meanwhile without a data race on the Rust side.

use crate::memory::{RegisteredMemory, SendPiece};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Sends up to `N` of `pieces`, in order, with one sendmsg(2); returns the bytes sent.
///
/// # Panics
/// When a [`SendPiece::Memory`] range lies outside its memory (callers check it when they
/// queue the piece).
pub(crate) fn send_pieces<const N: usize>(
    socket: BorrowedFd<'_>,
    pieces: &[SendPiece<'_>],
    flags: i32,
) -> io::Result<usize> {
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; N];
    let mut n = 0;
    for (slot, piece) in iov.iter_mut().zip(pieces) {
        *slot = match *piece {
            SendPiece::Bytes(bytes) => libc::iovec {
                iov_base: bytes.as_ptr().cast_mut().cast(),
                iov_len: bytes.len(),
            },
            SendPiece::Memory {
                memory,
                offset,
                len,
            } => libc::iovec {
                iov_base: memory_address(memory, offset, len),
                iov_len: len,
            },
        };
        n += 1;
    }
    // SAFETY: an all-zero msghdr is valid (no name, no control data).
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = iov.as_mut_ptr();
    message.msg_iovlen = n as _;
    // SAFETY: every iovec points into a live buffer borrowed for this call: a caller's slice,
    // or a range of registered memory checked to lie inside it (`memory_address`), which
    // stays mapped while the `&RegisteredMemory` borrow lives. The kernel only reads them.
    let sent = unsafe { libc::sendmsg(socket.as_raw_fd(), &message, flags) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sent as usize)
}

/// The address of `offset..offset + len` of `memory`, after checking that it lies inside.
fn memory_address(memory: &RegisteredMemory, offset: usize, len: usize) -> *mut libc::c_void {
    memory.raw().pointer_at(offset, len).cast_mut().cast()
}
