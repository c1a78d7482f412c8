//! `rdma_server`: the twin of librdmacm's `rdma_server` example, on rdmasock's connection
//! manager and verbs with no librdmacm.
//!
//! Listens on port 7471 (`-p`) of every IPv4 address, or of the one address `-s` names (a
//! name or a numeric address, as librdmacm's `rdma_getaddrinfo` takes it); takes one connection request, creates a QP on
//! the request's device (1 send / 1 receive of 16 bytes, inline sends when the device can),
//! posts a receive, accepts, waits for the client's message, sends 16 bytes back, waits for
//! that send, disconnects. Prints `rdma_server: start` and `rdma_server: end 0` (or the
//! failing step and `end -1`, exit status 255), as the C example does. Interoperates with
//! rdma-core's `rdma_client` both ways.
//!
//! Runs on every provider: the registry's connection manager takes the kernel's rdma_cm when
//! a kernel RDMA device serves the address, else the userspace iWARP provider (a machine
//! without kernel RDMA; said once on stderr); `RDMASOCK_PROVIDER` forces either.
//!
//! ```text
//! rdma_server [-s server_address] [-p port_number]
//! ```

mod common;

use common::cm_endpoint::{
    accept, cm_step, get_request, manager, step, Endpoint, RECV_WR_ID, SEND_WR_ID,
};
use common::cm_main::example_main;
use std::net::{SocketAddr, ToSocketAddrs};

const PROGRAM: &str = "rdma_server";

fn main() {
    example_main(PROGRAM, "0.0.0.0", run)
}

fn run(server: &str, port: u16) -> Result<(), String> {
    let address: SocketAddr = (server, port)
        .to_socket_addrs()
        .map_err(step("rdma_getaddrinfo"))?
        .next()
        .ok_or_else(|| format!("rdma_getaddrinfo: no address for {server}"))?;
    let listener = manager()
        .listen(address, 0)
        .map_err(cm_step("rdma_listen"))?;
    let request = get_request(listener.as_ref()).map_err(step("rdma_get_request"))?;
    let id = request.endpoint;
    let ep = Endpoint::new(id.as_ref(), PROGRAM)?;
    ep.post_recv()?;
    // librdmacm's rdma_accept waits for ESTABLISHED (synchronous ids); so does this.
    accept(id.as_ref(), &ep.qp).map_err(step("rdma_accept"))?;
    let result = ep
        .wait_for(RECV_WR_ID, "rdma_get_recv_comp")
        .and_then(|_| ep.post_send())
        .and_then(|()| ep.wait_for(SEND_WR_ID, "rdma_get_send_comp").map(drop));
    let _ = id.disconnect(&ep.qp);
    result
}
