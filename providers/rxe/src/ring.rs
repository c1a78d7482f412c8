//! Access to rxe's mmap'd queues (`struct rxe_queue_buf`, docs/kernel-abi.md#rxe-queues): the
//! only module of this crate with `unsafe`.
//!
//! A queue is a 384-byte header — `log2_elem_size` at +0, `index_mask` at +4, the producer
//! index at +128 and the consumer index at +256 — followed by `index_mask + 1` slots of
//! `1 << log2_elem_size` bytes. Both indices are stored already masked. Each side owns one
//! index: we write the producer index of the SQ and RQ and the consumer index of the CQ, and
//! only read the other. Slot contents are published with a release store of the owned index
//! and taken over with an acquire load of the other side's index.

use rdmasock_verbs::__private::Pod;
use rdmasock_verbs::__private::SharedMapping;
use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes of the queue header before slot 0.
pub(crate) const HEADER_LEN: usize = 384;
const PRODUCER_OFFSET: usize = 128;
const CONSUMER_OFFSET: usize = 256;

/// The slot after `index` in a ring of `mask + 1` slots.
pub(crate) fn next_index(index: u32, mask: u32) -> u32 {
    index.wrapping_add(1) & mask
}

/// How many elements are queued between `consumer` and `producer`.
pub(crate) fn queued(producer: u32, consumer: u32, mask: u32) -> u32 {
    producer.wrapping_sub(consumer) & mask
}

/// One mapped queue.
#[derive(Debug)]
pub(crate) struct Ring {
    map: SharedMapping,
    mask: u32,
    log2_stride: u32,
}

impl Ring {
    /// Checks the header the kernel wrote against the mapping's size.
    pub(crate) fn new(map: SharedMapping) -> Result<Ring, String> {
        if map.len() < HEADER_LEN {
            return Err(format!(
                "queue mapping of {} bytes has no header",
                map.len()
            ));
        }
        let log2_stride = word(&map, 0).load(Ordering::Acquire);
        let mask = word(&map, 4).load(Ordering::Acquire);
        let slots = u64::from(mask) + 1;
        if !(6..=16).contains(&log2_stride) || !slots.is_power_of_two() {
            return Err(format!(
                "queue header is not an rxe queue (log2_elem_size {log2_stride}, index_mask {mask:#x})"
            ));
        }
        let needed = HEADER_LEN as u64 + (slots << log2_stride);
        if needed > map.len() as u64 {
            return Err(format!(
                "queue of {slots} slots of {} bytes needs {needed} bytes but the mapping has {}",
                1u32 << log2_stride,
                map.len()
            ));
        }
        Ok(Ring {
            map,
            mask,
            log2_stride,
        })
    }

    /// `index_mask`: slots - 1, also the usable capacity.
    #[inline]
    pub(crate) fn mask(&self) -> u32 {
        self.mask
    }

    /// Bytes per slot.
    #[inline]
    pub(crate) fn stride(&self) -> usize {
        1 << self.log2_stride
    }

    /// The producer index, loaded with `order`.
    #[inline]
    pub(crate) fn producer(&self, order: Ordering) -> u32 {
        self.header_word(PRODUCER_OFFSET).load(order) & self.mask
    }

    /// The consumer index, loaded with `order`.
    #[inline]
    pub(crate) fn consumer(&self, order: Ordering) -> u32 {
        self.header_word(CONSUMER_OFFSET).load(order) & self.mask
    }

    /// Publishes the producer index (our side of the SQ/RQ): everything written to the slots
    /// before becomes visible to the kernel.
    #[inline]
    pub(crate) fn release_producer(&self, index: u32) {
        self.header_word(PRODUCER_OFFSET)
            .store(index & self.mask, Ordering::Release);
    }

    /// Publishes the consumer index (our side of the CQ): the slots before it are the
    /// kernel's again.
    #[inline]
    pub(crate) fn release_consumer(&self, index: u32) {
        self.header_word(CONSUMER_OFFSET)
            .store(index & self.mask, Ordering::Release);
    }

    /// The producer or consumer index word of the header, without `word`'s bounds check:
    /// every post and poll reads one, and `new` checked the header once.
    #[inline]
    fn header_word(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset == PRODUCER_OFFSET || offset == CONSUMER_OFFSET);
        // SAFETY: `offset` is PRODUCER_OFFSET or CONSUMER_OFFSET (private callers only), both
        // 4-byte aligned and below HEADER_LEN, and `new` refused mappings shorter than
        // HEADER_LEN; the mapping is page aligned. AtomicU32 has u32's layout, and the memory
        // lives as long as `self.map`, which the returned reference borrows. The kernel
        // accesses these words with its own atomics/barriers.
        unsafe { AtomicU32::from_ptr(self.map.as_ptr().add(offset).cast::<u32>()) }
    }

    #[inline]
    fn slot_ptr(&self, index: u32) -> *mut u8 {
        let offset = HEADER_LEN + ((index & self.mask) as usize) * self.stride();
        // SAFETY: `new` checked that every slot lies inside the mapping, and the index is
        // masked, so `offset` is in bounds of the mapped allocation.
        unsafe { self.map.as_ptr().add(offset) }
    }

    /// Slot `index` as bytes to encode an element into in place. The caller owns that slot:
    /// it is a producer slot not yet published.
    #[inline]
    pub(crate) fn slot_mut(&mut self, index: u32) -> &mut [u8] {
        let len = self.stride();
        // SAFETY: the slot is in bounds (slot_ptr) and `stride` bytes long; the kernel does
        // not access an unpublished producer slot, and `&mut self` keeps any other Rust
        // reference to this ring's slots from existing while the returned borrow lives. The
        // bytes are plain memory (the mapping was zero-filled or written before), so every
        // byte is an initialized u8.
        unsafe { std::slice::from_raw_parts_mut(self.slot_ptr(index), len) }
    }

    /// The `T` at the start of slot `index` (one unaligned copy). The caller owns that slot:
    /// it is a consumer slot the producer published and we have not yet released.
    #[inline]
    pub(crate) fn read<T: Pod>(&self, index: u32) -> T {
        assert!(size_of::<T>() <= self.stride(), "read larger than the slot");
        // SAFETY: the slot is in bounds (slot_ptr) and at least size_of::<T>() long (asserted); T is Pod, so any
        // bytes are a valid T; the kernel does not write a slot between publishing it and
        // our release of the consumer index.
        unsafe { std::ptr::read_unaligned(self.slot_ptr(index).cast::<T>()) }
    }
}

/// The 32-bit header word at `offset` as an atomic.
fn word(map: &SharedMapping, offset: usize) -> &AtomicU32 {
    assert!(offset + 4 <= map.len() && offset.is_multiple_of(4));
    // SAFETY: in bounds and 4-byte aligned (the mapping is page aligned; asserted above);
    // AtomicU32 has u32's layout; the memory lives as long as `map`, which the returned
    // reference borrows. The kernel accesses these words with its own atomics/barriers.
    unsafe { AtomicU32::from_ptr(map.as_ptr().add(offset).cast::<u32>()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_arithmetic() {
        let mask = 7;
        assert_eq!(next_index(0, mask), 1);
        assert_eq!(next_index(7, mask), 0, "wraps at the mask");
        assert_eq!(queued(0, 0, mask), 0, "empty");
        assert_eq!(queued(6, 7, mask), 7, "full");
        assert_eq!(queued(7, 0, mask), 7, "full across the wrap");
        // Capacity is the mask: from empty, 7 elements fit.
        let (mut p, c) = (3, 3);
        for i in 0..7 {
            assert_eq!(queued(p, c, mask), i);
            p = next_index(p, mask);
        }
        assert_eq!(queued(p, c, mask), 7);
        assert_eq!(queued(1, 6, mask), 3, "across the wrap");
        assert_eq!(queued(4, 4, mask), 0);
    }

    fn fake_ring(log2: u32, mask: u32, len: usize) -> Result<Ring, String> {
        use std::os::fd::AsFd;
        let zero = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/zero")
            .unwrap();
        let map = SharedMapping::map(zero.as_fd(), 0, len).unwrap();
        word(&map, 0).store(log2, Ordering::Relaxed);
        word(&map, 4).store(mask, Ordering::Relaxed);
        Ring::new(map)
    }

    /// A zero-filled scratch file of `len` bytes (already unlinked), to map as a ring and to
    /// read and write with `pread`/`pwrite`, which see the same bytes as the mapping without
    /// going through [`Ring`]'s accessors.
    fn scratch_file(len: u64) -> std::fs::File {
        let path = std::env::temp_dir().join(format!(
            "rdmasock-rxe-ring-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        file.set_len(len).unwrap();
        file
    }

    /// The little-endian u32 at byte `offset` of `file`.
    fn u32_at(file: &std::fs::File, offset: u64) -> u32 {
        use std::os::unix::fs::FileExt;
        let mut bytes = [0u8; 4];
        file.read_exact_at(&mut bytes, offset).unwrap();
        u32::from_le_bytes(bytes)
    }

    /// The header layout of the kernel's `struct rxe_queue_buf` (docs/kernel-abi.md#rxe-queues,
    /// `rdma/rdma_user_rxe.h`): `log2_elem_size` at 0, `index_mask` at 4, `producer_index`
    /// at 128 and `consumer_index` at 256 (each after 30 or 31 pad words), slot 0 at 384.
    /// The header is written and read as raw file bytes; every other word holds a filler
    /// whose masked value (0xa5a5_a5a5 & 7 = 5) no index takes here, so a read from a wrong
    /// offset shows.
    #[test]
    fn header_words_are_at_the_kernel_offsets() {
        use std::os::fd::AsFd;
        use std::os::unix::fs::FileExt;
        const FILLER: u32 = 0xa5a5_a5a5;
        let file = scratch_file(4096);
        let mut header = FILLER.to_le_bytes().repeat(HEADER_LEN / 4);
        for (offset, value) in [(0, 6u32), (4, 7), (128, 2), (256, 6)] {
            header[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
        }
        file.write_all_at(&header, 0).unwrap();
        let map = SharedMapping::map(file.as_fd(), 0, 4096).unwrap();
        let mut ring = Ring::new(map).unwrap();
        assert_eq!(ring.stride(), 64, "log2_elem_size 6 read from offset 0");
        assert_eq!(ring.mask(), 7, "index_mask read from offset 4");
        assert_eq!(ring.producer(Ordering::Acquire), 2, "producer_index at 128");
        assert_eq!(ring.consumer(Ordering::Acquire), 6, "consumer_index at 256");

        ring.release_producer(3);
        assert_eq!(u32_at(&file, 128), 3, "the producer index is stored at 128");
        ring.release_consumer(4);
        assert_eq!(u32_at(&file, 256), 4, "the consumer index is stored at 256");
        ring.slot_mut(0)[..4].copy_from_slice(&0x0102_0304u32.to_le_bytes());
        assert_eq!(u32_at(&file, 384), 0x0102_0304, "slot 0 starts at 384");
        ring.slot_mut(1)[..4].copy_from_slice(&0x0506_0708u32.to_le_bytes());
        assert_eq!(
            u32_at(&file, 384 + 64),
            0x0506_0708,
            "slot 1 one stride later"
        );
        // Nothing else in the header was written.
        for offset in (0..HEADER_LEN as u64).step_by(4) {
            let expected = match offset {
                0 => 6,
                4 => 7,
                128 => 3,
                256 => 4,
                _ => FILLER,
            };
            assert_eq!(u32_at(&file, offset), expected, "header word at {offset}");
        }
    }

    #[test]
    fn header_is_validated_and_slots_round_trip() {
        assert!(fake_ring(0, 7, 4096).is_err(), "stride below 64");
        assert!(
            fake_ring(6, 6, 4096).is_err(),
            "slot count not a power of two"
        );
        assert!(
            fake_ring(9, 7, 4096).is_err(),
            "8 slots of 512 bytes do not fit"
        );
        let mut ring = fake_ring(6, 7, 4096).unwrap();
        assert_eq!((ring.stride(), ring.mask()), (64, 7));
        assert_eq!(ring.slot_mut(9).len(), 64);
        ring.slot_mut(9)[..3].copy_from_slice(&[1, 2, 3]);
        assert_eq!(ring.read::<u32>(1), 0x0003_0201, "index 9 is slot 1");
        assert_eq!(ring.read::<u64>(2), 0, "the neighbour is untouched");
        ring.release_producer(3);
        ring.release_consumer(10);
        assert_eq!(ring.producer(Ordering::Acquire), 3);
        assert_eq!(ring.consumer(Ordering::Acquire), 2);
    }
}
