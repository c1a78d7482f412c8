//! [`MemoryRegion`].

use super::ProtectionDomain;
use crate::error::{Error, Result};
use crate::memory::{AccessFlags, RegisteredMemory};
use crate::provider::MrOps;
use crate::types::{LocalKey, RemoteKey};
use crate::wr::ScatterGather;
use std::sync::Arc;

/// Registered memory: the device may read and write it, and peers may too where
/// [`AccessFlags`] allow. Deregistered on drop.
#[derive(Debug)]
pub struct MemoryRegion {
    ops: Box<dyn MrOps>,
    memory: Arc<RegisteredMemory>,
    access: AccessFlags,
    // The local key, address and length, fixed at registration: `slice` builds every posted
    // request's entries from them without a call through `ops` or `memory`.
    lkey: LocalKey,
    addr: u64,
    len: usize,
    _pd: ProtectionDomain,
}

impl MemoryRegion {
    pub(crate) fn new(
        ops: Box<dyn MrOps>,
        memory: Arc<RegisteredMemory>,
        access: AccessFlags,
        pd: ProtectionDomain,
    ) -> Self {
        MemoryRegion {
            lkey: ops.lkey(),
            addr: memory.addr(),
            len: memory.len(),
            ops,
            memory,
            access,
            _pd: pd,
        }
    }

    /// The local key.
    #[inline]
    pub fn lkey(&self) -> LocalKey {
        self.lkey
    }
    /// The remote key a peer needs.
    pub fn rkey(&self) -> RemoteKey {
        self.ops.rkey()
    }
    /// The access rights.
    pub fn access(&self) -> AccessFlags {
        self.access
    }
    /// The virtual address of the first byte (what a peer puts in `remote_addr`).
    #[inline]
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// The length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the length is zero (never, for a region that registered).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The memory (bounds-checked copies and atomics).
    pub fn memory(&self) -> &Arc<RegisteredMemory> {
        &self.memory
    }

    /// A scatter/gather entry for `offset..offset+len` of this region.
    ///
    /// Inlined into the caller: on the data path it is two compares and three stores (the
    /// error message is built out of line).
    #[inline]
    pub fn slice(&self, offset: usize, len: usize) -> Result<ScatterGather<'_>> {
        // `offset <= self.len` first, so `self.len - offset` cannot wrap.
        if offset > self.len || len > self.len - offset || len > u32::MAX as usize {
            return Err(self.slice_error(offset, len));
        }
        Ok(ScatterGather::checked(
            self.addr + offset as u64,
            len as u32,
            self.lkey,
        ))
    }

    #[cold]
    #[inline(never)]
    fn slice_error(&self, offset: usize, len: usize) -> Error {
        Error::InvalidArgument(format!(
            "slice {offset}+{len} is outside the {}-byte memory region",
            self.len
        ))
    }

    /// Copies `src` into the region at `offset`.
    #[inline]
    pub fn write_at(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.memory.write_at(offset, src)
    }

    /// Faults in the pages of `offset..offset+len` ahead of their first write (see
    /// [`RegisteredMemory::populate`]).
    pub fn populate(&self, offset: usize, len: usize) -> Result<()> {
        self.memory.populate(offset, len)
    }

    /// Copies from the region at `offset` into `dst`.
    #[inline]
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.memory.read_at(offset, dst)
    }

    /// The byte at `offset`, read anew on every call (see [`RegisteredMemory::load_u8`]).
    #[inline]
    pub fn load_u8(&self, offset: usize) -> Result<u8> {
        self.memory.load_u8(offset)
    }

    /// A copy of the region's bytes (see [`RegisteredMemory::to_vec`]): while registered
    /// for remote or device writes they may change at any time, so no slice over them is
    /// handed out; read after the completion that says they were written.
    pub fn to_vec(&self) -> Vec<u8> {
        self.memory.to_vec()
    }
}
