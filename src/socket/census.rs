//! What the process's connections hold, counted as their verbs objects come and go: a few
//! relaxed atomics, read by [`census`](crate::census) and named by the errors of a connection
//! that hit a limit (how many connections the process held then).
#![forbid(unsafe_code)]

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
    /// Memory regions those connections registered.
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
pub(crate) fn connections_held() -> u64 {
    CONNECTIONS.load(Ordering::Relaxed)
}

/// One connection's entry in the census, taken out when it drops.
#[derive(Debug)]
pub(crate) struct Entry {
    regions: u64,
    bytes: u64,
}

impl Entry {
    /// Counts a connection holding `regions` regions of `bytes` bytes in all.
    pub(crate) fn new(regions: u64, bytes: u64) -> Entry {
        CONNECTIONS.fetch_add(1, Ordering::Relaxed);
        REGIONS.fetch_add(regions, Ordering::Relaxed);
        REGISTERED_BYTES.fetch_add(bytes, Ordering::Relaxed);
        Entry { regions, bytes }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        CONNECTIONS.fetch_sub(1, Ordering::Relaxed);
        REGIONS.fetch_sub(self.regions, Ordering::Relaxed);
        REGISTERED_BYTES.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

