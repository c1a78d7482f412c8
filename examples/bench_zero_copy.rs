//! `bench_zero_copy`: one-way bandwidth of zero-copy writes from registered buffers against
//! the copying socket, and the writing thread's CPU time per MiB, over one connection.
//!
//! ```text
//! bench_zero_copy [--sizes 65536,1048576] [--megabytes M] [--depth D] [--rounds R]
//!                 [--device NAME] [--recv-ring BYTES]
//! ```
//! Build with `--release`. For each message size (default 64 KiB and 1 MiB) and each of
//! `R` rounds (default 3), a client thread writes `M` MiB (default 64) to a server thread
//! that reads it into one buffer and drops it, three ways on fresh connections:
//! * `copy`: `write_all` of one buffer (the bytes go through the send ring);
//! * `zero-copy`: `submit_registered` of up to `D` registered buffers at a time (default
//!   8), each taken back with `wait_completed_registered` before it is submitted again;
//! * `zero-copy-blocking`: `write_registered` of one buffer (each call waits for its sends).
//!
//! Prints, per way and size, the best round's MiB/s, the writing thread's CPU time (user
//! plus system) in microseconds per MiB and its waits per MiB, one
//! `RESULT bw WAY SIZE MIBPS CPU_US_PER_MIB WAITS_PER_MIB` line each (what
//! `tests/vm/bench-zero-copy.sh` reads), then a table with the ratios zero-copy ÷
//! copy, and the writer's blocking waits per MiB over all rounds (a writer that waits has
//! used up every receive-ring half the reader gave it, see `WaitStats`). The connections use
//! the address of `--device NAME` (default: the first RDMA device's, or loopback over the
//! userspace provider where the kernel has none) and the socket's default options, except
//! with `--recv-ring BYTES`: each receive ring then grows up to BYTES instead of the
//! default largest size (128 KiB on a kernel device).

mod common;

use common::address::device_address;
use common::bench::thread_cpu;
use rdmasock::socket::DEFAULT_RING_MIN;
use rdmasock::{RdmaListener, RdmaSocket, RegisteredBuf, SocketOptions};
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
    recv_ring: Option<usize>,
}

fn args() -> Args {
    let mut a = Args {
        sizes: vec![64 << 10, 1 << 20],
        megabytes: 64,
        depth: 8,
        rounds: 3,
        device: None,
        recv_ring: None,
    };
    let mut it = std::env::args().skip(1);
    let usage = |what: &str| -> ! {
        eprintln!(
            "bench_zero_copy: {what}\nusage: bench_zero_copy [--sizes 65536,1048576] \
             [--megabytes M] [--depth D] [--rounds R] [--device NAME] [--recv-ring BYTES]"
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
            "--recv-ring" => a.recv_ring = Some(number(value())),
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

/// One round's results.
struct Round {
    /// MiB/s.
    bandwidth: f64,
    /// The writing thread's CPU time per MiB, in microseconds.
    cpu: f64,
    /// The writer's blocking waits.
    waits: u64,
}

/// One round: `total` bytes in `size`-byte writes the way `way` says, on sockets made with
/// `opts`.
fn round(
    ip: std::net::IpAddr,
    opts: &SocketOptions,
    way: Way,
    size: usize,
    total: usize,
    depth: usize,
) -> Round {
    let listener = RdmaListener::bind_with(SocketAddr::new(ip, 0), opts).expect("bind");
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
    let mut c = RdmaSocket::connect_with(address, opts).expect("connect");
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
    let waits = c.wait_stats().waits;
    drop(c);
    let got = server.join().expect("server thread");
    assert_eq!(got, messages * size, "the server got every byte");
    let mib = got as f64 / f64::from(1 << 20);
    Round {
        bandwidth: mib / elapsed.as_secs_f64(),
        cpu: cpu.as_secs_f64() * 1e6 / mib,
        waits,
    }
}

fn main() {
    let a = args();
    let ip = device_address(a.device.as_deref()).unwrap_or_else(|e| {
        eprintln!("bench_zero_copy: {e}");
        std::process::exit(1)
    });
    let total = a.megabytes << 20;
    let mut opts = SocketOptions::builder();
    if let Some(bytes) = a.recv_ring {
        opts = opts.recv_ring_range(DEFAULT_RING_MIN.min(bytes), bytes);
    }
    let opts = opts.build().unwrap_or_else(|e| {
        eprintln!("bench_zero_copy: --recv-ring: {e}");
        std::process::exit(2)
    });
    let ways = [Way::Copy, Way::ZeroCopy, Way::ZeroCopyBlocking];
    let all_mib = (a.rounds * a.megabytes) as f64;
    let mut table = Vec::new();
    for &size in &a.sizes {
        // Per way: the best MiB/s, the least CPU per MiB, the writer's waits per MiB.
        let mut best = [(0.0f64, f64::MAX, 0.0f64); 3];
        for _ in 0..a.rounds {
            for (i, &way) in ways.iter().enumerate() {
                let r = round(ip, &opts, way, size, total, a.depth);
                best[i] = (
                    best[i].0.max(r.bandwidth),
                    best[i].1.min(r.cpu),
                    best[i].2 + r.waits as f64 / all_mib,
                );
            }
        }
        for (i, way) in ways.iter().enumerate() {
            println!(
                "RESULT bw {} {size} {:.1} {:.0} {:.1}",
                way.name(),
                best[i].0,
                best[i].1,
                best[i].2
            );
        }
        table.push((size, best));
    }
    println!(
        "zero-copy writes on {ip}: best of {} rounds of {} MiB, depth {}",
        a.rounds, a.megabytes, a.depth
    );
    println!(
        "{:>9} {:>20} {:>12} {:>14} {:>10} {:>10} {:>11}",
        "size", "way", "MiB/s", "CPU us/MiB", "bw ratio", "CPU ratio", "waits/MiB"
    );
    for (size, best) in table {
        for (i, way) in ways.iter().enumerate() {
            println!(
                "{size:>9} {:>20} {:>12.1} {:>14.0} {:>10.2} {:>10.2} {:>11.1}",
                way.name(),
                best[i].0,
                best[i].1,
                best[i].0 / best[0].0,
                best[i].1 / best[0].1,
                best[i].2
            );
        }
    }
}
