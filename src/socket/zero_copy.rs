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
use std::fmt;
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
        self.post_registered(region)?;
        Ok(written)
    }

    /// [`write_registered`](Self::write_registered) as an iowrite: up to `len` bytes of the
    /// buffer from `offset` into the peer's window at `window_offset`, posted at once.
    pub(crate) fn iowrite_registered(
        &mut self,
        region: &MemoryRegion,
        window_offset: u64,
        offset: usize,
        len: usize,
    ) -> Result<RegisteredWrite, StreamError> {
        let written = self.engine.iowrite_registered(window_offset, offset, len)?;
        self.post_registered(region)?;
        Ok(written)
    }

    /// Posts what the engine queued, zero-copy payloads from `region`; a failed post failed
    /// the stream, whose error is returned.
    fn post_registered(&mut self, region: &MemoryRegion) -> Result<(), StreamError> {
        self.post_ops_registered(region).map_err(|e| {
            self.engine.error().cloned().unwrap_or_else(|| {
                StreamError::ConnectionReset(format!("posting a work request failed: {e}"))
            })
        })
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
        self.send_registered(buf, &range, |c, region, at, len| {
            c.write_registered(region, at, len)
        })
    }

    /// Sends the bytes `range` of `buf` a piece at a time with `post` (given the connection,
    /// the buffer's registration, the offset of the piece in the buffer and the bytes left),
    /// then waits until the device has reported the last piece's sends complete; returns the
    /// bytes sent, short after a timeout or on a nonblocking socket as `write` is.
    pub(crate) fn send_registered(
        &self,
        buf: &RegisteredBuf,
        range: &impl RangeBounds<usize>,
        mut post: impl FnMut(
            &mut Connection,
            &MemoryRegion,
            usize,
            usize,
        ) -> Result<RegisteredWrite, StreamError>,
    ) -> io::Result<usize> {
        let (start, end) = bounds(range, buf.len())?;
        if start == end {
            return Ok(0);
        }
        let region = self.registration(buf)?;
        let mut done = 0;
        let mut last = None;
        let mut stopped = None;
        while start + done < end {
            let at = start + done;
            match self
                .shared
                .run(Direction::Write, |c| post(c, &region, at, end - at))
            {
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

/// A buffer of a zero-copy write submitted with [`RdmaSocket::submit_registered`], held by the
/// connection until the device has reported its sends complete.
#[derive(Debug)]
pub(crate) struct Submission {
    buf: RegisteredBuf,
    /// The buffer's registration, held while it may be read.
    _region: Arc<MemoryRegion>,
    /// The bytes that went out from it (from its start).
    sent: usize,
    /// The last send queued for them.
    last: WrId,
}

/// A buffer handed back by [`RdmaSocket::completed_registered`]: the device reads it no more.
#[derive(Debug)]
pub struct CompletedWrite {
    /// The buffer, to reuse or drop.
    pub buf: RegisteredBuf,
    /// How many of its bytes (from its start) the submission sent.
    pub sent: usize,
    /// `Err` when the stream failed before the device reported those sends complete: they
    /// may not have reached the peer.
    pub result: io::Result<()>,
}

/// A zero-copy write that took nothing, and the buffer it was given.
#[derive(Debug)]
pub struct Refused {
    /// Why (`WouldBlock` on a nonblocking socket that cannot send now).
    pub error: io::Error,
    /// The buffer, unused.
    pub buf: RegisteredBuf,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a zero-copy write took nothing: {}", self.error)
    }
}

impl std::error::Error for Refused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<Refused> for io::Error {
    fn from(refused: Refused) -> io::Error {
        refused.error
    }
}

impl Connection {
    /// Whether the oldest submitted buffer can be handed back (its sends completed, or the
    /// stream failed).
    pub(crate) fn submission_done(&self) -> bool {
        self.submitted
            .front()
            .is_some_and(|s| self.engine.send_completed(s.last) || self.engine.error().is_some())
    }

    /// The oldest submitted buffer, when it can be handed back.
    fn take_completed(&mut self) -> Option<CompletedWrite> {
        if !self.submission_done() {
            return None;
        }
        let s = self.submitted.pop_front()?;
        let result = if self.engine.send_completed(s.last) {
            Ok(())
        } else {
            let e = self.engine.error().cloned().expect("checked above");
            Err(self.io_error(e))
        };
        Some(CompletedWrite {
            buf: s.buf,
            sent: s.sent,
            result,
        })
    }
}

impl RdmaSocket {
    /// Starts a zero-copy write of `buf` and keeps the buffer until the device has read it.
    /// On a blocking socket it posts all of it (waiting, up to the write timeout each time,
    /// for room as a blocking `write_all` does) and returns its length without waiting for
    /// the sends to complete: submit the next buffer at once, and take the ones done back
    /// with [`completed_registered`](Self::completed_registered) or
    /// [`wait_completed_registered`](Self::wait_completed_registered), in the order they
    /// were submitted. On a nonblocking socket it posts what fits now, at least one byte,
    /// and returns how many bytes that was; with nothing fitting it returns [`Refused`]
    /// (`WouldBlock`) with the buffer, nothing of it sent, and a writable event (mio), or
    /// the socket's fd turning readable, follows when a write can go on.
    ///
    /// A short submission sends those bytes only (nothing of the rest is queued); the
    /// buffer comes back with [`CompletedWrite::sent`] at the end of what went. The rest
    /// must go next: submit it with
    /// [`submit_registered_range`](Self::submit_registered_range)`(buf, sent..)` before any
    /// other write or submission (anything sent before it would land ahead of it in the
    /// stream); so retried, no byte is reordered or sent twice.
    ///
    /// Dropping the socket with buffers submitted drops them once the connection is gone;
    /// their memory is never freed while the device may read it.
    pub fn submit_registered(&self, buf: RegisteredBuf) -> Result<usize, Refused> {
        self.submit_registered_range(buf, ..)
    }

    /// [`submit_registered`](Self::submit_registered) of the bytes `range` of `buf`.
    pub fn submit_registered_range(
        &self,
        buf: RegisteredBuf,
        range: impl RangeBounds<usize>,
    ) -> Result<usize, Refused> {
        self.submit_with(buf, range, |c, region, at, left| {
            c.write_registered(region, at, left)
        })
    }

    /// [`submit_registered_range`](Self::submit_registered_range) as an iowrite: the bytes
    /// `range` of `buf` into the peer's mapped window at `offset` (the range's first byte
    /// lands there), with [`iowrite_registered`](Self::iowrite_registered)'s window checks.
    /// A short submission sent the first bytes of the range; the rest goes to `offset`
    /// plus what was sent.
    #[cfg(feature = "tokio")]
    pub(crate) fn submit_iowrite_registered_range(
        &self,
        buf: RegisteredBuf,
        range: impl RangeBounds<usize>,
        offset: u64,
    ) -> Result<usize, Refused> {
        let start = match bounds(&range, buf.len()) {
            Ok((start, _)) => start,
            Err(error) => return Err(Refused { error, buf }),
        };
        self.submit_with(buf, range, |c, region, at, left| {
            c.iowrite_registered(region, offset + (at - start) as u64, at, left)
        })
    }

    /// Submits the bytes `range` of `buf` a piece at a time with `post` (given the
    /// connection, the buffer's registration, the offset of the piece in the buffer and the
    /// bytes left) and keeps the buffer until the device has read it (see
    /// [`submit_registered`](Self::submit_registered)).
    fn submit_with(
        &self,
        buf: RegisteredBuf,
        range: impl RangeBounds<usize>,
        mut post: impl FnMut(
            &mut Connection,
            &MemoryRegion,
            usize,
            usize,
        ) -> Result<RegisteredWrite, StreamError>,
    ) -> Result<usize, Refused> {
        let refuse = |error: io::Error, buf: RegisteredBuf| Err(Refused { error, buf });
        let (start, end) = match bounds(&range, buf.len()) {
            Ok(b) => b,
            Err(e) => return refuse(e, buf),
        };
        if start == end {
            return refuse(
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a zero-copy write of no bytes: submit a range of at least one byte",
                ),
                buf,
            );
        }
        let region = match self.registration(&buf) {
            Ok(r) => r,
            Err(e) => return refuse(e, buf),
        };
        let nonblocking = self.shared.lock().nonblocking;
        // What went out so far: bytes, and the last send queued for them.
        let mut taken: Option<(usize, WrId)> = None;
        let mut stopped = None;
        while taken.is_none_or(|(n, _)| !nonblocking && start + n < end) {
            let at = start + taken.map_or(0, |(n, _)| n);
            let mut queued = None;
            let written = self.shared.run(Direction::Write, |c| {
                let w = post(c, &region, at, end - at)?;
                queued = Some(w);
                Ok(w)
            });
            // An error after the post (in the progress that follows it) still leaves the
            // bytes posted: the buffer must be kept.
            if let Some(w) = queued {
                taken = Some((taken.map_or(0, |(n, _)| n) + w.accepted, w.last));
            }
            if let Err(e) = written {
                stopped = Some(e);
                break;
            }
        }
        match (taken, stopped) {
            (Some((n, last)), _) => {
                self.shared.lock().submitted.push_back(Submission {
                    buf,
                    _region: region,
                    sent: start + n,
                    last,
                });
                Ok(n)
            }
            (None, Some(e)) => refuse(e, buf),
            (None, None) => unreachable!("the loop runs until something was taken or it failed"),
        }
    }

    /// The oldest submitted buffer, if the device has finished with it (or the stream
    /// failed: its `result` says so). Never blocks. Call it until it returns `None`: when
    /// buffers stay submitted, the next that can be taken back is announced by a writable
    /// event (mio), by the socket's fd turning readable (until the next call of this), and
    /// by the tokio stream's write readiness.
    pub fn completed_registered(&self) -> Option<CompletedWrite> {
        let mut g = self.shared.lock();
        self.shared.ready.completion_called();
        loop {
            if let Some(done) = g.take_completed() {
                if !g.submitted.is_empty() {
                    // The next one is announced when it is ready (at once if it is): the
                    // queue is armed, so that its completion makes an event.
                    let armed = loop {
                        match g.progress().and_then(|p| Ok(p || g.arm()?)) {
                            Ok(true) => continue,
                            Ok(false) => break true,
                            Err(_) => break false,
                        }
                    };
                    self.shared.ready.completion_blocked();
                    if armed {
                        self.shared.report(&g);
                    } else {
                        // The connection is broken: the next call hands the buffer back.
                        self.shared.ready.update(true, true, true);
                    }
                    self.shared.wake_others(&g);
                }
                return Some(done);
            }
            if g.submitted.is_empty() {
                return None;
            }
            match g.progress().and_then(|p| Ok(p || g.arm()?)) {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => {
                    // The connection is broken: the buffer comes back with the error.
                    let s = g.submitted.pop_front().expect("checked above");
                    return Some(CompletedWrite {
                        buf: s.buf,
                        sent: s.sent,
                        result: Err(e),
                    });
                }
            }
            self.shared.ready.completion_blocked();
            self.shared.report(&g);
            self.shared.wake_others(&g);
            return None;
        }
    }

    /// Waits for the oldest submitted buffer (without a timeout: its sends complete or the
    /// stream fails); `None` when none is submitted.
    pub fn wait_completed_registered(&self) -> io::Result<Option<CompletedWrite>> {
        self.shared
            .run(Direction::Other(None), |c| match c.take_completed() {
                Some(done) => Ok(Some(done)),
                None if c.submitted.is_empty() => Ok(None),
                None => Err(StreamError::WouldBlock),
            })
    }

    /// How many submitted buffers the socket holds (not yet handed back).
    pub fn registered_in_flight(&self) -> usize {
        self.shared.lock().submitted.len()
    }
}
