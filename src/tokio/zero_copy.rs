//! Zero-copy writes on [`RdmaStream`]: the buffer is passed by value and handed back with
//! the result, so that a future dropped half-way cannot free memory the device still reads
//! (the socket keeps a submitted buffer until its sends completed).
//!
//! Two shapes: [`RdmaStream::write_registered`] (one buffer, back when the device has read
//! it) and [`RdmaStream::submit_registered`] with [`RdmaStream::completed_registered`]
//! (several buffers in flight, back in submission order), both waiting on the stream's
//! write readiness: the completion channel's edge, and the write eventfd that the socket
//! raises once a submitted buffer can be taken back.
#![forbid(unsafe_code)]

use super::events::Way;
use super::stream::RdmaStream;
use crate::buffers::RegisteredBuf;
use crate::socket::{CompletedWrite, Refused};
use std::collections::{HashSet, VecDeque};
use std::future::poll_fn;
use std::io;
use std::ops::{Range, RangeBounds};
use std::sync::{Mutex, MutexGuard};

/// The stream's own record of submitted buffers, beside the socket's queue.
#[derive(Debug, Default)]
pub(crate) struct Returns {
    /// The first bytes' addresses of the buffers that `write_registered` futures submitted:
    /// one that comes back to anyone but its future belonged to a future that was dropped
    /// (the stream's calls take `&mut self`, so no other future of it runs meanwhile), and
    /// is let go.
    writes: HashSet<usize>,
    /// Buffers that [`RdmaStream::completed_registered`] hands back before the socket's:
    /// those a `write_registered` took back on its way to its own (older than every buffer
    /// the socket still holds), and those whose `submit_registered` future was dropped
    /// before they were posted.
    early: VecDeque<CompletedWrite>,
}

/// A buffer a `submit_registered` future holds while it waits for room: dropped with the
/// future, it goes to the stream's early returns, unposted.
struct Unposted<'a> {
    buf: Option<RegisteredBuf>,
    /// Where the range to submit starts: the `sent` it comes back with.
    from: usize,
    returns: &'a Mutex<Returns>,
}

impl Drop for Unposted<'_> {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            lock(self.returns).early.push_back(CompletedWrite {
                buf,
                sent: self.from,
                result: Ok(()),
            });
        }
    }
}

fn lock(returns: &Mutex<Returns>) -> MutexGuard<'_, Returns> {
    returns.lock().unwrap_or_else(|p| p.into_inner())
}

/// The address that identifies a buffer while the socket holds it.
fn address(buf: &RegisteredBuf) -> usize {
    buf.as_ptr() as usize
}

impl RdmaStream {
    /// Writes all of `buf` without copying it (see
    /// [`RdmaSocket::write_registered`](crate::RdmaSocket::write_registered)) and hands the
    /// buffer back once the device has read every byte of it, with how many bytes were
    /// written or the error that stopped the write (the buffer comes back either way).
    ///
    /// Cancellation: dropping the future before it completes drops the buffer once the
    /// socket has let go of it: part of it may have been sent, as with a `write_all` that
    /// was dropped. Memory the device still reads is never freed.
    pub async fn write_registered(
        &mut self,
        buf: RegisteredBuf,
    ) -> (io::Result<usize>, RegisteredBuf) {
        self.send_by_value(buf, .., |socket, buf, range| {
            socket.submit_registered_range(buf, range)
        })
        .await
    }

    /// Writes the bytes `range` of `buf` into the peer's mapped window at `offset` without
    /// copying them (rsocket's `riowrite`; see
    /// [`RdmaSocket::iowrite_registered_range`](crate::RdmaSocket::iowrite_registered_range)):
    /// plain RDMA WRITEs ordered with the stream, the device reading the bytes from the
    /// buffer. Hands the buffer back once the device has read every byte of the range, with
    /// how many bytes were written or the error that stopped the write (the buffer comes
    /// back either way). The whole range must lie inside one window the peer mapped:
    /// otherwise `InvalidInput` says so and nothing is written.
    ///
    /// Cancellation: as [`write_registered`](Self::write_registered)'s, dropping the future
    /// before it completes drops the buffer once the socket has let go of it (part of the
    /// range may have been written); memory the device still reads is never freed.
    pub async fn iowrite_registered_range(
        &mut self,
        buf: RegisteredBuf,
        range: impl RangeBounds<usize>,
        offset: u64,
    ) -> (io::Result<usize>, RegisteredBuf) {
        let start = match crate::socket::bounds(&range, buf.len()) {
            Ok((start, _)) => start,
            Err(e) => return (Err(e), buf),
        };
        self.send_by_value(buf, range, |socket, buf, piece| {
            let at = offset + (piece.start - start) as u64;
            socket.submit_iowrite_registered_range(buf, piece, at)
        })
        .await
    }

    /// [`iowrite_registered_range`](Self::iowrite_registered_range) of all of `buf`: its
    /// first byte lands at `offset` in the peer's window.
    pub async fn iowrite_registered(
        &mut self,
        buf: RegisteredBuf,
        offset: u64,
    ) -> (io::Result<usize>, RegisteredBuf) {
        self.iowrite_registered_range(buf, .., offset).await
    }

    /// Sends the bytes `range` of `buf` by value: `submit` posts a piece (what fits, from
    /// the range given) and the socket holds the buffer; the buffer comes back once the
    /// device has read that piece, and the next piece goes, until the range is sent or an
    /// error stops it.
    async fn send_by_value(
        &mut self,
        buf: RegisteredBuf,
        range: impl RangeBounds<usize>,
        submit: impl Fn(&crate::RdmaSocket, RegisteredBuf, Range<usize>) -> Result<usize, Refused>,
    ) -> (io::Result<usize>, RegisteredBuf) {
        let (start, end) = match crate::socket::bounds(&range, buf.len()) {
            Ok(b) => b,
            Err(e) => return (Err(e), buf),
        };
        let identity = address(&buf);
        let mut held = Some(buf);
        let mut done = 0;
        loop {
            let submitted = poll_fn(|cx| {
                self.events().drive(cx, Way::Write, || {
                    let buf = held.take().expect("the buffer is held between submissions");
                    match submit(self.socket(), buf, start + done..end) {
                        Ok(n) => {
                            lock(self.returns()).writes.insert(identity);
                            Ok(n)
                        }
                        Err(refused) => {
                            held = Some(refused.buf);
                            Err(refused.error)
                        }
                    }
                })
            })
            .await;
            let n = match submitted {
                Ok(n) => n,
                Err(e) => return (Err(e), held.expect("a refused buffer comes back")),
            };
            let completed = poll_fn(|cx| {
                self.events().drive(cx, Way::Write, || {
                    while let Some(done) = self.socket().completed_registered() {
                        if let Some(own) = self.sort_returned(done, identity) {
                            return Ok(own);
                        }
                    }
                    Err(io::ErrorKind::WouldBlock.into())
                })
            })
            .await;
            let CompletedWrite { buf, result, .. } = match completed {
                Ok(done) => done,
                // The reactor failed to watch the socket: the buffer is waited for here, on
                // this thread (its sends complete, or the stream fails).
                Err(e) => CompletedWrite {
                    result: Err(e),
                    ..self.wait_for(identity)
                },
            };
            done += n;
            if let Err(e) = result {
                return (Err(e), buf);
            }
            if start + done == end {
                return (Ok(done), buf);
            }
            held = Some(buf);
        }
    }

    /// Submits a zero-copy write of `buf` (see
    /// [`RdmaSocket::submit_registered`](crate::RdmaSocket::submit_registered)), waiting
    /// without blocking a worker until at least one byte fits: returns how many bytes went
    /// out (all of them, or fewer when the peer's ring had less room: submit the rest,
    /// from the `sent` the buffer comes back with, before anything else). The buffer comes
    /// back from [`completed_registered`](Self::completed_registered). An error other than
    /// room returns it at once, in [`Refused`].
    ///
    /// Cancellation safe: the buffer goes to the socket only in the poll that posts it (the
    /// future is then complete). Dropped before that, the future leaves the buffer, unsent,
    /// to [`completed_registered`](Self::completed_registered), which hands it back ahead
    /// of the buffers still in flight with `sent` where its range started and `result` Ok:
    /// no buffer is lost, and no byte of it went.
    pub async fn submit_registered(&mut self, buf: RegisteredBuf) -> Result<usize, Refused> {
        self.submit_registered_range(buf, ..).await
    }

    /// [`submit_registered`](Self::submit_registered) of the bytes `range` of `buf`.
    pub async fn submit_registered_range(
        &mut self,
        buf: RegisteredBuf,
        range: impl RangeBounds<usize>,
    ) -> Result<usize, Refused> {
        let (start, end) = match crate::socket::bounds(&range, buf.len()) {
            Ok(b) => b,
            Err(error) => return Err(Refused { error, buf }),
        };
        let mut held = Unposted {
            buf: Some(buf),
            from: start,
            returns: self.returns(),
        };
        let mut refused = None;
        let posted = poll_fn(|cx| {
            self.events().drive(cx, Way::Write, || {
                let buf = held
                    .buf
                    .take()
                    .expect("the buffer is held until it is posted");
                self.socket()
                    .submit_registered_range(buf, start..end)
                    .map_err(|r| {
                        let kind = r.error.kind();
                        if kind == io::ErrorKind::WouldBlock {
                            held.buf = Some(r.buf);
                        } else {
                            refused = Some(r);
                        }
                        io::Error::from(kind)
                    })
            })
        })
        .await;
        match (posted, refused) {
            (Ok(n), _) => Ok(n),
            (Err(_), Some(r)) => Err(r),
            // The reactor failed to watch the socket: the buffer is still held.
            (Err(error), None) => Err(Refused {
                error,
                buf: held.buf.take().expect("a buffer waiting for room is held"),
            }),
        }
    }

    /// The oldest buffer submitted with [`submit_registered`](Self::submit_registered),
    /// once the device has finished with it (or the stream failed: its `result` says so),
    /// waiting without blocking a worker; `None` when the stream holds none.
    ///
    /// Cancellation safe: the buffers stay with the stream until a call returns them.
    pub async fn completed_registered(&mut self) -> io::Result<Option<CompletedWrite>> {
        if let Some(done) = lock(self.returns()).early.pop_front() {
            return Ok(Some(done));
        }
        poll_fn(|cx| {
            self.events().drive(cx, Way::Write, || loop {
                match self.socket().completed_registered() {
                    Some(done) => {
                        if lock(self.returns()).writes.remove(&address(&done.buf)) {
                            // A buffer of a `write_registered` whose future was dropped.
                            continue;
                        }
                        return Ok(Some(done));
                    }
                    None if self.socket().registered_in_flight() == 0 => return Ok(None),
                    None => return Err(io::ErrorKind::WouldBlock.into()),
                }
            })
        })
        .await
    }

    /// How many submitted buffers the stream holds, not yet handed back by
    /// [`completed_registered`](Self::completed_registered) (with those of dropped
    /// `write_registered` futures until the device has let them go).
    pub fn registered_in_flight(&self) -> usize {
        self.socket().registered_in_flight() + lock(self.returns()).early.len()
    }

    /// Sorts a buffer the socket handed back to `write_registered` waiting for `identity`:
    /// its own is returned; one of a dropped `write_registered` future is let go; one of
    /// `submit_registered` waits in the early returns.
    fn sort_returned(&self, done: CompletedWrite, identity: usize) -> Option<CompletedWrite> {
        let mut returns = lock(self.returns());
        let at = address(&done.buf);
        if at == identity {
            returns.writes.remove(&at);
            return Some(done);
        }
        if !returns.writes.remove(&at) {
            returns.early.push_back(done);
        }
        None
    }

    /// Blocks until the submitted buffer at `identity` comes back, sorting the others on
    /// the way (its sends complete, or the stream fails and it comes back with the error).
    fn wait_for(&self, identity: usize) -> CompletedWrite {
        loop {
            match self.socket().completed_registered() {
                Some(done) => {
                    if let Some(own) = self.sort_returned(done, identity) {
                        return own;
                    }
                }
                None => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
    }
}
