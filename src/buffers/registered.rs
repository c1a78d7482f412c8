//! [`RegisteredBuf`]: memory a connection's device can send from without a copy.
#![forbid(unsafe_code)]

use super::sys::BufferMemory;
use crate::socket::{CensusEntry, OpenDevice};
use crate::verbs::{HugePages, MemoryRegion, Pages, RegisteredMemory};
use std::fmt;
use std::io;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, Weak};

/// A buffer whose bytes an [`RdmaSocket`](crate::RdmaSocket) sends without copying them
/// ([`RdmaSocket::write_registered`](crate::RdmaSocket::write_registered)): the device reads
/// them from here and writes them into the peer's receive ring.
///
/// It derefs to `[u8]`: fill it like a `Vec<u8>`'s slice. Memory comes from rdmasock
/// ([`RegisteredBuf::new`], page-aligned and zeroed) or from the caller
/// ([`RegisteredBuf::from_vec`], [`RegisteredBuf::from_boxed_slice`], which take the
/// allocation over, without a copy).
///
/// Registration is lazy and per device: the first zero-copy write on a connection registers
/// the buffer with that connection's device (the protection domain the process's
/// connections on it share), for the device to read only; later writes on any connection of
/// that device reuse the registration. The registrations go when the buffer drops, and one
/// of a device that was removed (or closed, its last connection gone) goes at the next write
/// that looks for one. [`census`](crate::census) counts each registration as a region.
///
/// A write borrows (or owns) the buffer until the device has read it, so the bytes can be
/// changed again as soon as the call returns.
pub struct RegisteredBuf {
    /// Dropped before `memory` (field order): a region must not outlive its bytes.
    registrations: Mutex<Vec<Registration>>,
    memory: BufferMemory,
}

/// The buffer's registration with one open device.
struct Registration {
    device: Weak<OpenDevice>,
    region: Arc<MemoryRegion>,
    _census: CensusEntry,
}

impl RegisteredBuf {
    /// `len` zeroed, page-aligned bytes (not registered yet).
    pub fn new(len: usize) -> io::Result<RegisteredBuf> {
        Ok(RegisteredBuf::from_memory(RegisteredMemory::allocate(len)?))
    }

    /// `len` zeroed bytes on 2 MiB huge pages as `huge` asks: `Require` fails with what to
    /// reserve when the system has no free huge pages, `Prefer` falls back to transparent
    /// huge pages or base pages ([`pages`](Self::pages) says which it got); see
    /// docs/MEMORY.md.
    pub fn with_huge_pages(len: usize, huge: HugePages) -> io::Result<RegisteredBuf> {
        Ok(RegisteredBuf::from_memory(RegisteredMemory::allocate_with(
            len, huge,
        )?))
    }

    /// What backs the buffer: base pages, transparent huge pages or 2 MiB hugetlb pages
    /// (memory from the caller counts as base pages).
    pub fn pages(&self) -> Pages {
        self.memory.pages()
    }

    /// The caller's bytes, taken over: the vector's allocation becomes the buffer (its
    /// length is the buffer's; spare capacity is unused), without a copy. Fails on an empty
    /// vector.
    pub fn from_vec(bytes: Vec<u8>) -> io::Result<RegisteredBuf> {
        if bytes.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a registered buffer needs at least one byte: RegisteredBuf::from_vec was \
                 given an empty vector",
            ));
        }
        Ok(RegisteredBuf::with_memory(BufferMemory::from_vec(bytes)))
    }

    /// The caller's boxed bytes, taken over without a copy (see [`from_vec`](Self::from_vec)).
    pub fn from_boxed_slice(bytes: Box<[u8]>) -> io::Result<RegisteredBuf> {
        RegisteredBuf::from_vec(bytes.into_vec())
    }

    /// A buffer over memory the verbs layer allocated (huge pages and the like are chosen
    /// there).
    pub(crate) fn from_memory(memory: RegisteredMemory) -> RegisteredBuf {
        RegisteredBuf::with_memory(BufferMemory::owned(memory))
    }

    fn with_memory(memory: BufferMemory) -> RegisteredBuf {
        RegisteredBuf {
            registrations: Mutex::new(Vec::new()),
            memory,
        }
    }

    /// The buffer's length in bytes.
    #[allow(clippy::len_without_is_empty)] // never empty
    pub fn len(&self) -> usize {
        self.memory.len()
    }

    /// How many devices the buffer is registered with now.
    pub fn registrations(&self) -> usize {
        self.lock_registrations().len()
    }

    /// The buffer's registration with `device`, made now if there is none. Registrations
    /// of devices that are gone or removed are dropped on the way.
    pub(crate) fn registration(&self, device: &Arc<OpenDevice>) -> io::Result<Arc<MemoryRegion>> {
        let mut registrations = self.lock_registrations();
        registrations.retain(|r| r.device.upgrade().is_some_and(|d| !d.is_removed()));
        let target = Arc::downgrade(device);
        if let Some(r) = registrations.iter().find(|r| r.device.ptr_eq(&target)) {
            return Ok(r.region.clone());
        }
        let region = self.memory.register(device.pd()).map_err(|e| {
            let text = format!(
                "registering a {}-byte buffer for zero-copy writes failed: {e}",
                self.len()
            );
            io::Error::new(io::Error::from(e).kind(), text)
        })?;
        let region = Arc::new(region);
        registrations.push(Registration {
            device: target,
            region: region.clone(),
            _census: CensusEntry::buffer(self.len() as u64),
        });
        Ok(region)
    }

    fn lock_registrations(&self) -> std::sync::MutexGuard<'_, Vec<Registration>> {
        self.registrations.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Deref for RegisteredBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.memory.as_slice()
    }
}

impl DerefMut for RegisteredBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.memory.as_mut_slice()
    }
}

impl AsRef<[u8]> for RegisteredBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for RegisteredBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl fmt::Debug for RegisteredBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredBuf")
            .field("len", &self.len())
            .field("registrations", &self.registrations())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::RegisteredBuf;

    #[test]
    fn a_buffer_is_its_bytes_from_either_source() {
        let mut own = RegisteredBuf::new(5000).unwrap();
        assert_eq!(own.len(), 5000);
        assert!(own.iter().all(|&b| b == 0), "zeroed");
        assert_eq!(own.as_ptr() as usize % 4096, 0, "page-aligned");
        own[4999] = 3;
        assert_eq!(own[4999], 3);
        let vec = vec![1u8, 2, 3];
        let at = vec.as_ptr();
        let theirs = RegisteredBuf::from_vec(vec).unwrap();
        assert_eq!(&theirs[..], &[1, 2, 3]);
        assert_eq!(theirs.as_ptr(), at, "the vector's memory, not a copy");
        let boxed = RegisteredBuf::from_boxed_slice(vec![4u8; 10].into_boxed_slice()).unwrap();
        assert_eq!(&boxed[..], &[4; 10]);
        assert_eq!(theirs.registrations(), 0);
        let empty = RegisteredBuf::from_vec(Vec::new()).unwrap_err();
        assert_eq!(empty.kind(), std::io::ErrorKind::InvalidInput);
        assert!(RegisteredBuf::new(0).is_err());
    }

    #[test]
    fn buffers_move_between_threads_and_tasks() {
        fn send_and_sync<T: Send + Sync>() {}
        send_and_sync::<RegisteredBuf>();
        send_and_sync::<crate::BufferPool>();
        send_and_sync::<crate::PooledBuf>();
    }
}
