//! [`AsFd`]/[`AsRawFd`] for [`RdmaSocket`] and [`RdmaListener`]: one readiness fd per
//! object, for poll(2), epoll and any event loop that watches file descriptors.
//!
//! The fd is an epoll instance the object owns (a socket makes it when first asked): it is never the transport
//! (the connection is a queue pair), and the application only waits on it for readability
//! (POLLIN / EPOLLIN), never reads, writes or closes it. Level-triggered:
//! * a socket's fd is readable while a read would not block (bytes, end of stream, or an
//!   error to report), and, after a write returned `WouldBlock`, from when writing can go on
//!   until the next write call. A read's `WouldBlock` never hides a pending write
//!   notification, nor the reverse. After `completed_registered` returned `None` with
//!   buffers submitted (or handed one back with more in flight), it is readable from when
//!   the oldest can be taken back until the next `completed_registered` call; that notice
//!   and a write's share the fd's write half, and neither call quiets the other's;
//! * a listener's fd is readable while `accept` may go on (a request waits and the backlog
//!   has room, a handshake moved on, or a handshake's bound passed).
//!
//! Readiness may be spurious (a clone took the bytes first): the call then returns
//! `WouldBlock` and the fd goes quiet until that call can go on. Registered with edge-
//! triggered epoll (EPOLLET), the fd gives an event each time a call that returned
//! `WouldBlock` can go on. Clones share their original's fd.
//!
//! Asking for a socket's fd puts the socket under the per-process readiness thread (the
//! same one [`mio`] registration uses), for as long as the socket lives; no thread is
//! started per socket. Should that fail, the fd turns readable and the next call returns the
//! error.
#![forbid(unsafe_code)]

use super::listener::RdmaListener;
use super::rdma_socket::RdmaSocket;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

impl AsFd for RdmaSocket {
    /// The socket's readiness fd (see [the crate's documentation](crate#a-file-descriptor-for-any-event-loop)): readable while a read would not
    /// block, after a write's `WouldBlock` from when writing can go on until the next write
    /// call, and after [`completed_registered`](RdmaSocket::completed_registered) left
    /// buffers submitted from when the next can be taken back until its next call. Wait on
    /// it for readability only; never read, write or close it.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.shared.enroll_for_fd();
        self.shared.ready.fd()
    }
}

impl AsRawFd for RdmaSocket {
    /// The raw form of [`as_fd`](AsFd::as_fd): the socket's readiness fd, owned by the
    /// socket.
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

impl AsFd for RdmaListener {
    /// The listener's readiness fd (see [the crate's documentation](crate#a-file-descriptor-for-any-event-loop)): readable while `accept` may go
    /// on. Wait on it for readability only; never read, write or close it.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.0.as_fd()
    }
}

impl AsRawFd for RdmaListener {
    /// The raw form of [`as_fd`](AsFd::as_fd): the listener's readiness fd, owned by the
    /// listener.
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}
