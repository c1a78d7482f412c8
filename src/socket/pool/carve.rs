//! The pool's allocator, over offsets only: which chunk, and where in it, each slice lies;
//! when a chunk must be added, and which chunks are empty and go. It registers nothing
//! (`pool` does, on its instructions), so every rule here is tested without a device.
//!
//! Slices are carved first-fit, in whole units (a page), from each chunk's list of free
//! ranges, which merges neighbours as slices come back. Units rather than power-of-two
//! classes: the default send area is 16 KiB of ring and 256 bytes of scratch, which a
//! power-of-two class would round to 32 KiB, pinning more than a registration of its own.
#![forbid(unsafe_code)]

/// A chunk's index among the allocator's chunks (stable while the chunk lives).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ChunkId(pub(crate) usize);

/// How big the chunks are: each slice takes whole `unit`s; a new chunk holds as many bytes
/// as the pool's regular chunks hold already (so their count grows as the log of the
/// demand), at least `min` and at most `max`; a request over `max` gets a chunk of its own,
/// of whole `grain`s (the page size of the chunks' memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkSizes {
    /// The alignment and granule of every slice (a power of two).
    pub(crate) unit: usize,
    /// The smallest regular chunk (a multiple of `unit` and of `grain`).
    pub(crate) min: usize,
    /// The largest regular chunk (a multiple of `unit` and of `grain`).
    pub(crate) max: usize,
    /// The page size of the chunks' memory: every chunk is a whole number of them.
    pub(crate) grain: usize,
}

/// Where a slice lies: its chunk, offset and length (whole units).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Carve {
    /// The chunk it lies in.
    pub(crate) chunk: ChunkId,
    /// Its first byte's offset in the chunk (a multiple of the unit).
    pub(crate) offset: usize,
    /// Its length (a multiple of the unit; at least what was asked).
    pub(crate) len: usize,
}

/// No chunk has room: register one of `len` bytes and [`add_chunk`](Carver::add_chunk)
/// it, or, where that fails, one of `fallback` bytes (what the request alone needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NeedChunk {
    /// The chunk to register.
    pub(crate) len: usize,
    /// The least chunk that holds the request.
    pub(crate) fallback: usize,
}

/// One chunk's bookkeeping.
#[derive(Debug)]
struct ChunkState {
    len: usize,
    /// Free ranges `(offset, len)`, sorted by offset, never adjacent (merged).
    free: Vec<(usize, usize)>,
    /// Bytes carved out of it.
    used: usize,
    /// Whether it is a regular chunk (not one made for a request over `max`).
    regular: bool,
}

/// The allocator of one pool: chunks and the slices carved from them.
#[derive(Debug)]
pub(crate) struct Carver {
    sizes: ChunkSizes,
    chunks: Vec<Option<ChunkState>>,
}

impl Carver {
    /// An allocator with no chunks.
    pub(crate) fn new(sizes: ChunkSizes) -> Carver {
        debug_assert!(sizes.unit.is_power_of_two());
        debug_assert!(sizes.min <= sizes.max && sizes.min.is_multiple_of(sizes.unit));
        debug_assert!(
            sizes.min.is_multiple_of(sizes.grain) && sizes.max.is_multiple_of(sizes.grain)
        );
        Carver {
            sizes,
            chunks: Vec::new(),
        }
    }

    /// A slice of at least `len` bytes (at least one unit) from the first chunk with room,
    /// or which chunk to add first.
    pub(crate) fn carve(&mut self, len: usize) -> Result<Carve, NeedChunk> {
        let want = round_up(len.max(1), self.sizes.unit);
        for (index, chunk) in self.chunks.iter_mut().enumerate() {
            let Some(chunk) = chunk else { continue };
            let Some(at) = chunk.free.iter().position(|&(_, free)| free >= want) else {
                continue;
            };
            let (offset, free) = chunk.free[at];
            if free == want {
                chunk.free.remove(at);
            } else {
                chunk.free[at] = (offset + want, free - want);
            }
            chunk.used += want;
            return Ok(Carve {
                chunk: ChunkId(index),
                offset,
                len: want,
            });
        }
        let fallback = round_up(want, self.sizes.grain);
        let len = if fallback > self.sizes.max {
            fallback
        } else {
            self.regular_bytes()
                .clamp(self.sizes.min, self.sizes.max)
                .max(fallback)
        };
        Err(NeedChunk { len, fallback })
    }

    /// Takes in a chunk of `len` bytes that was registered (whole units are carved from
    /// it); its id is the first free index.
    pub(crate) fn add_chunk(&mut self, len: usize) -> ChunkId {
        let usable = len - len % self.sizes.unit;
        let state = ChunkState {
            len: usable,
            free: if usable == 0 {
                Vec::new()
            } else {
                vec![(0, usable)]
            },
            used: 0,
            regular: usable <= self.sizes.max,
        };
        match self.chunks.iter().position(Option::is_none) {
            Some(index) => {
                self.chunks[index] = Some(state);
                ChunkId(index)
            }
            None => {
                self.chunks.push(Some(state));
                ChunkId(self.chunks.len() - 1)
            }
        }
    }

    /// Takes `carve` back and says which chunks to deregister now: an emptied chunk goes
    /// unless it is regular and the only empty one while other chunks are in use (the
    /// spare, which saves the next connection a registration); once no chunk is in use,
    /// every chunk goes.
    ///
    /// # Panics
    /// When `carve` is not a slice this allocator carved and has not taken back (a bug).
    pub(crate) fn release(&mut self, carve: Carve) -> Vec<ChunkId> {
        let chunk = self.chunks[carve.chunk.0]
            .as_mut()
            .expect("a slice of a live chunk");
        assert!(
            carve.offset + carve.len <= chunk.len && chunk.used >= carve.len,
            "a slice of this chunk"
        );
        let at = chunk
            .free
            .partition_point(|&(offset, _)| offset < carve.offset);
        assert!(
            chunk
                .free
                .get(at)
                .is_none_or(|&(o, _)| carve.offset + carve.len <= o)
                && (at == 0 || chunk.free[at - 1].0 + chunk.free[at - 1].1 <= carve.offset),
            "a slice taken back once"
        );
        chunk.free.insert(at, (carve.offset, carve.len));
        merge_around(&mut chunk.free, at);
        chunk.used -= carve.len;
        if chunk.used > 0 {
            return Vec::new();
        }
        let in_use = self.chunks.iter().flatten().any(|c| c.used > 0);
        let mut spare_kept = false;
        let mut gone = Vec::new();
        for (index, slot) in self.chunks.iter_mut().enumerate() {
            let Some(c) = slot else { continue };
            if c.used > 0 {
                continue;
            }
            if in_use && c.regular && !spare_kept {
                spare_kept = true;
                continue;
            }
            *slot = None;
            gone.push(ChunkId(index));
        }
        gone
    }

    /// Bytes in regular chunks (what a new regular chunk matches, up to `max`).
    fn regular_bytes(&self) -> usize {
        self.chunks
            .iter()
            .flatten()
            .filter(|c| c.regular)
            .map(|c| c.len)
            .sum()
    }

    /// How many chunks are registered.
    #[cfg(test)]
    pub(crate) fn chunk_count(&self) -> usize {
        self.chunks.iter().flatten().count()
    }

    /// The length of chunk `id`, while it lives.
    #[cfg(test)]
    pub(crate) fn chunk_len(&self, id: ChunkId) -> Option<usize> {
        self.chunks.get(id.0)?.as_ref().map(|c| c.len)
    }
}

/// Merges the free range at `at` with its neighbours where they touch.
fn merge_around(free: &mut Vec<(usize, usize)>, at: usize) {
    if at + 1 < free.len() && free[at].0 + free[at].1 == free[at + 1].0 {
        free[at].1 += free[at + 1].1;
        free.remove(at + 1);
    }
    if at > 0 && free[at - 1].0 + free[at - 1].1 == free[at].0 {
        free[at - 1].1 += free[at].1;
        free.remove(at);
    }
}

/// `len` rounded up to a multiple of `unit`.
fn round_up(len: usize, unit: usize) -> usize {
    len.div_ceil(unit) * unit
}

#[cfg(test)]
#[path = "carve_tests.rs"]
mod tests;
