//! What the benchmarks share: the stream trait both kinds of socket implement.

use rdmasock::socket::WaitStats;
use rdmasock::RdmaSocket;
use std::io::{Read, Write};
use std::net::TcpStream;

/// A stream a benchmark drives: `TcpStream` or `RdmaSocket`.
pub(crate) trait Stream: Read + Write + Send + 'static {
    /// The socket's wait counters (an RdmaSocket's only).
    fn waits(&self) -> Option<WaitStats>;
}

impl Stream for TcpStream {
    fn waits(&self) -> Option<WaitStats> {
        None
    }
}

impl Stream for RdmaSocket {
    fn waits(&self) -> Option<WaitStats> {
        Some(self.wait_stats())
    }
}
