//! Raw memory behind memory regions: page-aligned anonymous mappings and caller memory.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// A pointer and a length that stay valid while this value lives.
#[derive(Debug)]
pub struct RawMemory {
    ptr: NonNull<u8>,
    len: usize,
    owned: bool,
    /// Lent shared bytes (see [`RawMemory::lent`]): every write path refuses them.
    read_only: bool,
}

// SAFETY: RawMemory is a plain address range; all access goes through copying or atomic
// accessors, so sharing it between threads is no different from sharing a `&[AtomicU8]`.
unsafe impl Send for RawMemory {}
// SAFETY: see Send above.
unsafe impl Sync for RawMemory {}

impl RawMemory {
    /// Maps `len` zeroed bytes of anonymous, page-aligned memory.
    pub fn allocate(len: usize) -> io::Result<RawMemory> {
        // SAFETY: an anonymous private mapping with no address hint touches no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // Keep the pages in place across fork(): a registered page must not become copy-on-write.
        // SAFETY: p..p+len is the mapping just made.
        unsafe { libc::madvise(p, len, libc::MADV_DONTFORK) };
        Ok(RawMemory {
            ptr: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            len,
            owned: true,
            read_only: false,
        })
    }

    /// Wraps caller memory.
    ///
    /// # Safety
    /// `addr..addr+len` must stay valid for reads and writes while the value lives.
    pub unsafe fn borrowed(addr: *mut u8, len: usize) -> RawMemory {
        RawMemory {
            ptr: NonNull::new(addr).unwrap_or(NonNull::dangling()),
            len: if addr.is_null() { 0 } else { len },
            owned: false,
            read_only: false,
        }
    }

    /// Wraps bytes the caller lends for reading only: every write through this value panics.
    ///
    /// # Safety
    /// `bytes` must outlive the value (it keeps no lifetime).
    pub unsafe fn lent(bytes: &[u8]) -> RawMemory {
        RawMemory {
            // A shared slice's pointer is never written through: `read_only` guards it.
            ptr: NonNull::new(bytes.as_ptr().cast_mut()).unwrap_or(NonNull::dangling()),
            len: bytes.len(),
            owned: false,
            read_only: true,
        }
    }

    /// Whether the memory is lent for reading only (see [`RawMemory::lent`]).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The address of the first byte.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// The length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the length is zero.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies out; the caller has checked bounds.
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset + dst.len() <= self.len);
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

    /// Copies in; the caller has checked bounds.
    pub fn write(&self, offset: usize, src: &[u8]) {
        assert!(!self.read_only, "write into lent read-only memory");
        assert!(offset + src.len() <= self.len);
        // SAFETY: as in `read`.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len())
        }
    }

    fn atomic_at(&self, offset: usize) -> &AtomicU64 {
        assert!(!self.read_only, "atomic on lent read-only memory");
        assert!(offset + 8 <= self.len && (self.addr() + offset) % 8 == 0);
        // SAFETY: in bounds and 8-byte aligned (asserted); AtomicU64 has u64's layout and the
        // memory is valid for the lifetime of &self.
        unsafe { &*(self.ptr.as_ptr().add(offset) as *const AtomicU64) }
    }

    /// Atomic fetch-add.
    pub fn fetch_add_u64(&self, offset: usize, add: u64) -> u64 {
        self.atomic_at(offset).fetch_add(add, Ordering::SeqCst)
    }

    /// Atomic compare-and-swap; returns the old value.
    pub fn compare_swap_u64(&self, offset: usize, compare: u64, swap: u64) -> u64 {
        match self.atomic_at(offset).compare_exchange(
            compare,
            swap,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            Ok(v) | Err(v) => v,
        }
    }

    /// The bytes as a slice.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: valid range per the constructor; see RegisteredMemory::as_slice for the
        // documented caveat about concurrent device writes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes as a mutable slice.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        assert!(!self.read_only, "mutable slice of lent read-only memory");
        // SAFETY: as in as_slice, and &mut self gives exclusive access on the Rust side.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for RawMemory {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: the mapping was made by `allocate` with this length and is unmapped once.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        }
    }
}
