//! Which provider drives rxe0: with `RDMASOCK_PROVIDER` unset (or forcing only another
//! device) the pure-Rust rxe provider, and libibverbs is not even loaded; with
//! `RDMASOCK_PROVIDER=ibverbs` the rdma-core bridge. Checked twice: the name the registry's
//! choice reports (`Context::provider_name`) and, for RdmaSocket traffic, whether
//! `libibverbs.so` is mapped into this process.
//!
//! One test, in a fixed order (unforced first): once the bridge has loaded libibverbs it stays
//! mapped. Needs the VM's rxe0: `tests/vm/run.sh` (the suite runs it with the bridge unset).
#![forbid(unsafe_code)]

use rdmasock::{RdmaListener, RdmaSocket, PROVIDER_ENV};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::thread;

fn vm_ip() -> IpAddr {
    assert!(
        std::path::Path::new("/sys/class/infiniband/rxe0").exists(),
        "rxe0 is missing: this test runs in the VM (tests/vm/run.sh), which creates it"
    );
    std::env::var("RDMA_VM_IP")
        .expect("RDMA_VM_IP is unset: run in the VM (tests/vm/run.sh)")
        .parse()
        .expect("RDMA_VM_IP is an IP address")
}

fn libibverbs_mapped() -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .expect("reading /proc/self/maps")
        .contains("libibverbs.so")
}

/// The provider the registry picks for rxe0 now.
fn rxe0_provider() -> &'static str {
    rdmasock::open_device(Some("rxe0"))
        .expect("opening rxe0")
        .provider_name()
}

/// Connects an RdmaSocket to an RdmaListener on rxe0's address and echoes 4 KiB through.
fn echo_over_rdmasocket() {
    let listener = RdmaListener::bind(SocketAddr::new(vm_ip(), 0)).expect("bind on rxe0");
    let addr = listener.local_addr().expect("local_addr");
    let server = thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut buf = vec![0u8; 4096];
        s.read_exact(&mut buf).expect("server read");
        s.write_all(&buf).expect("server write");
    });
    let mut c = RdmaSocket::connect(addr).expect("connect");
    let sent: Vec<u8> = (0..4096u32).map(|i| (i % 253) as u8).collect();
    c.write_all(&sent).expect("client write");
    let mut back = vec![0u8; 4096];
    c.read_exact(&mut back).expect("client read");
    assert_eq!(back, sent, "the echo came back different");
    server.join().expect("server thread");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn pure_rust_rxe_unless_the_bridge_is_forced() {
    // Not forced: the pure-Rust provider, for the verbs API and for sockets.
    std::env::remove_var(PROVIDER_ENV);
    assert!(
        !libibverbs_mapped(),
        "libibverbs is mapped before anything ran"
    );
    assert_eq!(rxe0_provider(), "rxe", "RDMASOCK_PROVIDER unset");
    echo_over_rdmasocket();
    assert!(
        !libibverbs_mapped(),
        "an RdmaSocket exchange on rxe0 with RDMASOCK_PROVIDER unset loaded libibverbs: \
         the bridge ran instead of the pure-Rust rxe provider"
    );

    // Forcing the bridge for another device leaves rxe0 alone.
    std::env::set_var(PROVIDER_ENV, "siw0:ibverbs");
    assert_eq!(rxe0_provider(), "rxe", "RDMASOCK_PROVIDER=siw0:ibverbs");
    echo_over_rdmasocket();
    assert!(
        !libibverbs_mapped(),
        "RDMASOCK_PROVIDER=siw0:ibverbs put rxe0's RdmaSocket on the bridge"
    );

    // Forced, for rxe0 alone and for every device: the bridge.
    for forced in ["rxe0:ibverbs", "ibverbs"] {
        std::env::set_var(PROVIDER_ENV, forced);
        echo_over_rdmasocket();
        assert!(
            libibverbs_mapped(),
            "an RdmaSocket exchange with RDMASOCK_PROVIDER={forced} did not load libibverbs"
        );
        assert_eq!(rxe0_provider(), "ibverbs", "RDMASOCK_PROVIDER={forced}");
    }

    // And back: unset again, the registry picks the pure-Rust provider once more.
    std::env::remove_var(PROVIDER_ENV);
    assert_eq!(rxe0_provider(), "rxe", "RDMASOCK_PROVIDER unset again");
    echo_over_rdmasocket();
}
