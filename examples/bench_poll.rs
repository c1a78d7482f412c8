//! `bench_poll`: the same nonblocking 64-byte ping-pong driven by plain poll(2) on the
//! sockets' readiness fds (`AsFd`) and by mio (`mio::event::Source`), over the same provider
//! in one run. Prints a table with the ratio poll ÷ mio (target: <= 1.1x), and the same two
//! loops over TCP sockets on the same address as the floor: poll(2) looks at every fd on
//! each call where epoll does not, so with many connections poll(2) ÷ mio over TCP is what
//! any fd costs, and the RDMA rows are read against it.
//!
//! ```text
//! bench_poll [--rounds R] [--iters N] [--connections "1 16"] [--device NAME]
//!            [--markdown FILE]
//! ```
//! Build with `--release`. Each row runs `R` rounds (default 5), mio and poll(2) alternating,
//! each round on fresh connections: `C` connections (each entry of `--connections`, default
//! 1 and 16) between one client thread and one server thread, every connection `N` round
//! trips (default 5000) at once, both threads on one event loop of the kind measured (the
//! server echoes). The time is the client's, from its first write to the last echo, per
//! round trip of a connection. The table gives each side's median and range, the ratio of
//! the medians and the median of each round's own ratio ("paired"); each round also runs the
//! two loops over `TcpStream`s (TCP_NODELAY), the "TCP (floor)" rows. The connections use the
//! address of `--device NAME` (default: the first RDMA device's, or loopback over the
//! userspace provider where the kernel has none); in the test VM run it there, e.g.
//! `tests/vm/run.sh --both -- 'target/release/examples/bench_poll --device siw0'`.
//! `--markdown FILE` also writes the table, with the date and the machine, into the
//! `bench-poll` section of FILE (between `<!-- bench-poll:begin -->` and
//! `<!-- bench-poll:end -->`; with `--device NAME`, the `bench-poll-NAME` section),
//! leaving the rest as it is. `tests/vm/bench-poll.sh` runs it on rxe0 and siw0 in the VM.

mod common;

use common::address::device_address;
use common::bench::Summary;
use common::markdown;
use mio::{Events, Interest, Token};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use rdmasock::{RdmaListener, RdmaSocket};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Instant;

const MESSAGE: usize = 64;

struct Args {
    rounds: usize,
    iters: usize,
    connections: Vec<usize>,
    device: Option<String>,
    markdown: Option<PathBuf>,
    command_line: String,
}

fn args() -> Args {
    let mut a = Args {
        rounds: 5,
        iters: 5000,
        connections: vec![1, 16],
        device: None,
        markdown: None,
        command_line: String::new(),
    };
    let mut shown = vec!["bench_poll".to_string()];
    let mut it = std::env::args().skip(1);
    let usage = |other: &str| -> ! {
        eprintln!(
            "usage: bench_poll [--rounds R] [--iters N] [--connections \"1 16\"] [--device NAME] [--markdown FILE] (not {other})"
        );
        std::process::exit(2);
    };
    while let Some(arg) = it.next() {
        let value = it
            .next()
            .unwrap_or_else(|| usage(&format!("{arg} without a value")));
        if arg != "--markdown" {
            shown.push(match value.contains(' ') {
                true => format!("{arg} \"{value}\""),
                false => format!("{arg} {value}"),
            });
        }
        let num = |v: &str| -> usize { v.parse().unwrap_or_else(|_| usage(v)) };
        match arg.as_str() {
            "--rounds" => a.rounds = num(&value).max(1),
            "--iters" => a.iters = num(&value).max(1),
            "--connections" => a.connections = value.split_whitespace().map(num).collect(),
            "--device" => a.device = Some(value),
            "--markdown" => a.markdown = Some(PathBuf::from(value)),
            other => usage(other),
        }
    }
    a.command_line = shown.join(" ");
    a
}

/// Which event loop drives the sockets.
#[derive(Clone, Copy)]
enum Kind {
    Mio,
    Poll,
}

/// A nonblocking byte stream both loops can drive: an [`RdmaSocket`] (the measured one) or
/// a TCP socket (the floor).
trait Conn: AsFd + mio::event::Source + Send + 'static {
    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize>;
    fn write_some(&self, buf: &[u8]) -> io::Result<usize>;
    fn shutdown_write(&self) -> io::Result<()>;
}

/// Both socket types read, write and shut down through `&Self` the same way.
macro_rules! impl_conn {
    ($($ty:ty),*) => {$(
        impl Conn for $ty {
            fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
                let mut s = self;
                s.read(buf)
            }
            fn write_some(&self, buf: &[u8]) -> io::Result<usize> {
                let mut s = self;
                s.write(buf)
            }
            fn shutdown_write(&self) -> io::Result<()> {
                self.shutdown(Shutdown::Write)
            }
        }
    )*};
}

impl_conn!(RdmaSocket, mio::net::TcpStream);

/// An event loop over a thread's sockets.
enum Waiter {
    Mio(mio::Poll, Events),
    Poll,
}

impl Waiter {
    /// For mio, registers `sockets` (nonblocking already).
    fn new<S: Conn>(kind: Kind, sockets: &mut [S]) -> io::Result<Waiter> {
        match kind {
            Kind::Poll => Ok(Waiter::Poll),
            Kind::Mio => {
                let poll = mio::Poll::new()?;
                for (i, s) in sockets.iter_mut().enumerate() {
                    poll.registry().register(
                        s,
                        Token(i),
                        Interest::READABLE | Interest::WRITABLE,
                    )?;
                }
                Ok(Waiter::Mio(poll, Events::with_capacity(256)))
            }
        }
    }

    /// Waits until some sockets may go on; their indices (into `ready`).
    fn wait<S: Conn>(&mut self, sockets: &[S], ready: &mut Vec<usize>) -> io::Result<()> {
        ready.clear();
        match self {
            Waiter::Mio(poll, events) => {
                poll.poll(events, None)?;
                ready.extend(events.iter().map(|e| e.token().0));
            }
            Waiter::Poll => {
                let mut fds: Vec<PollFd<'_>> = sockets
                    .iter()
                    .map(|s| PollFd::new(s.as_fd(), PollFlags::POLLIN))
                    .collect();
                match nix::poll::poll(&mut fds, PollTimeout::NONE) {
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => return Err(io::Error::other(format!("poll: {e}"))),
                }
                ready.extend(
                    fds.iter()
                        .enumerate()
                        .filter(|(_, fd)| fd.revents().is_some_and(|r| !r.is_empty()))
                        .map(|(i, _)| i),
                );
            }
        }
        Ok(())
    }
}

/// Reads that found nothing to read (`WouldBlock` at once) after the loop was told the
/// socket was ready, both ends together: a wake-up that was not needed.
static EMPTY_READS: AtomicU64 = AtomicU64::new(0);

/// Reads what `s` has into `into` until `WouldBlock`; false at end of stream.
fn read_all<S: Conn>(s: &S, into: &mut Vec<u8>) -> io::Result<bool> {
    let mut buf = [0u8; 4096];
    let mut read = false;
    loop {
        match s.read_some(&mut buf) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                read = true;
                into.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if !read {
                    EMPTY_READS.fetch_add(1, Ordering::Relaxed);
                }
                return Ok(true);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Writes what it can of `pending`.
fn write_some<S: Conn>(s: &S, pending: &mut Vec<u8>) -> io::Result<()> {
    while !pending.is_empty() {
        match s.write_some(pending) {
            Ok(n) => drop(pending.drain(..n)),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The server: echoes on every socket until each has ended its stream.
fn echo<S: Conn>(kind: Kind, mut sockets: Vec<S>) -> io::Result<()> {
    let mut waiter = Waiter::new(kind, &mut sockets)?;
    let n = sockets.len();
    let mut pending = vec![Vec::new(); n];
    let mut open = vec![true; n];
    let mut ready = Vec::new();
    while open.iter().any(|&o| o) {
        waiter.wait(&sockets, &mut ready)?;
        for &i in &ready {
            if open[i] {
                open[i] = read_all(&sockets[i], &mut pending[i])?;
            }
            write_some(&sockets[i], &mut pending[i])?;
        }
    }
    Ok(())
}

/// The client: `iters` round trips on every socket at once; microseconds per round trip.
fn client<S: Conn>(kind: Kind, mut sockets: Vec<S>, iters: usize) -> io::Result<f64> {
    let mut waiter = Waiter::new(kind, &mut sockets)?;
    let n = sockets.len();
    let message = [0x2au8; MESSAGE];
    let mut got = vec![Vec::new(); n];
    let mut outgoing = vec![Vec::new(); n];
    let mut done = vec![0usize; n];
    let mut ready = Vec::new();
    let start = Instant::now();
    for i in 0..n {
        outgoing[i].extend_from_slice(&message);
        write_some(&sockets[i], &mut outgoing[i])?;
    }
    while done.iter().any(|&d| d < iters) {
        waiter.wait(&sockets, &mut ready)?;
        for &i in &ready {
            if !read_all(&sockets[i], &mut got[i])? {
                return Err(io::Error::other("the echo server ended a stream early"));
            }
            while got[i].len() >= MESSAGE && done[i] < iters {
                got[i].drain(..MESSAGE);
                done[i] += 1;
                if done[i] < iters {
                    outgoing[i].extend_from_slice(&message);
                }
            }
            write_some(&sockets[i], &mut outgoing[i])?;
        }
    }
    let micros = start.elapsed().as_secs_f64() * 1e6 / iters as f64;
    for s in &sockets {
        s.shutdown_write()?;
    }
    Ok(micros)
}

/// One row of the table: a transport and a connection count, both loops.
struct Row {
    connections: usize,
    transport: Transport,
    mio: Summary,
    poll: Summary,
    paired: f64,
    /// Medians over the rounds of the empty reads per round trip: mio's, poll(2)'s.
    empty: (f64, f64),
}

/// Which sockets a round connects.
#[derive(Clone, Copy)]
enum Transport {
    Rdma,
    Tcp,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Rdma => "RDMA",
            Transport::Tcp => "TCP",
        }
    }
}

/// One round: `connections` fresh connections over `transport`, both ends driven by `kind`.
fn round(
    transport: Transport,
    kind: Kind,
    addr: SocketAddr,
    connections: usize,
    iters: usize,
) -> io::Result<Outcome> {
    match transport {
        Transport::Rdma => {
            let (clients, servers) = rdma_pairs(addr, connections)?;
            drive(kind, clients, servers, iters)
        }
        Transport::Tcp => {
            let (clients, servers) = tcp_pairs(addr, connections)?;
            drive(kind, clients, servers, iters)
        }
    }
}

/// `connections` connected, nonblocking RDMA socket pairs on `addr`'s IP.
fn rdma_pairs(
    addr: SocketAddr,
    connections: usize,
) -> io::Result<(Vec<RdmaSocket>, Vec<RdmaSocket>)> {
    let listener = RdmaListener::bind(addr)?;
    let addr = listener.local_addr()?;
    let accepting = thread::spawn(move || -> io::Result<Vec<RdmaSocket>> {
        (0..connections)
            .map(|_| listener.accept().map(|(s, _)| s))
            .collect()
    });
    let clients = (0..connections)
        .map(|_| RdmaSocket::connect(addr))
        .collect::<io::Result<Vec<_>>>()?;
    let servers = accepting
        .join()
        .map_err(|_| io::Error::other("the accepting thread panicked"))??;
    for s in clients.iter().chain(&servers) {
        s.set_nonblocking(true)?;
    }
    Ok((clients, servers))
}

/// `connections` connected, nonblocking TCP socket pairs (TCP_NODELAY) on `addr`'s IP.
fn tcp_pairs(
    addr: SocketAddr,
    connections: usize,
) -> io::Result<(Vec<mio::net::TcpStream>, Vec<mio::net::TcpStream>)> {
    let listener = TcpListener::bind(addr)?;
    let addr = listener.local_addr()?;
    let (mut clients, mut servers) = (Vec::new(), Vec::new());
    for _ in 0..connections {
        // the backlog holds the connection until the accept below
        let client = TcpStream::connect(addr)?;
        let (server, _) = listener.accept()?;
        for (s, into) in [(client, &mut clients), (server, &mut servers)] {
            s.set_nodelay(true)?;
            s.set_nonblocking(true)?;
            into.push(mio::net::TcpStream::from_std(s));
        }
    }
    Ok((clients, servers))
}

/// What one round measured.
#[derive(Clone, Copy)]
struct Outcome {
    /// The client's microseconds per round trip.
    micros: f64,
    /// Reads that found nothing after a readiness report, per round trip (both ends).
    empty_reads: f64,
}

/// Runs the client on this thread and the echo server on another, both driven by `kind`.
fn drive<S: Conn>(
    kind: Kind,
    clients: Vec<S>,
    servers: Vec<S>,
    iters: usize,
) -> io::Result<Outcome> {
    let round_trips = (iters * clients.len()) as f64;
    EMPTY_READS.store(0, Ordering::Relaxed);
    let server = thread::spawn(move || echo(kind, servers));
    let micros = client(kind, clients, iters)?;
    server
        .join()
        .map_err(|_| io::Error::other("the echo thread panicked"))??;
    let empty_reads = EMPTY_READS.load(Ordering::Relaxed) as f64 / round_trips;
    Ok(Outcome {
        micros,
        empty_reads,
    })
}

fn main() {
    let a = args();
    let ip = device_address(a.device.as_deref()).unwrap_or_else(|e| {
        eprintln!("bench_poll: {e}");
        std::process::exit(1);
    });
    let addr = SocketAddr::new(ip, 0);
    let fail = |what: &str, e: io::Error| -> ! {
        eprintln!("bench_poll: {what}: {e}");
        std::process::exit(1);
    };
    let mut rows = Vec::new();
    for &c in &a.connections {
        // per transport (RDMA, TCP): mio's and poll(2)'s times, all four in each round
        let mut times = [(Vec::new(), Vec::new()), (Vec::new(), Vec::new())];
        for _ in 0..a.rounds {
            for (t, transport) in [Transport::Rdma, Transport::Tcp].into_iter().enumerate() {
                let name = transport.name();
                let (m, p) = &mut times[t];
                m.push(
                    round(transport, Kind::Mio, addr, c, a.iters)
                        .unwrap_or_else(|e| fail(&format!("{name} mio round"), e)),
                );
                p.push(
                    round(transport, Kind::Poll, addr, c, a.iters)
                        .unwrap_or_else(|e| fail(&format!("{name} poll round"), e)),
                );
            }
        }
        for (transport, (m, p)) in [Transport::Rdma, Transport::Tcp].into_iter().zip(times) {
            let paired =
                Summary::of(p.iter().zip(&m).map(|(p, m)| p.micros / m.micros).collect()).median;
            let empty = |o: &[Outcome]| Summary::of(o.iter().map(|o| o.empty_reads).collect());
            let (empty_mio, empty_poll) = (empty(&m).median, empty(&p).median);
            let micros = |o: Vec<Outcome>| Summary::of(o.iter().map(|o| o.micros).collect());
            rows.push(Row {
                connections: c,
                transport,
                mio: micros(m),
                poll: micros(p),
                paired,
                empty: (empty_mio, empty_poll),
            });
        }
    }
    let description = format!(
        "nonblocking {MESSAGE}-byte ping-pong on {ip}, poll(2) on the readiness fds vs mio, and the same two loops over TCP sockets (TCP_NODELAY) on the same address as the floor; {} rounds of {} round trips per connection",
        a.rounds, a.iters
    );
    println!("{description}");
    println!(
        "{:<36} {:>22} {:>22} {:>8} {:>8} {:>8} {:>13}",
        "us per round trip (median [min-max])",
        "mio",
        "poll(2)",
        "ratio",
        "paired",
        "target",
        "empty mio/poll"
    );
    let mut table = String::from(
        "| connections | sockets | mio, µs per round trip, median [min-max] | poll(2), µs per round trip, median [min-max] | ratio | paired | target | empty reads per round trip, mio / poll(2) |\n\
         |---:|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for row in rows {
        let Row {
            connections: c,
            transport,
            mio,
            poll,
            paired,
            empty: (empty_mio, empty_poll),
        } = row;
        let ratio = poll.median / mio.median;
        let (sockets, target) = match transport {
            Transport::Rdma => ("RdmaSocket", "≤ 1.10"),
            Transport::Tcp => ("TCP (floor)", "-"),
        };
        let name = format!("{c} connection{}, {sockets}", if c == 1 { "" } else { "s" });
        println!(
            "{name:<36} {:>22} {:>22} {ratio:>8.2} {paired:>8.2} {:>8} {:>13}",
            mio.text(1),
            poll.text(1),
            target.replace('≤', "<="),
            format!("{empty_mio:.2}/{empty_poll:.2}")
        );
        table.push_str(&format!(
            "| {c} | {sockets} | {} | {} | {ratio:.2} | {paired:.2} | {target} | {empty_mio:.2} / {empty_poll:.2} |\n",
            mio.text(1),
            poll.text(1)
        ));
    }
    if let Some(file) = &a.markdown {
        let body = format!(
            "Latest run: {}, `{}`, {}. {description}; ratio = poll(2) ÷ mio of the medians, \
             paired = the median of each round's own ratio.\n\n{table}",
            markdown::now_utc(),
            a.command_line,
            markdown::machine(),
        );
        let section = match &a.device {
            Some(device) => format!("bench-poll-{device}"),
            None => "bench-poll".to_string(),
        };
        match markdown::replace_section(file, &section, &body) {
            Ok(()) => eprintln!(
                "bench_poll: wrote the {section} section of {}",
                file.display()
            ),
            Err(e) => fail(&format!("cannot write {}", file.display()), e),
        }
    }
}
