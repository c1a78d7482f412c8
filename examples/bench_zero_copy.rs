//! `bench_zero_copy`: one-way bandwidth of zero-copy writes from registered buffers against
//! the copying socket, and the writing thread's CPU time per MiB, over one connection.
//!
//! ```text
//! bench_zero_copy [--sizes 65536,1048576] [--megabytes M] [--depth D] [--rounds R]
//!                 [--device NAME]
//! ```
//! Build with `--release`. For each message size (default 64 KiB and 1 MiB) and each of
//! `R` rounds (default 3), a client thread writes `M` MiB (default 64) to a server thread
//! that reads it into one buffer and drops it, three ways on fresh connections:
//! * `copy`: `write_all` of one buffer (the bytes go through the send ring);
//! * `zero-copy`: `submit_registered` of up to `D` registered buffers at a time (default
//!   8), each taken back with `wait_completed_registered` before it is submitted again;
//! * `zero-copy-blocking`: `write_registered` of one buffer (each call waits for its sends).
//!
//! Prints, per way and size, the best round's MiB/s and the writing thread's CPU time (user
//! plus system) in microseconds per MiB, one `RESULT bw WAY SIZE MIBPS CPU_US_PER_MIB` line
//! each (what `tests/vm/bench-zero-copy.sh` reads), then a table with the ratios zero-copy ÷
//! copy. The connections use the address of `--device NAME` (default: the first RDMA
//! device's, or loopback over the userspace provider where the kernel has none).

mod common;

use common::address::device_address;
use common::bench::thread_cpu;
use rdmasock::{RdmaListener, RdmaSocket, RegisteredBuf};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::thread;
use std::time::Instant;

struct Args {
    sizes: Vec<usize>,
    megabytes: usize,
    depth: usize,
    rounds: usize,
    device: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        sizes: vec![64 << 10, 1 << 20],
        megabytes: 64,
        depth: 8,
        rounds: 3,
        device: None,
    };
    let mut it = std::env::args().skip(1);
    let usage = |what: &str| -> ! {
        eprintln!(
            "bench_zero_copy: {what}\nusage: bench_zero_copy [--sizes 65536,1048576] \
             [--megabytes M] [--depth D] [--rounds R] [--device NAME]"
        );
        std::process::exit(2)
    };
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        let number = |v: String| -> usize {
            v.parse()
                .unwrap_or_else(|_| usage(&format!("{v} is not a number")))
        };
        match flag.as_str() {
            "--sizes" => a.sizes = value().split(',').map(|s| number(s.to_string())).collect(),
            "--megabytes" => a.megabytes = number(value()),
            "--depth" => a.depth = number(value()).max(1),
            "--rounds" => a.rounds = number(value()).max(1),
            "--device" => a.device = Some(value()),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if a.sizes.contains(&0) {
        usage("a size of 0");
    }
    a
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    Copy,
    ZeroCopy,
    ZeroCopyBlocking,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Copy => "copy",
            Way::ZeroCopy => "zero-copy",
            Way::ZeroCopyBlocking => "zero-copy-blocking",
        }
    }
}

/// One round: `total` bytes in `size`-byte writes the way `way` says; (MiB/s, CPU µs/MiB).
fn round(ip: std::net::IpAddr, way: Way, size: usize, total: usize, depth: usize) -> (f64, f64) {
    let listener = RdmaListener::bind(SocketAddr::new(ip, 0)).expect("bind");
    let address = listener.local_addr().expect("listener address");
    let server = thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0;
        loop {
            match s.read(&mut buf).expect("server read") {
                0 => return got,
                n => got += n,
            }
        }
    });
    let mut c = RdmaSocket::connect(address).expect("connect");
    let messages = total.div_ceil(size);
    let (start, cpu) = (Instant::now(), thread_cpu());
    match way {
        Way::Copy => {
            let buf = vec![7u8; size];
            for _ in 0..messages {
                c.write_all(&buf).expect("write");
            }
        }
        Way::ZeroCopyBlocking => {
            let mut buf = RegisteredBuf::new(size).expect("a registered buffer");
            buf.fill(7);
            for _ in 0..messages {
                c.write_registered(&buf).expect("zero-copy write");
            }
        }
        Way::ZeroCopy => {
            let mut free: Vec<RegisteredBuf> = (0..depth.min(messages))
                .map(|_| {
                    let mut b = RegisteredBuf::new(size).expect("a registered buffer");
                    b.fill(7);
                    b
                })
                .collect();
            // A blocking socket posts all of each buffer it is given.
            for _ in 0..messages {
                let buf = match free.pop() {
                    Some(buf) => buf,
                    None => {
                        let done = c
                            .wait_completed_registered()
                            .expect("wait")
                            .expect("in flight");
                        done.result.expect("zero-copy write");
                        done.buf
                    }
                };
                assert_eq!(c.submit_registered(buf).expect("submit"), size);
            }
            while let Some(done) = c.wait_completed_registered().expect("wait") {
                done.result.expect("zero-copy write");
            }
        }
    }
    c.flush().expect("flush");
    let (elapsed, cpu) = (start.elapsed(), thread_cpu() - cpu);
    drop(c);
    let got = server.join().expect("server thread");
    assert_eq!(got, messages * size, "the server got every byte");
    let mib = got as f64 / f64::from(1 << 20);
    (mib / elapsed.as_secs_f64(), cpu.as_secs_f64() * 1e6 / mib)
}

fn main() {
    let a = args();
    let ip = device_address(a.device.as_deref()).unwrap_or_else(|e| {
        eprintln!("bench_zero_copy: {e}");
        std::process::exit(1)
    });
    let total = a.megabytes << 20;
    let ways = [Way::Copy, Way::ZeroCopy, Way::ZeroCopyBlocking];
    let mut table = Vec::new();
    for &size in &a.sizes {
        let mut best = [(0.0f64, f64::MAX); 3];
        for _ in 0..a.rounds {
            for (i, &way) in ways.iter().enumerate() {
                let (bw, cpu) = round(ip, way, size, total, a.depth);
                best[i] = (best[i].0.max(bw), best[i].1.min(cpu));
            }
        }
        for (i, way) in ways.iter().enumerate() {
            println!(
                "RESULT bw {} {size} {:.1} {:.0}",
                way.name(),
                best[i].0,
                best[i].1
            );
        }
        table.push((size, best));
    }
    println!(
        "zero-copy writes on {ip}: best of {} rounds of {} MiB, depth {}",
        a.rounds, a.megabytes, a.depth
    );
    println!(
        "{:>9} {:>20} {:>12} {:>14} {:>10} {:>10}",
        "size", "way", "MiB/s", "CPU us/MiB", "bw ratio", "CPU ratio"
    );
    for (size, best) in table {
        for (i, way) in ways.iter().enumerate() {
            println!(
                "{size:>9} {:>20} {:>12.1} {:>14.0} {:>10.2} {:>10.2}",
                way.name(),
                best[i].0,
                best[i].1,
                best[i].0 / best[0].0,
                best[i].1 / best[0].1
            );
        }
    }
}
