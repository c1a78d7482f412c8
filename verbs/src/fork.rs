//! What `fork(2)` does to registered memory, and how a forked child tells that the RDMA
//! objects it inherited are its parent's (docs/MEMORY.md#fork).
//!
//! A registration pins its pages: the device reads and writes the physical pages that backed
//! the memory when it was registered. Without help from the kernel, `fork` makes those pages
//! copy-on-write in both processes, and the parent's next write to one moves the parent onto
//! a fresh copy that the device never sees: the parent's transfers silently lose data. Since
//! Linux 5.13 the kernel copies pinned pages for the child at `fork` instead, and says so on
//! NETLINK_RDMA (`RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK`); elsewhere every allocation made here is
//! marked `MADV_DONTFORK`, so the child does not get it at all and the parent's pages stay
//! where the device writes them.
#![forbid(unsafe_code)]

use std::sync::OnceLock;

/// How registered memory survives a `fork` of the process that registered it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ForkSafety {
    /// The kernel copies pinned pages for the child at `fork`
    /// (`RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK`): allocations keep the kernel's default, and a child
    /// has its own copy of every buffer, which it may read and write (the device never sees it).
    CopyOnFork,
    /// The kernel does not say that it copies pinned pages (before Linux 5.13, or no RDMA core
    /// loaded, as where only the userspace provider runs): every allocation of
    /// [`RegisteredMemory`](crate::RegisteredMemory) is marked `MADV_DONTFORK`, so a child has
    /// no mapping there (reading or writing it faults).
    DontFork,
}

/// What this kernel does with pinned pages at `fork`, asked once per process (a NETLINK_RDMA
/// `SYS_GET`); [`ForkSafety::DontFork`] where it cannot tell.
pub fn fork_safety() -> ForkSafety {
    static SAFETY: OnceLock<ForkSafety> = OnceLock::new();
    *SAFETY.get_or_init(|| {
        // Miri runs no system calls beyond a few; nothing there forks.
        #[cfg(miri)]
        return ForkSafety::DontFork;
        #[cfg(not(miri))]
        match crate::device::copy_on_fork() {
            Ok(true) => ForkSafety::CopyOnFork,
            Ok(false) | Err(_) => ForkSafety::DontFork,
        }
    })
}

/// The process that first opened a device context or allocated registered memory here.
static OWNER: OnceLock<u32> = OnceLock::new();

/// Notes this process as the one whose RDMA objects these are, for
/// [`in_forked_child`]: the first call wins, a child made by `fork` inherits the note, an
/// `exec` clears it. Opening a device context and allocating memory call it; so do the socket
/// layer's listeners and connects, before their connection manager makes anything.
pub fn note_owner() {
    OWNER.get_or_init(std::process::id);
}

/// Whether this process is a child made by `fork` from the process that created this
/// library's objects: the objects it inherited (connections, queue pairs, registrations,
/// their file descriptors' open files) are its parent's, and dropping them must not tear them
/// down. Costs one `getpid`; async-signal-safe (no lock, no allocation), so a child of a
/// multi-threaded parent may call it before `exec`.
pub fn in_forked_child() -> bool {
    OWNER
        .get()
        .is_some_and(|&owner| owner != std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_is_not_a_forked_child() {
        note_owner();
        assert!(!in_forked_child());
    }
}
