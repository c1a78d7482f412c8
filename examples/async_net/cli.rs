//! The tokio examples' command line and their client's closing report.

use super::Transport;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Where an example runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Server and client in one process, on this IP (the default address when `None`).
    Local(Option<IpAddr>),
    /// The server alone, on this address, until killed.
    Server(SocketAddr),
    /// The client alone, against the server at this address.
    Client(SocketAddr),
}

/// The command line: `[--tcp] [--requests N] [--connections C] [--size BYTES]
/// [local [IP] | server IP:PORT | client IP:PORT]`.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    /// `--tcp`: tokio's TcpStream instead of RdmaStream.
    pub transport: Transport,
    /// How many requests the client makes in all (default 1000).
    pub requests: usize,
    /// Over how many connections at once (default 4).
    pub connections: usize,
    /// The bytes in each request's payload (default 64).
    pub size: usize,
    /// Where it runs.
    pub mode: Mode,
}

impl Options {
    /// Parses the process's arguments.
    pub(crate) fn from_args() -> Result<Options, String> {
        let mut o = Options {
            transport: Transport::Rdma,
            requests: 1000,
            connections: 4,
            size: 64,
            mode: Mode::Local(None),
        };
        let mut free = Vec::new();
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut number = |name: &str| -> Result<usize, String> {
                let text = args.next().ok_or(format!("{name} needs a number"))?;
                text.parse().map_err(|e| format!("{name} {text}: {e}"))
            };
            match arg.as_str() {
                "--tcp" => o.transport = Transport::Tcp,
                "--requests" => o.requests = number("--requests")?.max(1),
                "--connections" => o.connections = number("--connections")?.max(1),
                "--size" => o.size = number("--size")?,
                _ if arg.starts_with("--") => return Err(format!("unknown option {arg}")),
                _ => free.push(arg),
            }
        }
        let address = |text: Option<&String>| -> Result<SocketAddr, String> {
            let text = text.ok_or("server and client need IP:PORT")?;
            text.parse().map_err(|e| format!("{text}: {e}"))
        };
        o.mode = match free.first().map(String::as_str) {
            None => Mode::Local(None),
            Some("local") => match free.get(1) {
                None => Mode::Local(None),
                Some(ip) => Mode::Local(Some(ip.parse().map_err(|e| format!("{ip}: {e}"))?)),
            },
            Some("server") => Mode::Server(address(free.get(1))?),
            Some("client") => Mode::Client(address(free.get(1))?),
            Some(other) => return Err(format!("unknown mode {other} (local, server or client)")),
        };
        Ok(o)
    }
}

/// Prints the client's result: requests/s and the latency of a request, from each
/// request's time and the whole run's.
pub(crate) fn report(options: &Options, times: &mut [Duration], elapsed: Duration) {
    times.sort();
    let micros = |q: f64| times[((times.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    println!(
        "{} requests of {} B on {} connections over {}: {:.0} requests/s, latency median \
         {:.1} us, p99 {:.1} us",
        times.len(),
        options.size,
        options.connections,
        options.transport.name(),
        times.len() as f64 / elapsed.as_secs_f64(),
        micros(0.5),
        micros(0.99)
    );
}
