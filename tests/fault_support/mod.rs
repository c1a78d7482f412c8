//! The fault table: faults injected into live connections, one measured row each, printed
//! on stderr as `fault-table-row KEY | provider | fault | detection | what the user sees |
//! bytes lost |` (`tests/fault-table.sh` gathers the rows into the README's table).
//!
//! - [`stream`]: a peer process reads a stream whose every byte it checks against the
//!   pattern and reports; the fault (peer SIGKILL, SIGSTOP, wire cut, device removal) comes
//!   once the peer has every byte a flush vouched for, and the writer goes on writing and
//!   flushing until a call fails. Bytes lost: what a flush or close that returned `Ok`
//!   vouched for, minus what the peer received intact.
//! - [`limits`]: fd exhaustion at connection N and a memlock limit too small, each in a
//!   child process whose limit is lowered.
//! - [`flood`]: raw junk at the userspace provider's listener while a connection streams and
//!   a second one connects.
//!
//! `tests/uiwarp_faults.rs` runs the host's rows (uiwarp), `tests/vm_faults.rs` the VM's
//! (rxe0, siw0); the kernel devices' wire cut is `two_hosts.rs`'s.
#![allow(dead_code)] // each test binary uses a different part

pub(crate) mod flood;
pub(crate) mod limits;
pub(crate) mod peer;
pub(crate) mod removal;
pub(crate) mod stream;

use crate::conformance::Provider;
use std::time::Duration;

/// The faults, in the table's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The peer process is killed (SIGKILL) mid-stream.
    Kill,
    /// The peer process is stopped (SIGSTOP) mid-stream, keepalive on.
    Stop,
    /// The wire to the peer is cut: nothing passes, nothing says so.
    Cut,
    /// The RDMA device under the connection is removed (`rdma link delete`).
    Removal,
    /// A peer floods the listener with raw frames.
    Flood,
    /// The fd limit (`RLIMIT_NOFILE`) is lowered at connection N.
    Fds,
    /// `RdmaSocket::connect` with `RLIMIT_MEMLOCK` too small.
    MemlockConnect,
    /// `RdmaListener::accept` with `RLIMIT_MEMLOCK` too small.
    MemlockAccept,
}

impl Fault {
    /// The fault's name in the table.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Fault::Kill => "peer SIGKILL",
            Fault::Stop => "peer SIGSTOP (keepalive on)",
            Fault::Cut => "wire cut (keepalive on)",
            Fault::Removal => "device removal",
            Fault::Flood => "flooding peer",
            Fault::Fds => "fd exhaustion",
            Fault::MemlockConnect => "memlock too small: `connect`",
            Fault::MemlockAccept => "memlock too small: `accept`",
        }
    }

    /// The fault's place in the table.
    fn order(self) -> u32 {
        self as u32 + 1
    }
}

/// A provider's place in the table.
fn provider_order(provider: Provider) -> u32 {
    match provider {
        Provider::Uiwarp => 1,
        Provider::Rxe => 2,
        Provider::Siw => 3,
    }
}

/// When the first call failed after the fault.
#[derive(Clone, Debug)]
pub(crate) enum Detection {
    /// A call failed this long after the fault.
    After(Duration),
    /// No call failed within this long.
    NotWithin(Duration),
}

impl std::fmt::Display for Detection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Detection::After(d) => write!(f, "{}", duration_text(*d)),
            Detection::NotWithin(d) => write!(f, "not detected within {}", duration_text(*d)),
        }
    }
}

/// `d` in ms under 10 s, else in s with one decimal.
pub(crate) fn duration_text(d: Duration) -> String {
    if d < Duration::from_secs(10) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// One row of the table.
pub(crate) struct Row {
    /// The provider the fault was injected on.
    pub provider: Provider,
    /// The fault.
    pub fault: Fault,
    /// When the first call failed.
    pub detection: Detection,
    /// What the user sees: the first error's text, or what went on working.
    pub seen: String,
    /// Bytes vouched for and not received intact.
    pub lost: u64,
}

impl Row {
    /// Prints the row (see the module's doc) for `tests/fault-table.sh`.
    pub(crate) fn print(&self) {
        eprintln!(
            "fault-table-row {}{} | {} | {} | {} | {} | {} |",
            provider_order(self.provider),
            self.fault.order(),
            self.provider.name(),
            self.fault.label(),
            self.detection,
            cell(&self.seen),
            self.lost
        );
    }
}

/// `text` fit for a markdown table cell: one line, `|` escaped.
fn cell(text: &str) -> String {
    text.replace('\n', " ").replace('|', "\\|")
}
