//! `bench_zero_copy`: one-way bandwidth of zero-copy writes from registered buffers against
//! the copying socket, and the writing thread's CPU time per MiB, over one connection.
//!
//! ```text
//! bench_zero_copy [--sizes 65536,1048576] [--megabytes M] [--depth D] [--rounds R]
//!                 [--device NAME] [--recv-ring BYTES] [--ring-min BYTES]
//!                 [--max-transfer BYTES] [--signal-interval N] [--event-mode] [--verbose]
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
//! plus system) in microseconds per MiB, its waits per MiB and the reading thread's CPU time
//! per MiB, one `RESULT bw WAY SIZE MIBPS CPU_US_PER_MIB WAITS_PER_MIB READER_US_PER_MIB`
//! line each (what `tests/vm/bench-zero-copy.sh` reads), then a table with the ratios zero-copy ÷
//! copy, and the writer's blocking waits per MiB over all rounds (a writer that waits has
//! used up every receive-ring half the reader gave it, see `WaitStats`). The connections use
//! the address of `--device NAME` (default: the first RDMA device's, or loopback over the
//! userspace provider where the kernel has none) and the socket's default options, except
//! with `--recv-ring BYTES`: each receive ring then grows up to BYTES instead of the
//! default largest size (128 KiB on a kernel device).
//!
//! To find where time goes: `--ring-min BYTES` starts each receive ring at BYTES instead of
//! the default smallest size (equal to the largest: a fixed ring), `--max-transfer BYTES`
//! (the largest single WRITE, 64 KiB by default: with a larger `--recv-ring` a message can
//! fill a larger half with one WRITE), `--signal-interval N` and `--event-mode` set those
//! socket options, and `--verbose` prints one `ROUND` line per
//! round with the writer's user and system CPU time per MiB and both threads' wait counters
//! (waits, naps, naps that overslept, sleeps on the completion channel).

mod common;

use common::address::device_address;
use common::bench::thread_cpu;
use rdmasock::socket::DEFAULT_RING_MIN;
use rdmasock::{RdmaListener, RdmaSocket, RegisteredBuf, SocketOptions};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::thread;
use std::time::Instant;

/// The receive ring's largest size on a kernel device by default.
const KERNEL_RING: usize = 128 * 1024;

struct Args {
    sizes: Vec<usize>,
    megabytes: usize,
    depth: usize,
    rounds: usize,
    device: Option<String>,
    recv_ring: Option<usize>,
    ring_min: Option<usize>,
    max_transfer: Option<u32>,
    signal_interval: Option<u16>,
    event_mode: bool,
    verbose: bool,
}

fn args() -> Args {
    let mut a = Args {
        sizes: vec![64 << 10, 1 << 20],
        megabytes: 64,
        depth: 8,
        rounds: 3,
        device: None,
        recv_ring: None,
        ring_min: None,
        max_transfer: None,
        signal_interval: None,
        event_mode: false,
        verbose: false,
    };
    let mut it = std::env::args().skip(1);
    let usage = |what: &str| -> ! {
        eprintln!(
            "bench_zero_copy: {what}\nusage: bench_zero_copy [--sizes 65536,1048576] \
             [--megabytes M] [--depth D] [--rounds R] [--device NAME] [--recv-ring BYTES] \
             [--ring-min BYTES] [--max-transfer BYTES] [--signal-interval N] [--event-mode] \
             [--verbose]"
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
            "--ring-min" => a.ring_min = Some(number(value())),
            "--max-transfer" => {
                a.max_transfer = Some(
                    u32::try_from(number(value()))
                        .unwrap_or_else(|_| usage("--max-transfer above 4294967295")),
                )
            }
            "--signal-interval" => {
                a.signal_interval = Some(
                    u16::try_from(number(value()))
                        .unwrap_or_else(|_| usage("--signal-interval above 65535")),
                )
            }
            "--event-mode" => a.event_mode = true,
            "--verbose" => a.verbose = true,
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
    /// The reading thread's CPU time per MiB, in microseconds.
    reader_cpu: f64,
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
    verbose: bool,
) -> Round {
    let listener = RdmaListener::bind_with(SocketAddr::new(ip, 0), opts).expect("bind");
    let address = listener.local_addr().expect("listener address");
    let server = thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0;
        let cpu = thread_cpu();
        loop {
            match s.read(&mut buf).expect("server read") {
                0 => return (got, thread_cpu() - cpu, s.wait_stats()),
                n => got += n,
            }
        }
    });
    let mut c = RdmaSocket::connect_with(address, opts).expect("connect");
    let messages = total.div_ceil(size);
    let (start, cpu, split) = (Instant::now(), thread_cpu(), cpu_split());
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
    let split_end = cpu_split();
    let stats = c.wait_stats();
    drop(c);
    let (got, reader_cpu, reader_stats) = server.join().expect("server thread");
    assert_eq!(got, messages * size, "the server got every byte");
    let mib = got as f64 / f64::from(1 << 20);
    let per_mib = |d: std::time::Duration| d.as_secs_f64() * 1e6 / mib;
    let r = Round {
        bandwidth: mib / elapsed.as_secs_f64(),
        cpu: per_mib(cpu),
        waits: stats.waits,
        reader_cpu: per_mib(reader_cpu),
    };
    if verbose {
        println!(
            "ROUND {} {size} {:.1} MiB/s writer user {:.0} sys {:.0} us/MiB waits {} naps {} \
             sleeps {}; reader {:.0} us/MiB waits {} naps {} overslept {} sleeps {}",
            way.name(),
            r.bandwidth,
            per_mib(split_end.0 - split.0),
            per_mib(split_end.1 - split.1),
            stats.waits,
            stats.naps,
            stats.channel_sleeps,
            r.reader_cpu,
            reader_stats.waits,
            reader_stats.naps,
            reader_stats.overslept_naps,
            reader_stats.channel_sleeps,
        );
    }
    r
}

/// The calling thread's user and system CPU time so far.
fn cpu_split() -> (std::time::Duration, std::time::Duration) {
    use nix::sys::resource::{getrusage, UsageWho};
    let usage = getrusage(UsageWho::RUSAGE_THREAD).expect("getrusage");
    let time = |t: nix::sys::time::TimeVal| {
        std::time::Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000)
    };
    (time(usage.user_time()), time(usage.system_time()))
}

fn main() {
    let a = args();
    let ip = device_address(a.device.as_deref()).unwrap_or_else(|e| {
        eprintln!("bench_zero_copy: {e}");
        std::process::exit(1)
    });
    let total = a.megabytes << 20;
    let mut opts = SocketOptions::builder();
    if a.recv_ring.is_some() || a.ring_min.is_some() {
        let largest = a.recv_ring.unwrap_or(KERNEL_RING);
        opts = opts.recv_ring_range(a.ring_min.unwrap_or(DEFAULT_RING_MIN).min(largest), largest);
    }
    if let Some(bytes) = a.max_transfer {
        opts = opts.max_transfer(bytes);
    }
    if let Some(n) = a.signal_interval {
        opts = opts.signal_interval(n);
    }
    if a.event_mode {
        opts = opts.event_mode();
    }
    let opts = opts.build().unwrap_or_else(|e| {
        eprintln!("bench_zero_copy: the options: {e}");
        std::process::exit(2)
    });
    let ways = [Way::Copy, Way::ZeroCopy, Way::ZeroCopyBlocking];
    let all_mib = (a.rounds * a.megabytes) as f64;
    let mut table = Vec::new();
    for &size in &a.sizes {
        // Per way: the best MiB/s, the writer's least CPU per MiB, its waits per MiB, the
        // reader's least CPU per MiB.
        let mut best = [(0.0f64, f64::MAX, 0.0f64, f64::MAX); 3];
        for _ in 0..a.rounds {
            for (i, &way) in ways.iter().enumerate() {
                let r = round(ip, &opts, way, size, total, a.depth, a.verbose);
                best[i] = (
                    best[i].0.max(r.bandwidth),
                    best[i].1.min(r.cpu),
                    best[i].2 + r.waits as f64 / all_mib,
                    best[i].3.min(r.reader_cpu),
                );
            }
        }
        for (i, way) in ways.iter().enumerate() {
            println!(
                "RESULT bw {} {size} {:.1} {:.0} {:.1} {:.0}",
                way.name(),
                best[i].0,
                best[i].1,
                best[i].2,
                best[i].3
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
