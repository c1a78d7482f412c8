//! Shared mappings of kernel queue memory (`mmap` on the uverbs fd).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

/// A `MAP_SHARED`, `PROT_READ | PROT_WRITE` mapping of a kernel queue, unmapped on drop.
///
/// It only hands out its base pointer and length: the provider's ring code (the one place
/// besides `sys` allowed to touch shared memory) does the volatile and atomic accesses.
#[derive(Debug)]
pub struct SharedMapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory shared with the kernel; all access goes through the
// ring code, which synchronizes with atomics and per-ring locks. The pointer itself can move
// between threads freely.
unsafe impl Send for SharedMapping {}
// SAFETY: see Send.
unsafe impl Sync for SharedMapping {}

impl SharedMapping {
    /// Maps `len` bytes of `fd` at `offset` (the offset/size pair a create response returned).
    pub fn map(fd: BorrowedFd<'_>, offset: u64, len: usize) -> io::Result<SharedMapping> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the kernel returned a zero-length queue mapping",
            ));
        }
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mmap offset too large"))?;
        // SAFETY: a fresh shared mapping with no address hint replaces no existing memory;
        // the kernel validates fd, offset and length.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedMapping {
            ptr: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            len,
        })
    }

    /// The first byte of the mapping (page aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never: `map` refuses zero lengths).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned; unmapped once, here.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn maps_a_shared_file() {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/zero")
            .unwrap();
        let m = SharedMapping::map(f.as_fd(), 0, 4096).unwrap();
        assert_eq!(m.len(), 4096);
        assert_eq!(m.as_ptr() as usize % 4096, 0);
        assert!(SharedMapping::map(f.as_fd(), 0, 0).is_err());
    }
}
