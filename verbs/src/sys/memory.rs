//! Raw memory behind memory regions: page-aligned anonymous mappings and caller memory.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// The size of a huge page that [`RawMemory::allocate_huge`] maps (`MAP_HUGE_2MB`).
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// What backs a mapping [`RawMemory`] made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backing {
    /// Base pages (or caller memory).
    Base,
    /// Base pages the kernel was asked to back with transparent huge pages (`MADV_HUGEPAGE`).
    Transparent,
    /// 2 MiB pages from the hugetlb pool (`MAP_HUGETLB | MAP_HUGE_2MB`).
    HugeTlb,
}

/// A pointer and a length that stay valid while this value lives.
#[derive(Debug)]
pub(crate) struct RawMemory {
    ptr: NonNull<u8>,
    len: usize,
    /// The length of the mapping `allocate*` made (`len` rounded up to whole 2 MiB pages on
    /// hugetlb and transparent huge page memory; 0 for memory not mapped here); what `Drop`
    /// unmaps.
    mapped: usize,
    backing: Backing,
    owned: bool,
    /// Lent shared bytes (see [`RawMemory::lent`]): every write path refuses them.
    read_only: bool,
}

// SAFETY: RawMemory is a plain address range; all access goes through copying or atomic
// accessors, so sharing it between threads is no different from sharing a `&[AtomicU8]`.
unsafe impl Send for RawMemory {}
// SAFETY: see Send above.
unsafe impl Sync for RawMemory {}

/// The system's page size (4096 if sysconf cannot say).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf reads a constant and has no memory effects.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    }
}

impl RawMemory {
    /// Maps `len` zeroed bytes of anonymous, page-aligned memory on base pages; with
    /// `transparent`, on whole 2 MiB-aligned extents (the mapping rounded up to 2 MiB) that the
    /// kernel is asked to back with transparent huge pages (`MADV_HUGEPAGE`; where it refuses,
    /// the memory stays on base pages and says so). With `dont_fork`, the mapping is left out
    /// of a child made by `fork` (`MADV_DONTFORK`).
    pub(crate) fn allocate(
        len: usize,
        transparent: bool,
        dont_fork: bool,
    ) -> io::Result<RawMemory> {
        #[cfg(not(miri))]
        if transparent {
            return RawMemory::allocate_transparent(len, dont_fork);
        }
        let _ = transparent;
        RawMemory::map(len, len, 0, dont_fork)
    }

    /// [`allocate`](Self::allocate) with `transparent`: a transparent huge page backs only an
    /// aligned 2 MiB extent inside the mapping, so the mapping is made 2 MiB larger than the
    /// rounded length, then trimmed to an aligned start.
    #[cfg(not(miri))]
    fn allocate_transparent(len: usize, dont_fork: bool) -> io::Result<RawMemory> {
        let too_long = || io::Error::from_raw_os_error(libc::ENOMEM);
        let mapped = len
            .checked_next_multiple_of(HUGE_PAGE)
            .ok_or_else(too_long)?;
        let over = mapped.checked_add(HUGE_PAGE).ok_or_else(too_long)?;
        // SAFETY: an anonymous private mapping with no address hint touches no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                over,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let start = p as usize;
        let aligned = start.next_multiple_of(HUGE_PAGE);
        let head = aligned - start;
        let tail = over - head - mapped;
        // SAFETY: start..start+head and aligned+mapped..start+over are the parts of the
        // mapping just made that lie outside the aligned extent kept; nothing refers to them.
        unsafe {
            if head > 0 {
                libc::munmap(p, head);
            }
            if tail > 0 {
                libc::munmap((aligned + mapped) as *mut libc::c_void, tail);
            }
        }
        let mut raw = RawMemory {
            ptr: NonNull::new(aligned as *mut u8).expect("inside a successful mapping"),
            len,
            mapped,
            backing: Backing::Base,
            owned: true,
            read_only: false,
        };
        // SAFETY: aligned..aligned+mapped is the mapping kept above; MADV_HUGEPAGE changes no
        // contents, only which pages may back them.
        let rc =
            unsafe { libc::madvise(aligned as *mut libc::c_void, mapped, libc::MADV_HUGEPAGE) };
        if rc == 0 {
            raw.backing = Backing::Transparent;
        }
        raw.dont_fork(dont_fork);
        Ok(raw)
    }

    /// Marks the whole mapping `MADV_DONTFORK` when `dont_fork`: where the kernel does not
    /// copy pinned pages for a child made by `fork`, a registered page must not become
    /// copy-on-write in the parent. (Miri, which runs the pure parts' tests, has no madvise
    /// and no fork.)
    fn dont_fork(&self, dont_fork: bool) {
        #[cfg(not(miri))]
        if dont_fork {
            // SAFETY: the range is the whole mapping this value made.
            unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.mapped, libc::MADV_DONTFORK) };
        }
        #[cfg(miri)]
        let _ = dont_fork;
    }

    /// Maps `len` zeroed bytes on 2 MiB pages of the hugetlb pool, the mapping rounded up to
    /// whole huge pages (`len` stays the length). Fails (`ENOMEM`) when the pool has too few
    /// free pages: a private hugetlb mapping reserves its pages when it is made.
    pub(crate) fn allocate_huge(len: usize, dont_fork: bool) -> io::Result<RawMemory> {
        let mapped = len
            .checked_next_multiple_of(HUGE_PAGE)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        let mut raw = RawMemory::map(
            len,
            mapped,
            libc::MAP_HUGETLB | libc::MAP_HUGE_2MB,
            dont_fork,
        )?;
        raw.backing = Backing::HugeTlb;
        Ok(raw)
    }

    /// One anonymous private mapping of `mapped` bytes with the extra `flags`, of which the
    /// value describes the first `len`.
    fn map(
        len: usize,
        mapped: usize,
        flags: libc::c_int,
        dont_fork: bool,
    ) -> io::Result<RawMemory> {
        // SAFETY: an anonymous private mapping with no address hint touches no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let raw = RawMemory {
            ptr: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            len,
            mapped,
            backing: Backing::Base,
            owned: true,
            read_only: false,
        };
        raw.dont_fork(dont_fork);
        Ok(raw)
    }

    /// What backs the memory.
    pub(crate) fn backing(&self) -> Backing {
        self.backing
    }

    /// Wraps caller memory.
    ///
    /// # Safety
    /// `addr..addr+len` must stay valid for reads and writes while the value lives.
    pub(crate) unsafe fn borrowed(addr: *mut u8, len: usize) -> RawMemory {
        RawMemory {
            ptr: NonNull::new(addr).unwrap_or(NonNull::dangling()),
            len: if addr.is_null() { 0 } else { len },
            mapped: 0,
            backing: Backing::Base,
            owned: false,
            read_only: false,
        }
    }

    /// Wraps bytes the caller lends for reading only: every write through this value panics.
    ///
    /// # Safety
    /// `bytes` must outlive the value (it keeps no lifetime).
    pub(crate) unsafe fn lent(bytes: &[u8]) -> RawMemory {
        RawMemory {
            // A shared slice's pointer is never written through: `read_only` guards it.
            ptr: NonNull::new(bytes.as_ptr().cast_mut()).unwrap_or(NonNull::dangling()),
            len: bytes.len(),
            mapped: 0,
            backing: Backing::Base,
            owned: false,
            read_only: true,
        }
    }

    /// Whether the memory is lent for reading only (see [`RawMemory::lent`]).
    pub(crate) fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The address of the first byte.
    pub(crate) fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// The length.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Panics unless `offset..offset + len` lies inside the memory. The sum is checked, so a
    /// range whose end wraps around the address space is refused in release builds too.
    #[inline]
    fn assert_inside(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "range {offset}+{len} outside raw memory of {} bytes",
            self.len
        );
    }

    /// Faults in the pages under `offset..offset+len` as a write would, without writing
    /// (`MADV_POPULATE_WRITE`, Linux 5.14): one system call instead of a page fault per page
    /// when the bytes are first written. Contents are unchanged, so the pages may be in use.
    /// Only for memory this value mapped ([`RawMemory::allocate`]); the caller has checked
    /// bounds.
    pub(crate) fn populate_write(&self, offset: usize, len: usize) -> io::Result<()> {
        if !self.owned {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "populating memory the caller owns",
            ));
        }
        self.assert_inside(offset, len);
        let page = match self.backing {
            Backing::HugeTlb => HUGE_PAGE,
            Backing::Base | Backing::Transparent => page_size(),
        };
        let start = offset / page * page;
        // The mapping covers whole pages, so rounding the end up stays inside it.
        let end = (offset + len).div_ceil(page) * page;
        if end <= start {
            return Ok(());
        }
        // SAFETY: start..end lies in the mapping made by `allocate` (page-aligned start, whole
        // pages); MADV_POPULATE_WRITE changes no contents and no mapping.
        let rc = unsafe {
            libc::madvise(
                self.ptr.as_ptr().add(start).cast(),
                end - start,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Copies out; the caller has checked bounds.
    #[inline]
    pub(crate) fn read(&self, offset: usize, dst: &mut [u8]) {
        self.assert_inside(offset, dst.len());
        // SAFETY: bounds asserted above; the range is valid per the constructor's contract;
        // dst is a distinct Rust buffer so the ranges do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                dst.as_mut_ptr(),
                dst.len(),
            )
        }
    }

    /// The byte at `offset`, read anew on every call (an atomic load: a device or a peer may
    /// be writing it meanwhile).
    #[inline]
    pub(crate) fn load_u8(&self, offset: usize) -> u8 {
        self.assert_inside(offset, 1);
        // SAFETY: in bounds (asserted); AtomicU8 has u8's layout and alignment, and the
        // memory is valid for the lifetime of &self. Writers outside Rust (the device, a
        // peer's RDMA WRITE) change it only as whole bytes.
        unsafe { &*(self.ptr.as_ptr().add(offset) as *const AtomicU8) }.load(Ordering::Acquire)
    }

    /// Copies in; the caller has checked bounds.
    #[inline]
    pub(crate) fn write(&self, offset: usize, src: &[u8]) {
        assert!(!self.read_only, "write into lent read-only memory");
        self.assert_inside(offset, src.len());
        // SAFETY: as in `read`.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len())
        }
    }

    fn atomic_at(&self, offset: usize) -> &AtomicU64 {
        assert!(!self.read_only, "atomic on lent read-only memory");
        self.assert_inside(offset, 8);
        assert!(
            (self.addr() + offset).is_multiple_of(8),
            "atomic at an unaligned offset {offset}"
        );
        // SAFETY: in bounds and 8-byte aligned (asserted); AtomicU64 has u64's layout and the
        // memory is valid for the lifetime of &self.
        unsafe { &*(self.ptr.as_ptr().add(offset) as *const AtomicU64) }
    }

    /// Atomic fetch-add.
    pub(crate) fn fetch_add_u64(&self, offset: usize, add: u64) -> u64 {
        self.atomic_at(offset).fetch_add(add, Ordering::SeqCst)
    }

    /// Atomic compare-and-swap; returns the old value.
    pub(crate) fn compare_swap_u64(&self, offset: usize, compare: u64, swap: u64) -> u64 {
        match self.atomic_at(offset).compare_exchange(
            compare,
            swap,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            Ok(v) | Err(v) => v,
        }
    }

    /// The address of `offset`, after checking that `offset..offset + len` lies inside the
    /// memory (panics otherwise), for the kernel to read (a gathering send): no Rust reference
    /// is made to the bytes, which a device or a peer may be writing.
    pub(crate) fn pointer_at(&self, offset: usize, len: usize) -> *const u8 {
        self.assert_inside(offset, len);
        self.ptr.as_ptr().wrapping_add(offset).cast_const()
    }

    /// The bytes as a mutable slice.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        assert!(!self.read_only, "mutable slice of lent read-only memory");
        // SAFETY: valid range per the constructor; `&mut self` gives exclusive access on the
        // Rust side, and the safe layer above hands it out only for memory no registration
        // shares (see RegisteredMemory::as_mut_slice).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for RawMemory {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: the mapping was made by `map` with this length and is unmapped once.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.mapped) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which of the pages of `m` are resident (mincore).
    fn resident(m: &RawMemory) -> Vec<bool> {
        let page = page_size();
        let mut v = vec![0u8; m.len().div_ceil(page)];
        // SAFETY: the range is the mapping made by `allocate`; `v` has a byte per page.
        let rc = unsafe { libc::mincore(m.ptr.as_ptr().cast(), m.len(), v.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", io::Error::last_os_error());
        v.iter().map(|b| b & 1 != 0).collect()
    }

    #[test]
    fn populate_write_brings_in_exactly_the_pages_asked_and_keeps_the_bytes() {
        let page = page_size();
        let m = RawMemory::allocate(8 * page, false, true).expect("mmap");
        assert!(
            resident(&m).iter().all(|r| !r),
            "a fresh mapping has no pages"
        );
        m.write(3 * page + 5, b"kept");
        // From inside page 1 to inside page 2: both pages, whole.
        match m.populate_write(page + 100, page) {
            Ok(()) => {}
            // A kernel before 5.14; the callers then let the pages fault in.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return,
            Err(e) => panic!("populate: {e}"),
        }
        assert_eq!(
            resident(&m),
            [false, true, true, true, false, false, false, false]
        );
        let mut back = [0u8; 4];
        m.read(3 * page + 5, &mut back);
        assert_eq!(&back, b"kept");
        m.populate_write(3 * page, 5 * page).expect("populate");
        assert!(resident(&m)[3..].iter().all(|&r| r));
        m.read(3 * page + 5, &mut back);
        assert_eq!(&back, b"kept", "populating changed no bytes");
    }

    // Ranges whose end wraps around the address space: each accessor panics with the range
    // check's message (an unchecked `offset + len` would wrap to a small end in a release
    // build and pass the check).
    #[test]
    #[should_panic(expected = "outside raw memory of 4096 bytes")]
    fn read_refuses_a_range_that_wraps() {
        let m = RawMemory::allocate(4096, false, true).expect("mmap");
        m.read(usize::MAX - 1, &mut [0u8; 4]);
    }

    #[test]
    #[should_panic(expected = "outside raw memory of 4096 bytes")]
    fn write_refuses_a_range_that_wraps() {
        let m = RawMemory::allocate(4096, false, true).expect("mmap");
        m.write(usize::MAX - 1, &[0u8; 4]);
    }

    #[test]
    #[should_panic(expected = "outside raw memory of 4096 bytes")]
    fn atomics_refuse_an_offset_that_wraps() {
        let m = RawMemory::allocate(4096, false, true).expect("mmap");
        m.fetch_add_u64(usize::MAX - 3, 1);
    }

    #[test]
    #[should_panic(expected = "outside raw memory of 4096 bytes")]
    fn populate_refuses_a_range_that_wraps() {
        let m = RawMemory::allocate(4096, false, true).expect("mmap");
        let _ = m.populate_write(usize::MAX - 1, 4);
    }

    #[test]
    fn populate_write_refuses_memory_the_caller_owns() {
        let mut bytes = vec![0u8; 64];
        // SAFETY: `bytes` outlives the value.
        let m = unsafe { RawMemory::borrowed(bytes.as_mut_ptr(), bytes.len()) };
        let e = m.populate_write(0, 64).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
    }
}
