//! Memory registrations as the engine sees them: a protection domain's table of regions
//! (STag = local key, as in siw), and a queue pair's pool of inline payloads: copied at post
//! time, or lent by the caller while the post frames them, so the caller may reuse its buffer
//! once the post returns.

use crate::protocol::{MemoryTable, RegionView};
use rdmasock_verbs::{AccessFlags, LocalKey, RegisteredMemory, RemoteKey};
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

mod stag;

/// Keys of inline payloads have this bit set; region keys never do.
const INLINE_KEY_BIT: u32 = 0x8000_0000;

#[derive(Debug)]
struct Region {
    memory: Arc<RegisteredMemory>,
    access: AccessFlags,
}

/// Hashes region keys with one multiplication (SipHash, the default, cost ~300 instructions
/// a message in a 4 KiB stream, which looks a key up for every gather entry). Resistance to
/// chosen keys is not needed: only this process inserts keys (a peer's STag only looks
/// one up).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u32(u32::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        // Fibonacci hashing; the high half folded down, since the table takes its bucket
        // from the low bits (and the low byte is a key byte, not a counter).
        let x = (u64::from(n) ^ self.0).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 32);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The regions of one protection domain.
#[derive(Debug, Default)]
pub(crate) struct RegionSet {
    regions: HashMap<u32, Region, BuildHasherDefault<KeyHasher>>,
}

impl RegionSet {
    /// Registers all of `memory`; returns its key (lkey = rkey), unique among the process's
    /// live registrations, with a random key byte. `None` when every STag is in use.
    pub(crate) fn register(
        &mut self,
        memory: Arc<RegisteredMemory>,
        access: AccessFlags,
    ) -> Option<u32> {
        let key = stag::allocate()?;
        let replaced = self.regions.insert(key, Region { memory, access });
        debug_assert!(replaced.is_none(), "STag {key:#x} handed out while live");
        Some(key)
    }

    /// Removes a registration.
    pub(crate) fn deregister(&mut self, key: u32) {
        if self.regions.remove(&key).is_some() {
            stag::release(key);
        }
    }

    /// The region `lkey` names, for a post to read an inline payload from (`None` for a key
    /// of an inline pool, which is no region).
    pub(crate) fn local_view(&self, lkey: LocalKey) -> Option<RegionView<'_>> {
        if lkey.0 & INLINE_KEY_BIT != 0 {
            return None;
        }
        self.view(lkey.0)
    }

    fn view(&self, key: u32) -> Option<RegionView<'_>> {
        self.regions.get(&key).map(|r| RegionView {
            memory: &r.memory,
            memory_offset: 0,
            address: r.memory.addr(),
            length: r.memory.len() as u64,
            access: r.access,
        })
    }
}

impl Drop for RegionSet {
    /// A protection domain's regions left registered give their STags back.
    fn drop(&mut self) {
        for key in self.regions.keys() {
            stag::release(*key);
        }
    }
}

/// Inline payloads, kept until the engine has framed them: copies, or bytes the caller lends
/// for the length of a post (see [`InlinePool::lend`]).
#[derive(Debug, Default)]
pub(crate) struct InlinePool {
    /// Oldest first.
    entries: VecDeque<InlineEntry>,
    /// Buffers of sent copies, for reuse (no allocation per inline send).
    free: Vec<Arc<RegisteredMemory>>,
    next_key: u32,
    /// Where a post gathers an inline payload before [`InlinePool::store`] copies it (kept
    /// for the next post: no allocation per inline send).
    pub(crate) gather: Vec<u8>,
}

#[derive(Debug)]
struct InlineEntry {
    post_seq: u64,
    key: u32,
    /// The address its gather entry names (the caller's, for lent bytes).
    address: u64,
    memory: Arc<RegisteredMemory>,
}

/// The size of an inline copy buffer (the largest inline payload).
const INLINE_BUFFER: usize = 256;
/// How many spare buffers a QP keeps.
const SPARE_BUFFERS: usize = 64;

impl InlinePool {
    /// Stores a copy of `bytes`; returns the key and address that reach it.
    pub(crate) fn store(
        &mut self,
        post_seq: u64,
        bytes: &[u8],
    ) -> rdmasock_verbs::Result<(u32, u64)> {
        let memory = match self.free.pop() {
            // Not one a transmit queue still holds (its bytes may be unwritten).
            Some(m) if bytes.len() <= m.len() && Arc::strong_count(&m) == 1 => m,
            _ => Arc::new(RegisteredMemory::allocate(bytes.len().max(INLINE_BUFFER))?),
        };
        memory.write_at(0, bytes)?;
        let address = memory.addr();
        Ok((self.insert(post_seq, address, memory), address))
    }

    /// Takes bytes lent for this post (made by `RegisteredMemory::lend`) as an inline
    /// payload without copying them; returns the key that reaches them at their own
    /// address. Before the post returns, [`InlinePool::end_lend`] must run.
    pub(crate) fn lend(&mut self, post_seq: u64, memory: &Arc<RegisteredMemory>) -> u32 {
        self.insert(post_seq, memory.addr(), memory.clone())
    }

    fn insert(&mut self, post_seq: u64, address: u64, memory: Arc<RegisteredMemory>) -> u32 {
        self.next_key = self.next_key.wrapping_add(1) & 0x007f_ffff;
        let key = INLINE_KEY_BIT | self.next_key << 8;
        self.entries.push_back(InlineEntry {
            post_seq,
            key,
            address,
            memory,
        });
        key
    }

    /// Ends the lends of a post: a lent payload that `still_needed` says the engine has not
    /// framed whole is copied (same key, same address); the others are dropped. Afterwards
    /// the pool holds no lent memory.
    pub(crate) fn end_lend(
        &mut self,
        mut still_needed: impl FnMut(LocalKey) -> bool,
    ) -> rdmasock_verbs::Result<()> {
        let mut result = Ok(());
        let mut i = 0;
        while i < self.entries.len() {
            let e = &mut self.entries[i];
            if !e.memory.is_lent() {
                i += 1;
                continue;
            }
            if still_needed(LocalKey(e.key)) {
                let copy = RegisteredMemory::allocate(e.memory.len().max(1))
                    .and_then(|m| m.write_at(0, &e.memory.to_vec()).map(|()| m));
                match copy {
                    Ok(m) => {
                        e.memory = Arc::new(m);
                        i += 1;
                        continue;
                    }
                    // The engine then finds no memory for the rest of that request and fails
                    // it with a local protection error, as for memory deregistered under it.
                    Err(err) => result = Err(err),
                }
            }
            self.entries.remove(i);
        }
        result
    }

    /// Whether it holds no copy (the lean path and borrowed payloads make none).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drops the payloads of requests posted before `consumed` (their bytes are framed).
    pub(crate) fn release_before(&mut self, consumed: u64) {
        while self.entries.front().is_some_and(|e| e.post_seq < consumed) {
            let m = self.entries.pop_front().expect("front exists").memory;
            if self.free.len() < SPARE_BUFFERS && m.len() == INLINE_BUFFER && !m.is_lent() {
                self.free.push(m);
            }
        }
    }

    /// Drops every copy.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }

    fn view(&self, key: u32) -> Option<RegionView<'_>> {
        self.entries
            .iter()
            .find(|e| e.key == key)
            .map(|e| RegionView {
                memory: &e.memory,
                memory_offset: 0,
                address: e.address,
                length: e.memory.len() as u64,
                // Lent bytes are only read; a copy is the engine's own.
                access: if e.memory.is_lent() {
                    AccessFlags::empty()
                } else {
                    AccessFlags::LOCAL_WRITE
                },
            })
    }
}

/// What one queue pair's connection may reach: its domain's regions and its inline copies.
pub(crate) struct QpMemory<'a> {
    pub(crate) regions: &'a RegionSet,
    pub(crate) inline: &'a InlinePool,
}

impl MemoryTable for QpMemory<'_> {
    fn local(&self, lkey: LocalKey) -> Option<RegionView<'_>> {
        if lkey.0 & INLINE_KEY_BIT != 0 {
            self.inline.view(lkey.0)
        } else {
            self.regions.view(lkey.0)
        }
    }

    fn remote(&self, stag: RemoteKey) -> Option<RegionView<'_>> {
        if stag.0 & INLINE_KEY_BIT != 0 {
            return None;
        }
        self.regions.view(stag.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_copies_are_local_only_and_released_in_order() {
        let set = RegionSet::default();
        let mut pool = InlinePool::default();
        let (k1, a1) = pool.store(1, b"abc").unwrap();
        let (k2, _) = pool.store(2, b"defg").unwrap();
        let mem = QpMemory {
            regions: &set,
            inline: &pool,
        };
        let v = mem.local(LocalKey(k1)).unwrap();
        let mut got = [0u8; 3];
        v.read(a1, &mut got, AccessFlags::empty()).unwrap();
        assert_eq!(&got, b"abc");
        assert!(mem.remote(RemoteKey(k1)).is_none());
        pool.release_before(2);
        let mem = QpMemory {
            regions: &set,
            inline: &pool,
        };
        assert!(mem.local(LocalKey(k1)).is_none());
        assert!(mem.local(LocalKey(k2)).is_some());
    }

    #[test]
    fn region_keys_are_unique_across_domains() {
        let mut a = RegionSet::default();
        let mut b = RegionSet::default();
        let m = Arc::new(RegisteredMemory::allocate(64).unwrap());
        let ka = a.register(m.clone(), AccessFlags::REMOTE_READ).unwrap();
        let kb = b.register(m, AccessFlags::REMOTE_READ).unwrap();
        assert_ne!(ka, kb);
        assert!(b.view(ka).is_none());
        assert_eq!(ka & INLINE_KEY_BIT, 0);
    }

    /// A region stays registered while 2^23 others are registered and deregistered (the
    /// index space wraps): its STag still names it, and no other registration got it.
    #[test]
    fn a_live_region_keeps_its_stag_through_a_wrap() {
        let mut set = RegionSet::default();
        let kept_memory = Arc::new(RegisteredMemory::allocate(64).unwrap());
        let kept = set
            .register(kept_memory.clone(), AccessFlags::REMOTE_READ)
            .unwrap();
        let other = Arc::new(RegisteredMemory::allocate(64).unwrap());
        for round in 0..=stag::INDEX_MASK {
            let key = set
                .register(other.clone(), AccessFlags::REMOTE_READ)
                .unwrap();
            assert_ne!(
                key, kept,
                "round {round}: the live region's STag handed out"
            );
            set.deregister(key);
        }
        let view = set.view(kept).expect("the kept region is still registered");
        assert_eq!(view.address, kept_memory.addr());
    }

    /// Region keys share their low byte: the hasher must still spread them over a table's
    /// buckets (which come from the low bits), or every lookup would walk one long probe.
    #[test]
    fn region_keys_spread_over_the_buckets() {
        use std::hash::BuildHasher;
        let build = BuildHasherDefault::<KeyHasher>::default();
        let buckets: std::collections::HashSet<u64> = (1u32..=1024)
            .map(|index| build.hash_one(index << 8 | 0x5a) & 1023)
            .collect();
        assert!(buckets.len() > 600, "{} of 1024 buckets", buckets.len());
    }
}
