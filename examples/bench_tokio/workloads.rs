//! The workloads of `bench_tokio`, each run once on one side (fresh connections each time).

use crate::async_net::{self, Listener, Transport};
use crate::common::clock::RoundTrips;
use crate::echo::{Echo, EchoClient, EchoReply, EchoRequest, EchoServer};
use hyper_util::rt::TokioIo;
use rdmasock::tokio::{RdmaListener as AsyncListener, RdmaStream};
use rdmasock::{RdmaListener, RdmaSocket, SocketOptions};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::runtime::Runtime;

/// What a row measures.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Workload {
    /// 64 B request/response round trips on one connection: microseconds, median.
    Latency,
    /// 64 B request/response on this many connections at once: requests/s.
    Requests(usize),
    /// A one-way stream in 1 MiB writes: MB/s.
    Stream,
    /// tonic unary calls of 64 B on 8 channels at once: requests/s.
    TonicRate,
    /// The same run's CPU time (user + system, whole process) per call: microseconds.
    TonicCpu,
}

impl Workload {
    pub(crate) fn name(self) -> String {
        match self {
            Workload::Latency => "64 B request/response (us)".to_string(),
            Workload::Requests(1) => "64 B requests/s, 1 connection".to_string(),
            Workload::Requests(n) => format!("64 B requests/s, {n} connections"),
            Workload::Stream => "1 MiB stream (MB/s)".to_string(),
            Workload::TonicRate => "tonic requests/s, 8 channels".to_string(),
            Workload::TonicCpu => "tonic CPU per request (us)".to_string(),
        }
    }
}

/// Who runs a workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// `rdmasock::tokio::RdmaStream` (tonic over it for the tonic rows).
    Stream,
    /// tokio's `TcpStream` (tonic over it for the tonic rows).
    Tcp,
    /// The blocking `RdmaSocket` in event mode (sleeps on the completion channel).
    Event,
    /// The blocking `RdmaSocket` with its default adaptive wait.
    Adaptive,
}

impl Side {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Side::Stream => "RdmaStream",
            Side::Tcp => "TcpStream",
            Side::Event => "RdmaSocket, event mode",
            Side::Adaptive => "RdmaSocket, adaptive",
        }
    }
}

/// A row of the table: a workload, what RdmaStream is compared with, and the target.
pub(crate) struct Row {
    pub workload: Workload,
    pub against: Side,
    pub target: &'static str,
}

/// The host's rows: RdmaStream over uiwarp against tokio's TcpStream.
pub(crate) fn host_rows() -> Vec<Row> {
    let row = |workload, target| Row {
        workload,
        against: Side::Tcp,
        target,
    };
    vec![
        row(Workload::Latency, "<= 1.25"),
        row(Workload::Requests(1), ">= 0.80"),
        row(Workload::Requests(64), ">= 0.80"),
        row(Workload::Stream, ">= 0.80"),
    ]
}

/// The VM's rows: RdmaStream against the blocking socket, and tonic over both transports.
pub(crate) fn vm_rows() -> Vec<Row> {
    let row = |workload, against| Row {
        workload,
        against,
        target: "-",
    };
    vec![
        row(Workload::Latency, Side::Event),
        row(Workload::Latency, Side::Adaptive),
        row(Workload::Stream, Side::Event),
        row(Workload::Stream, Side::Adaptive),
        row(Workload::TonicRate, Side::Tcp),
        row(Workload::TonicCpu, Side::Tcp),
    ]
}

/// How much each workload does.
pub(crate) struct Sizes {
    /// Round trips of the latency workload.
    pub iters: usize,
    /// Requests of the requests/s and tonic workloads.
    pub requests: usize,
    /// Bytes of the stream workload.
    pub bytes: usize,
    /// The largest ring (each way) of the RdmaStreams, `--ring`; `None`: the default.
    pub ring: Option<usize>,
}

impl Sizes {
    /// The RdmaStreams' options: the defaults, or rings that grow from the default smallest
    /// size to `--ring`.
    fn stream_options(&self) -> SocketOptions {
        match self.ring {
            None => SocketOptions::default(),
            Some(ring) => SocketOptions::builder()
                .send_ring_range(rdmasock::socket::DEFAULT_RING_MIN, ring)
                .recv_ring_range(rdmasock::socket::DEFAULT_RING_MIN, ring)
                .build()
                .expect("--ring was checked"),
        }
    }
}

/// Runs `workload` once on `side` on address `ip`; its one number.
pub(crate) fn measure(
    runtime: &Runtime,
    ip: IpAddr,
    workload: Workload,
    side: Side,
    sizes: &Sizes,
) -> f64 {
    match (workload, side) {
        (Workload::Latency, Side::Event | Side::Adaptive) => {
            let (client, server) = blocking_pair(ip, side);
            blocking_latency(client, server, sizes.iters)
        }
        (Workload::Stream, Side::Event | Side::Adaptive) => {
            let (client, server) = blocking_pair(ip, side);
            blocking_stream(client, server, sizes.bytes)
        }
        (Workload::TonicRate, _) => runtime.block_on(tonic_run(ip, side, sizes.requests)).0,
        (Workload::TonicCpu, _) => runtime.block_on(tonic_run(ip, side, sizes.requests)).1,
        (_, Side::Tcp) => runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind((ip, 0)).await.expect("bind");
            let addr = listener.local_addr().expect("local_addr");
            let pair = || async {
                let (client, accepted) =
                    tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
                let (client, server) = (client.expect("connect"), accepted.expect("accept").0);
                client.set_nodelay(true).expect("nodelay");
                server.set_nodelay(true).expect("nodelay");
                (client, server)
            };
            run_async(workload, pair, sizes).await
        }),
        (_, _) => runtime.block_on(async {
            let opts = sizes.stream_options();
            let listener = AsyncListener::bind_with((ip, 0), &opts)
                .await
                .expect("bind");
            let addr = listener.local_addr().expect("local_addr");
            let pair = || async {
                let (client, accepted) =
                    tokio::join!(RdmaStream::connect_with(addr, &opts), listener.accept());
                let (client, server) = (client.expect("connect"), accepted.expect("accept").0);
                // as TCP_NODELAY on the TcpStreams: the userspace provider sends a small
                // write at once instead of holding it for the next
                client.set_nodelay(true).expect("nodelay");
                server.set_nodelay(true).expect("nodelay");
                (client, server)
            };
            run_async(workload, pair, sizes).await
        }),
    }
}

/// Runs an async workload over connections made by `pair`.
async fn run_async<S, F, P>(workload: Workload, pair: P, sizes: &Sizes) -> f64
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: std::future::Future<Output = (S, S)>,
    P: Fn() -> F,
{
    match workload {
        Workload::Latency => {
            // the client in a task as well: both ends on the runtime's workers
            let (client, server) = pair().await;
            let client = tokio::spawn(async_latency(client, server, sizes.iters));
            client.await.expect("client task")
        }
        Workload::Requests(connections) => {
            let mut pairs = Vec::with_capacity(connections);
            for _ in 0..connections {
                pairs.push(pair().await);
            }
            async_requests(pairs, sizes.requests).await
        }
        _ => {
            let (client, server) = pair().await;
            async_stream(client, server, sizes.bytes).await
        }
    }
}

/// Answers 64 B messages until the client closes.
async fn echo64<S: AsyncRead + AsyncWrite + Unpin>(mut server: S) {
    let mut buf = [0u8; 64];
    while server.read_exact(&mut buf).await.is_ok() {
        if server.write_all(&buf).await.is_err() {
            break;
        }
    }
}

/// Median microseconds of a 64 B round trip (after a tenth as many warm-up ones).
async fn async_latency<S>(mut client: S, server: S, iters: usize) -> f64
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let echo = tokio::spawn(echo64(server));
    let mut buf = [7u8; 64];
    let warm = iters / 10;
    let mut clock = RoundTrips::new(warm, iters);
    for _ in 0..warm + iters {
        clock.start();
        client.write_all(&buf).await.expect("request");
        client.read_exact(&mut buf).await.expect("response");
    }
    let median = clock.finish(1.0).median();
    drop(client);
    echo.await.expect("echo task");
    median
}

/// Requests/s of `requests` 64 B round trips spread over the `pairs`, all at once.
async fn async_requests<S>(pairs: Vec<(S, S)>, requests: usize) -> f64
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let each = requests / pairs.len();
    let total = each * pairs.len();
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (mut client, server) in pairs {
        tokio::spawn(echo64(server));
        tasks.spawn(async move {
            let mut buf = [7u8; 64];
            for _ in 0..each {
                client.write_all(&buf).await.expect("request");
                client.read_exact(&mut buf).await.expect("response");
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("client task");
    }
    total as f64 / start.elapsed().as_secs_f64()
}

/// MB/s of a one-way stream of `total` bytes in 1 MiB writes, until the reader's ack.
async fn async_stream<S>(mut client: S, mut server: S, total: usize) -> f64
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let sink = tokio::spawn(async move {
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0;
        while got < total {
            match server.read(&mut buf).await.expect("sink read") {
                0 => break,
                n => got += n,
            }
        }
        server.write_all(b"k").await.expect("ack");
        got
    });
    let chunk = vec![0x5au8; 1 << 20];
    let start = Instant::now();
    let mut sent = 0;
    while sent < total {
        let n = chunk.len().min(total - sent);
        client.write_all(&chunk[..n]).await.expect("stream write");
        sent += n;
    }
    client.flush().await.expect("flush");
    let mut ack = [0u8; 1];
    client.read_exact(&mut ack).await.expect("ack");
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(sink.await.expect("sink task"), total);
    total as f64 / secs / 1e6
}

/// A connected pair of blocking sockets on `ip`, in event mode or the default wait.
fn blocking_pair(ip: IpAddr, side: Side) -> (RdmaSocket, RdmaSocket) {
    let options = if side == Side::Event {
        SocketOptions::builder()
            .event_mode()
            .build()
            .expect("options")
    } else {
        SocketOptions::default()
    };
    let listener = RdmaListener::bind_with(SocketAddr::new(ip, 0), &options).expect("bind");
    let addr = listener.local_addr().expect("local_addr");
    let accepted = thread::spawn(move || listener.accept().expect("accept").0);
    let client = RdmaSocket::connect_with(addr, &options).expect("connect");
    (client, accepted.join().expect("accept thread"))
}

/// [`async_latency`] with blocking sockets and a thread per end.
fn blocking_latency(mut client: RdmaSocket, mut server: RdmaSocket, iters: usize) -> f64 {
    let echo = thread::spawn(move || {
        let mut buf = [0u8; 64];
        while server.read_exact(&mut buf).is_ok() {
            if server.write_all(&buf).is_err() {
                break;
            }
        }
    });
    let mut buf = [7u8; 64];
    let warm = iters / 10;
    let mut clock = RoundTrips::new(warm, iters);
    for _ in 0..warm + iters {
        clock.start();
        client.write_all(&buf).expect("request");
        client.read_exact(&mut buf).expect("response");
    }
    let median = clock.finish(1.0).median();
    drop(client);
    echo.join().expect("echo thread");
    median
}

/// [`async_stream`] with blocking sockets and a thread per end.
fn blocking_stream(mut client: RdmaSocket, mut server: RdmaSocket, total: usize) -> f64 {
    let sink = thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0;
        while got < total {
            match server.read(&mut buf).expect("sink read") {
                0 => break,
                n => got += n,
            }
        }
        server.write_all(b"k").expect("ack");
        got
    });
    let chunk = vec![0x5au8; 1 << 20];
    let start = Instant::now();
    let mut sent = 0;
    while sent < total {
        let n = chunk.len().min(total - sent);
        client.write_all(&chunk[..n]).expect("stream write");
        sent += n;
    }
    client.flush().expect("flush");
    let mut ack = [0u8; 1];
    client.read_exact(&mut ack).expect("ack");
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(sink.join().expect("sink thread"), total);
    total as f64 / secs / 1e6
}

/// The gRPC echo service.
struct EchoService;

#[tonic::async_trait]
impl Echo for EchoService {
    async fn unary_echo(
        &self,
        request: tonic::Request<EchoRequest>,
    ) -> Result<tonic::Response<EchoReply>, tonic::Status> {
        let payload = request.into_inner().payload;
        Ok(tonic::Response::new(EchoReply {
            payload,
            peer: String::new(),
        }))
    }
}

impl tonic::transport::server::Connected for async_net::Connection {
    type ConnectInfo = ();

    fn connect_info(&self) {}
}

/// tonic's requests/s with `requests` calls of 64 B on 8 channels at once over `side`'s
/// transport, and the process's CPU microseconds (user + system) per call.
async fn tonic_run(ip: IpAddr, side: Side, requests: usize) -> (f64, f64) {
    let transport = if side == Side::Tcp {
        Transport::Tcp
    } else {
        Transport::Rdma
    };
    let listener = Listener::bind(transport, SocketAddr::new(ip, 0))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local_addr");
    let incoming = futures::stream::unfold(listener, |listener| async {
        Some((listener.accept().await, listener))
    });
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(EchoServer::new(EchoService))
            .serve_with_incoming(incoming),
    );
    let mut clients = Vec::new();
    for _ in 0..8 {
        let connector = tower::service_fn(move |_: tonic::transport::Uri| async move {
            async_net::connect(transport, addr).await.map(TokioIo::new)
        });
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .connect_with_connector(connector)
            .await
            .expect("channel");
        clients.push(EchoClient::new(channel));
    }
    let each = requests / clients.len();
    let (cpu, start) = (cpu_time(), Instant::now());
    let mut tasks = tokio::task::JoinSet::new();
    for mut client in clients {
        tasks.spawn(async move {
            for _ in 0..each {
                let request = EchoRequest {
                    payload: vec![7; 64],
                };
                let reply = client.unary_echo(request).await.expect("call");
                assert_eq!(reply.into_inner().payload.len(), 64);
            }
        });
    }
    let calls = each * tasks.len();
    while let Some(done) = tasks.join_next().await {
        done.expect("client task");
    }
    let (secs, cpu) = (start.elapsed().as_secs_f64(), cpu_time() - cpu);
    server.abort();
    (calls as f64 / secs, cpu.as_secs_f64() * 1e6 / calls as f64)
}

/// The process's CPU time so far, user and system (getrusage).
fn cpu_time() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    let usage = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage");
    let time =
        |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
    time(usage.user_time()) + time(usage.system_time())
}
