//! Which provider drives rxe0: with `RDMASOCK_PROVIDER` unset (or forcing only another
//! device) the pure-Rust rxe provider, and libibverbs is not even loaded; with
//! `RDMASOCK_PROVIDER=ibverbs` the rdma-core bridge. Checked twice: the name the registry's
//! choice reports (`Context::provider_name`) and, for RdmaSocket traffic, whether
//! `libibverbs.so` is mapped into this process.
//!
//! Then async events through both providers: rxe0's port going down and up (eth0 set down and
//! up) must reach the context as PORT_ERR and PORT_ACTIVE for port 1.
//!
//! The tests must run one at a time and in name order (the VM suite's `--test-threads=1`):
//! the provider-choice test runs first because once the bridge has loaded libibverbs it stays
//! mapped, and the port test takes rxe0's link down. Needs the VM's rxe0: `tests/vm/run.sh`
//! (the suite runs this binary with RDMASOCK_PROVIDER unset).
#![forbid(unsafe_code)]

use rdmasock::verbs::AsyncEventKind;
use rdmasock::{RdmaListener, RdmaSocket, PROVIDER_ENV};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::thread;
use std::time::{Duration, Instant};

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
fn a_pure_rust_rxe_unless_the_bridge_is_forced() {
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

/// Sets `dev` up or down with ip(8) (the VM runs the tests as root).
fn set_link(dev: &str, up: bool) {
    let state = if up { "up" } else { "down" };
    let status = std::process::Command::new("ip")
        .args(["link", "set", dev, state])
        .status()
        .expect("running ip link set");
    assert!(
        status.success(),
        "ip link set {dev} {state} failed: {status}"
    );
}

/// Waits up to 10 s for rxe0's port 1 to report `state` (ACTIVE, DOWN) in sysfs.
fn wait_port_state(state: &str) {
    let path = "/sys/class/infiniband/rxe0/ports/1/state";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = std::fs::read_to_string(path).expect("reading rxe0's port state");
        if now.contains(state) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "rxe0's port 1 is '{}', not {state}, 10 s after the link change",
            now.trim()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// Waits up to 10 s (poll(2) on the async fd) for an event of `kind`, skipping others.
fn wait_async_event(context: &rdmasock::verbs::Context, kind: AsyncEventKind) -> u64 {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        while let Some(event) = context.read_async_event().expect("reading async events") {
            if event.kind == kind {
                return event.element;
            }
            seen.push(event);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "no {kind:?} async event within 10 s on {} (saw {seen:?})",
            context.provider_name()
        );
        let mut fds = [PollFd::new(context.as_fd(), PollFlags::POLLIN)];
        let ms = PollTimeout::try_from(left.as_millis().min(1000) as u32).expect("timeout");
        poll(&mut fds, ms).expect("poll on the async event fd");
    }
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn b_port_events_reach_the_context_through_both_providers() {
    vm_ip();
    let netdev = std::fs::read_to_string("/sys/class/infiniband/rxe0/parent")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "eth0".into());
    for forced in [None, Some("ibverbs")] {
        match forced {
            Some(kind) => std::env::set_var(PROVIDER_ENV, kind),
            None => std::env::remove_var(PROVIDER_ENV),
        }
        let context = rdmasock::open_device(Some("rxe0")).expect("opening rxe0");
        let provider = context.provider_name();
        assert_eq!(provider, if forced.is_some() { "ibverbs" } else { "rxe" });
        while context.read_async_event().expect("draining").is_some() {}
        set_link(&netdev, false);
        let port = wait_async_event(&context, AsyncEventKind::PortError);
        assert_eq!(port, 1, "PORT_ERR names port {port} on {provider}");
        set_link(&netdev, true);
        let port = wait_async_event(&context, AsyncEventKind::PortActive);
        assert_eq!(port, 1, "PORT_ACTIVE names port {port} on {provider}");
        wait_port_state("ACTIVE");
    }
    // The device works again for what runs next.
    std::env::remove_var(PROVIDER_ENV);
    echo_over_rdmasocket();
}
