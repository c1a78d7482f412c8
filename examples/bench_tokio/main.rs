//! `bench_tokio`: `rdmasock::tokio::RdmaStream` against its baselines, in one run, printing
//! one table with the ratios.
//!
//! ```text
//! bench_tokio [--rounds R] [--iters N] [--requests N] [--megabytes M] [--ring BYTES]
//!             [--only TEXT] [--side ours|against] [--markdown FILE]
//! bench_tokio --vm [IP] [same options]
//! ```
//! Build with `--release --features tokio`. On the host (the default): RdmaStream over the
//! userspace iWARP provider against tokio's TcpStream, both on loopback: 64 B
//! request/response latency (targets: ≤ 1.25x), requests/s of 64 B requests on 1 and on 64
//! connections at once (≥ 0.8x), and a 1 MiB stream (1 MiB writes, ≥ 0.8x).
//! With `--vm` (in the test VM, through `tests/vm/bench-tokio.sh`; IP defaults to rxe0's
//! address): RdmaStream against the blocking RdmaSocket in event mode and in its default
//! adaptive wait (64 B latency, 1 MiB stream), and tonic's requests/s over RdmaStream
//! against tonic over TcpStream on the same address, with the process's CPU time
//! (getrusage: user + system, client and server together) per request.
//! `--ring BYTES` lets the RdmaStreams' rings grow to BYTES each way instead of the default
//! largest size (1 MiB on the userspace provider, 128 KiB on a kernel device), to measure
//! what a deeper window gives a stream whose writer waits for the reader to free ring space.
//! `--only TEXT` runs only the rows whose workload name contains TEXT (`--only "64
//! connections"`); `--side ours` or `--side against` runs only RdmaStream's or only the
//! other side's runs of each row (to profile or count one side's work; no ratio is printed).
//! Each row runs `R` rounds (default 5), baseline and RdmaStream back to back, each round
//! on fresh connections; the table gives each side's median and range, the ratio of the
//! medians, and the median of each round's own ratio ("paired"). `--markdown FILE` also
//! writes the table, with the date and the machine, into FILE's `bench-tokio` (host) or
//! `bench-tokio-vm` (`--vm`) section, leaving the rest as it is.

#[path = "../async_net/mod.rs"]
mod async_net;
#[path = "../common/mod.rs"]
mod common;
#[path = "../grpc_echo/echo.rs"]
mod echo;
mod workloads;

use common::bench::Summary;
use common::markdown;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use workloads::Side;

/// The command line.
struct Args {
    /// In the VM: this IP (rxe0's by default).
    vm: Option<IpAddr>,
    rounds: usize,
    iters: usize,
    requests: usize,
    megabytes: usize,
    /// `--ring`: the RdmaStreams' largest ring, each way.
    ring: Option<usize>,
    /// `--only`: the rows whose workload name contains this.
    only: Option<String>,
    /// `--side`: run only RdmaStream (`Some(true)`) or only the other side (`Some(false)`).
    ours_only: Option<bool>,
    markdown: Option<PathBuf>,
    /// The options given, for the markdown section (without `--markdown FILE`).
    command_line: String,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        vm: None,
        rounds: 5,
        iters: 20_000,
        requests: 20_000,
        megabytes: 256,
        ring: None,
        only: None,
        ours_only: None,
        markdown: None,
        command_line: String::new(),
    };
    let mut shown = vec!["bench_tokio".to_string()];
    let mut it = std::env::args().skip(1).peekable();
    while let Some(arg) = it.next() {
        let mut number = |name: &str| -> Result<usize, String> {
            let text = it.next().ok_or(format!("{name} needs a number"))?;
            text.parse().map_err(|e| format!("{name} {text}: {e}"))
        };
        let value = match arg.as_str() {
            "--rounds" => {
                a.rounds = number("--rounds")?.max(1);
                a.rounds
            }
            "--iters" => {
                a.iters = number("--iters")?.max(1);
                a.iters
            }
            "--requests" => {
                a.requests = number("--requests")?.max(64);
                a.requests
            }
            "--megabytes" => {
                a.megabytes = number("--megabytes")?.max(1);
                a.megabytes
            }
            "--ring" => {
                let ring = number("--ring")?;
                // the same checks as the options' (a size the builder refuses says why)
                rdmasock::SocketOptions::builder()
                    .send_ring_range(rdmasock::socket::DEFAULT_RING_MIN, ring)
                    .recv_ring_range(rdmasock::socket::DEFAULT_RING_MIN, ring)
                    .build()
                    .map_err(|e| format!("--ring {ring}: {e}"))?;
                a.ring = Some(ring);
                ring
            }
            "--only" => {
                let text = it.next().ok_or("--only needs a workload name's part")?;
                a.only = Some(text.clone());
                shown.push(format!("--only {text:?}"));
                continue;
            }
            "--side" => {
                a.ours_only = match it.next().as_deref() {
                    Some("ours") => Some(true),
                    Some("against") => Some(false),
                    other => {
                        return Err(format!(
                            "--side needs \"ours\" or \"against\", not {other:?}"
                        ))
                    }
                };
                shown.push(format!("--side {}", side_word(a.ours_only)));
                continue;
            }
            "--markdown" => {
                a.markdown = Some(it.next().ok_or("--markdown needs a file")?.into());
                continue;
            }
            "--vm" => {
                let given = it.next_if(|next| !next.starts_with("--"));
                let ip = match given {
                    Some(text) => text.parse().map_err(|e| format!("--vm {text}: {e}"))?,
                    None => rxe_address()?,
                };
                a.vm = Some(ip);
                shown.push(arg);
                continue;
            }
            other => return Err(format!("unknown option {other}")),
        };
        shown.push(format!("{arg} {value}"));
    }
    a.command_line = shown.join(" ");
    Ok(a)
}

/// `--side`'s word for a choice.
fn side_word(ours_only: Option<bool>) -> &'static str {
    match ours_only {
        Some(true) => "ours",
        Some(false) => "against",
        None => "both",
    }
}

/// rxe0's address: `RDMA_VM_RXE_IP` (set in the VM by tests/vm/run.sh), else the device's.
fn rxe_address() -> Result<IpAddr, String> {
    match std::env::var("RDMA_VM_RXE_IP") {
        Ok(text) => text
            .parse()
            .map_err(|e| format!("RDMA_VM_RXE_IP {text}: {e}")),
        Err(_) => common::address::device_address(Some("rxe0")),
    }
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!(
                "bench_tokio: {e}\nusage: bench_tokio [--vm [IP]] [--rounds R] [--iters N] \
                 [--requests N] [--megabytes M] [--ring BYTES] [--only TEXT] \
                 [--side ours|against] [--markdown FILE]"
            );
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime");
    let ip = a.vm.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let all = if a.vm.is_some() {
        workloads::vm_rows()
    } else {
        workloads::host_rows()
    };
    let names: Vec<String> = all.iter().map(|r| r.workload.name()).collect();
    let rows: Vec<_> = all
        .into_iter()
        .filter(|r| {
            a.only
                .as_ref()
                .is_none_or(|o| r.workload.name().contains(o.as_str()))
        })
        .collect();
    if rows.is_empty() {
        eprintln!(
            "bench_tokio: --only {:?} matches no workload; the workloads here: {}",
            a.only.as_deref().unwrap_or_default(),
            names.join("; ")
        );
        std::process::exit(2);
    }
    if a.ours_only.is_some() && a.markdown.is_some() {
        eprintln!("bench_tokio: --side runs one side, which makes no table for --markdown");
        std::process::exit(2);
    }
    let sizes = workloads::Sizes {
        iters: a.iters,
        requests: a.requests,
        bytes: a.megabytes << 20,
        ring: a.ring,
    };
    let mut table = String::from(
        "| workload | against | against, median [min-max] | RdmaStream, median [min-max] | \
         ratio | paired | target |\n|---|---|---:|---:|---:|---:|---:|\n",
    );
    println!(
        "{:<34} {:<22} {:>24} {:>24} {:>6} {:>6} {:>7}",
        "workload",
        "against",
        "against [min-max]",
        "RdmaStream [min-max]",
        "ratio",
        "paired",
        "target"
    );
    for row in rows {
        let (mut base, mut ours) = (Vec::new(), Vec::new());
        for _ in 0..a.rounds {
            if a.ours_only != Some(true) {
                base.push(workloads::measure(
                    &runtime,
                    ip,
                    row.workload,
                    row.against,
                    &sizes,
                ));
            }
            if a.ours_only != Some(false) {
                ours.push(workloads::measure(
                    &runtime,
                    ip,
                    row.workload,
                    Side::Stream,
                    &sizes,
                ));
            }
        }
        if a.ours_only.is_some() {
            let (side, runs) = match a.ours_only {
                Some(true) => (Side::Stream, ours),
                _ => (row.against, base),
            };
            println!(
                "{:<34} {:<22} {:>24}",
                row.workload.name(),
                side.name(),
                Summary::of(runs).text(1)
            );
            continue;
        }
        let paired = Summary::of(ours.iter().zip(&base).map(|(o, b)| o / b).collect()).median;
        let (base, ours) = (Summary::of(base), Summary::of(ours));
        let ratio = ours.median / base.median;
        let name = row.workload.name();
        let against = row.against.name();
        println!(
            "{name:<34} {against:<22} {:>24} {:>24} {ratio:>6.2} {paired:>6.2} {:>7}",
            base.text(1),
            ours.text(1),
            row.target
        );
        table.push_str(&format!(
            "| {name} | {against} | {} | {} | {ratio:.2} | {paired:.2} | {} |\n",
            base.text(1),
            ours.text(1),
            row.target.replace("<=", "≤").replace(">=", "≥")
        ));
    }
    let description = format!(
        "{}; {} rounds of {} ping-pongs, {} requests, {} MiB per stream",
        if a.vm.is_some() {
            format!("RdmaStream on {ip} (rxe0) against the blocking RdmaSocket and tonic over TCP")
        } else {
            "RdmaStream over uiwarp against tokio's TcpStream (TCP_NODELAY), loopback".to_string()
        },
        a.rounds,
        a.iters,
        a.requests,
        a.megabytes
    ) + &match a.ring {
        Some(ring) => format!("; RdmaStream rings up to {ring} bytes each way"),
        None => String::new(),
    };
    println!("{description}");
    if let Some(file) = &a.markdown {
        let section = if a.vm.is_some() {
            "bench-tokio-vm"
        } else {
            "bench-tokio"
        };
        let body = format!(
            "Latest run: {}, `{}`, {}. {description}; ratio = RdmaStream ÷ the other of the \
             medians, paired = the median of each round's own ratio.\n\n{table}",
            markdown::now_utc(),
            a.command_line,
            markdown::machine(),
        );
        match markdown::replace_section(file, section, &body) {
            Ok(()) => eprintln!(
                "bench_tokio: wrote the {section} section of {}",
                file.display()
            ),
            Err(e) => {
                eprintln!("bench_tokio: cannot write {}: {e}", file.display());
                std::process::exit(1);
            }
        }
    }
}
