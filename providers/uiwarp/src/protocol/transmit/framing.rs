//! Cutting the current message into FPDUs: one DDP segment at a time, framed either from a
//! copy of its bytes or in place (the payload handed to the kernel straight from registered
//! memory, its CRC computed piece by piece), and the gather-list walks both use.

use super::{TxKind, TxMessage};
use crate::protocol::connection::{Blame, Connection, Fault};
use crate::protocol::memory::{AccessError, MemoryTable};
use crate::protocol::txqueue::{TxQueue, COPY_BELOW};
use crate::protocol::work::LocalSegment;
use crate::wire::crc32c::Crc32c;
use crate::wire::ddp::{
    queue, Opcode, Placement, SegmentRepr, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN,
};
use crate::wire::fpdu;
use crate::wire::rdmap::TerminateCode;
use rdmasock_verbs::memory::COPY_PIECE;
use rdmasock_verbs::{AccessFlags, RegisteredMemory, RemoteKey, WcStatus};
use std::sync::Arc;

impl Connection {
    /// Emits the next segment of `msg`; keeps it as the current message unless it is done.
    pub(super) fn emit_segment(
        &mut self,
        mut msg: TxMessage,
        memory: &dyn MemoryTable,
        queue: &mut TxQueue,
    ) {
        let tagged = !matches!(msg.kind, TxKind::Send { .. });
        let header_len = if tagged {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        };
        let room = usize::from(self.config.mulpdu)
            .saturating_sub(header_len)
            .max(1);
        let chunk = ((msg.total - msg.sent) as usize).min(room);
        let last = msg.sent as usize + chunk == msg.total as usize;
        let placement = match &msg.kind {
            TxKind::Send {
                msn, invalidate, ..
            } => Placement::Untagged {
                reserved_ulp: *invalidate,
                queue: queue::SEND,
                msn: *msn,
                offset: msg.sent,
            },
            TxKind::Write { stag, offset, .. } => Placement::Tagged {
                stag: *stag,
                offset: offset.wrapping_add(u64::from(msg.sent)),
            },
            TxKind::ReadResponse {
                sink_stag,
                sink_offset,
                ..
            } => Placement::Tagged {
                stag: *sink_stag,
                offset: sink_offset.wrapping_add(u64::from(msg.sent)),
            },
        };
        let opcode = match &msg.kind {
            TxKind::Send { opcode, .. } => *opcode,
            TxKind::Write { .. } => Opcode::RdmaWrite,
            TxKind::ReadResponse { .. } => Opcode::ReadResponse,
        };
        let header = SegmentRepr {
            last,
            opcode,
            placement,
        };
        // A READ response's source may be written while it is sent (the responder's
        // application owes the reader nothing): its bytes are copied into the frame and the
        // CRC computed over the copy, never over memory that TCP reads again later.
        let copy_for_crc = self.crc && matches!(msg.kind, TxKind::ReadResponse { .. });
        let copied = if chunk < COPY_BELOW || msg.kind.small().is_some() || copy_for_crc {
            self.frame_copied(header, &msg, chunk, memory, queue.bytes())
        } else {
            self.frame_in_place(header, &msg, chunk, memory, queue)
        };
        if let Err(e) = copied {
            let fault = match msg.kind {
                TxKind::Send { seq, .. } | TxKind::Write { seq, .. } => Fault::new(
                    TerminateCode::RDMAP_LOCAL_CATASTROPHIC,
                    format!("a send request's memory became unreadable ({e:?}) while it was sent"),
                )
                .blame(Blame::Send(seq, WcStatus::LocalProtectionError)),
                TxKind::ReadResponse { .. } => Fault::new(
                    TerminateCode::RDMAP_INVALID_STAG,
                    format!(
                        "the source of an RDMA READ became unreadable ({e:?}) before its response"
                    ),
                ),
            };
            self.fail(fault);
            return;
        }
        msg.sent += chunk as u32;
        if !last {
            self.tx_current = Some(msg);
            return;
        }
        match msg.kind {
            // Complete once written: the memory is read until then.
            TxKind::Send { seq, .. } | TxKind::Write { seq, .. } => queue.push_sent(seq),
            TxKind::ReadResponse { .. } => {
                self.irq.pop_front();
            }
        }
    }

    /// Appends one whole FPDU with `chunk` payload bytes of `msg` copied behind the header.
    /// Nothing is appended when the memory cannot be read.
    fn frame_copied(
        &self,
        header: SegmentRepr,
        msg: &TxMessage,
        chunk: usize,
        memory: &dyn MemoryTable,
        out: &mut Vec<u8>,
    ) -> Result<(), AccessError> {
        // One reservation for the whole frame: the appends below never grow `out`.
        out.reserve(fpdu::frame_len(header.header_len() + chunk));
        let start = fpdu::begin(out);
        header.append(out);
        let at = out.len();
        if let Some(small) = msg.kind.small() {
            // A small payload is appended as it is, without a zero fill first.
            let Some(bytes) = small
                .as_slice()
                .get(msg.sent as usize..msg.sent as usize + chunk)
            else {
                out.truncate(start);
                return Err(AccessError::OutOfBounds);
            };
            out.extend_from_slice(bytes);
            fpdu::finish(out, start, self.crc);
            return Ok(());
        }
        out.resize(at + chunk, 0);
        let copied = match &msg.kind {
            TxKind::Send { segments, .. } | TxKind::Write { segments, .. } => {
                gather(memory, segments, u64::from(msg.sent), &mut out[at..])
            }
            TxKind::ReadResponse {
                source_stag,
                source_offset,
                ..
            } if chunk > 0 => memory
                .remote(RemoteKey(*source_stag))
                .ok_or(AccessError::InvalidKey)
                .and_then(|r| {
                    r.read(
                        source_offset.wrapping_add(u64::from(msg.sent)),
                        &mut out[at..],
                        AccessFlags::REMOTE_READ,
                    )
                }),
            TxKind::ReadResponse { .. } => Ok(()),
        };
        if copied.is_err() {
            out.truncate(start);
            return copied;
        }
        fpdu::finish(out, start, self.crc);
        Ok(())
    }

    /// Queues one whole FPDU whose `chunk` payload bytes of `msg` stay in their registered
    /// memory: the header, the memory slices, then pad and CRC (computed over the slices
    /// here). Nothing is queued when the memory cannot be read: what a slice that cannot be
    /// found leaves half made is rolled back.
    fn frame_in_place(
        &self,
        header: SegmentRepr,
        msg: &TxMessage,
        chunk: usize,
        memory: &dyn MemoryTable,
        queue: &mut TxQueue,
    ) -> Result<(), AccessError> {
        let offset = u64::from(msg.sent);
        let each_slice = |f: &mut dyn FnMut(&Arc<RegisteredMemory>, usize, usize)| match &msg.kind {
            TxKind::Send { segments, .. } | TxKind::Write { segments, .. } => {
                locate(memory, segments, offset, chunk, f)
            }
            TxKind::ReadResponse {
                source_stag,
                source_offset,
                ..
            } => {
                let region = memory
                    .remote(RemoteKey(*source_stag))
                    .ok_or(AccessError::InvalidKey)?;
                let at = region.resolve(
                    source_offset.wrapping_add(offset),
                    chunk as u64,
                    AccessFlags::REMOTE_READ,
                )?;
                f(region.memory, at, chunk);
                Ok(())
            }
        };
        let mark = queue.mark();
        let out = queue.bytes();
        let start = fpdu::begin(out);
        header.append(out);
        let ulpdu = out.len() - start - fpdu::LENGTH_LEN + chunk;
        let len = u16::try_from(ulpdu).unwrap_or(u16::MAX);
        out[start..start + fpdu::LENGTH_LEN].copy_from_slice(&len.to_be_bytes());
        let mut crc = Crc32c::new();
        if self.crc {
            crc.update(&out[start..]);
        }
        let located = each_slice(&mut |m, at, n| {
            if self.crc {
                crc_of_memory(&mut crc, m, at, n);
            }
            queue.push_memory(m, at, n);
        });
        if let Err(e) = located {
            queue.rollback(mark);
            return Err(e);
        }
        let pad = [0u8; 3];
        let pad = &pad[..fpdu::pad_len(ulpdu)];
        let out = queue.bytes();
        out.extend_from_slice(pad);
        let value = if self.crc {
            crc.update(pad);
            crc.finish()
        } else {
            0
        };
        out.extend_from_slice(&value.to_le_bytes());
        Ok(())
    }
}

/// Adds `len` bytes of `memory` from `at` to `crc`, copied out a [`COPY_PIECE`] at a time
/// through a stack buffer: no slice is made over memory a peer or the application may be
/// writing meanwhile (the bytes sent are read by the kernel, in place).
fn crc_of_memory(crc: &mut Crc32c, memory: &RegisteredMemory, at: usize, len: usize) {
    let mut piece = [0u8; COPY_PIECE];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(COPY_PIECE);
        memory
            .read_at(at + done, &mut piece[..n])
            .expect("located inside its memory");
        crc.update(&piece[..n]);
        done += n;
    }
}

/// Finds message bytes `offset..offset+len` of a gather list in registered memory: calls
/// `slice` with (memory, offset within it, length) per scatter/gather entry covered, in order.
fn locate(
    memory: &dyn MemoryTable,
    segments: &[LocalSegment],
    mut offset: u64,
    mut len: usize,
    slice: &mut dyn FnMut(&Arc<RegisteredMemory>, usize, usize),
) -> Result<(), AccessError> {
    for s in segments {
        if len == 0 {
            break;
        }
        let seg_len = u64::from(s.length);
        if offset >= seg_len {
            offset -= seg_len;
            continue;
        }
        let n = (seg_len - offset).min(len as u64) as usize;
        let region = memory.local(s.lkey).ok_or(AccessError::InvalidKey)?;
        let at = region.resolve(s.addr.wrapping_add(offset), n as u64, AccessFlags::empty())?;
        slice(region.memory, at, n);
        len -= n;
        offset = 0;
    }
    if len == 0 {
        Ok(())
    } else {
        Err(AccessError::OutOfBounds)
    }
}

/// Reads message bytes `offset..offset+dst.len()` from a gather list.
fn gather(
    memory: &dyn MemoryTable,
    segments: &[LocalSegment],
    mut offset: u64,
    mut dst: &mut [u8],
) -> Result<(), AccessError> {
    for s in segments {
        if dst.is_empty() {
            break;
        }
        let len = u64::from(s.length);
        if offset >= len {
            offset -= len;
            continue;
        }
        let n = (len - offset).min(dst.len() as u64) as usize;
        let region = memory.local(s.lkey).ok_or(AccessError::InvalidKey)?;
        let (head, tail) = std::mem::take(&mut dst).split_at_mut(n);
        region.read(s.addr.wrapping_add(offset), head, AccessFlags::empty())?;
        dst = tail;
        offset = 0;
    }
    if dst.is_empty() {
        Ok(())
    } else {
        Err(AccessError::OutOfBounds)
    }
}
