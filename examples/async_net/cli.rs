//! The tokio examples' command line, the run of an echo example's server and client, and
//! the client's closing report.

use super::{Listener, Transport};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// An echo example's error.
pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;

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

/// Runs the echo example `name` on the process's arguments: its server (`serve` on a
/// listener), its client, or both in one process. The client runs `options.connections`
/// tasks of `connection` at once (arguments: the transport, the server's address, the
/// connection's number, how many requests it makes, the payload size; it returns each
/// request's time) and ends with `ok: N {echoed} echoed`.
pub(crate) async fn run_echo<S, SF, C, CF>(
    name: &str,
    echoed: &str,
    serve: S,
    connection: C,
) -> ExitCode
where
    S: Fn(Listener) -> SF,
    SF: Future<Output = Result<(), Error>> + Send + 'static,
    C: Fn(Transport, SocketAddr, usize, usize, usize) -> CF,
    CF: Future<Output = Result<Vec<Duration>, Error>> + Send + 'static,
{
    let options = match Options::from_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::from(2);
        }
    };
    let transport = options.transport;
    let client = |addr: SocketAddr| client(addr, &options, echoed, &connection);
    let result = match options.mode {
        Mode::Server(addr) => server(name, transport, addr, &serve).await,
        Mode::Client(addr) => client(addr).await,
        Mode::Local(ip) => local(ip, transport, &serve, client).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The server alone, on `addr` until killed.
async fn server<S, SF>(
    name: &str,
    transport: Transport,
    addr: SocketAddr,
    serve: &S,
) -> Result<(), Error>
where
    S: Fn(Listener) -> SF,
    SF: Future<Output = Result<(), Error>>,
{
    let listener = Listener::bind(transport, addr).await?;
    let at = listener.local_addr()?;
    println!("{name}: serving on {at} over {}", transport.name());
    serve(listener).await
}

/// Server and client in one process: the server on `ip` (the transport's default address
/// when `None`), in a task that ends with the client.
async fn local<S, SF, CF>(
    ip: Option<IpAddr>,
    transport: Transport,
    serve: &S,
    client: impl FnOnce(SocketAddr) -> CF,
) -> Result<(), Error>
where
    S: Fn(Listener) -> SF,
    SF: Future<Output = Result<(), Error>> + Send + 'static,
    CF: Future<Output = Result<(), Error>>,
{
    let ip = ip.map_or_else(|| super::default_ip(transport), Ok)?;
    let listener = Listener::bind(transport, SocketAddr::new(ip, 0)).await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(serve(listener));
    let result = client(addr).await;
    server.abort();
    result
}

/// The client: `options.requests` requests spread over `options.connections` connections
/// at once.
async fn client<C, CF>(
    addr: SocketAddr,
    options: &Options,
    echoed: &str,
    connection: &C,
) -> Result<(), Error>
where
    C: Fn(Transport, SocketAddr, usize, usize, usize) -> CF,
    CF: Future<Output = Result<Vec<Duration>, Error>> + Send + 'static,
{
    let (requests, connections) = (options.requests, options.connections);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..connections {
        let count = requests / connections + usize::from(c < requests % connections);
        tasks.spawn(connection(options.transport, addr, c, count, options.size));
    }
    let mut times = Vec::with_capacity(requests);
    while let Some(done) = tasks.join_next().await {
        times.extend(done??);
    }
    report(options, &mut times, start.elapsed());
    println!("ok: {} {echoed} echoed", times.len());
    Ok(())
}
