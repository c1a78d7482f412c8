//! `TCP_INFO`: the kernel's view of a TCP connection's progress (getsockopt(2)).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The socket's `struct tcp_info`; fields the running kernel does not know stay zero.
pub(crate) fn tcp_info(socket: BorrowedFd<'_>) -> io::Result<libc::tcp_info> {
    // SAFETY: tcp_info is plain integers, for which all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is writable for `len` bytes, and the kernel writes at most `len` of
    // them (it reports how many in `len`); the fd is borrowed, so it stays open meanwhile.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}
