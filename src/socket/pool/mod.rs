//! A pool of local-only registered memory per protection domain: a few large LOCAL_WRITE
//! registrations (chunks) from which each connection's send area (send ring, control slots,
//! scratch) is carved, instead of a registration per connection.
//!
//! Only memory whose key never leaves the process is pooled: a chunk is registered without
//! remote access, and its local key goes only into this process's own work requests. The
//! receive ring and the target list, which the peer writes with the remote key it was
//! given, keep registrations of their own: a key shared by several connections would let
//! one peer write into another connection's memory.
//!
//! A slice is its connection's alone: the allocator (`carve`) never hands out overlapping
//! ranges, and a slice's copies and scatter/gather entries are checked against its own
//! bounds, not the chunk's. Chunks grow with the demand (32 KiB, 64 KiB, … up to 1 MiB; a
//! 2 MiB huge page each where [`SocketOptions::huge_pages`](super::SocketOptions) asks);
//! a request over that gets a chunk of its own. An emptied chunk is deregistered, except one
//! spare while other chunks are in use, and once no slice is left every chunk is.
#![forbid(unsafe_code)]

mod carve;

use super::census;
use crate::verbs::{
    AccessFlags, HugePages, MemoryRegion, ProtectionDomain, RegisteredMemory, ScatterGather,
};
use carve::{Carve, Carver, ChunkSizes};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

const KIB: usize = 1024;
/// A slice's alignment and granule: a base page.
const UNIT: usize = 4 * KIB;
/// A huge page (see [`HugePages`]).
const HUGE_PAGE: usize = 2 * KIB * KIB;
/// Base-page chunks: from 32 KiB (one default send area and room to spare, so that a
/// process with one connection pins little more than it would alone) to 1 MiB.
const BASE_SIZES: ChunkSizes = ChunkSizes {
    unit: UNIT,
    min: 32 * KIB,
    max: KIB * KIB,
    grain: UNIT,
};
/// Huge-page chunks: one 2 MiB page each.
const HUGE_SIZES: ChunkSizes = ChunkSizes {
    unit: UNIT,
    min: HUGE_PAGE,
    max: HUGE_PAGE,
    grain: HUGE_PAGE,
};

/// The pool of one protection domain; see the module's text.
#[derive(Debug, Default)]
pub(crate) struct LocalPool {
    inner: Arc<Mutex<Pools>>,
}

/// A sub-pool per [`HugePages`] choice: a connection that asks for huge pages gets them,
/// one that does not never holds a 2 MiB page for its few KiB.
#[derive(Debug, Default)]
struct Pools {
    subs: Vec<SubPool>,
}

#[derive(Debug)]
struct SubPool {
    huge: HugePages,
    carver: Carver,
    /// The registrations, at their [`carve::ChunkId`]'s index.
    chunks: Vec<Option<Chunk>>,
}

/// One registered chunk, counted once in the census with its bytes.
#[derive(Debug)]
struct Chunk {
    region: Arc<MemoryRegion>,
    _census: census::Entry,
}

impl LocalPool {
    /// A slice of `len` bytes of LOCAL_WRITE memory registered with `pd` (on huge pages as
    /// `huge` asks), from a chunk with room or a chunk registered for it. A failed
    /// registration (memory, `RLIMIT_MEMLOCK`) is tried again with a chunk of just the
    /// request before its error comes back; the pool's other slices are untouched.
    pub(crate) fn carve(
        &self,
        pd: &ProtectionDomain,
        len: usize,
        huge: HugePages,
    ) -> io::Result<LocalSlice> {
        let mut pools = self.lock();
        let sub_index = pools.sub_index(huge);
        let sub = &mut pools.subs[sub_index];
        let carve = match sub.carver.carve(len) {
            Ok(carve) => carve,
            Err(need) => {
                let region = match register(pd, need.len, huge) {
                    Ok(region) => region,
                    Err(_) if need.fallback < need.len => register(pd, need.fallback, huge)?,
                    Err(e) => return Err(e),
                };
                let id = sub.carver.add_chunk(region.len());
                if sub.chunks.len() <= id.0 {
                    sub.chunks.resize_with(id.0 + 1, || None);
                }
                sub.chunks[id.0] = Some(Chunk {
                    _census: census::Entry::buffer(region.len() as u64),
                    region: Arc::new(region),
                });
                sub.carver
                    .carve(len)
                    .map_err(|_| io::Error::other("a new pool chunk did not hold its request"))?
            }
        };
        let region = sub.chunks[carve.chunk.0]
            .as_ref()
            .map(|c| c.region.clone())
            .ok_or_else(|| io::Error::other("a pool slice lies in no registered chunk"))?;
        Ok(LocalSlice {
            region,
            len,
            carve,
            sub: sub_index,
            pool: self.inner.clone(),
        })
    }

    /// How many chunks are registered now.
    #[cfg(test)]
    pub(crate) fn chunks(&self) -> usize {
        self.lock()
            .subs
            .iter()
            .map(|s| s.carver.chunk_count())
            .sum()
    }

    fn lock(&self) -> MutexGuard<'_, Pools> {
        lock(&self.inner)
    }
}

fn lock(pools: &Mutex<Pools>) -> MutexGuard<'_, Pools> {
    pools.lock().unwrap_or_else(|p| p.into_inner())
}

impl Pools {
    /// The index of `huge`'s sub-pool, made on first use.
    fn sub_index(&mut self, huge: HugePages) -> usize {
        if let Some(i) = self.subs.iter().position(|s| s.huge == huge) {
            return i;
        }
        let sizes = match huge {
            HugePages::Never => BASE_SIZES,
            _ => HUGE_SIZES,
        };
        self.subs.push(SubPool {
            huge,
            carver: Carver::new(sizes),
            chunks: Vec::new(),
        });
        self.subs.len() - 1
    }
}

/// Allocates and registers a chunk of `len` bytes, LOCAL_WRITE only.
fn register(pd: &ProtectionDomain, len: usize, huge: HugePages) -> io::Result<MemoryRegion> {
    let memory = RegisteredMemory::allocate_with(len, huge)?;
    Ok(pd.register_memory(memory, AccessFlags::LOCAL_WRITE)?)
}

/// `len` bytes of a pool chunk, its connection's alone, returned to the pool on drop. It
/// offers what a connection uses of a [`MemoryRegion`], within its own bounds: offsets are
/// from the slice's start.
#[derive(Debug)]
pub(crate) struct LocalSlice {
    region: Arc<MemoryRegion>,
    /// The bytes asked for (the carve may hold a few more, never handed out).
    len: usize,
    /// Where it lies in its chunk.
    carve: Carve,
    /// Its sub-pool's index.
    sub: usize,
    pool: Arc<Mutex<Pools>>,
}

impl LocalSlice {
    /// The length in bytes.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The virtual address of the first byte.
    #[cfg(test)]
    pub(crate) fn addr(&self) -> u64 {
        self.region.addr() + self.carve.offset as u64
    }

    /// The local key (the chunk's).
    #[cfg(test)]
    pub(crate) fn lkey(&self) -> crate::verbs::LocalKey {
        self.region.lkey()
    }

    /// A scatter/gather entry for `offset..offset+len` of the slice.
    #[inline]
    pub(crate) fn slice(
        &self,
        offset: usize,
        len: usize,
    ) -> crate::verbs::Result<ScatterGather<'_>> {
        self.check(offset, len)?;
        self.region.slice(self.carve.offset + offset, len)
    }

    /// Copies `src` into the slice at `offset`.
    #[inline]
    pub(crate) fn write_at(&self, offset: usize, src: &[u8]) -> crate::verbs::Result<()> {
        self.check(offset, src.len())?;
        self.region.write_at(self.carve.offset + offset, src)
    }

    /// Copies from the slice at `offset` into `dst`.
    #[cfg(test)]
    pub(crate) fn read_at(&self, offset: usize, dst: &mut [u8]) -> crate::verbs::Result<()> {
        self.check(offset, dst.len())?;
        self.region.read_at(self.carve.offset + offset, dst)
    }

    /// Faults in the pages of `offset..offset+len` (see [`MemoryRegion::populate`]).
    pub(crate) fn populate(&self, offset: usize, len: usize) -> crate::verbs::Result<()> {
        self.check(offset, len)?;
        self.region.populate(self.carve.offset + offset, len)
    }

    /// Fails unless `offset..offset+len` lies inside the slice.
    #[inline]
    fn check(&self, offset: usize, len: usize) -> crate::verbs::Result<()> {
        // `offset <= self.len` first, so `self.len - offset` cannot wrap.
        if offset > self.len || len > self.len - offset {
            return Err(self.range_error(offset, len));
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn range_error(&self, offset: usize, len: usize) -> crate::verbs::Error {
        crate::verbs::Error::InvalidArgument(format!(
            "range {offset}+{len} is outside the {}-byte pooled send area",
            self.len
        ))
    }
}

impl Drop for LocalSlice {
    fn drop(&mut self) {
        let mut pools = lock(&self.pool);
        let sub = &mut pools.subs[self.sub];
        let gone = sub.carver.release(self.carve);
        let chunks: Vec<Chunk> = gone
            .into_iter()
            .filter_map(|id| sub.chunks.get_mut(id.0).and_then(Option::take))
            .collect();
        drop(pools);
        // Deregistered outside the lock (the last reference is this slice's or the list's).
        drop(chunks);
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
