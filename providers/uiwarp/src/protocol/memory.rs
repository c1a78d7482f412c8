//! How the engine reaches memory regions: a table the driver supplies, looked up by key.
//!
//! Every byte the engine reads or writes on behalf of a work request or a peer goes through
//! [`RegionView::resolve`], which checks the key's region, the bounds and the access rights,
//! and then through [`RegisteredMemory`]'s own bounds-checked copy. A peer can therefore
//! never touch memory that is not registered for that access.

use rdmasock_verbs::{AccessFlags, LocalKey, RegisteredMemory, RemoteKey};
use std::collections::HashMap;
use std::sync::Arc;

/// One registration as the engine sees it.
#[derive(Copy, Clone, Debug)]
pub struct RegionView<'a> {
    /// The memory behind the region (shared: the transmit queue keeps it while it sends
    /// from it).
    pub memory: &'a Arc<RegisteredMemory>,
    /// Where the region starts within `memory`.
    pub memory_offset: usize,
    /// The address (virtual address or tagged offset base) of the region's first byte.
    pub address: u64,
    /// The region's length.
    pub length: u64,
    /// What the region allows.
    pub access: AccessFlags,
}

/// Why an access to a region was refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AccessError {
    /// No region has that key.
    InvalidKey,
    /// The range is not inside the region (or wraps).
    OutOfBounds,
    /// The region does not allow the access.
    NotPermitted,
}

impl<'a> RegionView<'a> {
    /// Checks `address..address+len` against the region and `needed` against its rights;
    /// returns the offset within `memory`.
    pub fn resolve(
        &self,
        address: u64,
        len: u64,
        needed: AccessFlags,
    ) -> Result<usize, AccessError> {
        if !self.access.contains(needed) {
            return Err(AccessError::NotPermitted);
        }
        let end = address.checked_add(len).ok_or(AccessError::OutOfBounds)?;
        let region_end = self
            .address
            .checked_add(self.length)
            .ok_or(AccessError::OutOfBounds)?;
        if address < self.address || end > region_end {
            return Err(AccessError::OutOfBounds);
        }
        let offset =
            usize::try_from(address - self.address).map_err(|_| AccessError::OutOfBounds)?;
        let at = self
            .memory_offset
            .checked_add(offset)
            .ok_or(AccessError::OutOfBounds)?;
        let len = usize::try_from(len).map_err(|_| AccessError::OutOfBounds)?;
        if at.checked_add(len).is_none_or(|e| e > self.memory.len()) {
            return Err(AccessError::OutOfBounds);
        }
        Ok(at)
    }

    /// Copies from the region at `address` into `dst`, if allowed.
    pub fn read(
        &self,
        address: u64,
        dst: &mut [u8],
        needed: AccessFlags,
    ) -> Result<(), AccessError> {
        let at = self.resolve(address, dst.len() as u64, needed)?;
        self.memory
            .read_at(at, dst)
            .map_err(|_| AccessError::OutOfBounds)
    }

    /// Copies `src` into the region at `address`, if allowed.
    pub fn write(&self, address: u64, src: &[u8], needed: AccessFlags) -> Result<(), AccessError> {
        let at = self.resolve(address, src.len() as u64, needed)?;
        self.memory
            .write_at(at, src)
            .map_err(|_| AccessError::OutOfBounds)
    }
}

/// The registrations a connection may use, supplied by the driver at each call.
///
/// Implementations return only regions of the connection's protection domain.
pub trait MemoryTable {
    /// The region a local key names (for scatter/gather entries of our own work requests).
    fn local(&self, lkey: LocalKey) -> Option<RegionView<'_>>;
    /// The region an STag names (for tagged placement and READ sources a peer asks for).
    fn remote(&self, stag: RemoteKey) -> Option<RegionView<'_>>;
}

#[derive(Debug)]
struct Entry {
    memory: Arc<RegisteredMemory>,
    memory_offset: usize,
    address: u64,
    length: u64,
    access: AccessFlags,
}

/// A simple [`MemoryTable`]: registrations in a map, where a region's local key and STag are
/// the same number (as in siw), and addresses are the memory's own addresses.
#[derive(Debug, Default)]
pub struct RegionTable {
    entries: HashMap<u32, Entry>,
    next_key: u32,
}

impl RegionTable {
    /// An empty table.
    pub fn new() -> RegionTable {
        RegionTable {
            entries: HashMap::new(),
            next_key: 0x100,
        }
    }

    /// Registers all of `memory` with `access`; returns the key (lkey = STag).
    pub fn register(&mut self, memory: Arc<RegisteredMemory>, access: AccessFlags) -> u32 {
        let len = memory.len();
        self.register_range(memory, 0, len, access)
    }

    /// Registers `len` bytes of `memory` from `offset`; returns the key. The range is clamped
    /// to the memory.
    pub fn register_range(
        &mut self,
        memory: Arc<RegisteredMemory>,
        offset: usize,
        len: usize,
        access: AccessFlags,
    ) -> u32 {
        let offset = offset.min(memory.len());
        let len = len.min(memory.len() - offset);
        let key = self.next_key;
        self.next_key = self.next_key.wrapping_add(0x100);
        self.entries.insert(
            key,
            Entry {
                address: memory.addr() + offset as u64,
                memory,
                memory_offset: offset,
                length: len as u64,
                access,
            },
        );
        key
    }

    /// Removes a registration; returns whether it existed.
    pub fn deregister(&mut self, key: u32) -> bool {
        self.entries.remove(&key).is_some()
    }

    fn view(&self, key: u32) -> Option<RegionView<'_>> {
        self.entries.get(&key).map(|e| RegionView {
            memory: &e.memory,
            memory_offset: e.memory_offset,
            address: e.address,
            length: e.length,
            access: e.access,
        })
    }
}

impl MemoryTable for RegionTable {
    fn local(&self, lkey: LocalKey) -> Option<RegionView<'_>> {
        self.view(lkey.0)
    }
    fn remote(&self, stag: RemoteKey) -> Option<RegionView<'_>> {
        self.view(stag.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_checks_bounds_access_and_wrap() {
        let mem = Arc::new(RegisteredMemory::allocate(4096).unwrap());
        let mut t = RegionTable::new();
        let k = t.register_range(mem.clone(), 100, 200, AccessFlags::REMOTE_READ);
        let v = t.remote(RemoteKey(k)).unwrap();
        let base = mem.addr() + 100;
        assert_eq!(v.resolve(base, 200, AccessFlags::REMOTE_READ), Ok(100));
        assert_eq!(v.resolve(base + 199, 1, AccessFlags::empty()), Ok(299));
        assert_eq!(
            v.resolve(base, 201, AccessFlags::empty()),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            v.resolve(base - 1, 1, AccessFlags::empty()),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            v.resolve(u64::MAX, 2, AccessFlags::empty()),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            v.resolve(base, 1, AccessFlags::REMOTE_WRITE),
            Err(AccessError::NotPermitted)
        );
        assert!(v.write(base, b"x", AccessFlags::REMOTE_WRITE).is_err());
        assert!(t.remote(RemoteKey(k + 1)).is_none());
        assert!(t.deregister(k));
        assert!(t.local(LocalKey(k)).is_none());
    }
}
