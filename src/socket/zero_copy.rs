//! Zero-copy writes: stream bytes sent from the caller's [`RegisteredBuf`] instead of being
//! copied into the send ring. The engine queues the same messages a copying write makes
//! (one RDMA WRITE WITH IMMEDIATE per piece, or WRITE and 4-byte SEND on iWARP), in stream
//! order with them, whose payload is the buffer's registration on the connection's device
//! ([`Payload::Registered`](crate::protocol::Payload::Registered)); they are posted by the
//! call that queued them, and the call (or the submission) holds the buffer until the
//! device has reported them complete.
#![forbid(unsafe_code)]

use super::conn::Connection;
use super::rdma_socket::RdmaSocket;
use super::shared::Direction;
use crate::buffers::RegisteredBuf;
use crate::protocol::{RegisteredWrite, StreamError, WrId};
use crate::verbs::MemoryRegion;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

impl Connection {
    /// Queues up to `len` bytes of the buffer whose registration is `region`, from `offset`,
    /// and posts them at once (with whatever was queued before them).
    pub(crate) fn write_registered(
        &mut self,
        region: &MemoryRegion,
        offset: usize,
        len: usize,
    ) -> Result<RegisteredWrite, StreamError> {
        let written = self.engine.write_registered(offset, len)?;
        if let Err(e) = self.post_ops_registered(region) {
            // `post_ops_registered` failed the stream: its error says why.
            return Err(self.engine.error().cloned().unwrap_or_else(|| {
                StreamError::ConnectionReset(format!("posting a work request failed: {e}"))
            }));
        }
        Ok(written)
    }
}

impl RdmaSocket {
    /// Writes all of `buf` without copying it: the device reads the bytes from the buffer
    /// and writes them into the peer's receive ring, in stream order with the socket's other
    /// writes (the peer, rdmasock or rsocket, sees an ordinary stream). Returns once every
    /// byte was sent and the device has reported those sends complete, so `buf` may be
    /// changed or reused at once. The first write on a connection of a device registers the
    /// buffer with it (see [`RegisteredBuf`]).
    ///
    /// Blocking like [`write_all`](std::io::Write::write_all) on a blocking socket (the
    /// write timeout bounds each wait for room); on a nonblocking socket it sends what fits
    /// now, waits for those sends to complete, and returns how many bytes that was
    /// (`WouldBlock` when none fit). After a timeout the bytes sent so far are returned, as
    /// a short write. A write that fails fails the stream, as a copying write's does.
    pub fn write_registered(&self, buf: &RegisteredBuf) -> io::Result<usize> {
        self.write_registered_range(buf, ..)
    }

    /// [`write_registered`](Self::write_registered) of the bytes `range` of `buf`.
    pub fn write_registered_range(
        &self,
        buf: &RegisteredBuf,
        range: impl RangeBounds<usize>,
    ) -> io::Result<usize> {
        let (start, end) = bounds(&range, buf.len())?;
        if start == end {
            return Ok(0);
        }
        let region = self.registration(buf)?;
        let mut done = 0;
        let mut last = None;
        let mut stopped = None;
        while start + done < end {
            let at = start + done;
            match self.shared.run(Direction::Write, |c| {
                c.write_registered(&region, at, end - at)
            }) {
                Ok(w) => {
                    done += w.accepted;
                    last = Some(w.last);
                }
                Err(e) => {
                    stopped = Some(e);
                    break;
                }
            }
        }
        if let Some(last) = last {
            self.wait_sent(last)?;
        }
        match stopped {
            None => Ok(done),
            Some(e)
                if done > 0
                    && matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
            {
                Ok(done)
            }
            Some(e) => Err(e),
        }
    }

    /// The buffer's registration with this connection's device.
    pub(crate) fn registration(&self, buf: &RegisteredBuf) -> io::Result<Arc<MemoryRegion>> {
        let device = self.shared.lock().res.device.clone();
        buf.registration(&device)
    }

    /// Waits until the send `last` (and every one before it) completed. When the stream
    /// has failed, waits at most the close timeout for the device to report them (flushed)
    /// and returns the stream's error.
    fn wait_sent(&self, last: WrId) -> io::Result<()> {
        let waited = self.shared.run(Direction::Other(None), |c| {
            if c.engine.send_completed(last) {
                return Ok(());
            }
            match c.engine.error() {
                Some(e) => Err(e.clone()),
                None => Err(StreamError::WouldBlock),
            }
        });
        let Err(e) = waited else {
            return Ok(());
        };
        let grace = self.shared.lock().opts.close_timeout;
        // Failed: the queue pair flushes what it holds; wait for that, bounded.
        let _ = self.shared.run(Direction::Other(Some(grace)), |c| {
            if c.engine.send_completed(last) {
                Ok(())
            } else {
                Err(StreamError::WouldBlock)
            }
        });
        Err(e)
    }
}

/// `range` of a buffer of `len` bytes as `(start, end)`, or an error naming it.
pub(crate) fn bounds(range: &impl RangeBounds<usize>, len: usize) -> io::Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(s), Some(e)) if s <= e && e <= len => Ok((s, e)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the range {:?}..{:?} is outside the {len}-byte registered buffer",
                range.start_bound(),
                range.end_bound()
            ),
        )),
    }
}
