//! Memory registrations as the engine sees them: a protection domain's table of regions
//! (STag = local key, as in siw), and a queue pair's pool of inline payloads, copied at post
//! time so the caller may reuse its buffer at once.

use crate::core::{MemoryTable, RegionView};
use rdmasock_verbs::{AccessFlags, LocalKey, RegisteredMemory, RemoteKey};
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Keys of inline payloads have this bit set; region keys never do.
const INLINE_KEY_BIT: u32 = 0x8000_0000;

/// The next region index (an STag is `index << 8 | key byte`). Process-wide, so a key of
/// one protection domain never names a region of another.
static NEXT_REGION: AtomicU32 = AtomicU32::new(1);

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
        // from the low bits (and a key's low byte is the same for every region).
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
    /// Registers all of `memory`; returns its key (lkey = rkey).
    pub(crate) fn register(&mut self, memory: Arc<RegisteredMemory>, access: AccessFlags) -> u32 {
        let index = NEXT_REGION.fetch_add(1, Ordering::Relaxed) & 0x007f_ffff;
        let key = index << 8 | 0x5a;
        self.regions.insert(key, Region { memory, access });
        key
    }

    /// Removes a registration.
    pub(crate) fn deregister(&mut self, key: u32) {
        self.regions.remove(&key);
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

/// Copies of inline payloads, kept until the engine has sent them.
#[derive(Debug, Default)]
pub(crate) struct InlinePool {
    /// (post sequence, key, memory), oldest first.
    entries: VecDeque<(u64, u32, Arc<RegisteredMemory>)>,
    /// Buffers of sent copies, for reuse (no allocation per inline send).
    free: Vec<Arc<RegisteredMemory>>,
    next_key: u32,
    /// Where a post gathers an inline payload before [`InlinePool::store`] copies it (kept
    /// for the next post: no allocation per inline send).
    pub(crate) gather: Vec<u8>,
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
        self.next_key = self.next_key.wrapping_add(1) & 0x007f_ffff;
        let key = INLINE_KEY_BIT | self.next_key << 8;
        let addr = memory.addr();
        self.entries.push_back((post_seq, key, memory));
        Ok((key, addr))
    }

    /// Drops the copies of requests posted before `consumed` (their bytes are sent).
    pub(crate) fn release_before(&mut self, consumed: u64) {
        while self.entries.front().is_some_and(|e| e.0 < consumed) {
            let (_, _, m) = self.entries.pop_front().expect("front exists");
            if self.free.len() < SPARE_BUFFERS && m.len() == INLINE_BUFFER {
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
            .find(|e| e.1 == key)
            .map(|(_, _, m)| RegionView {
                memory: m,
                memory_offset: 0,
                address: m.addr(),
                length: m.len() as u64,
                access: AccessFlags::LOCAL_WRITE,
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
        let ka = a.register(m.clone(), AccessFlags::REMOTE_READ);
        let kb = b.register(m, AccessFlags::REMOTE_READ);
        assert_ne!(ka, kb);
        assert!(b.view(ka).is_none());
        assert_eq!(ka & INLINE_KEY_BIT, 0);
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
