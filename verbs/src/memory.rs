//! Memory that a memory region covers, and the access rights a registration grants;
//! gathering sends from it are in `send`.
#![deny(unsafe_code)] // one documented `unsafe fn` constructor, no unsafe blocks beyond forwarding

use crate::error::{Error, Result};
use crate::fork::{fork_safety, note_owner, ForkSafety};
use crate::sys::memory::{Backing, RawMemory, HUGE_PAGE};
use bitflags::bitflags;
use std::sync::Arc;

mod send;
pub use send::{send_pieces, SendPiece};

bitflags! {
    /// What a memory region allows (`enum ib_access_flags`).
    #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
    pub struct AccessFlags: u32 {
        /// The local HCA may write (needed for receives, READ responses and atomics' results).
        const LOCAL_WRITE = 1 << 0;
        /// Peers may RDMA WRITE into it.
        const REMOTE_WRITE = 1 << 1;
        /// Peers may RDMA READ from it.
        const REMOTE_READ = 1 << 2;
        /// Peers may run atomics on it.
        const REMOTE_ATOMIC = 1 << 3;
        /// Memory window binding.
        const MW_BIND = 1 << 4;
        /// Zero-based addressing.
        const ZERO_BASED = 1 << 5;
        /// On-demand paging.
        const ON_DEMAND = 1 << 6;
    }
}

/// The largest piece [`RegisteredMemory::read_at`] and [`RegisteredMemory::write_at`] hand to
/// one `memcpy`. glibc copies blocks above a few KiB with `rep movsb`, which QEMU's TCG (the
/// emulator the VM test suite and the benchmarks run under) executes at 0.4 GB/s, against
/// 2.6 GB/s for the vector loop it uses on 2 KiB pieces; on hardware the pieces copy as fast
/// as one call (30-50 GB/s either way on this project's KVM host, 64 KiB copied 200,000
/// times). Ring copies of the socket layer and the userspace provider's placement go through
/// here.
pub const COPY_PIECE: usize = 2048;

/// Whether an allocation of [`RegisteredMemory`] goes on 2 MiB huge pages
/// ([`RegisteredMemory::allocate_with`]; docs/MEMORY.md#huge-pages).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HugePages {
    /// Base pages (the default).
    #[default]
    Never,
    /// 2 MiB pages from the hugetlb pool where it has enough free; otherwise base pages that
    /// the kernel is asked to back with transparent huge pages (`MADV_HUGEPAGE`).
    /// [`RegisteredMemory::pages`] says which it got.
    Prefer,
    /// 2 MiB pages from the hugetlb pool, or an error ([`Error::HugePages`]) that says how to
    /// reserve them.
    Require,
}

/// What backs a [`RegisteredMemory`] ([`RegisteredMemory::pages`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pages {
    /// Base pages (4 KiB on x86-64), or memory the caller owns.
    Base,
    /// Base pages that the kernel was asked to back with transparent huge pages
    /// (`MADV_HUGEPAGE`): it does so for the aligned 2 MiB extents of the memory when it has
    /// huge pages free and transparent huge pages are not `never`
    /// (/sys/kernel/mm/transparent_hugepage/enabled).
    TransparentHuge,
    /// 2 MiB pages from the hugetlb pool (`MAP_HUGETLB | MAP_HUGE_2MB`).
    Huge2MiB,
}

/// A range of memory that stays valid and pinned-in-place while any clone of its owner lives.
///
/// Either owned (page-aligned, zeroed, allocated by [`RegisteredMemory::allocate`]) or borrowed
/// from the caller through the `unsafe` [`RegisteredMemory::from_raw`]. Providers that touch
/// memory themselves (the userspace engine, inline sends) go through the bounds-checked
/// accessors here; nothing else dereferences the address.
#[derive(Debug)]
pub struct RegisteredMemory {
    raw: RawMemory,
}

impl RegisteredMemory {
    /// Allocates `len` zeroed, page-aligned bytes on base pages. Where the kernel does not
    /// copy pinned pages at `fork` ([`ForkSafety::DontFork`]), the memory is left out of a
    /// forked child (`MADV_DONTFORK`).
    pub fn allocate(len: usize) -> Result<RegisteredMemory> {
        RegisteredMemory::allocate_with(len, HugePages::Never)
    }

    /// Allocates `len` zeroed, page-aligned bytes, on 2 MiB huge pages as `huge` asks
    /// ([`HugePages`]); [`pages`](Self::pages) says what backs them. On hugetlb pages the
    /// mapping is rounded up to whole 2 MiB pages (the length stays `len`). As
    /// [`allocate`](Self::allocate) for `fork`.
    pub fn allocate_with(len: usize, huge: HugePages) -> Result<RegisteredMemory> {
        if len == 0 {
            return Err(Error::InvalidArgument(
                "a memory region needs at least one byte".into(),
            ));
        }
        note_owner();
        let dont_fork = fork_safety() == ForkSafety::DontFork;
        let base = |transparent| {
            RawMemory::allocate(len, transparent, dont_fork)
                .map_err(|e| Error::io(format!("allocating {len} bytes for a memory region"), e))
        };
        let raw = match huge {
            HugePages::Never => base(false)?,
            HugePages::Prefer => match RawMemory::allocate_huge(len, dont_fork) {
                Ok(raw) => raw,
                Err(_) => base(true)?,
            },
            HugePages::Require => {
                RawMemory::allocate_huge(len, dont_fork).map_err(|e| huge_pages_error(len, e))?
            }
        };
        Ok(RegisteredMemory { raw })
    }

    /// What backs the memory.
    pub fn pages(&self) -> Pages {
        match self.raw.backing() {
            Backing::Base => Pages::Base,
            Backing::Transparent => Pages::TransparentHuge,
            Backing::HugeTlb => Pages::Huge2MiB,
        }
    }

    /// The size of the pages that back the memory: 2 MiB on hugetlb pages, the base page size
    /// otherwise (transparent huge pages come and go with the kernel's choice, so they count as
    /// base pages here).
    pub fn page_size(&self) -> usize {
        match self.raw.backing() {
            Backing::HugeTlb => HUGE_PAGE,
            Backing::Base | Backing::Transparent => crate::sys::memory::page_size(),
        }
    }

    /// Describes memory the caller owns.
    ///
    /// # Safety
    /// `addr..addr+len` must be valid for reads and writes for as long as this value (and every
    /// memory region registered over it) lives, and may be written by the device or a peer at
    /// any time while registered: the caller must not hold Rust references into it that assume
    /// it does not change.
    #[allow(unsafe_code)]
    pub unsafe fn from_raw(addr: *mut u8, len: usize) -> RegisteredMemory {
        RegisteredMemory {
            // SAFETY: forwarded to the caller's contract above.
            raw: unsafe { RawMemory::borrowed(addr, len) },
        }
    }

    /// Lends `bytes` as read-only memory for the duration of `f`: each slice becomes one
    /// `RegisteredMemory`, in order, that `f` may read and share (the userspace provider
    /// queues sends from it), and whose writes fail ([`RegisteredMemory::write_at`] and the
    /// atomics return an error; [`RegisteredMemory::as_mut_slice`] panics). Every clone of
    /// them must be gone when `f` returns or unwinds: the borrow ends there, so a clone left
    /// behind aborts the process rather than let memory be read after it is freed.
    pub fn lend<'b, R>(
        bytes: impl IntoIterator<Item = &'b [u8]>,
        f: impl FnOnce(&[Arc<RegisteredMemory>]) -> R,
    ) -> R {
        let scope = LendScope(
            bytes
                .into_iter()
                .map(|b| {
                    #[allow(unsafe_code)]
                    // SAFETY: `b` is borrowed for this whole call, and `LendScope`'s drop
                    // aborts unless this Arc is the last reference when the call ends.
                    let raw = unsafe { RawMemory::lent(b) };
                    Arc::new(RegisteredMemory { raw })
                })
                .collect(),
        );
        f(&scope.0)
    }

    /// Whether the memory was lent by [`RegisteredMemory::lend`] (read-only).
    pub fn is_lent(&self) -> bool {
        self.raw.is_read_only()
    }

    /// The first byte's address.
    pub fn addr(&self) -> u64 {
        self.raw.addr() as u64
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Whether the length is zero.
    pub fn is_empty(&self) -> bool {
        self.raw.len() == 0
    }

    /// Whether `addr..addr+len` lies inside this memory.
    pub fn contains(&self, addr: u64, len: usize) -> bool {
        let start = self.addr();
        addr >= start
            && (addr - start)
                .checked_add(len as u64)
                .is_some_and(|end| end <= self.len() as u64)
    }

    fn check_writable(&self) -> Result<()> {
        if self.raw.is_read_only() {
            return Err(Error::InvalidArgument(
                "this memory is lent read-only for a send (RegisteredMemory::lend)".into(),
            ));
        }
        Ok(())
    }

    #[inline]
    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(self.range_error(offset, len)),
        }
    }

    /// The error of [`check`](Self::check), built out of line.
    #[cold]
    #[inline(never)]
    fn range_error(&self, offset: usize, len: usize) -> Error {
        Error::InvalidArgument(format!(
            "range {offset}+{len} outside memory of {} bytes",
            self.len()
        ))
    }

    /// Faults in the pages of `offset..offset+len` ahead of their first write, in one system
    /// call (`MADV_POPULATE_WRITE`) instead of a page fault per page; contents do not change.
    /// For memory that registration does not pin (the userspace provider's), whose pages
    /// otherwise fault in one by one as data first flows through them. Fails on memory the
    /// caller owns and on kernels before 5.14 (`EINVAL`).
    pub fn populate(&self, offset: usize, len: usize) -> Result<()> {
        self.check_writable()?;
        self.check(offset, len)?;
        self.raw
            .populate_write(offset, len)
            .map_err(|e| Error::io("populating memory ahead of its first write", e))
    }

    /// Copies `dst.len()` bytes at `offset` into `dst` (in [`COPY_PIECE`]-byte pieces).
    #[inline]
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check(offset, dst.len())?;
        for (i, piece) in dst.chunks_mut(COPY_PIECE).enumerate() {
            self.raw.read(offset + i * COPY_PIECE, piece);
        }
        Ok(())
    }

    /// The byte at `offset`, read anew on every call (for a loop that waits for a peer's
    /// RDMA WRITE to change it): one load, without a copy's set-up.
    #[inline]
    pub fn load_u8(&self, offset: usize) -> Result<u8> {
        self.check(offset, 1)?;
        Ok(self.raw.load_u8(offset))
    }

    /// Copies `src` into the memory at `offset` (in [`COPY_PIECE`]-byte pieces).
    #[inline]
    pub fn write_at(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.check(offset, src.len())?;
        for (i, piece) in src.chunks(COPY_PIECE).enumerate() {
            self.raw.write(offset + i * COPY_PIECE, piece);
        }
        Ok(())
    }

    /// Atomic fetch-and-add of a native-endian u64 at `offset` (8-byte aligned); returns the old value.
    pub fn fetch_add_u64(&self, offset: usize, add: u64) -> Result<u64> {
        self.check_atomic(offset)?;
        Ok(self.raw.fetch_add_u64(offset, add))
    }

    /// Atomic compare-and-swap of a native-endian u64 at `offset`; returns the old value.
    pub fn compare_swap_u64(&self, offset: usize, compare: u64, swap: u64) -> Result<u64> {
        self.check_atomic(offset)?;
        Ok(self.raw.compare_swap_u64(offset, compare, swap))
    }

    fn check_atomic(&self, offset: usize) -> Result<()> {
        self.check_writable()?;
        self.check(offset, 8)?;
        if !(self.raw.addr() + offset).is_multiple_of(8) {
            return Err(Error::InvalidArgument(format!(
                "atomic at offset {offset} is not 8-byte aligned"
            )));
        }
        Ok(())
    }

    /// A copy of the bytes.
    ///
    /// While the memory is registered for remote or device writes, the copy is what the bytes
    /// were while it was made; read after the completion that says they were written. (No
    /// `&[u8]` over the memory itself is handed out: a device or a peer may write it at any
    /// time, which a shared slice must never see.)
    pub fn to_vec(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; self.len()];
        self.read_at(0, &mut bytes)
            .expect("the whole memory lies inside itself");
        bytes
    }

    /// The bytes, mutably: `&mut self` means no clone of an `Arc` of this value exists, so no
    /// memory region covers it (every region holds one). Panics on lent memory (see
    /// [`RegisteredMemory::lend`]).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.raw.as_mut_slice()
    }

    /// The raw memory, for the gathering send (`sys`).
    pub(crate) fn raw(&self) -> &RawMemory {
        &self.raw
    }
}

/// The error of a hugetlb mapping that failed: what the pool holds, and how to fill it.
fn huge_pages_error(requested: usize, source: std::io::Error) -> Error {
    let pool = |file: &str| {
        std::fs::read_to_string(format!("/sys/kernel/mm/hugepages/hugepages-2048kB/{file}"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".into())
    };
    Error::HugePages {
        requested,
        pages: requested.div_ceil(HUGE_PAGE),
        free: pool("free_hugepages"),
        total: pool("nr_hugepages"),
        source,
    }
}

/// The lent memories of one [`RegisteredMemory::lend`] call.
struct LendScope(Vec<Arc<RegisteredMemory>>);

impl Drop for LendScope {
    fn drop(&mut self) {
        for m in &self.0 {
            if Arc::strong_count(m) != 1 || Arc::weak_count(m) != 0 {
                eprintln!(
                    "rdmasock: lent memory at {:#x} is still referenced after its lend ended; aborting (a bug)",
                    m.addr()
                );
                std::process::abort();
            }
        }
    }
}

#[cfg(test)]
mod tests;
