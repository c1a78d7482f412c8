//! The fault table's rows of the kernel devices rxe0 and siw0, in the VM
//! (`tests/vm/run.sh`, which runs these with `--ignored --test-threads=1`): faults injected
//! into live connections, each test measuring and printing one row (`fault_support/`;
//! `tests/fault-table.sh` gathers the rows) and asserting that the fault was detected within
//! the bound its settings imply and that no byte a call vouched for was lost (on siw, whose
//! WRITE completes once TCP took the bytes, a flush proves placement with a placement
//! fence, as on uiwarp). Their wire cut needs two hosts: `two_hosts.rs`
//! measures it. The host's rows are `uiwarp_faults.rs`'s. Each test panics when it is not
//! run in the VM.

#[allow(unused_macros)]
mod conformance;
#[path = "fault_support/mod.rs"]
mod fault_support;

/// The rows of one kernel device, in a module of their own (the device's name).
macro_rules! device_faults {
    ($fixture:expr) => {
        use crate::conformance::Fixture;
        use crate::fault_support::peer::serve_if_peer;
        use crate::fault_support::{limits, stream, Fault};

        /// The device's fixture.
        fn fixture() -> Fixture {
            ($fixture).in_module(module_path!())
        }

        #[test]
        #[ignore = "needs the VM: run tests/vm/run.sh"]
        fn peer_sigkill() {
            serve_if_peer();
            stream::measure_as_vouched(&fixture(), Fault::Kill, "peer_sigkill");
        }

        #[test]
        #[ignore = "needs the VM: run tests/vm/run.sh"]
        fn peer_sigstop() {
            serve_if_peer();
            stream::measure_nothing_lost(&fixture(), Fault::Stop, "peer_sigstop");
        }

        #[test]
        #[ignore = "needs the VM: run tests/vm/run.sh"]
        fn device_removal() {
            serve_if_peer();
            stream::measure_nothing_lost(&fixture(), Fault::Removal, "device_removal");
        }

        #[test]
        #[ignore = "needs the VM: run tests/vm/run.sh"]
        fn fd_exhaustion() {
            serve_if_peer();
            limits::fds(&fixture(), "fd_exhaustion");
        }

        #[test]
        #[ignore = "needs the VM: run tests/vm/run.sh"]
        fn memlock_too_small_for_connect() {
            serve_if_peer();
            limits::memlock_connect(&fixture(), "memlock_too_small_for_connect");
        }

        #[test]
        #[ignore = "needs the VM: run tests/vm/run.sh"]
        fn memlock_too_small_for_accept() {
            serve_if_peer();
            limits::memlock_accept(&fixture(), "memlock_too_small_for_accept");
        }
    };
}

mod rxe {
    device_faults!(crate::conformance::Fixture::rxe());
}

mod siw {
    device_faults!(crate::conformance::Fixture::siw());
}
