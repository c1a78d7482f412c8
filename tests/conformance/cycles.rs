//! Connect/echo/close cycles without leaks: after a thousand, open file descriptors and
//! resident memory have not grown, and on a kernel device neither have its registered memory
//! regions nor the memory they pin.

use super::socket_support::{cycles_from_env, echo_one_byte_each, open_fds, rss_kib, status_kib};
use super::{Fixture, Provider};
use rdmasock::RdmaSocket;
use std::io::{Read, Write};
use std::thread;
use std::time::{Duration, Instant};

/// What a provider's registrations hold: (memory regions listed by the kernel, KiB pinned).
/// The userspace provider registers nothing with a kernel: (0, 0) there.
fn registrations(f: &Fixture) -> (usize, usize) {
    match f.provider {
        Provider::Uiwarp => (0, 0),
        // rxe and siw pin a region's pages with ib_umem_get, which counts them in the
        // process's pinned_vm, and list every registered region in their resource tracking.
        Provider::Rxe | Provider::Siw => (mr_count(), status_kib("VmPin")),
    }
}

/// The lines of `rdma resource show mr` (iproute2): one per registered region.
fn mr_count() -> usize {
    let out = std::process::Command::new("rdma")
        .args(["resource", "show", "mr"])
        .output()
        .expect("rdma (iproute2) runs");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// How much resident memory may grow over the cycles: 16 MiB with the userspace provider
/// (whose engine and TCP sockets live in this process), 8 MiB on a kernel device.
fn rss_allowance_kib(f: &Fixture) -> usize {
    match f.provider {
        Provider::Uiwarp => 16 * 1024,
        Provider::Rxe | Provider::Siw => 8 * 1024,
    }
}

/// `RDMASOCK_CYCLES` (default 1000) connect/echo/close cycles after 10 warm-up cycles; fails
/// if file descriptors, resident memory or (on a kernel device) registered regions or pinned
/// memory grow. On a kernel device, one connection open must first show its rings in
/// `VmPin`, so that the pinned-memory check can fail.
pub(crate) fn thousand_connect_close_cycles_leak_nothing(f: &Fixture) {
    let (l, addr) = f.listener();
    let cycles = cycles_from_env();
    // The cycles, the warm-up's 10 and the pinned-memory probe.
    let server = echo_one_byte_each(l, cycles + 11);
    let cycle = || {
        let t0 = Instant::now();
        let mut c = RdmaSocket::connect(addr).expect("connect");
        let t1 = Instant::now();
        c.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        let t2 = Instant::now();
        drop(c);
        (t1 - t0, t2 - t1, t2.elapsed())
    };
    for _ in 0..10 {
        let (connect, echo, close) = cycle();
        eprintln!("warm-up cycle: connect {connect:?}, echo {echo:?}, close {close:?}");
    }
    let (_, idle) = registrations(f);
    let mut probe = RdmaSocket::connect(addr).expect("connect");
    probe.write_all(b"p").unwrap();
    probe.read_exact(&mut [0u8; 1]).unwrap();
    let (_, open) = registrations(f);
    drop(probe);
    assert_eq!(
        open > idle,
        f.provider.is_kernel_device(),
        "VmPin with a connection open ({idle} -> {open} KiB) grows on a kernel device only"
    );
    let (fds, rss, (mrs, pinned)) = (open_fds(), rss_kib(), registrations(f));
    let start = Instant::now();
    for i in 1..=cycles {
        cycle();
        if i % 100 == 0 {
            eprintln!(
                "{addr}: {i} cycles in {:.1} s",
                start.elapsed().as_secs_f64()
            );
        }
    }
    let secs = start.elapsed().as_secs_f64();
    server.join().unwrap();
    // The userspace provider's TCP connections finish closing on its engine thread (FIN both
    // ways): a bounded wait for their descriptors.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut fds2 = open_fds();
    while fds2 > fds && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
        fds2 = open_fds();
    }
    let (rss2, (mrs2, pinned2)) = (rss_kib(), registrations(f));
    eprintln!(
        "{addr}: {cycles} cycles in {secs:.1} s ({:.2} ms each); fds {fds}->{fds2}, \
         RSS {rss}->{rss2} KiB, MR lines {mrs}->{mrs2}, pinned {pinned}->{pinned2} KiB",
        secs * 1000.0 / cycles as f64
    );
    // The listener is gone now: one fd fewer is fine, one more is a leak.
    assert!(fds2 <= fds, "fd leak: {fds} -> {fds2}");
    assert!(mrs2 <= mrs, "MR leak: {mrs} -> {mrs2}");
    assert!(
        pinned2 <= pinned,
        "pinned memory grew: {pinned} -> {pinned2} KiB (a registration was not released)"
    );
    let allowance = rss_allowance_kib(f);
    assert!(
        rss2 < rss + allowance,
        "memory grew by more than {} MiB: {rss} -> {rss2} KiB",
        allowance / 1024
    );
}
