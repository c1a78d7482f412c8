//! hyper_echo: an HTTP/1.1 echo service and its client, written with hyper 1.x and
//! hyper-util's tokio glue (`TokioIo`), over `rdmasock::tokio::RdmaStream`; `--tcp` runs the
//! very same code over tokio's `TcpStream`. The client sends `POST /echo` requests on
//! several connections at once, checks every body that comes back, and prints requests/s and
//! the latency of a request.
//!
//! ```text
//! hyper_echo [--tcp] [OPTIONS] [local [IP]]    server and client in one process (default)
//! hyper_echo [--tcp] server IP:PORT            the server alone, until killed
//! hyper_echo [--tcp] [OPTIONS] client IP:PORT  the client alone
//!
//! OPTIONS: --requests N (default 1000), --connections C (default 4), --size BYTES (default 64)
//! ```
//! Without IP the first RDMA device's IPv4 address is used (loopback over the userspace
//! provider where the kernel has none; 127.0.0.1 with `--tcp`). Build with
//! `--features tokio`.

mod async_net;
mod common;

use async_net::cli::{self, Error};
use async_net::{Connection, Listener, Transport};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The service: `POST /echo` answers with the request's body, anything else is 404.
async fn echo(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Error> {
    if request.method() != Method::POST || request.uri().path() != "/echo" {
        let mut missing = Response::new(Full::new(Bytes::from_static(b"not found\n")));
        *missing.status_mut() = StatusCode::NOT_FOUND;
        return Ok(missing);
    }
    let body = request.into_body().collect().await?.to_bytes();
    Ok(Response::new(Full::new(body)))
}

/// Serves every connection `listener` accepts, each in a task of its own. A connection that
/// fails before it is accepted (say, its peer gave up half-way) is reported and the server
/// goes on.
async fn serve(listener: Listener) -> Result<(), Error> {
    loop {
        let connection = match listener.accept().await {
            Ok(connection) => connection,
            Err(e) => {
                eprintln!("hyper_echo: accept: {e}");
                continue;
            }
        };
        let peer = connection.peer_addr();
        tokio::spawn(async move {
            let served = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(connection), service_fn(echo))
                .await;
            if let Err(e) = served {
                eprintln!("hyper_echo: connection from {peer}: {e}");
            }
        });
    }
}

/// The body of request `index` on connection `connection`: `size` bytes that differ between
/// requests, so that a body delivered to the wrong request is noticed.
fn body(connection: usize, index: usize, size: usize) -> Bytes {
    let seed = connection.wrapping_mul(31).wrapping_add(index);
    (0..size).map(|i| (seed + i) as u8).collect()
}

/// Sends `count` requests one after the other on a new connection to `addr`, checks each
/// answer, and returns how long each took.
async fn client_connection(
    transport: Transport,
    addr: SocketAddr,
    connection: usize,
    count: usize,
    size: usize,
) -> Result<Vec<Duration>, Error> {
    let stream: Connection = async_net::connect(transport, addr).await?;
    let (mut sender, driver) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        if let Err(e) = driver.await {
            eprintln!("hyper_echo: client connection {connection}: {e}");
        }
    });
    let mut times = Vec::with_capacity(count);
    for index in 0..count {
        let sent = body(connection, index, size);
        let request = Request::post(format!("http://{addr}/echo"))
            .header(hyper::header::HOST, addr.to_string())
            .body(Full::new(sent.clone()))?;
        let start = Instant::now();
        let response = sender.send_request(request).await?;
        let status = response.status();
        let got = response.into_body().collect().await?.to_bytes();
        times.push(start.elapsed());
        if status != StatusCode::OK || got != sent {
            return Err(format!(
                "connection {connection}, request {index}: status {status}, {} of {} bytes \
                 came back{}",
                got.len(),
                sent.len(),
                if got.len() == sent.len() {
                    " but differ"
                } else {
                    ""
                }
            )
            .into());
        }
    }
    Ok(times)
}

#[tokio::main]
async fn main() -> ExitCode {
    cli::run_echo("hyper_echo", "bodies", serve, client_connection).await
}
