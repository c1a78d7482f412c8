//! rsocket's iomap on [`RdmaStream`]: the same windows and one-sided writes as
//! [`RdmaSocket::iomap`](crate::RdmaSocket::iomap) and
//! [`RdmaSocket::iowrite`](crate::RdmaSocket::iowrite) (docs/IOMAP.md), waiting for room to
//! send on the stream's write readiness instead of blocking a runtime thread.
#![forbid(unsafe_code)]

use super::events::Way;
use super::stream::RdmaStream;
use crate::socket::MappedWindow;
use std::future::poll_fn;
use std::io;

impl RdmaStream {
    /// rsocket's `riomap` ([`RdmaSocket::iomap`](crate::RdmaSocket::iomap)): registers a
    /// zeroed window of `len` bytes and maps it for the peer's iowrites at `offset` (`None`:
    /// the window's address), the entry ordered with the stream. Waits for room to send
    /// like a write. Cancellation: a future dropped before it completes maps nothing (the
    /// window it registered meanwhile is let go).
    pub async fn iomap(&self, len: usize, offset: Option<u64>) -> io::Result<MappedWindow> {
        poll_fn(|cx| {
            self.events()
                .drive(cx, Way::Write, || self.socket().iomap(len, offset))
        })
        .await
    }

    /// rsocket's `riowrite` ([`RdmaSocket::iowrite`](crate::RdmaSocket::iowrite)): writes
    /// up to all of `buf` into the peer's mapped window at `offset`, ordered with the stream;
    /// returns the bytes written (fewer when the send ring holds fewer, like `write`), after
    /// waiting for room when none is free. A range outside every window the peer mapped is
    /// refused with `InvalidInput`, nothing written. Cancellation safe: a dropped future
    /// wrote nothing.
    pub async fn iowrite(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        poll_fn(|cx| {
            self.events()
                .drive(cx, Way::Write, || self.socket().iowrite(buf, offset))
        })
        .await
    }

    /// Entries of the peer's iomap table: how many windows this side may map.
    pub fn iomap_slots(&self) -> usize {
        self.socket().iomap_slots()
    }
}
