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
//! with `MADV_POPULATE_WRITE` (one system call for up to 32 pages) a window ahead of its
//! cursor: the send ring's as the application's bytes are copied in, the receive ring's
//! behind the bytes that arrived (where the next land), as their completions are taken.
//! Pages still come in only as far as data has gone, plus the window, as with TCP's
//! autotuned buffers; and no window at all until the cursor has left the ring's first page
//! ([`BUSY_FROM`]), so that an idle connection costs only the pages its data touched.
#![forbid(unsafe_code)]

use super::pool::LocalSlice;
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

impl Populate for LocalSlice {
    fn len(&self) -> usize {
        LocalSlice::len(self)
    }
    fn populate(&self, offset: usize, len: usize) -> bool {
        LocalSlice::populate(self, offset, len).is_ok()
    }
}

/// The most a ring's pages are brought in ahead of its cursor; each populate covers the
/// window too.
pub(crate) const WARM_AHEAD: usize = 64 * 1024;
/// The window while little of the ring has been used: it grows with the populated part
/// (4, 8, 16 … KiB), so a connection that moves a few KiB brings in a few pages, and none
/// at connect (populating 128 KiB per ring at connect added ~160 µs to each of
/// `connect_cycles`' loopback connections).
pub(crate) const MIN_AHEAD: usize = 4 * 1024;
/// Nothing is brought in until the cursor has passed this far into the ring (its first
/// page, which the data faults in itself): a mostly idle connection that exchanges a few
/// small messages keeps the pages it touched and no window beyond them, which with
/// thousands of connections is most of their memory.
pub(crate) const BUSY_FROM: usize = 4 * 1024;

/// Brings one ring's pages in, from its start, ahead of a cursor that goes round it.
#[derive(Debug)]
pub(crate) struct RingWarmer {
    /// Bytes from the ring's start whose pages are in.
    populated: usize,
    /// The ring's length: once populated this far, the work is done.
    ring: usize,
}

impl RingWarmer {
    /// A warmer for the first `ring` bytes of `mr`; nothing is brought in yet.
    pub(crate) fn new(mr: &impl Populate, ring: usize) -> RingWarmer {
        RingWarmer {
            populated: 0,
            ring: ring.min(mr.len()),
        }
    }

    /// Brings in the pages up to a window past `cursor` (at most the ring) if they are not
    /// yet, together with the window after them; false when the kernel refused (before
    /// Linux 5.14: the pages then fault in as they are first written).
    pub(crate) fn ahead_of(&mut self, mr: &impl Populate, cursor: usize) -> bool {
        if self.populated == 0 && cursor < BUSY_FROM {
            return true;
        }
        let ahead = self.populated.clamp(MIN_AHEAD, WARM_AHEAD);
        let want = cursor.saturating_add(ahead).min(self.ring);
        if want <= self.populated {
            return true;
        }
        let end = want.saturating_add(ahead).min(self.ring);
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
    fn brings_pages_in_ahead_in_growing_windows_and_stops_at_the_ring_end() {
        // The ring is the memory's first 1 MiB (the send ring has control slots after it).
        let mr = Fake::new(1024 * KIB + 4 * KIB);
        let mut w = Some(RingWarmer::new(&mr, 1024 * KIB));
        assert_eq!(mr.take(), vec![], "nothing at connect");
        // Small messages within the first page: nothing (the data brings that page in).
        warm(&mut w, &mr, 1);
        warm(&mut w, &mr, BUSY_FROM - 1);
        assert_eq!(
            mr.take(),
            vec![],
            "an idle connection's few bytes bring in no window"
        );
        // Past it: a few pages.
        warm(&mut w, &mr, BUSY_FROM + 1);
        assert_eq!(mr.take(), vec![(0, 12 * KIB + 1)]);
        // 4 KiB messages: the window grows with what is in, up to WARM_AHEAD.
        let mut cursor = BUSY_FROM + 1;
        let mut calls = Vec::new();
        while w.is_some() {
            cursor += 4 * KIB;
            warm(&mut w, &mr, cursor % (1024 * KIB));
            for (offset, len) in mr.take() {
                calls.push((cursor, offset, len));
            }
        }
        // Every byte of the ring once, in order, never past it; each call ahead of the
        // cursor by at least the window, which doubles up to WARM_AHEAD.
        let mut next = 12 * KIB + 1;
        for &(at, offset, len) in &calls {
            assert_eq!(offset, next, "{calls:?}");
            let ahead = offset.clamp(MIN_AHEAD, WARM_AHEAD);
            assert!(
                offset + len >= (at + 2 * ahead).min(1024 * KIB),
                "{calls:?}"
            );
            next = offset + len;
        }
        assert_eq!(next, 1024 * KIB, "up to the ring's end, no further");
        assert!(cursor < 1024 * KIB, "done before the cursor got there");
        let windows: Vec<usize> = calls.iter().map(|c| c.2).collect();
        assert!(windows[..4].windows(2).all(|p| p[1] > p[0]), "{windows:?}");
        assert!(
            calls.len() < 1024 / 64 + 8,
            "one call per window: {}",
            calls.len()
        );
    }

    #[test]
    fn a_kernel_that_cannot_populate_turns_it_off() {
        let mr = Fake {
            refuse: true,
            ..Fake::new(256 * KIB)
        };
        let mut w = Some(RingWarmer::new(&mr, 256 * KIB));
        warm(&mut w, &mr, BUSY_FROM + 100);
        assert!(w.is_none(), "one refusal and it stops asking");
        assert_eq!(mr.take().len(), 1);
    }

    #[test]
    fn a_ring_smaller_than_the_windows_is_done_at_once() {
        let mr = Fake::new(8 * KIB);
        let mut w = Some(RingWarmer::new(&mr, 128 * KIB));
        warm(&mut w, &mr, BUSY_FROM + 1000);
        assert_eq!(mr.take(), vec![(0, 8 * KIB)], "never past the memory");
        assert!(w.is_none(), "done");
    }
}
