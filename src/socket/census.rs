//! What the process's connections hold, counted as their verbs objects come and go: a few
//! relaxed atomics, read by [`census`](crate::census) and named by the errors of a connection
//! that hit a limit (how many connections the process held then).
#![forbid(unsafe_code)]

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

static CONNECTIONS: AtomicU64 = AtomicU64::new(0);
static REGIONS: AtomicU64 = AtomicU64::new(0);
static REGISTERED_BYTES: AtomicU64 = AtomicU64::new(0);

/// What the process's connections hold right now (sockets, listeners' connections still in
/// their handshake, and closed sockets whose connection is still winding down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Census {
    /// Connections with their verbs objects (queue pair, completion queue, regions) created.
    pub connections: u64,
    /// Memory regions those connections registered, the chunks of the pool their send
    /// areas are carved from (one each, however many connections share it; see
    /// docs/MEMORY.md), their iomap windows (one each, until the connection closes), and
    /// the registrations of
    /// [`RegisteredBuf`](crate::RegisteredBuf)s (one per buffer and device it was written on).
    pub regions: u64,
    /// Bytes those regions cover (pinned on a kernel device; ordinary memory on the
    /// userspace provider).
    pub registered_bytes: u64,
}

/// What the process's connections hold right now; see [`Census`].
pub fn census() -> Census {
    Census {
        connections: CONNECTIONS.load(Ordering::Relaxed),
        regions: REGIONS.load(Ordering::Relaxed),
        registered_bytes: REGISTERED_BYTES.load(Ordering::Relaxed),
    }
}

/// The connections held right now, for an error's text.
fn connections_held() -> u64 {
    CONNECTIONS.load(Ordering::Relaxed)
}

/// One connection's entry in the census, taken out when it drops.
#[derive(Debug)]
pub(crate) struct Entry {
    connections: u64,
    regions: u64,
    bytes: u64,
}

impl Entry {
    /// Counts a connection holding `regions` regions of `bytes` bytes in all.
    pub(crate) fn new(regions: u64, bytes: u64) -> Entry {
        CONNECTIONS.fetch_add(1, Ordering::Relaxed);
        Entry::region_only(regions, bytes, 1)
    }

    /// Counts one registration of `bytes` bytes beside a connection's own (a registered
    /// buffer's on one device, an iomap window's, a pool chunk's).
    pub(crate) fn buffer(bytes: u64) -> Entry {
        Entry::region_only(1, bytes, 0)
    }

    fn region_only(regions: u64, bytes: u64, connections: u64) -> Entry {
        REGIONS.fetch_add(regions, Ordering::Relaxed);
        REGISTERED_BYTES.fetch_add(bytes, Ordering::Relaxed);
        Entry {
            connections,
            regions,
            bytes,
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        CONNECTIONS.fetch_sub(self.connections, Ordering::Relaxed);
        REGIONS.fetch_sub(self.regions, Ordering::Relaxed);
        REGISTERED_BYTES.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// `e` with what a connection that hit a process limit needs said: which limit, how many
/// connections the process held, and what to do (the original text first, unchanged). Any
/// other error comes back as it was.
pub(crate) fn at_limit(e: io::Error) -> io::Error {
    let text = e.to_string();
    let held = connections_held();
    let out_of_fds = matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
        || text.contains("os error 24")
        || text.contains("os error 23");
    let added = if text.contains("RLIMIT_MEMLOCK") {
        format!(
            "; {held} RDMA connections were held in this process when it ran out of locked \
             memory (they keep working): raise RLIMIT_MEMLOCK or close connections"
        )
    } else if out_of_fds {
        let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or_else(|_| "unknown".to_string(), |(soft, _)| soft.to_string());
        format!(
            "; the process is out of file descriptors (RLIMIT_NOFILE is {limit}) with {held} \
             RDMA connections held (they keep working): raise the limit (`ulimit -n`) or \
             close connections"
        )
    } else {
        return e;
    };
    io::Error::new(e.kind(), format!("{text}{added}"))
}
