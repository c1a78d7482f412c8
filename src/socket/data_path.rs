//! The data path: the caller's bytes into the send ring (or straight to the provider, inline
//! or lent) and out of the receive ring. Each write route fills its work requests its own way
//! and posts them through the one post path (`post`).
#![forbid(unsafe_code)]

use super::conn::Connection;
use super::lend::Lend;
use super::pool::LocalSlice;
use super::vectored;
use super::warm::warm;
use crate::protocol::{CopySpan, StreamError};
use crate::verbs::MemoryRegion;
use std::io::{IoSlice, IoSliceMut};

/// The smallest write whose bytes are lent (posted from the caller's buffer) on a device
/// that lends inline sends, when nothing waits for the transport (see `lend`). Lending costs about 1,800 instructions a post (callgrind,
/// uiwarp, 4 KiB writes: 1.3 K more per message than copying into the ring), more than
/// copying 4 KiB; by 16 KiB the copy costs more than that.
const LEND_FROM: usize = 16 * 1024;

impl Connection {
    #[inline]
    pub(crate) fn write(&mut self, buf: &[u8]) -> Result<usize, StreamError> {
        if let Some(message) = self.engine.write_inline(buf.len()) {
            // A lone small message: straight to the queue pair (see `post_inline_write`).
            return self.post_inline_write(message, buf).map(|()| buf.len());
        }
        if !self.lends(buf.len()) {
            let (mr, warmer) = (&self.res.send_area, &mut self.res.send_warm);
            let mut copied = Ok(());
            let written = self.engine.write(buf.len(), |s| {
                warm(warmer, mr, s.ring_offset + s.len);
                keep_first_error(&mut copied, copy_to_ring(mr, buf, s));
            });
            return self.copied(written, copied);
        }
        // Lend: the ring space is reserved but not written; the messages are posted now,
        // while `buf` is borrowed (see `lend`).
        let mut spans = std::mem::take(&mut self.lent_spans);
        spans.clear();
        let written = self.engine.write(buf.len(), |s| spans.push(s));
        let mut copied = Ok(());
        if written.is_ok() && self.post_ops_with(Lend::new(buf, &spans)).is_err() {
            // The engine has failed; anything still queued must find its bytes in the ring.
            for &s in &spans {
                keep_first_error(&mut copied, copy_to_ring(&self.res.send_area, buf, s));
            }
        }
        self.lent_spans = spans;
        self.copied(written, copied)
    }

    /// The result of a call whose bytes went through the rings: `result` when every copy
    /// succeeded; otherwise the stream is aborted (what was queued would carry the wrong
    /// bytes, or a read's bytes left the ring without reaching the caller) and the call
    /// fails with the copy's error.
    #[inline(always)]
    pub(crate) fn copied<T>(
        &mut self,
        result: Result<T, StreamError>,
        copied: Result<(), crate::verbs::Error>,
    ) -> Result<T, StreamError> {
        match copied {
            Ok(()) => result,
            Err(e) => {
                let error = StreamError::Copy(e.to_string());
                self.engine.abort(error.clone());
                Err(error)
            }
        }
    }

    /// Whether a write of `len` bytes is lent (see `lend`): on a kernel device (whose queue
    /// pairs copy inline bytes when the request is posted), a write the engine sends inline,
    /// as rsocket sends one from the caller's buffer; where the queue pair lends inline
    /// sends, a write of at least [`LEND_FROM`] and above the inline threshold while nothing
    /// waits for the transport.
    fn lends(&self, len: usize) -> bool {
        let threshold = self.opts.stream.inline_threshold() as usize;
        if self.res.lend_limit == 0 {
            return len <= threshold;
        }
        self.res.lend_limit > threshold
            && len >= LEND_FROM.max(threshold + 1)
            && self.res.qp.send_backlog() == Some(0)
    }

    /// A gathering write: the bytes of `bufs` in order, as [`Connection::write`] takes one
    /// buffer (one message for as much as fits one).
    pub(crate) fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> Result<usize, StreamError> {
        let mut nonempty = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (nonempty.next(), nonempty.next()) {
            // One buffer after all: the plain write, which may lend it.
            return self.write(only);
        }
        let (mr, warmer) = (&self.res.send_area, &mut self.res.send_warm);
        let total = vectored::total_len(bufs.iter().map(|b| b.len()));
        let mut copied = Ok(());
        let written = self.engine.write(total, |s| {
            warm(warmer, mr, s.ring_offset + s.len);
            keep_first_error(&mut copied, vectored::gather_to_ring(mr, bufs, s));
        });
        self.copied(written, copied)
    }

    /// A scattering read into `bufs` in order.
    pub(crate) fn read_vectored(
        &mut self,
        bufs: &mut [IoSliceMut<'_>],
    ) -> Result<usize, StreamError> {
        let mr = self.res.reading_ring(self.engine.reads_old_recv_ring());
        let total = vectored::total_len(bufs.iter().map(|b| b.len()));
        let mut copied = Ok(());
        let result = self.engine.read(total, |s| {
            keep_first_error(&mut copied, vectored::scatter_from_ring(mr, bufs, s));
        });
        let result = self.copied(result, copied);
        self.last_read = *result.as_ref().unwrap_or(&0);
        self.give_back_read_ring();
        result
    }

    /// Copies up to `buf.len()` received bytes out (`peek`: leaves them queued).
    #[inline]
    pub(crate) fn read(&mut self, buf: &mut [u8], peek: bool) -> Result<usize, StreamError> {
        let mr = self.res.reading_ring(self.engine.reads_old_recv_ring());
        let len = buf.len();
        // In range by the engine's arithmetic; a failure (a bug) aborts the stream. Two
        // closures, so that each has one caller.
        let mut copied = Ok(());
        let result = if peek {
            self.engine.peek(len, |s| {
                keep_first_error(&mut copied, copy_from_ring(mr, buf, s))
            })
        } else {
            self.engine.read(len, |s| {
                keep_first_error(&mut copied, copy_from_ring(mr, buf, s))
            })
        };
        let result = self.copied(result, copied);
        self.last_read = *result.as_ref().unwrap_or(&0);
        self.give_back_read_ring();
        result
    }
}

impl Connection {
    /// Deregisters the receive ring replaced last once every byte in it was read.
    #[inline]
    fn give_back_read_ring(&mut self) {
        if self.res.old_recv_mr.is_some() && !self.engine.holds_old_recv_ring() {
            self.res.old_recv_mr = None;
        }
    }
}

/// Keeps the first copy error of a call in `first` (a call's copies go on, but its result
/// is that error).
#[inline(always)]
pub(crate) fn keep_first_error(
    first: &mut Result<(), crate::verbs::Error>,
    copy: Result<(), crate::verbs::Error>,
) {
    if first.is_ok() {
        *first = copy;
    }
}

/// Copies the piece `span` of the receive ring to its place in `buf` (inlined into the
/// read, where it is the only work per message besides the engine's counters).
#[inline(always)]
fn copy_from_ring(
    mr: &MemoryRegion,
    buf: &mut [u8],
    span: CopySpan,
) -> Result<(), crate::verbs::Error> {
    mr.read_at(
        span.ring_offset,
        &mut buf[span.data_offset..span.data_offset + span.len],
    )
}

/// Copies the piece `span` of `buf` to its place in the send ring.
fn copy_to_ring(mr: &LocalSlice, buf: &[u8], span: CopySpan) -> Result<(), crate::verbs::Error> {
    mr.write_at(
        span.ring_offset,
        &buf[span.data_offset..span.data_offset + span.len],
    )
}
