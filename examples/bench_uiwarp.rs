//! `bench_uiwarp`: RdmaSocket over the userspace iWARP provider against `std::net::TcpStream`,
//! both on loopback, in one run: 64-byte ping-pong latency and 4 KiB / 1 MiB streaming
//! bandwidth. Prints a table with the ratios (targets: latency <= 1.3x, bandwidth >= 0.8x).
//!
//! ```text
//! bench_uiwarp [--rounds R] [--iters N] [--megabytes M] [--event] [--only WORKLOAD]
//!              [--ring BYTES] [--signal N] [--side tcp|uiwarp] [--waits] [--cpu]
//!              [--nodelay] [--tcp-nagle] [--markdown FILE]
//! ```
//! Build with `--release`. Each workload runs `R` rounds (default 5), TcpStream and uiwarp
//! alternating, each round on fresh connections; the table gives each side's median and
//! range, the ratio of the medians, and the median of each round's own ratio ("paired":
//! uiwarp's run over the TcpStream run just before it), which a host whose speed drifts
//! between rounds sways less (one round can be off by 2x on a virtualised host, where
//! waking a thread on the other core costs a few or tens of microseconds). `--event`
//! uses event mode (sleep on the completion channel) instead of the library's adaptive
//! busy-poll. `--waits` prints each uiwarp round's result and both ends' `WaitStats` (how
//! often the blocking calls waited, napped, overslept a nap and slept on the channel).
//! TcpStream runs with TCP_NODELAY and RdmaSocket with its defaults (the provider may hold
//! a write for a few microseconds to send it with the next ones; see
//! `RdmaSocket::set_nodelay`); `--nodelay` sets nodelay on RdmaSocket too (every write
//! goes to TCP at once), `--tcp-nagle` leaves Nagle's algorithm on in TcpStream.
//! The 1 MiB stream runs four more ways, each paired with TcpStream rounds of its own: with
//! zero-copy writes (`submit_registered` of two registered 1 MiB buffers in turn; the
//! reader reads as before), and three floors over plain TcpStream that add what MPA and the
//! socket must add to TCP: MPA's CRC32c over every byte on both ends; that and the reader's
//! copy out of its receive ring (1 copy: the floor of zero-copy writes); that and the
//! writer's copy into its send ring (2 copies: the floor of the copying stream). No
//! implementation of each design beats its floor on the host it runs on. `--only` takes
//! `latency`, `4k`, `1m` (all five 1 MiB rows) or one row: `1m-zc`, `1m-crc`, `1m-copy1`,
//! `1m-copy2`. `--cpu` prints each 1 MiB round's MB/s and the writing and reading threads'
//! CPU time (user plus system) per MiB to stderr.
//! `--markdown FILE` also writes the table, with the date and the machine, into the
//! `bench-uiwarp` section of FILE (normally `docs/BENCHMARKS.md`; between
//! `<!-- bench-uiwarp:begin -->` and `<!-- bench-uiwarp:end -->`), leaving the rest as it is.

mod common;

use common::bench::{thread_cpu, Stream, Summary};
use common::clock::RoundTrips;
use common::markdown;
use rdmasock::socket::WaitStats;
use rdmasock::{
    connection_manager_for, ProviderKind, RdmaListener, RdmaSocket, RegisteredBuf, SocketOptions,
};
use rdmasock_uiwarp::wire::crc32c::Crc32c;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// One round's result, with its client's and server's wait counters.
type Round = (f64, Option<WaitStats>, Option<WaitStats>);

struct Args {
    rounds: usize,
    iters: usize,
    megabytes: usize,
    event: bool,
    /// Only this workload: `latency`, `4k` or `1m` (all when `None`).
    only: Option<String>,
    /// Send and receive ring bytes (rsocket's 128 KiB when `None`).
    ring: Option<usize>,
    /// Signalling interval (the library's default when `None`).
    signal: Option<usize>,
    /// Only this side: `tcp` or `uiwarp` (both when `None`), for counting one side's
    /// syscalls and switches with strace or perf.
    side: Option<String>,
    /// Print each uiwarp round and its ends' wait counters to stderr.
    waits: bool,
    /// `RdmaSocket::set_nodelay(true)` on both ends.
    nodelay: bool,
    /// TcpStream without TCP_NODELAY.
    tcp_nagle: bool,
    /// Write the table into this markdown file's `bench-uiwarp` section.
    markdown: Option<PathBuf>,
    /// The options given, for the markdown section (without `--markdown FILE`).
    command_line: String,
}

/// What `--only` takes: a workload, or one of the 1 MiB stream's rows.
const ONLY: [&str; 7] = [
    "latency", "4k", "1m", "1m-zc", "1m-crc", "1m-copy1", "1m-copy2",
];

fn args() -> Args {
    let mut a = Args {
        rounds: 5,
        iters: 20_000,
        megabytes: 256,
        event: false,
        only: None,
        ring: None,
        signal: None,
        side: None,
        waits: false,
        nodelay: false,
        tcp_nagle: false,
        markdown: None,
        command_line: command_line(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut num = |name: &str| -> usize {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} needs a number"))
        };
        match arg.as_str() {
            "--rounds" => a.rounds = num("--rounds").max(1),
            "--iters" => a.iters = num("--iters"),
            "--megabytes" => a.megabytes = num("--megabytes"),
            "--event" => a.event = true,
            "--only" => {
                let w = it.next().unwrap_or_default();
                if !ONLY.contains(&w.as_str()) {
                    eprintln!("bench_uiwarp: --only takes one of {ONLY:?} (not {w:?})");
                    std::process::exit(2);
                }
                a.only = Some(w);
            }
            "--ring" => a.ring = Some(num("--ring")),
            "--signal" => a.signal = Some(num("--signal")),
            "--side" => a.side = it.next(),
            "--waits" => a.waits = true,
            "--nodelay" => a.nodelay = true,
            "--tcp-nagle" => a.tcp_nagle = true,
            "--cpu" => PRINT_CPU.store(true, Ordering::Relaxed),
            "--markdown" => {
                a.markdown = Some(PathBuf::from(it.next().expect("--markdown needs a file")))
            }
            other => {
                eprintln!(
                    "usage: bench_uiwarp [--rounds R] [--iters N] [--megabytes M] [--event] [--only latency|4k|1m] [--ring BYTES] [--signal N] [--side tcp|uiwarp] [--waits] [--cpu] [--nodelay] [--tcp-nagle] [--markdown FILE] (not {other})"
                );
                std::process::exit(2);
            }
        }
    }
    a
}

/// How the benchmark was run, for the markdown section: its options without
/// `--markdown FILE`.
fn command_line() -> String {
    let mut shown = vec!["bench_uiwarp".to_string()];
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--markdown" {
            args.next();
        } else {
            shown.push(arg);
        }
    }
    shown.join(" ")
}

/// Median microseconds per 64-byte round trip (after a warm-up).
fn pingpong<S: Stream>(mut client: S, server: S, iters: usize) -> Round {
    let echo = thread::spawn(move || {
        let mut s = server;
        let mut buf = [0u8; 64];
        while s.read_exact(&mut buf).is_ok() {
            if s.write_all(&buf).is_err() {
                break;
            }
        }
        s.waits()
    });
    let mut buf = [7u8; 64];
    let warm = iters / 10;
    let mut clock = RoundTrips::new(warm, iters);
    for _ in 0..iters + warm {
        clock.start();
        client.write_all(&buf).expect("ping");
        client.read_exact(&mut buf).expect("pong");
    }
    let samples = clock.finish(1.0);
    let client_waits = client.waits();
    drop(client);
    let server_waits = echo.join().ok().flatten();
    (samples.median(), client_waits, server_waits)
}

/// The reading end of a stream: reads `total` bytes into a buffer of `len`, then acks with
/// one byte; joins to (bytes read, its wait counters, its CPU time).
fn sink<S: Stream>(
    mut server: S,
    len: usize,
    total: usize,
) -> thread::JoinHandle<(usize, Option<WaitStats>, Duration)> {
    thread::spawn(move || {
        let cpu = thread_cpu();
        let mut buf = vec![0u8; len];
        let mut got = 0usize;
        while got < total {
            match server.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) => panic!("sink read: {e}"),
            }
        }
        server.write_all(b"k").expect("ack");
        (got, server.waits(), thread_cpu() - cpu)
    })
}

/// The end of a stream round named `what`: waits for the reader's ack and the reader,
/// reports the CPU times (`--cpu`), and returns the MB/s of `total` bytes since `start`
/// (the writer's start instant and CPU time) with both ends' wait counters.
fn finish<S: Stream>(
    what: &str,
    mut client: S,
    sink: thread::JoinHandle<(usize, Option<WaitStats>, Duration)>,
    start: (Instant, Duration),
    total: usize,
) -> Round {
    let mut ack = [0u8; 1];
    client.read_exact(&mut ack).expect("ack");
    let secs = start.0.elapsed().as_secs_f64();
    let writer_cpu = thread_cpu() - start.1;
    let (got, server_waits, reader_cpu) = sink.join().expect("sink");
    let mbps = total as f64 / secs / 1e6;
    report_cpu(what, mbps, writer_cpu, reader_cpu, total);
    assert_eq!(got, total);
    (mbps, client.waits(), server_waits)
}

/// MB/s of a one-way stream of `total` bytes in `chunk`-byte writes.
fn stream<S: Stream>(mut client: S, server: S, chunk: usize, total: usize) -> Round {
    let sink = sink(server, chunk.max(65536), total);
    let buf = vec![0x5au8; chunk];
    let t = Instant::now();
    let cpu = thread_cpu();
    let mut sent = 0;
    while sent < total {
        let n = chunk.min(total - sent);
        client.write_all(&buf[..n]).expect("stream write");
        sent += n;
    }
    finish(std::any::type_name::<S>(), client, sink, (t, cpu), total)
}

/// MB/s of a one-way stream of `total` bytes from `DEPTH` registered 1 MiB buffers, each
/// handed to `submit_registered` again once the socket gave it back: the writer copies
/// nothing (the reader reads as in [`stream`]).
fn stream_zero_copy(client: RdmaSocket, server: RdmaSocket, total: usize) -> Round {
    const DEPTH: usize = 2;
    let chunk = 1 << 20;
    let sink = sink(server, chunk, total);
    let mut free: Vec<RegisteredBuf> = (0..DEPTH)
        .map(|_| {
            let mut b = RegisteredBuf::new(chunk).expect("registered buffer");
            b.fill(0x5a);
            b
        })
        .collect();
    let t = Instant::now();
    let cpu = thread_cpu();
    let mut sent = 0;
    while sent < total {
        let buf = match free.pop() {
            Some(b) => b,
            None => {
                let done = client
                    .wait_completed_registered()
                    .expect("wait")
                    .expect("in flight");
                done.result.expect("zero-copy write");
                done.buf
            }
        };
        let n = chunk.min(total - sent);
        let took = client
            .submit_registered_range(buf, ..n)
            .map_err(|r| r.error)
            .expect("submit");
        assert_eq!(took, n, "a submission takes the whole range");
        sent += n;
    }
    while let Some(done) = client.wait_completed_registered().expect("wait") {
        done.result.expect("zero-copy write");
    }
    finish("zero-copy", client, sink, (t, cpu), total)
}

/// Set by `--cpu`.
static PRINT_CPU: AtomicBool = AtomicBool::new(false);

/// With `--cpu`, prints a stream round's MB/s and each end's CPU time per MiB to stderr.
fn report_cpu(what: &str, mbps: f64, writer: Duration, reader: Duration, total: usize) {
    if PRINT_CPU.load(Ordering::Relaxed) {
        let mib = total as f64 / f64::from(1 << 20);
        eprintln!(
            "{what}: {mbps:.0} MB/s; CPU us/MiB: writer {:.0}, reader {:.0}",
            writer.as_secs_f64() * 1e6 / mib,
            reader.as_secs_f64() * 1e6 / mib
        );
    }
}

fn tcp_pair(nagle: bool) -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let c = TcpStream::connect(addr).unwrap();
    let (s, _) = l.accept().unwrap();
    c.set_nodelay(!nagle).unwrap();
    s.set_nodelay(!nagle).unwrap();
    (c, s)
}

/// TcpStream doing the least work an MPA stream with CRC must add to TCP: a CRC32c pass
/// over every byte written and read, and `copies` of the copies a socket over MPA makes: 1,
/// the reader's out of its receive ring into the caller's buffer (where the writer sends
/// from registered memory); 2, also the writer's into its send ring (the copying stream).
/// The 1 MiB stream over it is a floor that no implementation of that design beats here.
struct Floor {
    tcp: TcpStream,
    copies: u8,
    crc: Crc32c,
    ring: Vec<u8>,
}

impl Floor {
    fn new(tcp: TcpStream, copies: u8) -> Floor {
        Floor {
            tcp,
            copies,
            crc: Crc32c::new(),
            ring: Vec::new(),
        }
    }
}

impl Read for Floor {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.copies == 0 {
            let n = self.tcp.read(buf)?;
            self.crc.update(&buf[..n]);
            return Ok(n);
        }
        self.ring.resize(buf.len(), 0);
        let n = self.tcp.read(&mut self.ring)?;
        self.crc.update(&self.ring[..n]);
        buf[..n].copy_from_slice(&self.ring[..n]);
        Ok(n)
    }
}

impl Write for Floor {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.copies < 2 {
            let n = self.tcp.write(buf)?;
            self.crc.update(&buf[..n]);
            return Ok(n);
        }
        self.ring.resize(buf.len(), 0);
        self.ring.copy_from_slice(buf);
        self.crc.update(&self.ring);
        self.tcp.write_all(&self.ring)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.tcp.flush()
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        std::hint::black_box(self.crc.finish());
    }
}

impl Stream for Floor {
    fn waits(&self) -> Option<WaitStats> {
        None
    }
}

fn rdma_pair(opts: &SocketOptions, nodelay: bool) -> (RdmaSocket, RdmaSocket) {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let uiwarp = connection_manager_for(ProviderKind::Uiwarp);
    let l = RdmaListener::bind_via(uiwarp, any, opts).expect("bind (uiwarp)");
    let addr = l.local_addr().unwrap();
    let t = thread::spawn(move || l.accept().expect("accept").0);
    let c = RdmaSocket::connect_via(uiwarp, addr, opts).expect("connect (uiwarp)");
    let s = t.join().unwrap();
    c.set_nodelay(nodelay).unwrap();
    s.set_nodelay(nodelay).unwrap();
    (c, s)
}

fn main() {
    let a = args();
    let mut builder = SocketOptions::builder();
    if a.event {
        builder = builder.event_mode();
    }
    if let Some(n) = a.signal {
        builder = builder.signal_interval(u16::try_from(n).expect("--signal fits in 16 bits"));
    }
    if let Some(r) = a.ring {
        builder = builder.send_ring(r).recv_ring(r);
    }
    let opts = builder.build().expect("socket options");
    let total = a.megabytes << 20;
    let wanted = |w: &str| a.only.as_deref().is_none_or(|o| o == w);
    let tcp = a.side.as_deref() != Some("uiwarp");
    let uiwarp = a.side.as_deref() != Some("tcp");
    // One round of a workload on one side: `None` for the side left out.
    let run = |key: &str, on_tcp: bool| -> Option<f64> {
        if !(if on_tcp { tcp } else { uiwarp }) {
            return None;
        }
        let chunk = if key == "4k" { 4096 } else { 1 << 20 };
        let (value, client, server) = match (key, on_tcp) {
            ("latency", true) => {
                let (c, s) = tcp_pair(a.tcp_nagle);
                pingpong(c, s, a.iters)
            }
            ("latency", false) => {
                let (c, s) = rdma_pair(&opts, a.nodelay);
                pingpong(c, s, a.iters)
            }
            (_, true) => {
                let (c, s) = tcp_pair(a.tcp_nagle);
                stream(c, s, chunk, total)
            }
            (_, false) => {
                let (c, s) = rdma_pair(&opts, a.nodelay);
                stream(c, s, chunk, total)
            }
        };
        if let (true, Some(c), Some(s)) = (a.waits, client, server) {
            eprintln!("{key} {value:.1}: client {c:?}; server {s:?}");
        }
        Some(value)
    };
    // The floors of the 1 MiB stream (see `Floor`), in the uiwarp column.
    let floor = |copies: u8| -> Option<f64> {
        if !uiwarp {
            return None;
        }
        let (c, s) = tcp_pair(a.tcp_nagle);
        Some(stream(Floor::new(c, copies), Floor::new(s, copies), 1 << 20, total).0)
    };
    let mut rows = Vec::new();
    for (name, key, target) in [
        ("64 B ping-pong RTT (us, median)", "latency", "<= 1.30"),
        ("4 KiB stream (MB/s)", "4k", ">= 0.80"),
        ("1 MiB stream (MB/s)", "1m", ">= 0.90"),
        ("1 MiB stream, zero-copy writes", "1m-zc", ">= 0.90"),
        ("1 MiB floor: TCP + CRC32c", "1m-crc", "-"),
        ("1 MiB floor: TCP + CRC + 1 copy", "1m-copy1", "-"),
        ("1 MiB floor: TCP + CRC + 2 copies", "1m-copy2", "-"),
    ] {
        if !wanted(key) && !wanted(key.split('-').next().unwrap_or(key)) {
            continue;
        }
        let (mut t, mut u) = (Vec::new(), Vec::new());
        for _ in 0..a.rounds {
            let base = key.split('-').next().unwrap_or(key);
            t.extend(run(base, true));
            u.extend(match key {
                "1m-crc" => floor(0),
                "1m-copy1" => floor(1),
                "1m-copy2" => floor(2),
                "1m-zc" if uiwarp => {
                    let (c, s) = rdma_pair(&opts, a.nodelay);
                    Some(stream_zero_copy(c, s, total).0)
                }
                "1m-zc" => None,
                _ => run(key, false),
            });
        }
        // Each round runs TcpStream and uiwarp back to back, so the median of the rounds'
        // own ratios is not swayed by the host's speed drifting between rounds.
        let paired = Summary::of(t.iter().zip(&u).map(|(t, u)| u / t).collect()).median;
        let (t, u) = (Summary::of(t), Summary::of(u));
        rows.push((name, t, u, paired, target));
    }
    let description = format!(
        "RdmaSocket over uiwarp (nodelay {}) vs TcpStream ({}), loopback, {} mode; {} rounds of {} ping-pongs, {} MiB per stream; the floor rows give, in the uiwarp column, TcpStream adding MPA's CRC32c and 1 or 2 of the socket's copies (no implementation of that design beats them)",
        if a.nodelay { "on" } else { "off" },
        if a.tcp_nagle { "Nagle on" } else { "TCP_NODELAY" },
        if a.event { "event" } else { "adaptive busy-poll" },
        a.rounds,
        a.iters,
        a.megabytes
    );
    println!("{description}");
    println!(
        "{:<34} {:>22} {:>22} {:>8} {:>8} {:>8}",
        "workload (median [min-max])", "TcpStream", "uiwarp", "ratio", "paired", "target"
    );
    let mut table = String::from(
        "| workload | TcpStream, median [min-max] | uiwarp, median [min-max] | ratio | paired | target |\n\
         |---|---:|---:|---:|---:|---:|\n",
    );
    for (name, tcp, rdma, paired, target) in rows {
        let ratio = rdma.median / tcp.median;
        let paired = match paired {
            p if p.is_nan() => "-".to_string(),
            p => format!("{p:.2}"),
        };
        println!(
            "{name:<34} {:>22} {:>22} {ratio:>8.2} {paired:>8} {target:>8}",
            tcp.text(0),
            rdma.text(0)
        );
        table.push_str(&format!(
            "| {name} | {} | {} | {ratio:.2} | {paired} | {} |\n",
            tcp.text(0),
            rdma.text(0),
            target.replace("<=", "≤").replace(">=", "≥")
        ));
    }
    if let Some(file) = &a.markdown {
        let body = format!(
            "Latest run: {}, `{}`, {}. {description}; ratio = uiwarp ÷ TcpStream of the \
             medians, paired = the median of each round's own ratio.\n\n{table}",
            markdown::now_utc(),
            a.command_line,
            markdown::machine(),
        );
        match markdown::replace_section(file, "bench-uiwarp", &body) {
            Ok(()) => eprintln!(
                "bench_uiwarp: wrote the bench-uiwarp section of {}",
                file.display()
            ),
            Err(e) => {
                eprintln!("bench_uiwarp: cannot write {}: {e}", file.display());
                std::process::exit(1);
            }
        }
    }
}
