//! The fault table's rows on this host, which has no kernel RDMA: faults injected into live
//! connections of the userspace iWARP provider (uiwarp), each test measuring and printing
//! one row (`fault_support/`; `tests/fault-table.sh` gathers the rows) and asserting that
//! the fault was detected within the bound its settings imply and that no byte a call
//! vouched for was lost (a stopped peer: that nothing failed, and every byte arrived once
//! it went on). Device removal and
//! memlock do not apply here: uiwarp has no device and pins nothing. The kernel devices'
//! rows are `vm_faults.rs`'s.

#[allow(unused_macros)]
mod conformance;
#[path = "fault_support/mod.rs"]
mod fault_support;

use conformance::Fixture;
use fault_support::peer::serve_if_peer;
use fault_support::{flood, limits, stream, Fault};

/// The userspace provider's fixture.
fn fixture() -> Fixture {
    Fixture::uiwarp().in_module(module_path!())
}

/// The row of a killed peer. No byte a flush vouched for is lost: a flush proves that the
/// peer placed the bytes (see [`wire_cut`]), and a killed peer answers nothing after the
/// last flush before the fault.
#[test]
fn peer_sigkill() {
    serve_if_peer();
    stream::measure_as_vouched(&fixture(), Fault::Kill, "peer_sigkill");
}

/// The row of a stopped peer: it is never declared lost, though its TCP window fills (it
/// runs in a network namespace whose TCP receive buffers are small, and its kernel answers
/// every zero-window probe), and every byte arrives once it goes on. A run
/// takes a few seconds: [`a_stopped_peer_with_a_full_window_is_never_declared_lost`] runs
/// it several times.
#[test]
fn peer_sigstop() {
    serve_if_peer();
    stream::measure_as_vouched(&fixture(), Fault::Stop, "peer_sigstop");
}

/// [`peer_sigstop`] again, [`STOP_RUNS`] times: the verdict on a stopped peer whose window
/// is full must never be "lost" (a verdict from the TCP user timeout, which Linux applies
/// to zero-window probing too, gave up on it about one run in four).
#[test]
fn a_stopped_peer_with_a_full_window_is_never_declared_lost() {
    serve_if_peer();
    for _ in 0..STOP_RUNS {
        stream::measure_as_vouched(
            &fixture(),
            Fault::Stop,
            "a_stopped_peer_with_a_full_window_is_never_declared_lost",
        );
    }
}

/// How many times [`a_stopped_peer_with_a_full_window_is_never_declared_lost`] stops a peer.
const STOP_RUNS: usize = 3;

/// The row of a cut wire: no byte a flush vouched for is lost. The userspace provider
/// completes a WRITE once its TCP socket took the bytes, so a flush proves placement with a
/// one-byte RDMA READ of the peer's target list after them (a placement fence), whose
/// response comes only once the
/// peer placed every byte before it; a flush that cannot get it fails once the keepalive
/// finds the wire cut.
#[test]
fn wire_cut() {
    serve_if_peer();
    stream::measure_as_vouched(&fixture(), Fault::Cut, "wire_cut");
}

#[test]
fn flooding_peer() {
    flood::flood(&fixture());
}

#[test]
fn fd_exhaustion() {
    serve_if_peer();
    limits::fds(&fixture(), "fd_exhaustion");
}
