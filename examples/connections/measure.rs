//! What the process holds, read from /proc/self: resident and pinned memory, fds, threads,
//! and what rdmasock's own census counts (connections, registered regions and bytes); and
//! the kernel's vmalloc memory in use (/proc/meminfo).
use std::fs;

/// One reading of the process.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Reading {
    /// VmRSS, bytes.
    pub(crate) rss: u64,
    /// VmPin + VmLck, bytes.
    pub(crate) pinned: u64,
    /// Open fds.
    pub(crate) fds: u64,
    /// Threads.
    pub(crate) threads: u64,
    /// Registered memory regions of rdmasock's connections.
    pub(crate) regions: u64,
    /// Bytes registered by rdmasock's connections.
    pub(crate) registered: u64,
    /// The kernel's vmalloc memory in use, machine-wide (`VmallocUsed` of /proc/meminfo),
    /// bytes: where rxe and siw keep their queues.
    pub(crate) vmalloc: u64,
}

/// A `/proc/self/status` field in bytes (it says kB).
fn status_field(status: &str, name: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

fn entries(dir: &str) -> u64 {
    fs::read_dir(dir).map_or(0, |d| d.count() as u64)
}

/// Reads the process now.
pub(crate) fn now() -> Reading {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let census = rdmasock::census();
    Reading {
        rss: status_field(&status, "VmRSS"),
        pinned: status_field(&status, "VmPin") + status_field(&status, "VmLck"),
        // read_dir's own fd is counted: take it off.
        fds: entries("/proc/self/fd").saturating_sub(1),
        threads: entries("/proc/self/task"),
        regions: census.regions,
        registered: census.registered_bytes,
        vmalloc: status_field(
            &fs::read_to_string("/proc/meminfo").unwrap_or_default(),
            "VmallocUsed",
        ),
    }
}
