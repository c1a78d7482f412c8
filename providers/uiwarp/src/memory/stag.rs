//! STags of memory regions: `index << 8 | key`, as siw makes them. The index is unique among
//! the process's live registrations (a peer's STag names one region of one protection domain,
//! and a region is never silently replaced, even after the index space wrapped); the key byte
//! comes from a generator seeded per process from the kernel's random source, so that a peer
//! cannot guess a region's STag from another's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Indices are 23 bits: the top bit of an STag marks inline payloads (see
/// `INLINE_KEY_BIT`), the low byte is the key.
pub(crate) const INDEX_MASK: u32 = 0x007f_ffff;

/// Which STag indices are live, and where the search for a free one goes on.
#[derive(Debug)]
pub(crate) struct Indices {
    /// One bit per index (`0..=INDEX_MASK`); allocated on first use (1 MiB).
    live: Vec<u64>,
    /// The next index to try.
    next: u32,
    /// How many are live.
    count: u32,
}

impl Indices {
    /// No index live; the first handed out is `first` (0 is never handed out).
    pub(crate) const fn starting_at(first: u32) -> Indices {
        Indices {
            live: Vec::new(),
            next: first,
            count: 0,
        }
    }

    /// A free index, now live; `None` when every one is.
    pub(crate) fn take(&mut self) -> Option<u32> {
        if self.live.is_empty() {
            self.live = vec![0; (INDEX_MASK as usize + 1) / 64];
            self.live[0] |= 1; // index 0 is never used
            self.count = 1;
        }
        if self.count > INDEX_MASK {
            return None;
        }
        loop {
            let i = self.next & INDEX_MASK;
            self.next = self.next.wrapping_add(1);
            let (word, bit) = (i as usize / 64, 1u64 << (i % 64));
            if self.live[word] & bit == 0 {
                self.live[word] |= bit;
                self.count += 1;
                return Some(i);
            }
        }
    }

    /// Frees `index`.
    pub(crate) fn give_back(&mut self, index: u32) {
        let i = index & INDEX_MASK;
        let (word, bit) = (i as usize / 64, 1u64 << (i % 64));
        if i != 0 && self.live.get(word).is_some_and(|w| w & bit != 0) {
            self.live[word] &= !bit;
            self.count -= 1;
        }
    }
}

/// The process's live region indices.
static INDICES: Mutex<Indices> = Mutex::new(Indices::starting_at(1));

/// A new STag, unique among live registrations; `None` when all 2^23 - 1 indices are live.
pub(crate) fn allocate() -> Option<u32> {
    let index = INDICES.lock().unwrap_or_else(|p| p.into_inner()).take()?;
    Some(index << 8 | u32::from(key_byte()))
}

/// Frees the index of `stag` (a region deregistered).
pub(crate) fn release(stag: u32) {
    INDICES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .give_back(stag >> 8);
}

/// The generator's state (splitmix64), seeded on first use.
static STATE: AtomicU64 = AtomicU64::new(0);
/// The generator's increment (an odd constant: every state in turn).
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// A key byte from the per-process generator.
fn key_byte() -> u8 {
    if STATE.load(Ordering::Relaxed) == 0 {
        let _ = STATE.compare_exchange(0, seed() | 1, Ordering::Relaxed, Ordering::Relaxed);
    }
    let state = STATE
        .fetch_add(GAMMA, Ordering::Relaxed)
        .wrapping_add(GAMMA);
    (mix(state) >> 56) as u8
}

/// splitmix64's output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// 8 bytes from the kernel's random source; without one (no /dev/urandom in a chroot), the
/// clock, the process id and an address mixed, which a remote peer cannot read either.
fn seed() -> u64 {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok()
    {
        return u64::from_ne_bytes(bytes);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let local = 0u8;
    mix(now ^ u64::from(std::process::id()).rotate_left(32) ^ (&local as *const u8 as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2^23 registrations, each deregistered, while one region stays registered: the index
    /// space wraps, never handing out the live one, and each index handed out
    /// is free until given back.
    #[test]
    fn a_wrap_never_hands_out_a_live_index() {
        let mut indices = Indices::starting_at(1);
        let kept = indices.take().unwrap();
        for round in 0..=INDEX_MASK {
            let i = indices.take().expect("a free index");
            assert!(
                i != kept && i != 0,
                "round {round}: index {i} handed out again"
            );
            indices.give_back(i);
        }
        // Fill every index but one: the last free one is found, then none is left.
        let mut seen = vec![false; INDEX_MASK as usize + 1];
        seen[kept as usize] = true;
        let mut count = 1;
        while let Some(i) = indices.take() {
            assert!(!seen[i as usize], "index {i} handed out twice");
            seen[i as usize] = true;
            count += 1;
        }
        assert_eq!(count, INDEX_MASK, "every index but 0");
        indices.give_back(1000);
        assert_eq!(indices.take(), Some(1000));
        assert_eq!(indices.take(), None);
    }

    #[test]
    fn key_bytes_vary() {
        let keys: std::collections::HashSet<u8> = (0..256).map(|_| key_byte()).collect();
        assert!(keys.len() > 100, "{} distinct key bytes of 256", keys.len());
    }
}
