//! `bench_socket`: ping-pong latency and one-way streaming bandwidth of [`RdmaSocket`] or
//! `std::net::TcpStream` over `IP` (the address of an RDMA device's netdev, so both kinds use
//! the same link). Used by tests/vm/bench-socket.sh.
//!
//! ```text
//! bench_socket rdma|tcp IP [--sizes 64,4096,65536] [--iters N] [--megabytes M] [--chunks B,...]
//!                         [--spin MICROSECONDS] [--ring BYTES] [--signal N]
//!                         [--max-transfer BYTES] [--huge-pages never|prefer|require]
//!                         [--listen PORT | --connect PORT] [--waits]
//! ```
//!
//! By default both ends run in this process, as two threads. `--listen PORT` runs only the
//! passive end (echo, then sink) on `IP:PORT`; `--connect PORT` runs the active end against
//! it and prints the results: two processes, as perftest and rstream run (or two hosts).
//! Both must be given the same sizes, counts and options. `--waits` prints each latency's
//! spread (a `SPREAD` line: percentiles of the one-way time) and, with both ends in one
//! process and `rdma`, a `WAITS` line per connection with both ends' `WaitStats`.
//!
//! `--spin` sets RdmaSocket's busy-poll budget per wait (0: event mode), `--ring` its send
//! and receive ring sizes, `--signal` its signalling interval (one send in N completes) and
//! `--max-transfer` its largest message, `--huge-pages` whether its rings go on 2 MiB pages
//! (docs/MEMORY.md; the effect shows with large rings and writes: `--ring 1048576 --chunks
//! 1048576`); the default for each is the library's default options.
//!
//! For each size: `N` ping-pongs after `N/10` warm-up ones; then, for each chunk size `B`
//! (default 64 KiB; `--chunk B` is the same as a list of one), `M` MiB written in `B`-byte
//! writes on a new connection and acknowledged by the reader with one byte. Prints, per
//! result:
//!
//! ```text
//! RESULT lat rdma 64 AVG_USEC MEDIAN_USEC      one-way: half the round trip, as perftest
//! RESULT bw rdma 65536 MIB_PER_SEC
//! ```
mod common;

use common::bench::Stream;
use common::clock::RoundTrips;
use rdmasock::socket::WaitStats;
use rdmasock::verbs::HugePages;
use rdmasock::{RdmaListener, RdmaSocket, SocketOptions};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

/// With `--waits`: a `WAITS` line with both ends' wait counters.
fn print_waits(on: bool, what: &str, client: Option<WaitStats>, server: Option<WaitStats>) {
    if let (true, Some(c), Some(s)) = (on, client, server) {
        println!("WAITS {what} client {c:?} server {s:?}");
    }
}

struct Args {
    kind: String,
    ip: IpAddr,
    sizes: Vec<usize>,
    iters: usize,
    megabytes: usize,
    /// The write sizes of the streaming runs, one connection each.
    chunks: Vec<usize>,
    opts: SocketOptions,
    role: Role,
    /// Print each connection's wait counters (`--waits`, both ends in this process).
    waits: bool,
}

/// Which ends of each connection this process runs.
#[derive(Clone, Copy)]
enum Role {
    Both,
    Listen(u16),
    Connect(u16),
}

fn args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let kind = it.next().ok_or("the kind (rdma or tcp) is missing")?;
    if kind != "rdma" && kind != "tcp" {
        return Err(format!("kind {kind}: expected rdma or tcp"));
    }
    let ip = it
        .next()
        .ok_or("the IP address is missing")?
        .parse()
        .map_err(|e| format!("IP address: {e}"))?;
    let mut a = Args {
        kind,
        ip,
        sizes: vec![64, 4096, 65536],
        iters: 200,
        megabytes: 16,
        chunks: vec![65536],
        opts: SocketOptions::default(),
        role: Role::Both,
        waits: false,
    };
    let (mut spin, mut ring, mut signal, mut max_transfer) = (None, None, None, None);
    let mut huge = HugePages::Never;
    while let Some(flag) = it.next() {
        if flag == "--waits" {
            a.waits = true;
            continue;
        }
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        let list = |v: &str| v.split(',').map(num).collect::<Result<Vec<_>, _>>();
        match flag.as_str() {
            "--sizes" => a.sizes = list(&value)?,
            "--iters" => a.iters = num(&value)?,
            "--megabytes" => a.megabytes = num(&value)?,
            "--chunk" | "--chunks" => a.chunks = list(&value)?,
            "--spin" => spin = Some(num(&value)?),
            "--ring" => ring = Some(num(&value)?),
            "--signal" => signal = Some(num(&value)?),
            "--max-transfer" => max_transfer = Some(num(&value)?),
            "--huge-pages" => {
                huge = match value.as_str() {
                    "never" => HugePages::Never,
                    "prefer" => HugePages::Prefer,
                    "require" => HugePages::Require,
                    other => return Err(format!("--huge-pages {other}: never, prefer or require")),
                }
            }
            "--listen" | "--connect" => {
                let port = value
                    .parse::<u16>()
                    .map_err(|e| format!("{flag} {value}: {e}"))?;
                a.role = if flag == "--listen" {
                    Role::Listen(port)
                } else {
                    Role::Connect(port)
                };
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    let mut b = SocketOptions::builder().huge_pages(huge);
    b = match spin {
        None => b,
        Some(0) => b.event_mode(),
        Some(us) => b.busy_poll(Duration::from_micros(us as u64)),
    };
    if let Some(bytes) = ring {
        b = b.send_ring(bytes).recv_ring(bytes);
    }
    if let Some(n) = signal {
        b = b.signal_interval(u16::try_from(n).map_err(|e| format!("--signal {n}: {e}"))?);
    }
    if let Some(n) = max_transfer {
        b = b.max_transfer(u32::try_from(n).map_err(|e| format!("--max-transfer {n}: {e}"))?);
    }
    a.opts = b
        .build()
        .map_err(|e| format!("--spin/--ring/--signal/--max-transfer: {e}"))?;
    if a.iters == 0 || a.chunks.is_empty() || a.chunks.contains(&0) || a.sizes.contains(&0) {
        return Err("iterations, sizes and chunks must be positive".into());
    }
    Ok(a)
}

/// (average, median) one-way microseconds over `iters` round trips of `size` bytes.
/// With `waits`, prints both ends' wait counters.
fn pingpong<S: Stream>(client: S, server: S, size: usize, iters: usize, waits: bool) -> (f64, f64) {
    let echo = thread::spawn(move || echo(server, size, iters));
    let (result, client) = ping(client, size, iters, waits);
    let server = echo.join().expect("echo thread");
    print_waits(
        waits,
        &format!("lat {size}"),
        client.waits(),
        server.waits(),
    );
    result
}

/// The passive end of [`pingpong`]: sends back every `size`-byte message.
fn echo<S: Stream>(mut s: S, size: usize, iters: usize) -> S {
    let mut buf = vec![0u8; size];
    for _ in 0..iters + iters / 10 {
        s.read_exact(&mut buf).expect("server read");
        s.write_all(&buf).expect("server write");
    }
    s
}

/// The active end of [`pingpong`]: `iters / 10` warm-up round trips, then `iters` timed.
fn ping<S: Stream>(mut client: S, size: usize, iters: usize, spread: bool) -> ((f64, f64), S) {
    let warm = iters / 10;
    let out: Vec<u8> = (0..size).map(|i| (i * 7) as u8).collect();
    let mut back = vec![0u8; size];
    let mut clock = RoundTrips::new(warm, iters);
    for _ in 0..iters + warm {
        clock.start();
        client.write_all(&out).expect("client write");
        client.read_exact(&mut back).expect("client read");
        assert_eq!(back, out, "the echo differs from what was sent");
    }
    let samples = clock.finish(2.0);
    if spread {
        let at = |q: f64| samples.quantile(q);
        println!(
            "SPREAD lat {size} p10 {:.0} p50 {:.0} p90 {:.0} p99 {:.0} max {:.0}",
            at(0.1),
            at(0.5),
            at(0.9),
            at(0.99),
            at(1.0)
        );
    }
    ((samples.average(), samples.median()), client)
}

/// MiB/s of `total` bytes written in `chunk`-byte writes, until the reader's one-byte ack.
/// With `waits`, prints both ends' wait counters.
fn stream<S: Stream>(client: S, server: S, chunk: usize, total: usize, waits: bool) -> f64 {
    let sink = thread::spawn(move || {
        let mut server = server;
        let got = sink(&mut server, chunk, total);
        (got, server.waits())
    });
    let mut client = client;
    let bw = source(&mut client, chunk, total);
    let (got, server) = sink.join().expect("sink thread");
    assert_eq!(got, total, "bytes lost");
    print_waits(waits, &format!("bw {chunk}"), client.waits(), server);
    bw
}

/// The passive end of [`stream`]: reads `total` bytes, then acknowledges with one byte.
fn sink<S: Stream>(s: &mut S, chunk: usize, total: usize) -> usize {
    let mut buf = vec![0u8; chunk.max(65536)];
    let mut got = 0usize;
    while got < total {
        match s.read(&mut buf).expect("sink read") {
            0 => break,
            n => got += n,
        }
    }
    s.write_all(b"k").expect("ack");
    got
}

/// The active end of [`stream`]: MiB/s until the ack.
fn source<S: Stream>(client: &mut S, chunk: usize, total: usize) -> f64 {
    let buf = vec![0x5au8; chunk];
    let t = Instant::now();
    let mut sent = 0;
    while sent < total {
        let n = chunk.min(total - sent);
        client.write_all(&buf[..n]).expect("stream write");
        sent += n;
    }
    let mut ack = [0u8; 1];
    client.read_exact(&mut ack).expect("ack");
    total as f64 / t.elapsed().as_secs_f64() / f64::from(1u32 << 20)
}

fn tcp_pair(ip: IpAddr) -> (TcpStream, TcpStream) {
    let l = TcpListener::bind(SocketAddr::new(ip, 0)).expect("TCP bind");
    let c = TcpStream::connect(l.local_addr().expect("TCP address")).expect("TCP connect");
    let (s, _) = l.accept().expect("TCP accept");
    c.set_nodelay(true).expect("TCP_NODELAY");
    s.set_nodelay(true).expect("TCP_NODELAY");
    (c, s)
}

fn rdma_pair(ip: IpAddr, opts: &SocketOptions) -> (RdmaSocket, RdmaSocket) {
    let l = RdmaListener::bind_with(SocketAddr::new(ip, 0), opts).expect("RDMA bind");
    let addr = l.local_addr().expect("RDMA address");
    let t = thread::spawn(move || l.accept().expect("RDMA accept").0);
    let c = RdmaSocket::connect_with(addr, opts).expect("RDMA connect");
    (c, t.join().expect("accept thread"))
}

fn run<S: Stream>(a: &Args, pair: impl Fn(IpAddr) -> (S, S)) {
    for &size in &a.sizes {
        let (c, s) = pair(a.ip);
        let (avg, median) = pingpong(c, s, size, a.iters, a.waits);
        println!("RESULT lat {} {size} {avg:.2} {median:.2}", a.kind);
    }
    for &chunk in &a.chunks {
        let (c, s) = pair(a.ip);
        let bw = stream(c, s, chunk, a.megabytes << 20, a.waits);
        println!("RESULT bw {} {chunk} {bw:.2}", a.kind);
    }
}

/// `--listen`: the passive end of each connection the active end makes, in its order.
fn serve<S: Stream>(a: &Args, mut accept: impl FnMut() -> S) {
    for &size in &a.sizes {
        echo(accept(), size, a.iters);
    }
    for &chunk in &a.chunks {
        sink(&mut accept(), chunk, a.megabytes << 20);
    }
}

/// `--connect`: the active end; prints the results.
fn drive<S: Stream>(a: &Args, connect: impl Fn() -> S) {
    for &size in &a.sizes {
        let ((avg, median), _) = ping(connect(), size, a.iters, a.waits);
        println!("RESULT lat {} {size} {avg:.2} {median:.2}", a.kind);
    }
    for &chunk in &a.chunks {
        let bw = source(&mut connect(), chunk, a.megabytes << 20);
        println!("RESULT bw {} {chunk} {bw:.2}", a.kind);
    }
}

/// Connects with `f`, retrying for up to 30 s while the listener is not up yet.
fn retry<S>(what: &str, f: impl Fn() -> std::io::Result<S>) -> S {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        match f() {
            Ok(s) => return s,
            Err(_) if Instant::now() < end => thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

fn rdma_ends(a: &Args) {
    match a.role {
        Role::Both => run(a, |ip| rdma_pair(ip, &a.opts)),
        Role::Listen(port) => {
            let l =
                RdmaListener::bind_with(SocketAddr::new(a.ip, port), &a.opts).expect("RDMA bind");
            serve(a, || l.accept().expect("RDMA accept").0);
        }
        Role::Connect(port) => drive(a, || {
            retry("RDMA connect", || {
                RdmaSocket::connect_with(SocketAddr::new(a.ip, port), &a.opts)
            })
        }),
    }
}

fn tcp_ends(a: &Args) {
    match a.role {
        Role::Both => run(a, tcp_pair),
        Role::Listen(port) => {
            let l = TcpListener::bind(SocketAddr::new(a.ip, port)).expect("TCP bind");
            serve(a, || {
                let s = l.accept().expect("TCP accept").0;
                s.set_nodelay(true).expect("TCP_NODELAY");
                s
            });
        }
        Role::Connect(port) => drive(a, || {
            let s = retry("TCP connect", || {
                TcpStream::connect(SocketAddr::new(a.ip, port))
            });
            s.set_nodelay(true).expect("TCP_NODELAY");
            s
        }),
    }
}

fn main() -> ExitCode {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("bench_socket: {e}\nusage: bench_socket rdma|tcp IP [--sizes 64,4096,65536] [--iters N] [--megabytes M] [--chunks B,...] [--spin US] [--ring BYTES] [--signal N] [--max-transfer BYTES] [--huge-pages never|prefer|require] [--listen PORT | --connect PORT]");
            return ExitCode::from(2);
        }
    };
    if a.kind == "rdma" {
        rdma_ends(&a);
    } else {
        tcp_ends(&a);
    }
    ExitCode::SUCCESS
}
