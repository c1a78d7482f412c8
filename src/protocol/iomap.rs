//! rsocket's iomap: one-sided writes (`riowrite`) into windows of memory the peer mapped
//! (`riomap`) at offsets of its choosing, ordered with the stream.
//!
//! Each side may offer an *iomap table* in its hello: flag bit 1 and a table size in
//! rsocket's scaled 8-bit encoding ([`iomap_size_from_scale`]). The table lies in the same
//! registration as the 32-byte target list, right after it, with the same rkey: entry `i` at
//! `target_sgl.addr + 16 * target_sgl.length + 24 * i`. An entry ([`IomapEntry`]) is
//! `{offset u64, addr u64, key u32, length u32}` in the table owner's byte order. A side that
//! maps a window writes the entry into a free slot of the *peer's* table with an RDMA WRITE
//! WITH IMM (write+send mode: WRITE then SEND) whose message is `IOMAP_SGL | index`; the slot
//! owner then writes into the window with plain RDMA WRITEs (no immediate: the window's owner
//! learns of them only through the stream). rsocket's message takes a credit on the sending
//! side; this engine gives it back on receipt (rsocket's receiver never does).
//!
//! Unmapping, which rsocket never tells the peer, is sent here as a zeroed entry in the same
//! slot (an rsocket writer then finds no window there); a window's memory stays registered
//! until the connection closes, so that a write already on its way lands harmlessly.
#![forbid(unsafe_code)]

use super::config::CONTROL_SLOTS;
use super::engine::{StreamEngine, TARGET_LIST_LEN};
use super::error::StreamError;
use super::hello::{Hello, FLAG_IOMAP};
use super::msg::{ByteOrder, Message, RemoteSge, SGE_LEN};
use super::op::{CopySpan, Op, Payload, RingSpan, WrId};
use std::collections::VecDeque;

/// Bytes of one iomap table entry (`struct rs_iomap`).
pub const IOMAP_ENTRY_LEN: usize = 24;
/// An iowrite asks for a completion at least once in this many posts (see
/// [`StreamEngine::count_iowrite_signal`]; rsocket signals every one).
pub(crate) const IOWRITE_SIGNAL_INTERVAL: u16 = 16;
/// The largest table the 8-bit scaled size can announce (127 * 256 entries).
pub const MAX_IOMAP_ENTRIES: u16 = 127 << 8;

/// The table size a scaled hello byte announces (rsocket's `rs_scale_to_value(v, 8)`):
/// 0..=128 as they are, above that `(v & 127) * 256`.
pub fn iomap_size_from_scale(scale: u8) -> u16 {
    if scale <= 128 {
        u16::from(scale)
    } else {
        u16::from(scale & 127) << 8
    }
}

/// The scaled hello byte for a table of `entries` (rsocket's `rs_value_to_scale(v, 8)`);
/// sizes above 128 round down to a multiple of 256.
pub fn iomap_scale(entries: u16) -> u8 {
    let entries = entries.min(MAX_IOMAP_ENTRIES);
    if entries <= 128 {
        entries as u8
    } else {
        (128 | (entries >> 8)) as u8
    }
}

/// One iomap table entry: the window's offset in the mapper's offset space and where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IomapEntry {
    /// The offset a writer names to reach the window's first byte.
    pub offset: u64,
    /// The window's address, rkey and length (length 0: the slot is free).
    pub window: RemoteSge,
}

impl IomapEntry {
    /// The 24 bytes in `order`.
    pub fn encode(&self, order: ByteOrder) -> [u8; IOMAP_ENTRY_LEN] {
        let mut b = [0u8; IOMAP_ENTRY_LEN];
        b[..8].copy_from_slice(&match order {
            ByteOrder::Little => self.offset.to_le_bytes(),
            ByteOrder::Big => self.offset.to_be_bytes(),
        });
        b[8..].copy_from_slice(&self.window.encode(order));
        b
    }

    /// Decodes 24 bytes in `order`; `None` when `bytes` is shorter.
    pub fn decode(bytes: &[u8], order: ByteOrder) -> Option<Self> {
        let offset: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
        let window = RemoteSge::decode(bytes.get(8..IOMAP_ENTRY_LEN)?, order)?;
        let offset = match order {
            ByteOrder::Little => u64::from_le_bytes(offset),
            ByteOrder::Big => u64::from_be_bytes(offset),
        };
        Some(IomapEntry { offset, window })
    }

    /// Whether `[offset, offset + len)` lies wholly inside this window.
    fn holds(&self, offset: u64, len: u64) -> bool {
        self.window.length != 0
            && offset >= self.offset
            && offset - self.offset <= u64::from(self.window.length)
            && len <= u64::from(self.window.length) - (offset - self.offset)
    }
}

/// The iomap state of one connection.
#[derive(Debug, Default)]
pub(crate) struct IomapState {
    /// Entries in our table (what the peer may map for us to write into).
    pub(crate) local_size: u16,
    /// The peer's table: address and key, `length` = its number of entries (0: none).
    pub(crate) peer_table: RemoteSge,
    /// Which slots of the peer's table our windows hold.
    pub(crate) used: Vec<bool>,
    /// The peer's windows, checked, by slot of our table (length 0: free).
    pub(crate) windows: Vec<IomapEntry>,
    /// Slots of our table the peer announced, whose entries the driver is to read.
    pub(crate) updates: VecDeque<u16>,
}

impl IomapState {
    pub(crate) fn new(local_size: u16) -> Self {
        IomapState {
            local_size,
            windows: vec![IomapEntry::default(); usize::from(local_size)],
            ..IomapState::default()
        }
    }

    /// Takes the peer's table from its hello (none unless it sets the iomap flag).
    pub(crate) fn on_connected(&mut self, peer: &Hello) {
        let entries = if peer.flags & FLAG_IOMAP != 0 {
            iomap_size_from_scale(peer.target_iomap_size)
        } else {
            0
        };
        // The hello's checks keep the target list's end inside the address space; a table
        // that would run past it is treated as none.
        let start = peer.target_sgl.addr + SGE_LEN as u64 * u64::from(peer.target_sgl.length);
        let fits = start
            .checked_add(IOMAP_ENTRY_LEN as u64 * u64::from(entries))
            .is_some();
        let entries = if fits { entries } else { 0 };
        self.peer_table = RemoteSge::new(start, peer.target_sgl.key, u32::from(entries));
        self.used = vec![false; usize::from(entries)];
    }
}

impl StreamEngine {
    /// Entries in our iomap table (the peer maps its windows into them).
    pub fn iomap_local_size(&self) -> u16 {
        self.iomap.local_size
    }

    /// Entries in the peer's iomap table (how many windows we may map for it; 0 until
    /// connected, and when the peer offers none).
    pub fn iomap_peer_size(&self) -> u16 {
        self.iomap.peer_table.length as u16
    }

    /// Byte offset of slot `index` of our table in the target-list registration.
    pub fn iomap_entry_offset(index: u16) -> usize {
        TARGET_LIST_LEN + IOMAP_ENTRY_LEN * usize::from(index)
    }

    /// The next slot of our table the peer announced (`IOMAP_SGL`), whose 24 bytes the driver
    /// reads at [`iomap_entry_offset`](Self::iomap_entry_offset) and passes to
    /// [`on_iomap_entry`](Self::on_iomap_entry), right after feeding the completion.
    pub fn take_iomap_update(&mut self) -> Option<u16> {
        self.iomap.updates.pop_front()
    }

    /// An `IOMAP_SGL` message arrived for slot `index` (from `on_receive`).
    pub(crate) fn on_iomap_message(&mut self, index: u32) {
        // The message took a credit at its sender, like a data message: give it back.
        self.rseq_no = self.rseq_no.wrapping_add(1);
        if index >= u32::from(self.iomap.local_size) {
            self.fail(StreamError::Protocol(format!(
                "the peer announced iomap entry {index}, but our table has {} entries \
                 (a broken or hostile rsocket peer)",
                self.iomap.local_size
            )));
            return;
        }
        self.iomap.updates.push_back(index as u16);
    }

    /// The 24 bytes of our table's slot `index`, as the peer wrote them: checked and adopted
    /// (a length of 0 frees the slot). A malformed entry fails the stream.
    pub fn on_iomap_entry(&mut self, index: u16, bytes: &[u8; IOMAP_ENTRY_LEN]) {
        if usize::from(index) >= self.iomap.windows.len() {
            return;
        }
        let entry = IomapEntry::decode(bytes, self.cfg.byte_order).unwrap_or_default();
        let len = u64::from(entry.window.length);
        if entry.window.addr.checked_add(len).is_none() || entry.offset.checked_add(len).is_none() {
            self.fail(StreamError::Protocol(format!(
                "the peer mapped an iomap window of {len} bytes at address {:#x}, offset {:#x}, \
                 whose range overflows (a broken or hostile rsocket peer)",
                entry.window.addr, entry.offset
            )));
            return;
        }
        self.iomap.windows[usize::from(index)] = entry;
    }

    /// The peer's window that holds `[offset, offset + len)` wholly (`len` at least 1), if
    /// one does; the first such slot, as rsocket looks them up.
    pub fn iomap_window(&self, offset: u64, len: u64) -> Option<IomapEntry> {
        self.iomap
            .windows
            .iter()
            .find(|w| w.holds(offset, len.max(1)))
            .copied()
    }

    /// A free slot of the peer's table for a new window, reserved; released by
    /// [`iomap_unmap`](Self::iomap_unmap) (or [`iomap_release`](Self::iomap_release)).
    pub fn iomap_reserve(&mut self) -> Result<u16, StreamError> {
        self.write_allowed()?;
        if self.iomap.peer_table.length == 0 {
            return Err(StreamError::Iomap(
                "the peer offers no iomap table: it must set RDMA_IOMAPSIZE (rdmasock: \
                 SocketOptionsBuilder::iomap_size) before connecting"
                    .into(),
            ));
        }
        let Some(index) = self.iomap.used.iter().position(|u| !u) else {
            return Err(StreamError::Iomap(format!(
                "all {} entries of the peer's iomap table are mapped: unmap a window first, \
                 or have the peer ask for a bigger table",
                self.iomap.peer_table.length
            )));
        };
        self.iomap.used[index] = true;
        Ok(index as u16)
    }

    /// Frees slot `index` of the peer's table without telling the peer (the connection is
    /// over, or the entry was never sent).
    pub fn iomap_release(&mut self, index: u16) {
        if let Some(u) = self.iomap.used.get_mut(usize::from(index)) {
            *u = false;
        }
    }

    /// Sends an entry into reserved slot `index` of the peer's table: an `IOMAP_SGL`
    /// message whose 24 bytes are staged in the send ring (`copy` is told where, with
    /// `data_offset` into the entry's bytes, which
    /// [`iomap_entry_bytes`](Self::iomap_entry_bytes) gives). [`StreamError::WouldBlock`]
    /// when there is no room or credit yet.
    pub fn iomap_send(
        &mut self,
        index: u16,
        mut copy: impl FnMut(CopySpan),
    ) -> Result<(), StreamError> {
        self.write_allowed()?;
        if usize::from(index) >= self.iomap.used.len() {
            return Err(StreamError::Iomap(format!(
                "iomap slot {index} is outside the peer's table of {} entries",
                self.iomap.used.len()
            )));
        }
        let len = IOMAP_ENTRY_LEN;
        let can = self.sqe_avail >= self.sqes_per_message()
            && self.sbuf_avail >= len
            && self.sseq_no != self.sseq_comp
            && self.send_resize.is_none();
        if !can {
            return Err(StreamError::WouldBlock);
        }
        let (first, second) = self.take_ring(len, &mut copy);
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= self.sqes_per_message();
        let signaled = self.count_signal();
        let addr = self.iomap.peer_table.addr + (IOMAP_ENTRY_LEN * usize::from(index)) as u64;
        let inline = len <= self.cfg.inline_threshold as usize;
        self.post_write_msg(
            Payload::SendRing { first, second },
            Message::IomapSgl(u32::from(index)).encode(),
            addr,
            self.iomap.peer_table.key,
            inline,
            signaled,
            false,
            len,
        );
        Ok(())
    }

    /// The 24 bytes of `entry` as the peer reads its table.
    pub fn iomap_entry_bytes(&self, entry: &IomapEntry) -> [u8; IOMAP_ENTRY_LEN] {
        entry.encode(self.peer_order)
    }

    /// Sends a zeroed entry into slot `index` of the peer's table (our window there is gone)
    /// and frees the slot; `copy` as for [`iomap_send`](Self::iomap_send), from 24 zero
    /// bytes. On a closed or failed connection the slot is just freed.
    pub fn iomap_unmap(
        &mut self,
        index: u16,
        copy: impl FnMut(CopySpan),
    ) -> Result<(), StreamError> {
        if self.write_allowed().is_err() {
            self.iomap_release(index);
            return Ok(());
        }
        self.iomap_send(index, copy)?;
        self.iomap_release(index);
        Ok(())
    }

    /// rsocket's `riowrite`: up to `len` bytes to the peer's window at `offset`, as plain
    /// RDMA WRITEs ordered with the stream, staged in the send ring (`copy` as for
    /// [`write`](Self::write)). The whole range must lie inside one window the peer mapped,
    /// or nothing is written and [`StreamError::Iomap`] says why (the connection stays).
    /// Returns the bytes accepted, or [`StreamError::WouldBlock`] when none could be.
    pub fn iowrite(
        &mut self,
        offset: u64,
        len: usize,
        mut copy: impl FnMut(CopySpan),
    ) -> Result<usize, StreamError> {
        self.write_allowed()?;
        if len == 0 {
            return Ok(0);
        }
        let Some(window) = self.iomap_window(offset, len as u64) else {
            return Err(self.iomap_miss(offset, len));
        };
        let mut done = 0;
        while done < len
            && self.sqe_avail >= 1
            && self.sbuf_avail >= self.send_low_water()
            && self.send_resize.is_none()
        {
            let xfer = (len - done)
                .min(self.cfg.max_transfer as usize)
                .min(self.sbuf_avail);
            let (first, second) = self.take_ring(xfer, &mut |s: CopySpan| {
                copy(CopySpan {
                    data_offset: done + s.data_offset,
                    ..s
                })
            });
            self.sqe_avail -= 1;
            let signaled = self.count_iowrite_signal();
            let wr_id = self.track_iowrite(xfer, signaled);
            let remote = window.window.addr + (offset - window.offset) + done as u64;
            self.ops.push_back(Op::Write {
                wr_id,
                payload: Payload::SendRing { first, second },
                remote_addr: remote,
                rkey: window.window.key,
                inline: xfer <= self.cfg.inline_threshold as usize,
                signaled,
            });
            done += xfer;
        }
        if done == 0 && len > 0 {
            Err(StreamError::WouldBlock)
        } else {
            Ok(done)
        }
    }

    /// `track` for one iowrite of `bytes` (one work request, no control
    /// slot): when the newest entry is a run of unsignalled iowrites of the same stream
    /// position, the write joins it instead of taking an entry of its own (a signalled one
    /// ends the run), so the completion that retires the run pops one entry for all of them.
    /// A failed completion of a write inside a run retires the whole run (see
    /// [`on_send_completion`](Self::on_send_completion)).
    #[inline]
    pub(crate) fn track_iowrite(&mut self, bytes: usize, signaled: bool) -> WrId {
        let seq = self.next_seq;
        let message = self.sseq_no;
        match self.pending.back_mut() {
            Some(run)
                if run.iowrites > 0
                    && !run.signaled
                    && !run.fence
                    && run.message == message
                    && run.seq + 1 == seq =>
            {
                self.next_seq += 1;
                self.unfenced = true;
                run.seq = seq;
                run.iowrites += 1;
                run.sqes += 1;
                run.bytes += bytes;
                run.signaled = signaled;
                WrId::send(seq)
            }
            _ => {
                let wr_id = self.track(false, bytes, false, signaled);
                if let Some(p) = self.pending.back_mut() {
                    p.iowrites = 1;
                }
                wr_id
            }
        }
    }

    /// [`count_signal`](Self::count_signal) for an iowrite: signalled at least once every
    /// [`IOWRITE_SIGNAL_INTERVAL`] posts (or the configured interval, if longer; at most a
    /// quarter of the send queue), and whenever the post leaves the queue or the ring short.
    /// Nothing waits for an iowrite's own completion (the peer is not told of it, and a
    /// flush or close asks for the completion it needs), so a completion is asked for only
    /// to give the send queue and the ring space back in batches: the writer then polls the
    /// completion queue and feeds a completion once every several iowrites instead of after
    /// each. An unsignalled write that fails still completes, with its error, and fails the
    /// connection as any failed send does.
    pub(crate) fn count_iowrite_signal(&mut self) -> bool {
        let quarter = ((u32::from(self.cfg.send_queue_depth) - CONTROL_SLOTS) / 4).max(1);
        let interval = u32::from(IOWRITE_SIGNAL_INTERVAL)
            .min(quarter)
            .max(u32::from(self.cfg.signal_interval));
        self.unsignaled = self.unsignaled.saturating_add(1);
        let starved =
            self.sqe_avail < self.sqes_per_message() || self.sbuf_avail < self.send_low_water();
        let signaled = u32::from(self.unsignaled) >= interval || starved;
        if signaled {
            self.unsignaled = 0;
        }
        signaled
    }

    /// Why no window holds `[offset, offset + len)`.
    pub(super) fn iomap_miss(&self, offset: u64, len: usize) -> StreamError {
        let end = offset.saturating_add(len as u64);
        match self.iomap.windows.iter().find(|w| w.holds(offset, 1)) {
            Some(w) => StreamError::Iomap(format!(
                "an iowrite of {len} bytes at offset {offset:#x} runs past the end of the \
                 peer's window [{:#x}, {:#x}) (to {end:#x}): nothing was written; write \
                 inside the window",
                w.offset,
                w.offset + u64::from(w.window.length)
            )),
            None => StreamError::Iomap(format!(
                "no window the peer mapped holds offset {offset:#x} (an iowrite of {len} \
                 bytes): nothing was written; the peer has not mapped it, or unmapped it \
                 ({} of our {} iomap slots hold a window)",
                self.iomap
                    .windows
                    .iter()
                    .filter(|w| w.window.length != 0)
                    .count(),
                self.iomap.local_size
            )),
        }
    }

    /// Takes `len` bytes of send ring at its head (wrapping), telling `copy` each piece.
    fn take_ring(
        &mut self,
        len: usize,
        copy: &mut impl FnMut(CopySpan),
    ) -> (RingSpan, Option<RingSpan>) {
        let first_len = len.min(self.sring_len - self.sbuf_head);
        let first = RingSpan {
            offset: self.sbuf_head,
            len: first_len,
        };
        copy(CopySpan {
            data_offset: 0,
            ring_offset: first.offset,
            len: first_len,
        });
        let second = (len > first_len).then(|| {
            copy(CopySpan {
                data_offset: first_len,
                ring_offset: 0,
                len: len - first_len,
            });
            RingSpan {
                offset: 0,
                len: len - first_len,
            }
        });
        self.sbuf_head = (self.sbuf_head + len) % self.sring_len;
        self.sbuf_avail -= len;
        (first, second)
    }
}

#[cfg(test)]
#[path = "iomap_tests.rs"]
mod tests;
