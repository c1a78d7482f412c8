//! What the kernel knows of a TCP connection's progress, for providers that carry RDMA
//! over TCP and judge themselves whether a peer still answers.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

/// A TCP connection's progress, from the kernel's `TCP_INFO`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpProgress {
    /// Segments sent and not yet acknowledged.
    pub unacknowledged_segments: u32,
    /// Bytes written to the socket and not yet sent (the peer's window is full, or the
    /// congestion window).
    pub unsent_bytes: u32,
    /// Zero-window probes sent in a row without an answer.
    pub unanswered_probes: u8,
    /// Time since the last acknowledgement arrived.
    pub since_last_acknowledgement: Duration,
    /// Bytes the peer acknowledged over the connection's life.
    pub bytes_acknowledged: u64,
}

/// The progress of the TCP connection on `socket`.
pub fn tcp_progress(socket: BorrowedFd<'_>) -> io::Result<TcpProgress> {
    let info = crate::sys::tcp::tcp_info(socket)?;
    Ok(TcpProgress {
        unacknowledged_segments: info.tcpi_unacked,
        unsent_bytes: info.tcpi_notsent_bytes,
        unanswered_probes: info.tcpi_probes,
        since_last_acknowledgement: Duration::from_millis(u64::from(info.tcpi_last_ack_recv)),
        bytes_acknowledged: info.tcpi_bytes_acked,
    })
}
