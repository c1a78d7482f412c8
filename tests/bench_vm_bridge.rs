//! RdmaSocket latency and bandwidth on rxe0, the pure-Rust rxe provider against the rdma-core
//! bridge (RDMASOCK_PROVIDER=ibverbs), in one run: rounds alternate between the two so the
//! VM's load affects both alike. Prints a table; checks every byte and which provider ran
//! (libibverbs is not even mapped until the first bridge round).
//!
//! In the VM: `tests/vm/run.sh --both -- <this binary> --ignored --nocapture` (named bench_*, so
//! the VM suite does not run it: it measures; under TCG its numbers compare only with each other).
//! tests/vm/bench-bridge.sh measures the same with the release `bench_socket` example (medians,
//! several sizes, best of R rounds, a ratio table); this debug-build variant checks in-process.
#![forbid(unsafe_code)]

use rdmasock::{RdmaListener, RdmaSocket};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

fn vm_ip() -> IpAddr {
    assert!(
        std::path::Path::new("/sys/class/infiniband/rxe0").exists(),
        "rxe0 is missing: this benchmark runs in the VM (run-in-vm.sh), which creates it"
    );
    std::env::var("RDMA_VM_IP")
        .expect("RDMA_VM_IP is unset: run in the VM")
        .parse()
        .expect("RDMA_VM_IP is an IP address")
}

fn libibverbs_mapped() -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .expect("/proc/self/maps")
        .contains("libibverbs.so")
}

/// Chooses the provider for everything opened from now on, and checks it took.
fn use_provider(bridge: bool) -> &'static str {
    if bridge {
        std::env::set_var(rdmasock::PROVIDER_ENV, "ibverbs");
    } else {
        std::env::remove_var(rdmasock::PROVIDER_ENV);
    }
    let name = rdmasock::open_device(Some("rxe0"))
        .expect("opening rxe0")
        .provider_name();
    assert_eq!(name, if bridge { "ibverbs" } else { "rxe" });
    name
}

fn pair() -> (RdmaSocket, RdmaSocket) {
    let l = RdmaListener::bind(SocketAddr::new(vm_ip(), 0)).expect("bind");
    let addr = l.local_addr().unwrap();
    let t = thread::spawn(move || l.accept().expect("accept").0);
    let c = RdmaSocket::connect(addr).expect("connect");
    (t.join().expect("accept thread"), c)
}

/// Mean round trip of `iters` 64-byte ping-pongs.
fn latency(iters: u32) -> Duration {
    let (mut s, mut c) = pair();
    let echo = thread::spawn(move || {
        let mut b = [0u8; 64];
        for _ in 0..iters {
            s.read_exact(&mut b).unwrap();
            s.write_all(&b).unwrap();
        }
    });
    let mut b = [7u8; 64];
    let start = Instant::now();
    for i in 0..iters {
        b[0] = i as u8;
        c.write_all(&b).unwrap();
        c.read_exact(&mut b).unwrap();
        assert_eq!(b[0], i as u8);
    }
    let t = start.elapsed() / iters;
    echo.join().unwrap();
    t
}

/// MiB/s of `total` bytes one way, every byte checked.
fn bandwidth(total: usize) -> f64 {
    let (mut s, mut c) = pair();
    let sink = thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        let mut got = 0usize;
        while got < total {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "early end after {got} bytes");
            for (k, &byte) in buf[..n].iter().enumerate() {
                assert_eq!(byte, ((got + k) % 251) as u8, "byte {}", got + k);
            }
            got += n;
        }
    });
    // The pattern continues across chunks (65536 is not a multiple of 251): each chunk is a
    // window of this buffer starting at the running offset.
    let pattern: Vec<u8> = (0..(1usize << 16) + 251).map(|i| (i % 251) as u8).collect();
    let start = Instant::now();
    let mut sent = 0usize;
    while sent < total {
        let n = (total - sent).min(1 << 16);
        let off = sent % 251;
        c.write_all(&pattern[off..off + n]).unwrap();
        sent += n;
    }
    sink.join().unwrap();
    total as f64 / (1 << 20) as f64 / start.elapsed().as_secs_f64()
}

#[test]
#[ignore = "needs the VM: run-in-vm.sh '<binary> --ignored --nocapture'"]
fn rdmasocket_pure_rust_rxe_against_the_rdma_core_bridge() {
    let rounds: usize = std::env::var("RDMASOCK_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let iters = 500;
    let total = 16 << 20;
    let mut rows = Vec::new();
    for round in 0..rounds {
        for bridge in [false, true] {
            if round == 0 && bridge {
                assert!(
                    !libibverbs_mapped(),
                    "the pure-Rust rounds must not load libibverbs"
                );
            }
            let provider = use_provider(bridge);
            let lat = latency(iters);
            let bw = bandwidth(total);
            if bridge {
                assert!(
                    libibverbs_mapped(),
                    "the bridge round did not load libibverbs"
                );
            }
            rows.push((provider, lat, bw));
        }
    }
    println!(
        "provider  round-trip (64 B, mean of {iters})  bandwidth ({} MiB one way)",
        total >> 20
    );
    for (p, lat, bw) in &rows {
        println!(
            "{p:<9} {:>10.1} us                  {bw:>8.1} MiB/s",
            lat.as_secs_f64() * 1e6
        );
    }
    let mean = |name: &str| {
        let r: Vec<_> = rows.iter().filter(|r| r.0 == name).collect();
        let lat = r.iter().map(|r| r.1.as_secs_f64()).sum::<f64>() / r.len() as f64;
        let bw = r.iter().map(|r| r.2).sum::<f64>() / r.len() as f64;
        (lat * 1e6, bw)
    };
    let (rl, rb) = mean("rxe");
    let (bl, bb) = mean("ibverbs");
    println!(
        "mean: rxe {rl:.1} us {rb:.1} MiB/s; ibverbs {bl:.1} us {bb:.1} MiB/s; \
         pure-Rust latency {:.2}x the bridge's, bandwidth {:.2}x",
        rl / bl,
        rb / bb
    );
}
