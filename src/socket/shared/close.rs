//! The graceful close of a shared connection ([`Shared::close`], and the drop of the last
//! handle).
#![forbid(unsafe_code)]

use super::{Direction, Shared};
use crate::protocol::StreamError;
use std::io;
use std::net::Shutdown;
use std::time::Duration;

impl Shared {
    /// The graceful close: end-of-stream after the queued data, then the disconnect
    /// handshake, bounded by the close timeout; torn down without the handshake when time
    /// runs out. `Ok` only when it finished and every byte written is in the peer's memory;
    /// otherwise what went wrong: the connection's error, the bytes it may have lost, or
    /// the close timeout.
    pub(crate) fn close(&self) -> io::Result<()> {
        let timeout = {
            let mut g = self.lock();
            g.engine.shutdown(Shutdown::Both);
            g.nonblocking = false;
            g.opts.close_timeout
        };
        let waited = self.run(Direction::Other(Some(timeout)), |c| {
            // After the connection manager's DISCONNECTED, whether the peer closed or the
            // connection broke is known once the flushed receives are fed.
            if c.closed() && !c.engine.awaits_flush() {
                Ok(())
            } else {
                Err(StreamError::WouldBlock)
            }
        });
        let g = self.lock();
        let result = if !g.closed() {
            // Time ran out: tear down without the handshake.
            let torn_down = g.endpoint.disconnect(&g.res.qp);
            Err(close_timed_out(timeout, waited.err(), torn_down.err()))
        } else if let Some(e) = g.engine.undelivered().or_else(|| g.engine.error().cloned()) {
            Err(g.io_error(e))
        } else {
            waited
        };
        drop(g);
        self.forget_ready();
        result
    }
}

/// The error of a close that did not finish within `timeout`: what the wait said, and the
/// teardown's failure if it failed too.
fn close_timed_out(
    timeout: Duration,
    waited: Option<io::Error>,
    torn_down: Option<io::Error>,
) -> io::Error {
    let waited = waited.map(|e| format!(" ({e})")).unwrap_or_default();
    let torn_down = torn_down
        .map(|e| format!("; tearing the connection down failed too: {e}"))
        .unwrap_or_default();
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "closing the connection: the peer did not finish the close within the close \
             timeout ({timeout:?}){waited}, so it was torn down without the handshake and \
             may lack bytes that were written{torn_down}; raise the close timeout \
             (SocketOptionsBuilder::close_timeout) or make sure the peer reads and closes"
        ),
    )
}

impl Drop for Shared {
    /// The last handle is gone: graceful close (end-of-stream after the queued data, the
    /// disconnect handshake), bounded by the close timeout. A drop has no one to tell how
    /// the close went: whether the peer got every byte, or the close timed out and the
    /// connection was torn down, is lost with it. Call [`RdmaSocket::close`] to learn it.
    ///
    /// [`RdmaSocket::close`]: super::RdmaSocket::close
    fn drop(&mut self) {
        // Nothing to report to: see above.
        let _ = self.close();
    }
}
