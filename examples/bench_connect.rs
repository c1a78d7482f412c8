//! `bench_connect`: what a connection costs to make. Connect+accept latency (mean, median,
//! 99th percentile) and connections per second, one at a time and `P` at once, for
//! `RdmaSocket`, for kernel TCP, and for rsocket (the same TCP code run under
//! `LD_PRELOAD=librspreload.so`, where rdma-core is installed), side by side with ratios.
//!
//! ```text
//! bench_connect [--rounds R] [--count N] [--parallel P] [--device NAME] [--phases]
//!               [--markdown FILE]
//! ```
//! Build with `--release`. Each kind runs in a child process of its own (so that only the
//! rsocket one has the preload), with an in-process listener on the address of
//! `--device NAME` (default: the first RDMA device's, or loopback over the userspace provider
//! where the kernel has none) whose server threads echo each connection's first byte and wait
//! for its close. One connect is timed from the call to the client's receipt of the echoed
//! byte (so the server has accepted); a round makes `N` (default 100) one after another,
//! then `N` by `P` threads at once (default 64), each connection closed before its thread's
//! next; connections/s counts the closes too. There are `R` rounds (default 3), the kinds
//! taking turns; the latency columns are over every round's connects, the rates the median
//! of the rounds, and the ratios the median of each round's own ratio.
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
//! table into the `bench-connect` section of FILE (`bench-connect-NAME` with `--device NAME`),
//! leaving the rest as it is. In the test VM: `tests/vm/bench-connect.sh`.

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
/// How long one child may run before it is killed (and its round counted as failed).
const CHILD_LIMIT: Duration = Duration::from_secs(300);
/// The rounds of each phase of `--phases`.
const PHASE_ROUNDS: u32 = 20;

struct Args {
    rounds: usize,
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
        "bench_connect: {what}\nusage: bench_connect [--rounds R] [--count N] [--parallel P] [--device NAME] \
         [--phases] [--markdown FILE]"
    );
    std::process::exit(2);
}

fn parse() -> Args {
    let mut a = Args {
        rounds: 3,
        count: 100,
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
            "--rounds" => a.rounds = number(&value),
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

/// One round of one kind, as its child prints it: each sequential connect's latency (µs) and
/// the rates.
struct Round {
    samples: Vec<f64>,
    sequential: f64,
    parallel: f64,
}

/// Runs each kind's child `rounds` times, the kinds taking turns (so that a machine whose
/// load drifts loads each alike), and prints the table.
fn parent(a: &Args, ip: IpAddr) {
    let me = std::env::current_exe().unwrap_or_else(|e| fail("own path", e));
    let mut kinds = vec!["rdmasock", "tcp"];
    if std::path::Path::new(PRELOAD).exists() && !ip.is_loopback() {
        kinds.push("rsocket");
    } else {
        eprintln!("bench_connect: no rsocket row ({PRELOAD} missing, or no RDMA device)");
    }
    let mut rounds: Vec<Vec<Option<Round>>> = kinds.iter().map(|_| Vec::new()).collect();
    let mut notes = String::new();
    for round in 0..a.rounds {
        for (k, kind) in kinds.iter().enumerate() {
            let phases = a.phases && *kind == "rdmasock" && round + 1 == a.rounds;
            match run_child(a, &me, kind, phases) {
                Ok((r, text)) => {
                    rounds[k].push(Some(r));
                    notes.push_str(&text);
                }
                Err(e) => {
                    rounds[k].push(None);
                    notes.push_str(&format!("{kind}, round {}: {e}\n", round + 1));
                }
            }
        }
    }
    let table = table(a, ip, &kinds, &rounds);
    print!("{table}");
    if !notes.is_empty() {
        println!("\n{notes}");
    }
    if let Some(file) = &a.markdown {
        let body = format!(
            "Latest run: {}, `{}`, {}.\n\n```text\n{table}{}```\n",
            markdown::now_utc(),
            a.command_line,
            markdown::machine(),
            if notes.is_empty() {
                String::new()
            } else {
                format!("\n{notes}")
            }
        );
        let section = match &a.device {
            Some(device) => format!("bench-connect-{device}"),
            None => "bench-connect".to_string(),
        };
        match markdown::replace_section(file, &section, &body) {
            Ok(()) => eprintln!(
                "bench_connect: wrote the {section} section of {}",
                file.display()
            ),
            Err(e) => fail(&format!("cannot write {}", file.display()), e),
        }
    }
}

/// One child's round: its results, and the lines it printed besides (phases, failures).
fn run_child(
    a: &Args,
    me: &std::path::Path,
    kind: &str,
    phases: bool,
) -> std::result::Result<(Round, String), String> {
    let mut cmd = Command::new(me);
    cmd.args(["--child", kind, "--count", &a.count.to_string()])
        .args(["--parallel", &a.parallel.to_string()]);
    if let Some(d) = &a.device {
        cmd.args(["--device", d]);
    }
    if phases {
        cmd.arg("--phases");
    }
    if kind == "rsocket" {
        cmd.env("LD_PRELOAD", PRELOAD);
    }
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("start a child: {e}"))?;
    let id = child.id();
    // A child that hangs (a connect that never completes) is killed after CHILD_LIMIT.
    let (done, finished) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let timed_out = std::sync::mpsc::RecvTimeoutError::Timeout;
        if finished.recv_timeout(CHILD_LIMIT) == Err(timed_out) {
            let _ = Command::new("kill")
                .args(["-KILL", &id.to_string()])
                .status();
        }
    });
    let out = child
        .wait_with_output()
        .map_err(|e| format!("wait for a child: {e}"))?;
    let _ = done.send(());
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        return Err(format!("the run failed ({})", out.status));
    }
    let (mut samples, mut rates, mut text) = (None, None, String::new());
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let numbers =
            |rest: &str| -> Vec<f64> { rest.split(' ').filter_map(|x| x.parse().ok()).collect() };
        if let Some(rest) = line.strip_prefix("samples ") {
            samples = Some(numbers(rest));
        } else if let Some(rest) = line.strip_prefix("rates ") {
            rates = Some(numbers(rest));
        } else {
            text.push_str(line);
            text.push('\n');
        }
    }
    match (samples, rates.as_deref()) {
        (Some(samples), Some(&[sequential, parallel])) if !samples.is_empty() => Ok((
            Round {
                samples,
                sequential,
                parallel,
            },
            text,
        )),
        _ => Err("the child printed no results".into()),
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn table(a: &Args, ip: IpAddr, kinds: &[&str], rounds: &[Vec<Option<Round>>]) -> String {
    let mut t = format!(
        "connect+accept on {ip}, {} rounds, the kinds taking turns; each round {} connects one \
         at a time, then {} by {} threads at once\n\
         latency: from connect to the echo of the first byte, over every round's connects; \
         conn/s: the median of the rounds\n\
         kind      mean µs  median µs   p99 µs   conn/s seq  conn/s x{}\n",
        a.rounds, a.count, a.count, a.parallel, a.parallel
    );
    for (kind, rs) in kinds.iter().zip(rounds) {
        let rs: Vec<&Round> = rs.iter().flatten().collect();
        let mut all: Vec<f64> = rs.iter().flat_map(|r| r.samples.iter().copied()).collect();
        if all.is_empty() {
            t.push_str(&format!("{kind:<8} (no round finished)\n"));
            continue;
        }
        let mean = all.iter().sum::<f64>() / all.len() as f64;
        let mid = median(&mut all);
        let p99 = all[((all.len() - 1) as f64 * 0.99) as usize];
        let seq = median(&mut rs.iter().map(|r| r.sequential).collect::<Vec<_>>());
        let par = median(&mut rs.iter().map(|r| r.parallel).collect::<Vec<_>>());
        t.push_str(&format!(
            "{kind:<8} {mean:>8.0} {mid:>10.0} {p99:>8.0} {seq:>12.1} {par:>11.1}\n"
        ));
    }
    // Paired: each round's own ratio (the kinds ran back to back), then the median of those.
    let paired = |other: usize, metric: &dyn Fn(&Round) -> f64| -> f64 {
        let mut ratios: Vec<f64> = rounds[0]
            .iter()
            .zip(&rounds[other])
            .filter_map(|pair| match pair {
                (Some(ours), Some(theirs)) => Some(metric(ours) / metric(theirs)),
                _ => None,
            })
            .collect();
        median(&mut ratios)
    };
    let latency = |r: &Round| median(&mut r.samples.clone());
    for (k, other) in kinds.iter().enumerate().skip(1) {
        t.push_str(&format!(
            "rdmasock / {other}, the median of the rounds' own ratios: latency (median) {:.2}, \
             conn/s seq {:.2}, conn/s x{} {:.2}\n",
            paired(k, &latency),
            paired(k, &|r| r.sequential),
            a.parallel,
            paired(k, &|r| r.parallel),
        ));
    }
    if kinds.contains(&"rsocket") {
        t.push_str("targets against rsocket: latency ratio ≤ 1.00, conn/s x64 ratio ≥ 1.00\n");
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
                let mut failed = Vec::new();
                for _ in 0..per_thread {
                    if let Err(e) = cycle(&connect, addr) {
                        failed.push(e);
                    }
                }
                failed
            })
        })
        .collect();
    let mut failed = Vec::new();
    for w in workers {
        failed.extend(
            w.join()
                .unwrap_or_else(|_| fail("parallel connect", "a thread panicked")),
        );
    }
    let made = per_thread * a.parallel - failed.len();
    let parallel = made as f64 / start.elapsed().as_secs_f64();
    if let Some(e) = failed.first() {
        // Counted out of the rate, and said: a refusal or a timeout under the storm.
        println!(
            "failed {kind}: {} of {} parallel connects failed (the first: {e})",
            failed.len(),
            per_thread * a.parallel
        );
    }
    let mean = samples.iter().sum::<f64>() / samples.len() as f64;
    let text: Vec<String> = samples.iter().map(|v| format!("{v:.1}")).collect();
    println!("samples {}", text.join(" "));
    println!("rates {sequential} {parallel}");
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
