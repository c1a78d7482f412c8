//! The socket conformance suite's connect/close cycles (`conformance/cycles.rs`) on the
//! userspace provider: a thousand, after which open file descriptors and RSS must not have
//! grown. A binary of its own, so that no other case runs in the process while it measures
//! the process (the other cases run in `uiwarp_socket.rs`).

#[macro_use]
mod conformance;

mod uiwarp {
    conformance_tests! {
        fixture: crate::conformance::Fixture::uiwarp();
        attributes: [];
        cases: [thousand_connect_close_cycles_leak_nothing];
        not_applicable: [];
    }
}
