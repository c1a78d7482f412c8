//! The simulation's deterministic randomness and data: a seeded generator, a hash, and a
//! byte stream the receiver can recompute (used by `fabric.rs`).

/// xorshift64*: the test's only randomness, seeded.
pub(crate) struct Rng(pub u64);
impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// FNV-1a, 64 bit.
#[derive(Clone, Copy)]
pub(crate) struct Fnv(pub u64);
impl Fnv {
    pub(crate) fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// A deterministic byte stream: byte `i` depends only on the seed and `i`, so the receiver can
/// recompute what it must see whatever the chunking.
pub(crate) struct Stream {
    seed: u64,
    pos: u64,
}
impl Stream {
    pub(crate) fn new(seed: u64) -> Self {
        Stream { seed, pos: 0 }
    }
    pub(crate) fn fill(&mut self, out: &mut Vec<u8>, n: usize) {
        let end = self.pos + n as u64;
        while self.pos < end {
            let word = self.pos / 8;
            let mut r = Rng((word ^ self.seed).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
            let bytes = r.next().to_le_bytes();
            let from = (self.pos % 8) as usize;
            let to = (8u64.min(from as u64 + end - self.pos)) as usize;
            out.extend_from_slice(&bytes[from..to]);
            self.pos += (to - from) as u64;
        }
    }
}
