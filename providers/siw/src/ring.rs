//! Access to siw's mmap'd element arrays (docs/kernel-abi.md#siw-elements): the only module of this
//! crate with `unsafe`.
//!
//! A siw queue is a bare array of `count` fixed-size elements (`count` a power of two) with no
//! shared indices: ownership of each element is a `VALID` bit in its own flags field, at byte
//! 8 of every element — a `u16` in send and receive elements, a `u8` in completion elements.
//! Each side keeps a private free-running counter. The producer writes the body of a free
//! element, then publishes it with a release store of its flags; the consumer loads the flags
//! with acquire, reads the body, and hands the element back with a release store of 0.
//!
//! A completion array is followed by `struct siw_cq_ctrl`, whose first 32-bit word arms the
//! completion channel.

use rdmasock_verbs::__private::SharedMapping;
use std::sync::atomic::{fence, AtomicU16, AtomicU32, AtomicU8, Ordering};

/// Byte offset of the flags field in every element.
pub(crate) const FLAGS_OFFSET: usize = 8;

/// The slot of the free-running counter `counter` in a ring of `count` slots (a power of
/// two, so wrap-around of the counter is harmless).
pub(crate) fn slot_of(counter: u32, count: u32) -> u32 {
    counter & (count - 1)
}

/// One mapped element array.
#[derive(Debug)]
pub(crate) struct ElementRing {
    map: SharedMapping,
    count: u32,
    stride: usize,
    /// Bytes after the array that belong to the ring (the CQ control word).
    trailer: usize,
}

impl ElementRing {
    /// Checks that `count` elements of `stride` bytes and `trailer` bytes after them fit the
    /// mapping, and that `count` is a power of two.
    pub(crate) fn new(
        map: SharedMapping,
        count: u32,
        stride: usize,
        trailer: usize,
    ) -> Result<ElementRing, String> {
        if count == 0 || !count.is_power_of_two() {
            return Err(format!(
                "the kernel reported {count} elements, not a power of two"
            ));
        }
        assert!(
            stride >= FLAGS_OFFSET + 2 && stride.is_multiple_of(8),
            "element stride"
        );
        assert!(trailer.is_multiple_of(4), "trailer alignment");
        let needed = count as u64 * stride as u64 + trailer as u64;
        if needed > map.len() as u64 {
            return Err(format!(
                "{count} elements of {stride} bytes need {needed} bytes but the mapping has {}",
                map.len()
            ));
        }
        Ok(ElementRing {
            map,
            count,
            stride,
            trailer,
        })
    }

    /// Elements in the ring.
    pub(crate) fn count(&self) -> u32 {
        self.count
    }

    /// Bytes per element.
    pub(crate) fn stride(&self) -> usize {
        self.stride
    }

    fn element_ptr(&self, counter: u32) -> *mut u8 {
        let offset = slot_of(counter, self.count) as usize * self.stride;
        // SAFETY: `new` checked that count * stride bytes lie inside the mapping and the slot
        // index is below count, so `offset` is in bounds of the mapped allocation.
        unsafe { self.map.as_ptr().add(offset) }
    }

    /// The 16-bit flags of a send or receive element.
    fn flags16(&self, counter: u32) -> &AtomicU16 {
        let p = self.element_ptr(counter).wrapping_add(FLAGS_OFFSET);
        // SAFETY: in bounds (stride >= FLAGS_OFFSET + 2, asserted in new) and 2-byte aligned
        // (the mapping is page aligned, stride and FLAGS_OFFSET are multiples of 8);
        // AtomicU16 has u16's layout; the memory lives as long as `self.map`, which the
        // returned reference borrows. The kernel accesses the field with READ_ONCE /
        // smp_store_mb, i.e. single aligned 16-bit accesses.
        unsafe { AtomicU16::from_ptr(p.cast::<u16>()) }
    }

    /// The 8-bit flags of a completion element.
    fn flags8(&self, counter: u32) -> &AtomicU8 {
        let p = self.element_ptr(counter).wrapping_add(FLAGS_OFFSET);
        // SAFETY: in bounds as in flags16; any address is aligned for a u8; AtomicU8 has u8's
        // layout; borrowed from `self.map`. The kernel writes it with WRITE_ONCE.
        unsafe { AtomicU8::from_ptr(p) }
    }

    /// Whether the send/receive element at `counter` is still owned by the kernel (its
    /// `VALID` bit is set: the kernel has not taken it yet).
    pub(crate) fn producer_slot_busy(&self, counter: u32, valid: u16) -> bool {
        self.flags16(counter).load(Ordering::Acquire) & valid != 0
    }

    /// Whether the send element at `counter`, published before the caller's latest
    /// [`publish`](Self::publish), is still untaken by the kernel: then the kernel's
    /// transmit engine has yet to reach it and will go on to the elements after it, so no
    /// doorbell is needed (libsiw's rule). The full fence orders the latest publication's
    /// store before this load; the kernel clears a taken element's flags with
    /// `smp_store_mb` before it looks at the next, so one of the two sides sees the other's
    /// store: either we find the element taken (and ring), or the kernel finds ours.
    pub(crate) fn earlier_slot_untaken(&self, counter: u32, valid: u16) -> bool {
        fence(Ordering::SeqCst);
        self.flags16(counter).load(Ordering::Acquire) & valid != 0
    }

    /// Writes `element` (a whole element whose flags bytes are ignored) into the free slot of
    /// `counter`, then publishes it with a release store of `flags`. The caller has checked
    /// with [`ElementRing::producer_slot_busy`] that the slot is free, and holds the ring's
    /// lock, so it is the only producer.
    pub(crate) fn publish(&mut self, counter: u32, element: &[u8], flags: u16) {
        assert!(element.len() <= self.stride, "element larger than the slot");
        assert!(
            element.len() >= FLAGS_OFFSET + 2,
            "element shorter than its flags"
        );
        let base = self.element_ptr(counter);
        let tail = FLAGS_OFFSET + 2;
        // SAFETY: both ranges lie inside the slot (in bounds, see element_ptr; lengths
        // asserted above) and skip the flags field, which the kernel may read concurrently
        // (it reads only the flags of a free slot, never its body); `element` is a distinct
        // Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(element.as_ptr(), base, FLAGS_OFFSET);
            std::ptr::copy_nonoverlapping(
                element.as_ptr().add(tail),
                base.add(tail),
                element.len() - tail,
            );
        }
        // The publication point: every body store above happens-before the kernel's read of
        // the flags that sees VALID.
        self.flags16(counter).store(flags, Ordering::Release);
    }

    /// If the completion element at `counter` is valid (the kernel published it), copies it
    /// into `out` and returns true. The caller holds the ring's lock.
    pub(crate) fn take_completion(&self, counter: u32, valid: u8, out: &mut [u8]) -> bool {
        assert!(out.len() <= self.stride, "read larger than the slot");
        if self.flags8(counter).load(Ordering::Acquire) & valid == 0 {
            return false;
        }
        // SAFETY: in bounds (element_ptr, asserted length); the kernel does not write a
        // completion element while its VALID bit is set (we own it until we store 0), and the
        // acquire load above orders these reads after its writes; `out` is a distinct buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(self.element_ptr(counter), out.as_mut_ptr(), out.len())
        };
        true
    }

    /// Hands the completion element at `counter` back to the kernel (flags := 0, release: our
    /// reads of its body happen before the kernel may reuse it).
    pub(crate) fn release_completion(&self, counter: u32) {
        self.flags8(counter).store(0, Ordering::Release);
    }

    /// The 32-bit word at `offset` of the trailer after the array.
    fn trailer_word(&self, offset: usize) -> &AtomicU32 {
        assert!(offset + 4 <= self.trailer, "outside the trailer");
        let at = self.count as usize * self.stride + offset;
        // SAFETY: in bounds (new checked count * stride + trailer <= len, asserted offset);
        // 4-byte aligned (page-aligned base, stride a multiple of 8, offset a multiple of 4
        // checked by the trailer layout); AtomicU32 has u32's layout; borrowed from
        // `self.map`. The kernel accesses it with READ_ONCE/WRITE_ONCE/smp_store_mb.
        unsafe { AtomicU32::from_ptr(self.map.as_ptr().add(at).cast::<u32>()) }
    }

    /// Stores `value` into the trailer word at `offset` and then makes the store visible
    /// before any later load (a full fence: arming followed by a poll must not miss a
    /// completion the kernel added in between).
    pub(crate) fn store_trailer_word(&self, offset: usize, value: u32) {
        self.trailer_word(offset).store(value, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Loads the trailer word at `offset`.
    pub(crate) fn load_trailer_word(&self, offset: usize) -> u32 {
        self.trailer_word(offset).load(Ordering::Acquire)
    }

    /// Test support: plays the kernel's part on a fake ring — stores `flags` into the 16-bit
    /// flags of the element at `counter` (taking a send/receive element clears them to 0).
    #[cfg(test)]
    pub(crate) fn set_flags16(&self, counter: u32, flags: u16) {
        self.flags16(counter).store(flags, Ordering::Release);
    }

    /// Test support: plays the kernel's part — writes a completion element body, then its
    /// flags with release.
    #[cfg(test)]
    pub(crate) fn kernel_complete(&mut self, counter: u32, element: &[u8], flags: u8) {
        assert!(element.len() <= self.stride);
        let base = self.element_ptr(counter);
        // SAFETY: in bounds of the slot (element is one CQE, at most one stride, asserted);
        // a test plays the kernel and nothing else accesses the slot meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(element.as_ptr(), base, element.len()) };
        self.flags8(counter).store(flags, Ordering::Release);
    }

    /// Test support: a copy of the element at `counter`.
    #[cfg(test)]
    pub(crate) fn element_bytes(&self, counter: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.stride];
        // SAFETY: in bounds (one stride from element_ptr); tests are single-threaded here.
        unsafe {
            std::ptr::copy_nonoverlapping(self.element_ptr(counter), out.as_mut_ptr(), out.len())
        };
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// A ring over anonymous shared memory (`/dev/zero`), standing in for a kernel mapping.
    pub(crate) fn fake_ring(
        count: u32,
        stride: usize,
        trailer: usize,
    ) -> Result<ElementRing, String> {
        let zero = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/zero")
            .unwrap();
        let len = count as usize * stride + trailer;
        let map = SharedMapping::map(zero.as_fd(), 0, len.max(1)).unwrap();
        ElementRing::new(map, count, stride, trailer)
    }

    #[test]
    fn slots_wrap_with_the_counter() {
        assert_eq!(slot_of(0, 8), 0);
        assert_eq!(slot_of(9, 8), 1);
        assert_eq!(slot_of(u32::MAX, 8), 7);
        assert_eq!(slot_of(u32::MAX.wrapping_add(1), 8), 0);
    }

    #[test]
    fn geometry_is_validated() {
        assert!(fake_ring(3, 120, 0).is_err(), "not a power of two");
        let ring = fake_ring(4, 120, 0).unwrap();
        assert_eq!((ring.count(), ring.stride()), (4, 120));
        // A mapping one byte short of the trailer is refused.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/zero")
            .unwrap();
        let map = SharedMapping::map(f.as_fd(), 0, 4 * 32 + 7).unwrap();
        let err = ElementRing::new(map, 4, 32, 8).unwrap_err();
        assert!(err.contains("need 136 bytes"), "{err}");
    }

    #[test]
    fn publish_leaves_flags_for_last_and_skips_them_in_the_copy() {
        let mut ring = fake_ring(2, 120, 0).unwrap();
        let mut element = vec![0xeeu8; 120];
        element[8] = 0x55;
        element[9] = 0x66;
        assert!(!ring.producer_slot_busy(3, 1));
        ring.publish(3, &element, 0x0005);
        let got = ring.element_bytes(1);
        assert_eq!(&got[..8], &[0xee; 8]);
        assert_eq!(
            &got[8..10],
            &[5, 0],
            "flags are the published value, not the buffer's"
        );
        assert_eq!(&got[10..], &[0xee; 110]);
        assert!(ring.producer_slot_busy(1, 1), "owned by the kernel now");
        ring.set_flags16(1, 0);
        assert!(
            !ring.producer_slot_busy(3, 1),
            "taken by the kernel: free again"
        );
    }

    #[test]
    fn completions_are_taken_and_released() {
        let mut ring = fake_ring(4, 32, 8).unwrap();
        let mut out = [0u8; 32];
        assert!(!ring.take_completion(0, 1, &mut out), "empty");
        let mut cqe = [7u8; 32];
        cqe[8] = 0;
        ring.kernel_complete(4, &cqe, 1);
        assert!(ring.take_completion(0, 1, &mut out));
        assert_eq!(out[8], 1);
        assert_eq!(out[0], 7);
        ring.release_completion(0);
        assert!(!ring.take_completion(0, 1, &mut out));
        assert_eq!(ring.load_trailer_word(0), 0);
        ring.store_trailer_word(0, 3);
        assert_eq!(ring.load_trailer_word(0), 3);
    }
}
