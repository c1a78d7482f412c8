//! The socket conformance suite's connect/close cycles (`conformance/cycles.rs`) on the VM's
//! rxe0 and siw0 (`tests/vm/run.sh`, which runs these with `--ignored --test-threads=1`): a
//! thousand each, after which open file descriptors, registered memory regions, pinned
//! memory and RSS must not have grown. A binary of its own, so that the cycles have the
//! suite's per-binary time limit to themselves; every other case of the suite runs in
//! `vm_socket.rs` (rxe0) and `vm_socket_siw.rs` (siw0). Each test panics when its device or
//! the VM's address is missing.

#[macro_use]
mod conformance;

mod rxe {
    conformance_tests! {
        fixture: crate::conformance::Fixture::rxe();
        attributes: [#[ignore = "needs the VM: run tests/vm/run.sh"]];
        cases: [thousand_connect_close_cycles_leak_nothing];
        not_applicable: [];
    }
}

mod siw {
    conformance_tests! {
        fixture: crate::conformance::Fixture::siw();
        attributes: [#[ignore = "needs the VM with siw0: run tests/vm/run.sh --both"]];
        cases: [thousand_connect_close_cycles_leak_nothing];
        not_applicable: [];
    }
}
