//! The one place where a registered buffer's bytes are seen as Rust slices.
//!
//! [`BufferMemory`] owns a range of memory and is the only thing that registers it, always
//! with local access only ([`AccessFlags`] empty): the device may read it for a send, but
//! neither the device nor a peer can write it. So the bytes change only through
//! [`BufferMemory::as_mut_slice`], which needs `&mut self`; and the socket calls that post
//! sends from the memory hold a shared borrow of the buffer (or own it) until the device has
//! reported every such send complete, so no `&mut` exists while the device reads.
#![allow(unsafe_code)]

use crate::verbs::{AccessFlags, MemoryRegion, Pages, ProtectionDomain, RegisteredMemory};
use std::sync::{Arc, Mutex};

/// What holds a registered buffer's bytes.
#[derive(Debug)]
enum Backing {
    /// Allocated by rdmasock (page-aligned, zeroed).
    Allocated { _memory: RegisteredMemory },
    /// The caller's vector, taken over: never grown, shrunk, read or written as a `Vec`.
    User { _bytes: Vec<u8> },
}

/// Memory a registered buffer owns, and the descriptions its registrations were made over.
#[derive(Debug)]
pub(crate) struct BufferMemory {
    backing: Backing,
    /// The first byte and the length, fixed for the buffer's life.
    addr: *mut u8,
    len: usize,
    /// One description per registration: a provider may hold a clone while a send from the
    /// memory is queued, which `Drop` looks at before it frees anything.
    descriptions: Mutex<Vec<Arc<RegisteredMemory>>>,
}

// SAFETY: `addr` points into `backing`, which the value owns; the bytes are reached only
// through `as_slice` (`&self`) and `as_mut_slice` (`&mut self`), so the usual borrow rules
// make sharing and sending the value across threads as sound as for a `Vec<u8>`.
unsafe impl Send for BufferMemory {}
// SAFETY: as for `Send`: `&self` gives shared reads only.
unsafe impl Sync for BufferMemory {}

impl BufferMemory {
    /// Memory rdmasock allocated.
    pub(crate) fn owned(mut memory: RegisteredMemory) -> BufferMemory {
        let bytes = memory.as_mut_slice();
        let (addr, len) = (bytes.as_mut_ptr(), bytes.len());
        BufferMemory {
            backing: Backing::Allocated { _memory: memory },
            addr,
            len,
            descriptions: Mutex::new(Vec::new()),
        }
    }

    /// The caller's vector (not empty), taken over: its heap allocation becomes the buffer.
    pub(crate) fn from_vec(mut bytes: Vec<u8>) -> BufferMemory {
        let (addr, len) = (bytes.as_mut_ptr(), bytes.len());
        BufferMemory {
            backing: Backing::User { _bytes: bytes },
            addr,
            len,
            descriptions: Mutex::new(Vec::new()),
        }
    }

    /// Registers the memory with `pd` for the device to read (local access only: neither
    /// the device nor a peer may write it).
    pub(crate) fn register(&self, pd: &ProtectionDomain) -> crate::verbs::Result<MemoryRegion> {
        // SAFETY: `addr..addr+len` stays valid while `self` lives, and longer while a
        // description is still held elsewhere (`Drop` leaks the backing then). Nothing
        // writes it while a send may read it: only `as_mut_slice` writes, under `&mut self`,
        // which the socket calls never leave posted sends behind (they hold the buffer until
        // their sends completed), and the registration is read-only.
        let memory = unsafe { RegisteredMemory::from_raw(self.addr, self.len) };
        let region = pd.register_memory(memory, AccessFlags::empty())?;
        self.descriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(region.memory().clone());
        Ok(region)
    }

    /// What backs the memory (the caller's vector: base pages).
    pub(crate) fn pages(&self) -> Pages {
        match &self.backing {
            Backing::Allocated { _memory: memory } => memory.pages(),
            Backing::User { .. } => Pages::Base,
        }
    }

    /// The length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `addr..addr+len` is the backing's memory, valid while `self` lives.
        // Nothing writes it during this borrow of `self`: registrations are read-only (see
        // `register`), and the only writer is `as_mut_slice`, which needs `&mut self`.
        unsafe { std::slice::from_raw_parts(self.addr, self.len) }
    }

    /// The bytes, mutably.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` means no other slice over the bytes exists,
        // and no send from them is in flight (the socket calls hold the buffer until their
        // sends completed), so nothing else reads or writes them during this borrow.
        unsafe { std::slice::from_raw_parts_mut(self.addr, self.len) }
    }
}

impl Drop for BufferMemory {
    fn drop(&mut self) {
        // The registrations went first (the buffer drops them before its memory). A provider
        // may still hold a description (a send it has not let go of, on a connection that
        // failed): then the bytes are leaked rather than freed under it.
        let descriptions = self
            .descriptions
            .get_mut()
            .unwrap_or_else(|p| p.into_inner());
        if descriptions.iter().any(|d| Arc::strong_count(d) > 1) {
            let backing =
                std::mem::replace(&mut self.backing, Backing::User { _bytes: Vec::new() });
            std::mem::forget(backing);
        }
    }
}
