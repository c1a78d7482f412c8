//! `uiwarp_rdma`: librdmacm's `rdma_server` / `rdma_client` examples on the userspace iWARP
//! provider (no kernel RDMA): one 16-byte SEND each way, then disconnect. Interoperates with
//! rdma-core's `rdma_server` / `rdma_client` on a kernel iWARP device (siw).
//!
//! ```text
//! uiwarp_rdma server [-p port]              listens on every address (default 7471)
//! uiwarp_rdma client [-s address] [-p port] (default 127.0.0.1:7471)
//! ```
//! Prints `rdma_server: start` ... `rdma_server: end 0` (or `end -1`, exit status 255) like
//! the C examples. `RDMASOCK_PCAP=file` captures the exchange.

mod endpoint;

use endpoint::{step, Endpoint, FOREVER};
use rdmasock_uiwarp::{connect, disconnect, UiwarpListener};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

fn server(port: u16) -> Result<(), String> {
    let any = SocketAddr::from(([0, 0, 0, 0], port));
    let listener = UiwarpListener::bind(any, 0).map_err(step("rdma_listen"))?;
    let request = listener
        .get_request(None)
        .map_err(step("rdma_get_request"))?;
    let ep = Endpoint::new(FOREVER)?;
    ep.post_recv()?;
    request
        .accept(&ep.qp, &[], FOREVER)
        .map_err(step("rdma_accept"))?;
    let r = ep
        .wait_recv()
        .and_then(|()| ep.post_send())
        .and_then(|()| ep.wait_send());
    let _ = disconnect(&ep.qp);
    r
}

fn client(server: &str, port: u16) -> Result<(), String> {
    let dst = (server, port)
        .to_socket_addrs()
        .map_err(step("rdma_getaddrinfo"))?
        .next()
        .ok_or_else(|| format!("rdma_getaddrinfo: no address for {server}"))?;
    let ep = Endpoint::new(FOREVER)?;
    ep.post_recv()?;
    connect(&ep.qp, dst, &[], Duration::from_secs(10)).map_err(step("rdma_connect"))?;
    let r = ep
        .post_send()
        .and_then(|()| ep.wait_send())
        .and_then(|()| ep.wait_recv());
    let _ = disconnect(&ep.qp);
    r
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or("");
    let (mut host, mut port) = ("127.0.0.1".to_string(), 7471u16);
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        match (a.as_str(), it.next()) {
            ("-s", Some(v)) => host = v.clone(),
            ("-p", Some(v)) => port = v.parse().unwrap_or(0),
            _ => {
                eprintln!("usage: uiwarp_rdma server [-p port] | client [-s address] [-p port]");
                std::process::exit(1);
            }
        }
    }
    let (program, result) = match mode {
        "server" => ("rdma_server", {
            println!("rdma_server: start");
            server(port)
        }),
        "client" => ("rdma_client", {
            println!("rdma_client: start");
            client(&host, port)
        }),
        _ => {
            eprintln!("usage: uiwarp_rdma server [-p port] | client [-s address] [-p port]");
            std::process::exit(1);
        }
    };
    let ret = match result {
        Ok(()) => 0,
        Err(e) => {
            println!("{e}");
            -1
        }
    };
    println!("{program}: end {ret}");
    std::process::exit(ret);
}
