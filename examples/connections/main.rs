//! connections: what each connection costs, for RdmaSocket, TcpStream and (given its
//! preload library) rsocket, side by side.
//!
//! ```text
//! connections [--counts "1 100 1000"] [--bind ADDR] [--messages M] [--busy BYTES]
//!             [--rsocket LIBRSPRELOAD] [--markdown FILE] [--section NAME]
//! ```
//!
//! For each count N and each stack, a fresh process (this program, re-run) spawns its peer
//! (this program again: one mio thread accepting and echoing every connection), reads
//! itself, opens N connections to the peer one after the other through the blocking API,
//! echoes M 64-byte messages on each (checked), reads itself again (idle), echoes BYTES more
//! on each (busy) and reads itself again, closes them all and reads itself a last time.
//! The readings come from /proc/self (VmRSS, VmPin + VmLck, fds, threads) and from
//! [`rdmasock::census`] (regions and bytes registered by the connections).
//!
//! Stacks: `rdma` (RdmaSocket with the default options, on
//! whichever provider serves ADDR: the userspace provider on
//! loopback without kernel RDMA), `rdma-srq` (the same with the shared receive
//! queue, where the device has one: `SocketOptionsBuilder::shared_receive_queue(true)`),
//! `tcp` (TcpStream), and with `--rsocket LIB` `rsocket`:
//! the TcpStream run again with both processes under `LD_PRELOAD=LIB` (rdma-core's
//! librspreload.so, which turns the sockets into rsockets). The table prints each cost per
//! connection (the change over the baseline, divided by N) with the ratio RdmaSocket ÷ each
//! other stack. RdmaSocket's send areas come from a pool of shared registrations (chunks,
//! docs/MEMORY.md): a chunk counts once, as one region of its whole bytes, pinned whether
//! or not its slices are all in use, so the per-connection rows carry the chunks' cost
//! spread over the N (which is why N = 1 shows more regions than N = 100). `--markdown FILE` writes the table into FILE's `bench-connections` section
//! (normally docs/BENCHMARKS.md); `--section NAME` names another section (the VM's run,
//! `tests/vm/bench-connections.sh`, writes one per device).
//!
//! Internal modes: `--measure STACK N BIND MESSAGES BYTES` (one measuring process, which
//! prints one `run` line) and `--peer STACK BIND` (the peer, which prints `listening ADDR`
//! and serves until its stdin closes).
mod client;
#[path = "../common/markdown.rs"]
#[allow(dead_code)]
mod markdown;
mod measure;
mod peer;
mod report;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

const USAGE: &str = "usage: connections [--counts \"1 100 1000\"] [--bind ADDR] [--messages M] \
                     [--busy BYTES] [--rsocket LIBRSPRELOAD] [--markdown FILE] \
                     [--section NAME]";

/// The options of a whole run.
struct Options {
    counts: Vec<usize>,
    bind: String,
    messages: usize,
    busy: usize,
    rsocket: Option<String>,
    markdown: Option<PathBuf>,
    section: String,
    command_line: String,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        counts: vec![1, 100, 1000],
        bind: "127.0.0.1:0".to_string(),
        messages: 4,
        busy: 256 * 1024,
        rsocket: None,
        markdown: None,
        section: "bench-connections".to_string(),
        command_line: String::new(),
    };
    let mut shown = vec!["connections".to_string()];
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| format!("{arg} needs a value\n{USAGE}"))?;
        let number = |v: &str| {
            v.parse::<usize>()
                .map_err(|e| format!("{arg} {v}: {e}\n{USAGE}"))
        };
        match arg.as_str() {
            "--counts" => {
                o.counts = value
                    .split_whitespace()
                    .map(number)
                    .collect::<Result<_, _>>()?
            }
            "--bind" => o.bind = value.clone(),
            "--messages" => o.messages = number(value)?,
            "--busy" => o.busy = number(value)?,
            "--rsocket" => o.rsocket = Some(value.clone()),
            "--markdown" => {
                o.markdown = Some(PathBuf::from(value));
                continue;
            }
            "--section" => {
                o.section = value.clone();
                continue;
            }
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        }
        shown.push(format!("{arg} {value:?}").replace("\"", "'"));
    }
    o.command_line = shown.join(" ");
    Ok(o)
}

/// Lifts the soft fd limit to the hard one: N connections need more than the usual 1,024.
fn raise_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

/// The peer: listens on `bind`, says where, and serves until its stdin closes.
fn peer(stack: &str, bind: &str) -> Result<(), String> {
    raise_fd_limit();
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        std::process::exit(0);
    });
    if let Some(opts) = rdma_options(stack) {
        let mut l = rdmasock::RdmaListener::bind_with(bind, &opts)
            .map_err(|e| format!("bind {bind}: {e}"))?;
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        println!("listening {}", l.local_addr().map_err(|e| e.to_string())?);
        peer::serve(&mut l).map_err(|e| e.to_string())
    } else {
        // Thread per connection: rsocket's preload library turns poll(2) into rpoll, not
        // epoll, so the TCP peer does without mio. The socket is of plain `SOCK_STREAM` type
        // (no close-on-exec flag) and accepted with accept(2), not accept4: the preload
        // library turns only those into rsockets.
        let addr: std::net::SocketAddr = bind.parse().map_err(|e| format!("{bind}: {e}"))?;
        let l = tcp_listener(addr).map_err(|e| format!("bind {bind}: {e}"))?;
        let local = l.local_addr().ok().and_then(|a| a.as_socket());
        println!("listening {}", local.ok_or("the listener has no address")?);
        loop {
            let (s, _) = l.accept_raw().map_err(|e| format!("accept: {e}"))?;
            let s = TcpStream::from(s);
            let _ = s.set_nodelay(true);
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || echo_thread(s))
                .map_err(|e| format!("a thread for a connection: {e}"))?;
        }
    }
}

/// The options of an RdmaSocket stack: `rdma` the defaults (no shared receive queue),
/// `rdma-srq` with the shared receive queue chosen; `None` for the TCP stacks.
pub(crate) fn rdma_options(stack: &str) -> Option<rdmasock::SocketOptions> {
    let srq = match stack {
        "rdma" => false,
        "rdma-srq" => true,
        _ => return None,
    };
    rdmasock::SocketOptions::builder()
        .shared_receive_queue(srq)
        .build()
        .ok()
}

/// A listening TCP socket of plain `SOCK_STREAM` type (see `peer`'s TCP branch).
fn tcp_listener(addr: std::net::SocketAddr) -> std::io::Result<socket2::Socket> {
    use socket2::{Domain, SockAddr, Socket, Type};
    let s = Socket::new_raw(Domain::for_address(addr), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.bind(&SockAddr::from(addr))?;
    s.listen(1024)?;
    Ok(s)
}

fn echo_thread(mut s: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    while let Ok(n @ 1..) = s.read(&mut buf) {
        if s.write_all(&buf[..n]).is_err() {
            break;
        }
    }
}

/// One measuring process: prints its `run` line.
fn measure(args: &[String]) -> Result<(), String> {
    let [stack, n, bind, messages, busy] = args else {
        return Err("--measure STACK N BIND MESSAGES BYTES".to_string());
    };
    let num = |v: &String| v.parse::<usize>().map_err(|e| format!("{v}: {e}"));
    raise_fd_limit();
    let run = client::run(stack, num(n)?, bind, num(messages)?, num(busy)?)?;
    println!("{}", report::encode(&run));
    Ok(())
}

/// Runs one measuring process for `stack` with `n` connections.
fn measure_in_child(o: &Options, stack: &str, n: usize) -> Result<client::Run, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
    let mut cmd = Command::new(exe);
    let tcp = if stack == "rsocket" { "tcp" } else { stack };
    cmd.args(["--measure", tcp, &n.to_string(), &o.bind])
        .args([o.messages.to_string(), o.busy.to_string()]);
    if stack == "rsocket" {
        cmd.env("LD_PRELOAD", o.rsocket.as_deref().unwrap_or_default());
    }
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting the {stack} run: {e}"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    // A stack that hangs (rsocket's preload library under many connections can) must not
    // hang the benchmark: its run is bounded, and killed at the bound.
    let bound = CHILD_BOUND + CHILD_BOUND_PER_CONNECTION * n as u32;
    let end = std::time::Instant::now() + bound;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < end => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the {stack} run of {n} did not finish within {bound:?} (killed)"
                ));
            }
            Err(e) => return Err(format!("waiting for the {stack} run: {e}")),
        }
    };
    let out = reader.join().unwrap_or_default();
    let line = out.lines().find(|l| l.starts_with("run "));
    match line.and_then(report::decode) {
        Some(run) if status.success() => Ok(run),
        _ => Err(format!("the {stack} run of {n} failed ({status})")),
    }
}

/// The bound on one measuring process: this, and `CHILD_BOUND_PER_CONNECTION` for each
/// connection (a connection costs up to ~0.15 s to make in the VM under TCG).
const CHILD_BOUND: std::time::Duration = std::time::Duration::from_secs(120);
const CHILD_BOUND_PER_CONNECTION: std::time::Duration = std::time::Duration::from_millis(500);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("--peer") if args.len() == 3 => peer(&args[1], &args[2]),
        Some("--measure") => measure(&args[1..]),
        _ => parse(&args).and_then(|o| whole(&o)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("connections: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Every count on every stack, then the table.
fn whole(o: &Options) -> Result<(), String> {
    let mut stacks = vec!["rdma", "rdma-srq", "tcp"];
    if o.rsocket.is_some() {
        stacks.push("rsocket");
    }
    let mut table = String::new();
    for &n in &o.counts {
        let mut runs = Vec::new();
        let mut failed = Vec::new();
        for stack in &stacks {
            match measure_in_child(o, stack, n) {
                Ok(run) => runs.push((*stack, run)),
                // A peer's failure is reported in the table, not the end of the benchmark.
                Err(e) if *stack == "rsocket" => failed.push(e),
                Err(e) => return Err(e),
            }
        }
        let mut text = report::table(n, &runs);
        for e in failed {
            text.push_str(&format!("{e}: no column for it\n"));
        }
        print!("{text}");
        std::io::stdout().flush().ok();
        table.push_str(&text);
        table.push('\n');
    }
    if let Some(file) = &o.markdown {
        let body = format!(
            "Latest run: {}, `{}`, {}. Costs per connection: the change over the process's \
             baseline (no connection open) divided by N, so the send-area pool's chunks, \
             which the connections share, count with their whole bytes and one region each, \
             spread over the N; ratio = RdmaSocket ÷ the other stack.\n\n```text\n{table}```\n",
            markdown::now_utc(),
            o.command_line,
            markdown::machine(),
        );
        markdown::replace_section(file, &o.section, &body)
            .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        eprintln!(
            "connections: wrote the {} section of {}",
            o.section,
            file.display()
        );
    }
    Ok(())
}
