//! The verbs conformance suite (tests/vm_verbs_support/) on the userspace iWARP provider:
//! two uiwarp0 QPs connected over loopback TCP through the provider's own connection setup.
//! The same bodies run on rxe0 (tests/vm_verbs.rs) and siw0 (tests/vm_siw.rs) in the VM;
//! here they need no VM and no kernel RDMA, and run in every `cargo test`.

#[macro_use]
#[path = "vm_verbs_support/mod.rs"]
mod support;

use support::iwarp::UIWARP;

conformance_suite!(host, UIWARP);
