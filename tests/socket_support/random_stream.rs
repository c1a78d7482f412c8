//! The two ends of a random stream, without I/O: what to write next and what to read into,
//! for the blocking helpers ([`super::send_random`], [`super::receive_random`]) and the
//! tokio suite's async ones alike, so that every suite sends the same bytes in the same
//! pieces and checks them the same way.

use super::Rng;
use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;

/// Fills `buf` with the next pseudo-random bytes of `data`.
pub(crate) fn fill(data: &mut Rng, buf: &mut [u8]) {
    for chunk in buf.chunks_mut(8) {
        let v = data.next().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// The writing end: `total` pseudo-random bytes of `seed` in pseudo-random pieces of at most
/// `max_piece`, hashed as they are handed out.
pub(crate) struct RandomSource {
    rng: Rng,
    data: Rng,
    hash: DefaultHasher,
    buf: Vec<u8>,
    left: usize,
}

impl RandomSource {
    /// The source of a stream of `total` bytes.
    pub(crate) fn new(total: usize, seed: u64, max_piece: usize) -> Self {
        RandomSource {
            rng: Rng(seed),
            data: Rng(seed ^ 0x9e37_79b9_7f4a_7c15),
            hash: DefaultHasher::new(),
            buf: vec![0u8; max_piece],
            left: total,
        }
    }

    /// The next piece to write whole (and the generator, to cut it further), or `None` once
    /// every byte was handed out.
    pub(crate) fn next_piece(&mut self) -> Option<(&mut Rng, &[u8])> {
        if self.left == 0 {
            return None;
        }
        let n = (1 + self.rng.below(self.buf.len())).min(self.left);
        fill(&mut self.data, &mut self.buf[..n]);
        self.hash.write(&self.buf[..n]);
        self.left -= n;
        Some((&mut self.rng, &self.buf[..n]))
    }

    /// The hash of every byte handed out.
    pub(crate) fn hash(&self) -> u64 {
        self.hash.finish()
    }
}

/// The reading end: reads of pseudo-random sizes of at most `max_piece`, hashed.
pub(crate) struct RandomSink {
    rng: Rng,
    hash: DefaultHasher,
    buf: Vec<u8>,
    total: usize,
}

impl RandomSink {
    /// The sink of reads sized by `seed`.
    pub(crate) fn new(seed: u64, max_piece: usize) -> Self {
        RandomSink {
            rng: Rng(seed),
            hash: DefaultHasher::new(),
            buf: vec![0u8; max_piece],
            total: 0,
        }
    }

    /// The buffer of the next read (and the generator, to cut it further).
    pub(crate) fn next_buffer(&mut self) -> (&mut Rng, &mut [u8]) {
        let want = 1 + self.rng.below(self.buf.len());
        (&mut self.rng, &mut self.buf[..want])
    }

    /// The last read took the first `n` bytes of its buffer; false at end of stream (0).
    pub(crate) fn took(&mut self, n: usize) -> bool {
        if n == 0 {
            return false;
        }
        self.hash.write(&self.buf[..n]);
        self.total += n;
        true
    }

    /// The bytes read and their hash.
    pub(crate) fn result(&self) -> (usize, u64) {
        (self.total, self.hash.finish())
    }
}
