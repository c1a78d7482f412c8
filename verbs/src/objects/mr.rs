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
            ops,
            memory,
            access,
            _pd: pd,
        }
    }

    /// The local key.
    pub fn lkey(&self) -> LocalKey {
        self.ops.lkey()
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
    pub fn addr(&self) -> u64 {
        self.memory.addr()
    }
    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.memory.len()
    }
    /// Whether the length is zero (never, for a region that registered).
    pub fn is_empty(&self) -> bool {
        self.memory.is_empty()
    }
    /// The memory (bounds-checked copies and atomics).
    pub fn memory(&self) -> &Arc<RegisteredMemory> {
        &self.memory
    }

    /// A scatter/gather entry for `offset..offset+len` of this region.
    pub fn slice(&self, offset: usize, len: usize) -> Result<ScatterGather<'_>> {
        let end = offset.checked_add(len);
        if !end.is_some_and(|e| e <= self.len()) || len > u32::MAX as usize {
            return Err(Error::InvalidArgument(format!(
                "slice {offset}+{len} is outside the {}-byte memory region",
                self.len()
            )));
        }
        Ok(ScatterGather::checked(
            self.addr() + offset as u64,
            len as u32,
            self.lkey(),
        ))
    }

    /// Copies `src` into the region at `offset`.
    pub fn write_at(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.memory.write_at(offset, src)
    }

    /// Copies from the region at `offset` into `dst`.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.memory.read_at(offset, dst)
    }

    /// The bytes. While registered for remote or device writes they may change under the
    /// slice; read after the completion that says they were written.
    pub fn as_slice(&self) -> &[u8] {
        self.memory.as_slice()
    }
}
