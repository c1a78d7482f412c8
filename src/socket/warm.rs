//! Faulting in the rings of a connection whose registrations pin nothing (the userspace
//! provider's) a window ahead of where they are written.
//!
//! A kernel device pins a ring when it is registered, which faults every page in before the
//! first byte moves. The userspace provider pins nothing, and its rings are larger
//! ([`UNPINNED_RING`](super::options::UNPINNED_RING), 1 MiB each): their pages fault in one
//! at a time as data first flows through them, two faults a message for each end of a 4 KiB
//! ping-pong until the rings have gone round once (256 messages). On hardware a fault costs
//! well under a microsecond, but under QEMU's TCG, where the VM benchmarks run, each costs
//! tens of microseconds and the first pass ran at 1.7x siw0's one-way time at 4 KiB (0.98x
//! with 128 KiB rings, which 200 round trips pass several times). So each ring is faulted in
//! with `MADV_POPULATE_WRITE` (one system call for 16 to 32 pages) a window ahead of its
//! cursor: the send ring's as the application's bytes are copied in, the receive ring's
//! behind the bytes that arrived (where the next land), as their completions are taken.
//! Pages still come in only as far as data has gone, plus the window, as with TCP's
//! autotuned buffers.
#![forbid(unsafe_code)]

use crate::verbs::MemoryRegion;

/// Memory whose pages can be brought in ahead of use (a memory region; a fake in tests).
pub(crate) trait Populate {
    /// Its length in bytes.
    fn len(&self) -> usize;
    /// Brings in the pages of `offset..offset+len`; false when the kernel refused.
    fn populate(&self, offset: usize, len: usize) -> bool;
}

impl Populate for MemoryRegion {
    fn len(&self) -> usize {
        MemoryRegion::len(self)
    }
    fn populate(&self, offset: usize, len: usize) -> bool {
        MemoryRegion::populate(self, offset, len).is_ok()
    }
}

/// How far ahead of a ring's cursor its pages are brought in; each populate covers at least
/// this much.
pub(crate) const WARM_AHEAD: usize = 64 * 1024;

/// Brings one ring's pages in, from its start, ahead of a cursor that goes round it.
#[derive(Debug)]
pub(crate) struct RingWarmer {
    /// Bytes from the ring's start whose pages are in.
    populated: usize,
    /// The ring's length: once populated this far, the work is done.
    ring: usize,
}

impl RingWarmer {
    /// A warmer for the first `ring` bytes of `mr`, with its first window brought in; `None`
    /// when the kernel cannot populate (before Linux 5.14: the pages fault in as before).
    pub(crate) fn new(mr: &impl Populate, ring: usize) -> Option<RingWarmer> {
        let mut w = RingWarmer {
            populated: 0,
            ring: ring.min(mr.len()),
        };
        w.ahead_of(mr, 0).then_some(w)
    }

    /// Brings in the pages up to `cursor + WARM_AHEAD` (at most the ring) if they are not
    /// yet, together with the window after them; false when the kernel refused.
    pub(crate) fn ahead_of(&mut self, mr: &impl Populate, cursor: usize) -> bool {
        let want = cursor.saturating_add(WARM_AHEAD).min(self.ring);
        if want <= self.populated {
            return true;
        }
        let end = want.saturating_add(WARM_AHEAD).min(self.ring);
        let ok = mr.populate(self.populated, end - self.populated);
        if ok {
            self.populated = end;
        }
        ok
    }

    /// Whether the whole ring is in.
    pub(crate) fn done(&self) -> bool {
        self.populated >= self.ring
    }
}

/// Runs `warmer` ahead of `cursor` and drops it once the ring is in or populating failed.
pub(crate) fn warm(warmer: &mut Option<RingWarmer>, mr: &impl Populate, cursor: usize) {
    if let Some(w) = warmer {
        if !w.ahead_of(mr, cursor) || w.done() {
            *warmer = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Records each populate; refuses them all when `refuse`.
    struct Fake {
        len: usize,
        refuse: bool,
        calls: RefCell<Vec<(usize, usize)>>,
    }

    impl Fake {
        fn new(len: usize) -> Fake {
            Fake {
                len,
                refuse: false,
                calls: RefCell::new(Vec::new()),
            }
        }
        fn take(&self) -> Vec<(usize, usize)> {
            std::mem::take(&mut self.calls.borrow_mut())
        }
    }

    impl Populate for Fake {
        fn len(&self) -> usize {
            self.len
        }
        fn populate(&self, offset: usize, len: usize) -> bool {
            assert!(offset + len <= self.len, "populate past the memory");
            self.calls.borrow_mut().push((offset, len));
            !self.refuse
        }
    }

    const KIB: usize = 1024;

    #[test]
    fn brings_pages_in_ahead_in_windows_and_stops_at_the_ring_end() {
        // The ring is the memory's first 1 MiB (the send ring has control slots after it).
        let mr = Fake::new(1024 * KIB + 4 * KIB);
        let mut w = RingWarmer::new(&mr, 1024 * KIB);
        assert_eq!(
            mr.take(),
            vec![(0, 2 * WARM_AHEAD)],
            "the first two windows at once"
        );
        // 4 KiB messages: nothing while a window is still in ahead of the cursor...
        for i in 1..=16 {
            warm(&mut w, &mr, i * 4 * KIB);
        }
        assert_eq!(mr.take(), vec![]);
        // ...then what the window needs and a window more, in one call.
        warm(&mut w, &mr, 68 * KIB);
        assert_eq!(mr.take(), vec![(2 * WARM_AHEAD, 4 * KIB + WARM_AHEAD)]);
        // Round the ring: every byte once, in order, never past the ring.
        let mut cursor = 68 * KIB;
        while w.is_some() {
            cursor += 4 * KIB;
            warm(&mut w, &mr, cursor % (1024 * KIB));
        }
        let calls = mr.take();
        let mut next = 4 * KIB + 3 * WARM_AHEAD;
        for &(offset, len) in &calls {
            assert_eq!(offset, next, "{calls:?}");
            assert!(len >= WARM_AHEAD || offset + len == 1024 * KIB, "{calls:?}");
            next = offset + len;
        }
        assert_eq!(next, 1024 * KIB, "up to the ring's end, no further");
        assert!(cursor < 1024 * KIB, "done before the cursor got there");
    }

    #[test]
    fn a_kernel_that_cannot_populate_turns_it_off() {
        let mr = Fake {
            refuse: true,
            ..Fake::new(256 * KIB)
        };
        assert!(RingWarmer::new(&mr, 256 * KIB).is_none());
        let mut w = Some(RingWarmer {
            populated: 0,
            ring: 256 * KIB,
        });
        warm(&mut w, &mr, 0);
        assert!(w.is_none(), "one refusal and it stops asking");
    }

    #[test]
    fn a_ring_smaller_than_the_windows_is_done_at_once() {
        let mr = Fake::new(64 * KIB);
        let w = RingWarmer::new(&mr, 128 * KIB).expect("populated");
        assert_eq!(mr.take(), vec![(0, 64 * KIB)], "never past the memory");
        assert!(w.done());
    }
}
