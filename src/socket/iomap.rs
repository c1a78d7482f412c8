//! rsocket's iomap on a socket: [`RdmaSocket::iomap`] exposes a window of memory the socket
//! registers (remotely writable) at an offset the peer names, and [`RdmaSocket::iowrite`]
//! writes into a window the peer mapped, as plain RDMA WRITEs ordered with the stream
//! (rsocket's `riomap`/`riowrite`/`riounmap`; the protocol's side is `crate::protocol`'s
//! iomap, the wire layout docs/IOMAP.md).
#![forbid(unsafe_code)]

use super::census::Entry;
use super::conn::Connection;
use super::data_path::keep_first_error;
use super::rdma_socket::RdmaSocket;
use super::shared::{Direction, Shared};
use super::warm::warm;
use super::zero_copy::bounds;
use crate::buffers::RegisteredBuf;
use crate::protocol::IOMAP_ENTRY_LEN;
use crate::protocol::{CopySpan, IomapEntry, RemoteSge, StreamEngine, StreamError};
use crate::verbs::{AccessFlags, MemoryRegion};
use std::fmt;
use std::io;
use std::ops::RangeBounds;
use std::sync::{Arc, Weak};

const REMOTE: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_WRITE);

/// A window's registration, counted in the census (as one region of its length) while it
/// is registered.
#[derive(Debug)]
pub(crate) struct WindowMemory {
    region: MemoryRegion,
    _census: Entry,
}

impl std::ops::Deref for WindowMemory {
    type Target = MemoryRegion;
    fn deref(&self) -> &MemoryRegion {
        &self.region
    }
}

/// The windows a connection mapped, kept registered until it closes: a write the peer
/// posted before our unmapping reached it still lands in memory we hold.
#[derive(Debug, Default)]
pub(crate) struct Windows {
    held: Vec<Arc<WindowMemory>>,
}

impl Windows {
    fn keep(&mut self, memory: &Arc<WindowMemory>) {
        if !self.held.iter().any(|m| Arc::ptr_eq(m, memory)) {
            self.held.push(Arc::clone(memory));
        }
    }
}

/// A window of registered memory the peer may write into with its `iowrite` (rsocket's
/// `riowrite`) at offsets `offset()..offset() + len()`. The socket owns the memory: read what
/// arrived with [`read_at`](Self::read_at) (a copy: the peer may be writing meanwhile, so no
/// reference to it is handed out). Unmap it with [`unmap`](Self::unmap) (dropping it unmaps
/// too, without waiting for room to tell the peer).
pub struct MappedWindow {
    /// Not a strong handle: a window does not keep its connection open.
    shared: Weak<Shared>,
    memory: Arc<WindowMemory>,
    index: u16,
    offset: u64,
    mapped: bool,
}

impl fmt::Debug for MappedWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedWindow")
            .field("offset", &self.offset)
            .field("len", &self.memory.len())
            .field("slot", &self.index)
            .finish()
    }
}

impl MappedWindow {
    /// The offset the peer names to write the window's first byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The window's length in bytes.
    pub fn len(&self) -> usize {
        self.memory.len()
    }

    /// Always false: a window has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.memory.len() == 0
    }

    /// Copies the window's bytes at `pos` (from its start) into `buf`. An error when
    /// `pos + buf.len()` runs past the window.
    pub fn read_at(&self, pos: usize, buf: &mut [u8]) -> io::Result<()> {
        self.memory
            .read_at(pos, buf)
            .map_err(|e| window_range(e, pos, buf.len(), self.len()))
    }

    /// The window's byte at `pos`, read anew on every call: what a loop that waits for the
    /// peer's `iowrite` to set a flag byte reads (one load, no copy). An error when `pos` is
    /// past the window.
    #[inline]
    pub fn byte_at(&self, pos: usize) -> io::Result<u8> {
        self.memory
            .load_u8(pos)
            .map_err(|e| window_range(e, pos, 1, self.len()))
    }

    /// Copies `buf` into the window at `pos` (the owner's own writes, e.g. to reset a flag
    /// byte the peer sets). An error when it runs past the window.
    pub fn write_at(&self, pos: usize, buf: &[u8]) -> io::Result<()> {
        self.memory
            .write_at(pos, buf)
            .map_err(|e| window_range(e, pos, buf.len(), self.len()))
    }

    /// Unmaps the window: the peer's table slot is cleared (the peer's later `iowrite`s to
    /// it fail at the peer), waiting for room to send that like a write. The memory stays
    /// registered, unreachable, until the connection closes. On a closed connection it only
    /// frees the slot.
    pub fn unmap(mut self) -> io::Result<()> {
        self.mapped = false;
        let index = self.index;
        match self.shared.upgrade() {
            Some(shared) => shared.run(Direction::Write, |c| c.iomap_unmap(index)),
            None => Ok(()),
        }
    }
}

impl Drop for MappedWindow {
    fn drop(&mut self) {
        if !self.mapped {
            return;
        }
        if let Some(shared) = self.shared.upgrade() {
            // One attempt, never a wait: when there is no room now the slot stays taken.
            let mut g = shared.lock();
            let _ = g.iomap_unmap(self.index);
            let _ = g.progress_after_write();
        }
    }
}

/// A window access outside the window, said as such.
fn window_range(e: crate::verbs::Error, pos: usize, len: usize, window: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{len} bytes at {pos} run past the mapped window of {window} bytes ({e}): stay \
             inside the window"
        ),
    )
}

impl RdmaSocket {
    /// rsocket's `riomap`: registers a window of `len` bytes (zeroed, remotely writable) and
    /// maps it for the peer's `iowrite` at `offset` (`None`: the window's address, as
    /// rsocket's offset -1), by writing its entry into a slot of the peer's iomap table,
    /// ordered with the stream (a write after this call reaches the peer after the entry).
    /// Waits for room to send like a write. Errors: the peer offers no table (it must ask
    /// for one: `RDMA_IOMAPSIZE`, [`SocketOptionsBuilder::iomap_size`](crate::socket::SocketOptionsBuilder::iomap_size)),
    /// every slot is mapped, `len` is 0 or above 4 GiB - 1, the offset range overflows, or
    /// the connection is closed.
    pub fn iomap(&self, len: usize, offset: Option<u64>) -> io::Result<MappedWindow> {
        let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        if len == 0 || u32::try_from(len).is_err() {
            return Err(invalid(format!(
                "an iomap window of {len} bytes: a window holds 1 to {} bytes",
                u32::MAX
            )));
        }
        let (memory, index) = {
            let mut g = self.shared.lock();
            let index = g.engine.iomap_reserve().map_err(|e| g.io_error(e))?;
            match g.res.device.pd().register(len, REMOTE) {
                Ok(region) => (
                    Arc::new(WindowMemory {
                        region,
                        _census: Entry::buffer(len as u64),
                    }),
                    index,
                ),
                Err(e) => {
                    g.engine.iomap_release(index);
                    return Err(io::Error::from(e));
                }
            }
        };
        let offset = offset.unwrap_or(memory.addr());
        if offset.checked_add(len as u64).is_none() {
            self.shared.lock().engine.iomap_release(index);
            return Err(invalid(format!(
                "an iomap window of {len} bytes at offset {offset:#x} runs past the end of the \
                 64-bit offset space: choose a lower offset"
            )));
        }
        let entry = IomapEntry {
            offset,
            window: RemoteSge::new(memory.addr(), memory.rkey().0, len as u32),
        };
        let sent = self
            .shared
            .run(Direction::Write, |c| c.iomap_send(index, &entry, &memory));
        if let Err(e) = sent {
            self.shared.lock().engine.iomap_release(index);
            return Err(e);
        }
        Ok(MappedWindow {
            shared: Arc::downgrade(&self.shared),
            memory,
            index,
            offset,
            mapped: true,
        })
    }

    /// rsocket's `riowrite`: writes `buf` into the peer's mapped window at `offset`, as
    /// RDMA WRITEs ordered with the stream (the peer sees them in its window, and stream
    /// bytes written after this call arrive after them). Returns the bytes written, like
    /// `write` (fewer when the send ring holds fewer; blocking and nonblocking as `write`).
    /// The whole range must lie inside one window the peer mapped: otherwise (past its end,
    /// an unmapped offset, a window the peer unmapped) an `InvalidInput` error says so,
    /// nothing is written and the connection stays.
    pub fn iowrite(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.shared
            .run(Direction::Write, |c| c.iowrite(buf, offset))
    }

    /// [`iowrite`](Self::iowrite) without a copy: writes all of `buf` into the peer's
    /// mapped window at `offset`, the device reading the bytes from the buffer (as
    /// [`write_registered`](Self::write_registered) does for stream bytes). Returns once
    /// every byte was written and the device has reported those writes complete, so `buf`
    /// may be changed or reused at once; blocking and nonblocking as `write_registered`.
    /// The whole range must lie inside one window the peer mapped, as for `iowrite`.
    pub fn iowrite_registered(&self, buf: &RegisteredBuf, offset: u64) -> io::Result<usize> {
        self.iowrite_registered_range(buf, .., offset)
    }

    /// [`iowrite_registered`](Self::iowrite_registered) of the bytes `range` of `buf`, to
    /// the peer's window at `offset` (the range's first byte lands there).
    pub fn iowrite_registered_range(
        &self,
        buf: &RegisteredBuf,
        range: impl RangeBounds<usize>,
        offset: u64,
    ) -> io::Result<usize> {
        let start = bounds(&range, buf.len())?.0;
        self.send_registered(buf, &range, |c, region, at, left| {
            c.iowrite_registered(region, offset + (at - start) as u64, at, left)
        })
    }

    /// Entries of the peer's iomap table: how many windows this side may map (0 when the
    /// peer asked for none).
    pub fn iomap_slots(&self) -> usize {
        usize::from(self.shared.lock().engine.iomap_peer_size())
    }
}

impl Connection {
    /// Sends `entry` into slot `index` of the peer's table, keeping `memory` registered.
    fn iomap_send(
        &mut self,
        index: u16,
        entry: &IomapEntry,
        memory: &Arc<WindowMemory>,
    ) -> Result<(), StreamError> {
        let bytes = self.engine.iomap_entry_bytes(entry);
        self.send_entry(index, bytes, false)?;
        self.windows.keep(memory);
        Ok(())
    }

    /// Clears slot `index` of the peer's table.
    pub(crate) fn iomap_unmap(&mut self, index: u16) -> Result<(), StreamError> {
        self.send_entry(index, [0u8; IOMAP_ENTRY_LEN], true)
    }

    fn send_entry(
        &mut self,
        index: u16,
        bytes: [u8; IOMAP_ENTRY_LEN],
        unmap: bool,
    ) -> Result<(), StreamError> {
        let (mr, warmer) = (&self.res.send_area, &mut self.res.send_warm);
        let mut copied = Ok(());
        let copy = |s: CopySpan| {
            warm(warmer, mr, s.ring_offset + s.len);
            let piece = &bytes[s.data_offset..s.data_offset + s.len];
            keep_first_error(&mut copied, mr.write_at(s.ring_offset, piece));
        };
        let sent = if unmap {
            self.engine.iomap_unmap(index, copy)
        } else {
            self.engine.iomap_send(index, copy)
        };
        self.copied(sent, copied)
    }

    /// One `iowrite` attempt (see [`StreamEngine::iowrite`]); a lone small one goes inline
    /// from `buf` at once ([`StreamEngine::iowrite_inline`]).
    fn iowrite(&mut self, buf: &[u8], offset: u64) -> Result<usize, StreamError> {
        if let Some(write) = self.engine.iowrite_inline(offset, buf.len()) {
            return self.post_inline_iowrite(write, buf).map(|()| buf.len());
        }
        let (mr, warmer) = (&self.res.send_area, &mut self.res.send_warm);
        let mut copied = Ok(());
        let written = self.engine.iowrite(offset, buf.len(), |s| {
            warm(warmer, mr, s.ring_offset + s.len);
            let piece = &buf[s.data_offset..s.data_offset + s.len];
            keep_first_error(&mut copied, mr.write_at(s.ring_offset, piece));
        });
        self.copied(written, copied)
    }

    /// Adopts the entries of our iomap table the peer announced (after a completion fed).
    pub(crate) fn take_iomap_updates(&mut self) -> io::Result<()> {
        while let Some(index) = self.engine.take_iomap_update() {
            let mut bytes = [0u8; IOMAP_ENTRY_LEN];
            self.res
                .target_mr
                .read_at(StreamEngine::iomap_entry_offset(index), &mut bytes)?;
            self.engine.on_iomap_entry(index, &bytes);
        }
        Ok(())
    }
}
