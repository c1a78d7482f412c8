//! grpc_echo: a gRPC service and its client with tonic over `rdmasock::tokio::RdmaStream`;
//! `--tcp` runs the very same code over tokio's `TcpStream`. The server is tonic's, fed the
//! accepted streams through `serve_with_incoming`; the client's channel connects through a
//! connector that produces the streams. The client calls `echo.Echo/UnaryEcho` on several
//! channels at once, checks every answer, and prints requests/s and the latency of a call.
//!
//! ```text
//! grpc_echo [--tcp] [OPTIONS] [local [IP]]    server and client in one process (default)
//! grpc_echo [--tcp] server IP:PORT            the server alone, until killed
//! grpc_echo [--tcp] [OPTIONS] client IP:PORT  the client alone
//!
//! OPTIONS: --requests N (default 1000), --connections C (default 4), --size BYTES (default 64)
//! ```
//! Without IP the first RDMA device's IPv4 address is used (loopback over the userspace
//! provider where the kernel has none; 127.0.0.1 with `--tcp`). The service (echo.rs) is
//! written by hand as tonic-build would generate it, so nothing needs protoc. Build with
//! `--features tokio`.

#[path = "../async_net/mod.rs"]
mod async_net;
#[path = "../common/mod.rs"]
mod common;
mod echo;

use async_net::cli::{self, Error};
use async_net::{Connection, Listener, Transport};
use echo::{Echo, EchoClient, EchoReply, EchoRequest, EchoServer};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tonic::transport::server::{Connected, TcpConnectInfo};
use tonic::transport::{Channel, Endpoint, Server, Uri};

/// tonic's server learns each connection's addresses from its stream: `request.remote_addr()`
/// then works as over TCP.
impl Connected for Connection {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo {
            local_addr: Some(self.local_addr()),
            remote_addr: Some(self.peer_addr()),
        }
    }
}

/// The service: answers with the request's bytes and the caller's address.
struct EchoService;

#[tonic::async_trait]
impl Echo for EchoService {
    async fn unary_echo(
        &self,
        request: tonic::Request<EchoRequest>,
    ) -> Result<tonic::Response<EchoReply>, tonic::Status> {
        let peer = request
            .remote_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let payload = request.into_inner().payload;
        Ok(tonic::Response::new(EchoReply { payload, peer }))
    }
}

/// Serves gRPC on every connection `listener` accepts.
async fn serve(listener: Listener) -> Result<(), Error> {
    let incoming = futures::stream::unfold(listener, |listener| async {
        let next = listener.accept().await;
        Some((next, listener))
    });
    Server::builder()
        .add_service(EchoServer::new(EchoService))
        .serve_with_incoming(incoming)
        .await?;
    Ok(())
}

/// A channel to `addr` whose connections are made by `async_net::connect`.
async fn channel(transport: Transport, addr: SocketAddr) -> Result<Channel, Error> {
    let connector = tower::service_fn(move |_: Uri| async move {
        async_net::connect(transport, addr).await.map(TokioIo::new)
    });
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))?;
    Ok(endpoint.connect_with_connector(connector).await?)
}

/// The payload of call `index` on channel `channel`: `size` bytes that differ between calls.
fn payload(channel: usize, index: usize, size: usize) -> Vec<u8> {
    let seed = channel.wrapping_mul(31).wrapping_add(index);
    (0..size).map(|i| (seed + i) as u8).collect()
}

/// Makes `count` calls one after the other on a new channel to `addr`, checks each answer,
/// and returns how long each took.
async fn client_channel(
    transport: Transport,
    addr: SocketAddr,
    number: usize,
    count: usize,
    size: usize,
) -> Result<Vec<Duration>, Error> {
    let mut client = EchoClient::new(channel(transport, addr).await?);
    let mut times = Vec::with_capacity(count);
    for index in 0..count {
        let sent = payload(number, index, size);
        let start = Instant::now();
        let request = EchoRequest {
            payload: sent.clone(),
        };
        let reply = client.unary_echo(request).await?.into_inner();
        times.push(start.elapsed());
        if reply.payload != sent || reply.peer.parse::<SocketAddr>().is_err() {
            return Err(format!(
                "channel {number}, call {index}: {} of {} bytes came back{}, peer {:?}",
                reply.payload.len(),
                sent.len(),
                if reply.payload.len() == sent.len() {
                    " but differ"
                } else {
                    ""
                },
                reply.peer
            )
            .into());
        }
    }
    Ok(times)
}

#[tokio::main]
async fn main() -> ExitCode {
    cli::run_echo("grpc_echo", "calls", serve, client_channel).await
}
