//! `bench_connect`: what a connection costs to make. Connect+accept latency (mean, median,
//! 99th percentile) and connections per second, one at a time and `P` at once, for
//! `RdmaSocket`, for kernel TCP, and for rsocket (the same TCP code run under
//! `LD_PRELOAD=librspreload.so`, where rdma-core is installed), side by side with ratios.
//!
//! ```text
//! bench_connect [--count N] [--parallel P] [--device NAME] [--phases] [--markdown FILE]
//! ```
//! Build with `--release`. Each kind runs in a child process of its own (so that only the
//! rsocket one has the preload), with an in-process listener on the address of
//! `--device NAME` (default: the first RDMA device's, or loopback over the userspace provider
//! where the kernel has none) whose server threads echo each connection's first byte and wait
//! for its close. One connect is timed from the call to the client's receipt of the echoed
//! byte (so the server has accepted); `N` (default 200) are made one after another, then `N`
//! by `P` threads at once (default 64), each connection closed before its thread's next.
//! Connections/s counts the closes too.
//!
//! `--phases` also breaks an RdmaSocket connect into what rdmasock does around the
//! connection manager's round trips, each timed alone (mean of 20): the address and route
//! resolution, the device open, the protection domain, the completion channel, queue and
//! queue pair, the rings' registrations; the rest of a whole connect is the connection
//! manager's handshake with the stream's hello. A connect on a device another connection
//! of the process holds skips the device open and the protection domain (they are shared).
//!
//! The TCP sockets are made with a plain `SOCK_STREAM` type and accepted with accept(2):
//! librspreload turns only such sockets into rsockets. `--markdown FILE` also writes the
//! table into the `bench-connect` section of FILE, leaving the rest as it is.

mod common;

use common::address::device_address;
use common::markdown;
use rdmasock::verbs::{AccessFlags, QpCapabilities, QpInitAttributes};
use rdmasock::{RdmaListener, RdmaSocket};
use socket2::{Domain, SockAddr, Socket, Type};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// rdma-core's preload library (Debian's path).
const PRELOAD: &str = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so";
/// The connects each child makes untimed first.
const WARM: usize = 5;
/// The rounds of each phase of `--phases`.
const PHASE_ROUNDS: u32 = 20;

struct Args {
    count: usize,
    parallel: usize,
    device: Option<String>,
    phases: bool,
    markdown: Option<PathBuf>,
    child: Option<String>,
    command_line: String,
}

fn usage(what: &str) -> ! {
    eprintln!(
        "bench_connect: {what}\nusage: bench_connect [--count N] [--parallel P] [--device NAME] \
         [--phases] [--markdown FILE]"
    );
    std::process::exit(2);
}

fn parse() -> Args {
    let mut a = Args {
        count: 200,
        parallel: 64,
        device: None,
        phases: false,
        markdown: None,
        child: None,
        command_line: String::new(),
    };
    let mut shown = vec!["bench_connect".to_string()];
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--phases" {
            a.phases = true;
            shown.push(arg);
            continue;
        }
        let value = args
            .next()
            .unwrap_or_else(|| usage(&format!("{arg} needs a value")));
        let number = |v: &str| -> usize {
            match v.parse() {
                Ok(n) if n > 0 => n,
                _ => usage(&format!("{arg} {v:?} is not a positive count")),
            }
        };
        match arg.as_str() {
            "--count" => a.count = number(&value),
            "--parallel" => a.parallel = number(&value),
            "--device" => a.device = Some(value.clone()),
            "--markdown" => a.markdown = Some(PathBuf::from(&value)),
            "--child" => a.child = Some(value.clone()),
            other => usage(&format!("unknown argument {other}")),
        }
        if arg != "--markdown" && arg != "--child" {
            shown.push(arg);
            shown.push(value);
        }
    }
    a.command_line = shown.join(" ");
    a
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("bench_connect: {what}: {e}");
    std::process::exit(1);
}

fn main() {
    let a = parse();
    let ip = device_address(a.device.as_deref()).unwrap_or_else(|e| fail("address", e));
    match a.child.as_deref() {
        Some(kind) => child(&a, kind, ip),
        None => parent(&a, ip),
    }
}

/// One kind's results, as a child prints them on one line.
#[derive(Clone, Copy)]
struct Result {
    mean: f64,
    median: f64,
    p99: f64,
    sequential: f64,
    parallel: f64,
}

/// Runs each kind in a child and prints the table.
fn parent(a: &Args, ip: IpAddr) {
    let me = std::env::current_exe().unwrap_or_else(|e| fail("own path", e));
    let mut kinds = vec!["rdmasock", "tcp"];
    if std::path::Path::new(PRELOAD).exists() && !ip.is_loopback() {
        kinds.push("rsocket");
    } else {
        eprintln!("bench_connect: no rsocket row ({PRELOAD} missing, or no RDMA device)");
    }
    let mut rows = Vec::new();
    let mut phases = String::new();
    for kind in kinds {
        let mut cmd = Command::new(&me);
        cmd.args(["--child", kind, "--count", &a.count.to_string()])
            .args(["--parallel", &a.parallel.to_string()]);
        if let Some(d) = &a.device {
            cmd.args(["--device", d]);
        }
        if a.phases && kind == "rdmasock" {
            cmd.arg("--phases");
        }
        if kind == "rsocket" {
            cmd.env("LD_PRELOAD", PRELOAD);
        }
        let out = cmd.output().unwrap_or_else(|e| fail("start a child", e));
        let text = String::from_utf8_lossy(&out.stdout);
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            eprintln!("bench_connect: the {kind} run failed ({})", out.status);
            continue;
        }
        for line in text.lines() {
            if let Some(r) = line.strip_prefix("result ") {
                let v: Vec<f64> = r.split(' ').filter_map(|x| x.parse().ok()).collect();
                if let [mean, median, p99, sequential, parallel] = v[..] {
                    let r = Result {
                        mean,
                        median,
                        p99,
                        sequential,
                        parallel,
                    };
                    rows.push((kind, r));
                }
            } else if line.starts_with("phase") || line.starts_with("  ") {
                phases.push_str(line);
                phases.push('\n');
            }
        }
    }
    let table = table(a, ip, &rows);
    print!("{table}");
    if !phases.is_empty() {
        println!("\n{phases}");
    }
    if let Some(file) = &a.markdown {
        let body = format!(
            "Latest run: {}, `{}`, {}.\n\n```text\n{table}{}```\n",
            markdown::now_utc(),
            a.command_line,
            markdown::machine(),
            if phases.is_empty() {
                String::new()
            } else {
                format!("\n{phases}")
            }
        );
        let section = if ip.is_loopback() {
            "bench-connect"
        } else {
            "bench-connect-vm"
        };
        match markdown::replace_section(file, section, &body) {
            Ok(()) => eprintln!(
                "bench_connect: wrote the {section} section of {}",
                file.display()
            ),
            Err(e) => fail(&format!("cannot write {}", file.display()), e),
        }
    }
}

fn table(a: &Args, ip: IpAddr, rows: &[(&str, Result)]) -> String {
    let mut t = format!(
        "connect+accept on {ip}: {} connects one at a time, {} by {} threads at once\n\
         kind      mean µs  median µs   p99 µs   conn/s seq  conn/s x{}\n",
        a.count, a.count, a.parallel, a.parallel
    );
    for (kind, r) in rows {
        t.push_str(&format!(
            "{kind:<8} {:>8.0} {:>10.0} {:>8.0} {:>12.0} {:>11.0}\n",
            r.mean, r.median, r.p99, r.sequential, r.parallel
        ));
    }
    let find = |k: &str| rows.iter().find(|(kind, _)| *kind == k).map(|(_, r)| *r);
    if let Some(ours) = find("rdmasock") {
        for other in ["rsocket", "tcp"] {
            if let Some(r) = find(other) {
                t.push_str(&format!(
                    "rdmasock / {other}: latency (median) {:.2}, conn/s seq {:.2}, conn/s x{} {:.2}\n",
                    ours.median / r.median,
                    ours.sequential / r.sequential,
                    a.parallel,
                    ours.parallel / r.parallel
                ));
            }
        }
        if find("rsocket").is_some() {
            t.push_str(
                "targets: latency ratio ≤ 1.00 and conn/s x64 ratio ≥ 1.00 against rsocket\n",
            );
        }
    }
    t
}

/// A stream of either kind.
trait Stream: Read + Write + Send + 'static {}
impl Stream for RdmaSocket {}
impl Stream for Socket {}

/// Connects to `addr`, the way `kind` does.
type Connect = Arc<dyn Fn(SocketAddr) -> io::Result<Box<dyn Stream>> + Send + Sync>;

fn child(a: &Args, kind: &str, ip: IpAddr) {
    let (addr, connect): (SocketAddr, Connect) = match kind {
        "rdmasock" => {
            let listener =
                RdmaListener::bind(SocketAddr::new(ip, 0)).unwrap_or_else(|e| fail("bind", e));
            let addr = listener.local_addr().unwrap_or_else(|e| fail("address", e));
            thread::spawn(move || loop {
                match listener.accept() {
                    Ok((s, _)) => serve(Box::new(s)),
                    Err(e) => fail("accept", e),
                }
            });
            let connect: Connect =
                Arc::new(|addr| Ok(Box::new(RdmaSocket::connect(addr)?) as Box<dyn Stream>));
            (addr, connect)
        }
        "tcp" | "rsocket" => {
            let listener = tcp_listener(SocketAddr::new(ip, 0)).unwrap_or_else(|e| fail("bind", e));
            let addr = listener
                .local_addr()
                .ok()
                .and_then(|a| a.as_socket())
                .unwrap_or_else(|| fail("address", "none"));
            thread::spawn(move || loop {
                // accept(2), not accept4: the preload library intercepts accept.
                match listener.accept_raw() {
                    Ok((s, _)) => serve(Box::new(s)),
                    Err(e) => fail("accept", e),
                }
            });
            let connect: Connect = Arc::new(|addr| {
                let s = Socket::new_raw(Domain::for_address(addr), Type::STREAM, None)?;
                s.connect(&SockAddr::from(addr))?;
                Ok(Box::new(s) as Box<dyn Stream>)
            });
            (addr, connect)
        }
        other => usage(&format!("unknown kind {other}")),
    };
    for _ in 0..WARM {
        cycle(&connect, addr).unwrap_or_else(|e| fail("warm-up connect", e));
    }
    let mut samples = Vec::with_capacity(a.count);
    let start = Instant::now();
    for _ in 0..a.count {
        samples.push(cycle(&connect, addr).unwrap_or_else(|e| fail("connect", e)));
    }
    let sequential = a.count as f64 / start.elapsed().as_secs_f64();
    let per_thread = a.count.div_ceil(a.parallel);
    let start = Instant::now();
    let workers: Vec<_> = (0..a.parallel)
        .map(|_| {
            let connect = Arc::clone(&connect);
            thread::spawn(move || {
                for _ in 0..per_thread {
                    cycle(&connect, addr).unwrap_or_else(|e| fail("parallel connect", e));
                }
            })
        })
        .collect();
    for w in workers {
        w.join()
            .unwrap_or_else(|_| fail("parallel connect", "a thread panicked"));
    }
    let parallel = (per_thread * a.parallel) as f64 / start.elapsed().as_secs_f64();
    samples.sort_by(f64::total_cmp);
    let mean = samples.iter().sum::<f64>() / samples.len() as f64;
    let median = samples[samples.len() / 2];
    let p99 = samples[((samples.len() - 1) as f64 * 0.99) as usize];
    println!("result {mean} {median} {p99} {sequential} {parallel}");
    if a.phases && kind == "rdmasock" {
        phases(addr, mean);
    }
}

/// A listening TCP socket of plain `SOCK_STREAM` type.
fn tcp_listener(addr: SocketAddr) -> io::Result<Socket> {
    let s = Socket::new_raw(Domain::for_address(addr), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.bind(&SockAddr::from(addr))?;
    s.listen(1024)?;
    Ok(s)
}

/// Echoes the connection's first byte and waits for its close, on a thread of its own.
fn serve(mut s: Box<dyn Stream>) {
    thread::spawn(move || {
        let mut b = [0u8; 1];
        if s.read_exact(&mut b).is_ok() && s.write_all(&b).is_ok() {
            while matches!(s.read(&mut b), Ok(n) if n > 0) {}
        }
    });
}

/// One connect, timed to the echo of its first byte (µs), then the close.
fn cycle(connect: &Connect, addr: SocketAddr) -> io::Result<f64> {
    let start = Instant::now();
    let mut s = connect(addr)?;
    s.write_all(b"x")?;
    let mut b = [0u8; 1];
    s.read_exact(&mut b)?;
    let took = start.elapsed().as_secs_f64() * 1e6;
    drop(s);
    Ok(took)
}

/// Times each step rdmasock takes around the connection manager's round trips (see the
/// module's documentation) and prints them, with what is left of a whole connect (`whole`).
fn phases(addr: SocketAddr, whole: f64) {
    let cm = rdmasock::connection_manager();
    let stream = rdmasock::protocol::StreamConfig::default();
    let mut t = [Duration::ZERO; 5];
    for _ in 0..PHASE_ROUNDS {
        let mut clock = Instant::now();
        let mut lap = |i: usize| {
            let now = Instant::now();
            t[i] += now - clock;
            clock = now;
        };
        let endpoint = cm
            .resolve(addr, Duration::from_secs(5))
            .unwrap_or_else(|e| fail("resolve", e));
        lap(0);
        let context = endpoint
            .open_context(&rdmasock::default_registry())
            .unwrap_or_else(|e| fail("open the device", e));
        lap(1);
        let pd = context
            .alloc_pd()
            .unwrap_or_else(|e| fail("protection domain", e));
        lap(2);
        let channel = context
            .create_comp_channel()
            .unwrap_or_else(|e| fail("completion channel", e));
        let cq = context
            .create_cq(512, Some(&channel))
            .unwrap_or_else(|e| fail("completion queue", e));
        let init = QpInitAttributes {
            caps: QpCapabilities {
                max_send_wr: 256,
                max_recv_wr: 256,
                max_send_sge: 2,
                max_recv_sge: 1,
                max_inline_data: 64,
            },
            sq_sig_all: false,
        };
        let qp = pd
            .create_qp(&init, &cq, &cq)
            .unwrap_or_else(|e| fail("queue pair", e));
        endpoint
            .init_qp(&qp)
            .unwrap_or_else(|e| fail("init the queue pair", e));
        lap(3);
        let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let rings = [
            (stream.send_ring() + 4096, AccessFlags::LOCAL_WRITE),
            (stream.recv_ring(), remote),
            (4096, remote),
        ];
        let regions: Vec<_> = rings
            .iter()
            .map(|&(len, access)| {
                pd.register(len, access)
                    .unwrap_or_else(|e| fail("register", e))
            })
            .collect();
        lap(4);
        drop((regions, qp, cq, channel, pd, context, endpoint));
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(PHASE_ROUNDS);
    let names = [
        "address and route resolution",
        "device open (shared while a connection holds it)",
        "protection domain (shared with the device)",
        "completion channel, queue, queue pair to INIT",
        "registrations (send ring, receive ring, target list)",
    ];
    println!("phases of an rdmasock connect (mean of {PHASE_ROUNDS}, µs, each alone):");
    let mut local = 0.0;
    for (name, d) in names.iter().zip(t) {
        println!("  {:>8.0}  {name}", us(d));
        local += us(d);
    }
    println!(
        "  {:>8.0}  the rest of a whole connect+echo ({whole:.0}): the connection manager's \
         handshake, the stream hello, the echo",
        (whole - local).max(0.0)
    );
}
