//! Outbound bytes as the driver writes them: a list of pieces, each either bytes the core
//! made (MPA frames, DDP/RDMAP headers, pads and CRCs, small payloads) or a payload slice of a
//! registered memory region. The driver hands the pieces to one `writev`, so a payload goes
//! from the application's memory to TCP with the kernel's copy only, and its CRC is computed
//! while the header is made. A send request completes once its last byte is written (the
//! memory is read until then), not when its frames are made.

use super::connection::Connection;
use rdmasock_verbs::{RegisteredMemory, SendPiece};
use std::collections::VecDeque;
use std::sync::Arc;

/// Payloads shorter than this are copied next to their header: an extra slice costs more.
pub(crate) const COPY_BELOW: usize = 512;

/// One piece of the queue.
#[derive(Debug)]
enum Piece {
    /// Bytes `start..end` of the arena.
    Own { start: usize, end: usize },
    /// `len` bytes of `memory` from `at` (checked against the region when queued).
    Memory {
        memory: Arc<RegisteredMemory>,
        at: usize,
        len: usize,
    },
}

/// A point in a [`TxQueue`] to go back to (see [`TxQueue::mark`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mark {
    pieces: usize,
    arena: usize,
    committed: usize,
    len: usize,
    queued_total: u64,
    sent: usize,
    /// The end of the last piece, when it is the queue's own bytes.
    back_end: Option<usize>,
}

/// Bytes waiting for TCP, in order (see the module documentation).
#[derive(Debug, Default)]
pub struct TxQueue {
    /// Bytes the core made; pieces point into it. Emptied when the queue drains.
    arena: Vec<u8>,
    /// Arena bytes up to here are covered by pieces; later ones are still being made.
    committed: usize,
    pieces: VecDeque<Piece>,
    /// Bytes of the front piece already written.
    front_written: usize,
    /// Bytes queued and not written.
    len: usize,
    /// Bytes ever queued (committed), and ever written: positions in the stream of bytes.
    queued_total: u64,
    written_total: u64,
    /// Send requests by sequence number, each with the stream position its last byte ends
    /// at, oldest first: completed once writing passes it. (Kept beside the pieces, not
    /// among them, so that a message's own bytes before and after a request's end stay one
    /// piece: one iovec, and fewer pieces to queue and retire.)
    sent: VecDeque<(u64, u64)>,
}

impl TxQueue {
    /// An empty queue.
    pub fn new() -> TxQueue {
        TxQueue::default()
    }

    /// Bytes queued and not yet written.
    pub fn len(&self) -> usize {
        self.len + (self.arena.len() - self.committed)
    }

    /// Whether nothing waits (send requests whose bytes are all written are completed).
    pub fn is_empty(&self) -> bool {
        self.len() == 0 && self.pieces.is_empty() && self.sent.is_empty()
    }

    /// The arena, to append bytes the core makes.
    pub(crate) fn bytes(&mut self) -> &mut Vec<u8> {
        &mut self.arena
    }

    /// Makes the bytes appended since the last piece into a piece.
    fn commit(&mut self) {
        let end = self.arena.len();
        if end == self.committed {
            return;
        }
        let start = self.committed;
        self.committed = end;
        self.len += end - start;
        self.queued_total += (end - start) as u64;
        if let Some(Piece::Own { end: last, .. }) = self.pieces.back_mut() {
            if *last == start {
                *last = end;
                return;
            }
        }
        self.pieces.push_back(Piece::Own { start, end });
    }

    /// Queues `len` bytes of `memory` from `at` (already checked against its region).
    pub(crate) fn push_memory(&mut self, memory: &Arc<RegisteredMemory>, at: usize, len: usize) {
        self.commit();
        if len == 0 {
            return;
        }
        self.len += len;
        self.queued_total += len as u64;
        self.pieces.push_back(Piece::Memory {
            memory: memory.clone(),
            at,
            len,
        });
    }

    /// Where the queue stands now, for [`TxQueue::rollback`].
    pub(crate) fn mark(&self) -> Mark {
        Mark {
            pieces: self.pieces.len(),
            arena: self.arena.len(),
            committed: self.committed,
            len: self.len,
            queued_total: self.queued_total,
            sent: self.sent.len(),
            back_end: match self.pieces.back() {
                Some(Piece::Own { end, .. }) => Some(*end),
                _ => None,
            },
        }
    }

    /// Drops everything queued or appended since `mark` (nothing was written since: the
    /// driver writes only between calls into the core).
    pub(crate) fn rollback(&mut self, mark: Mark) {
        self.pieces.truncate(mark.pieces);
        if let (Some(Piece::Own { end, .. }), Some(back_end)) =
            (self.pieces.back_mut(), mark.back_end)
        {
            // A commit since may have grown the last piece instead of adding one.
            *end = back_end;
        }
        self.arena.truncate(mark.arena);
        self.committed = mark.committed;
        self.len = mark.len;
        self.queued_total = mark.queued_total;
        self.sent.truncate(mark.sent);
    }

    /// Marks the end of the send request `seq`'s bytes.
    pub(crate) fn push_sent(&mut self, seq: u64) {
        self.commit();
        self.sent.push_back((self.queued_total, seq));
    }

    /// How many pieces are queued (an upper bound on the slices [`TxQueue::pieces`] fills;
    /// bytes made since the last piece count as one more).
    pub fn piece_count(&self) -> usize {
        self.pieces.len() + usize::from(self.arena.len() > self.committed)
    }

    /// Fills `out` with the pieces to write next, in order; returns how many it filled.
    /// Pieces of registered memory stay references to it (the kernel reads them in place,
    /// [`rdmasock_verbs::send_pieces`]).
    pub fn pieces<'a>(&'a mut self, out: &mut [SendPiece<'a>]) -> usize {
        self.commit();
        let mut n = 0;
        let mut skip = self.front_written;
        for piece in &self.pieces {
            if n == out.len() {
                break;
            }
            out[n] = match piece {
                Piece::Own { start, end } => SendPiece::Bytes(&self.arena[*start + skip..*end]),
                Piece::Memory { memory, at, len } => SendPiece::Memory {
                    memory,
                    offset: *at + skip,
                    len: *len - skip,
                },
            };
            skip = 0;
            n += 1;
        }
        n
    }

    /// Consumes `written` bytes from the front; completes the send requests whose bytes are
    /// now all written.
    pub fn advance(&mut self, written: usize, conn: &mut Connection) {
        self.commit();
        self.written_total += written as u64;
        self.consume(written);
        while let Some(&(end, seq)) = self.sent.front() {
            if end > self.written_total {
                break;
            }
            self.sent.pop_front();
            conn.finish_written_send(seq);
        }
    }

    /// Drops `written` bytes from the front pieces.
    fn consume(&mut self, mut written: usize) {
        while let Some(front) = self.pieces.front() {
            let size = match front {
                Piece::Own { start, end } => end - start,
                Piece::Memory { len, .. } => *len,
            };
            let left = size - self.front_written;
            if written < left {
                self.front_written += written;
                self.len -= written;
                return;
            }
            written -= left;
            self.len -= left;
            self.front_written = 0;
            self.pieces.pop_front();
        }
        self.arena.clear();
        self.committed = 0;
    }

    /// Copies the unwritten bytes that still point into `memory` into the queue's own arena,
    /// in place (the order of the pieces stays): for memory lent for one post, which the
    /// queue must not keep. Returns how many bytes it copied.
    pub fn detach(&mut self, memory: &Arc<RegisteredMemory>) -> usize {
        self.commit();
        let mut copied = 0;
        for piece in self.pieces.iter_mut() {
            if let Piece::Memory { memory: m, at, len } = piece {
                if Arc::ptr_eq(m, memory) {
                    let start = self.arena.len();
                    self.arena.resize(start + *len, 0);
                    memory
                        .read_at(*at, &mut self.arena[start..])
                        .expect("queued pieces were checked against their memory");
                    copied += *len;
                    *piece = Piece::Own {
                        start,
                        end: self.arena.len(),
                    };
                }
            }
        }
        self.committed = self.arena.len();
        copied
    }

    /// Drops everything (the connection failed: its unwritten sends are flushed).
    pub fn clear(&mut self) {
        self.arena.clear();
        self.committed = 0;
        self.pieces.clear();
        self.front_written = 0;
        self.len = 0;
        self.queued_total = self.written_total;
        self.sent.clear();
    }

    /// Appends the unwritten bytes to `out` (a capture, or the copying `poll_transmit`).
    pub fn copy_to(&mut self, out: &mut Vec<u8>) {
        self.commit();
        let mut skip = self.front_written;
        for piece in &self.pieces {
            match piece {
                Piece::Own { start, end } => {
                    out.extend_from_slice(&self.arena[*start + skip..*end])
                }
                Piece::Memory { memory, at, len } => {
                    let from = out.len();
                    out.resize(from + *len - skip, 0);
                    memory
                        .read_at(*at + skip, &mut out[from..])
                        .expect("queued pieces were checked against their memory");
                }
            }
            skip = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Config, Connection};
    use std::time::Instant;

    #[test]
    fn pieces_come_out_in_order_and_partial_writes_resume() {
        let mem = Arc::new(RegisteredMemory::allocate(64).unwrap());
        mem.write_at(10, b"payload").unwrap();
        let mut q = TxQueue::new();
        q.bytes().extend_from_slice(b"head-");
        q.push_memory(&mem, 10, 7);
        q.bytes().extend_from_slice(b"-tail");
        assert_eq!(q.len(), 17);
        // The uncommitted tail counts as a piece: no slice is ever left out of the bound.
        assert_eq!(q.piece_count(), 3);
        let mut bound = [SendPiece::Bytes(&[]); 3];
        assert_eq!(q.pieces(&mut bound), 3);
        let mut all = Vec::new();
        q.copy_to(&mut all);
        assert_eq!(all, b"head-payload-tail");
        let mut conn = Connection::responder(Config::default(), Instant::now());
        q.advance(7, &mut conn);
        let mut pieces = [SendPiece::Bytes(&[]); 8];
        let n = q.pieces(&mut pieces);
        let mut joined = Vec::new();
        for piece in &pieces[..n] {
            piece.copy_to(&mut joined).unwrap();
        }
        assert_eq!(joined, b"yload-tail");
        q.advance(10, &mut conn);
        assert!(q.is_empty());
        assert_eq!(q.arena.len(), 0);
    }

    #[test]
    fn rollback_restores_the_queue_even_after_a_commit_grew_its_last_piece() {
        let mem = Arc::new(RegisteredMemory::allocate(64).unwrap());
        mem.write_at(0, b"0123456789").unwrap();
        let mut q = TxQueue::new();
        q.bytes().extend_from_slice(b"head");
        q.push_memory(&mem, 0, 4);
        q.bytes().extend_from_slice(b"-own");
        q.push_sent(1);
        q.bytes().extend_from_slice(b"+more");
        let before = (q.len(), q.piece_count());
        let mark = q.mark();
        // A second frame: its header grows nothing yet; its payload commits the header
        // (merged into the last own piece), then more bytes follow.
        q.bytes().extend_from_slice(b"<hdr>");
        q.push_memory(&mem, 4, 6);
        q.bytes().extend_from_slice(b"<crc>");
        q.rollback(mark);
        assert_eq!((q.len(), q.piece_count()), before);
        let mut all = Vec::new();
        q.copy_to(&mut all);
        assert_eq!(all, b"head0123-own+more");
        // The same after the uncommitted tail was committed before the mark.
        let mut q = TxQueue::new();
        q.bytes().extend_from_slice(b"a");
        q.push_memory(&mem, 0, 1);
        q.bytes().extend_from_slice(b"b");
        q.push_memory(&mem, 1, 1);
        let mark = q.mark();
        q.bytes().extend_from_slice(b"c");
        q.push_memory(&mem, 2, 1);
        q.rollback(mark);
        let mut all = Vec::new();
        q.copy_to(&mut all);
        assert_eq!(all, b"a0b1");
        let mut conn = Connection::responder(Config::default(), Instant::now());
        q.advance(all.len(), &mut conn);
        assert!(q.is_empty());
    }

    #[test]
    fn detach_copies_the_unwritten_pieces_of_one_memory_in_place() {
        let lent = Arc::new(RegisteredMemory::allocate(32).unwrap());
        lent.write_at(0, b"0123456789abcdef").unwrap();
        let other = Arc::new(RegisteredMemory::allocate(8).unwrap());
        other.write_at(0, b"OTHER").unwrap();
        let mut q = TxQueue::new();
        q.bytes().extend_from_slice(b"<h>");
        q.push_memory(&lent, 0, 10);
        q.push_memory(&other, 0, 5);
        q.push_memory(&lent, 10, 6);
        q.bytes().extend_from_slice(b"<t>");
        let mut conn = Connection::responder(Config::default(), Instant::now());
        // Part of the first lent piece is already written.
        q.advance(5, &mut conn);
        assert_eq!(q.detach(&lent), 16);
        assert_eq!(Arc::strong_count(&lent), 1, "the queue keeps no reference");
        assert_eq!(Arc::strong_count(&other), 2, "other memory stays in place");
        lent.write_at(0, b"################").unwrap();
        q.bytes().extend_from_slice(b"!");
        let mut all = Vec::new();
        q.copy_to(&mut all);
        assert_eq!(all, b"23456789OTHERabcdef<t>!");
        let mut pieces = [SendPiece::Bytes(&[]); 8];
        let n = q.pieces(&mut pieces);
        let mut joined = Vec::new();
        for piece in &pieces[..n] {
            piece.copy_to(&mut joined).unwrap();
        }
        assert_eq!(joined, all);
        q.advance(all.len(), &mut conn);
        assert!(q.is_empty());
    }
}
