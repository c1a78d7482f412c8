//! `rdma_client`: the twin of librdmacm's `rdma_client` example, on rdmasock's connection
//! manager and verbs with no librdmacm.
//!
//! Resolves the server (`-s`, default 127.0.0.1; port 7471, `-p`) with 2-second address and
//! route timeouts, creates a QP on the resolved device (1 send / 1 receive of 16 bytes, inline
//! sends when the device can), posts a receive, connects, sends 16 bytes, waits for that send
//! and for the server's message, disconnects. Prints `rdma_client: start` and
//! `rdma_client: end 0` (or the failing step and `end -1`, exit status 255), as the C example
//! does. Interoperates with rdma-core's `rdma_server` both ways.
//!
//! Runs on every provider, as `rdma_server` does: on a machine without kernel RDMA, over the
//! userspace iWARP provider (`-s 127.0.0.1` works there). rdma_cm cannot reach 127.0.0.1
//! through rxe or siw: give the address of the netdev the soft device sits on (`-s 10.99.0.2`
//! in the test VM).
//!
//! ```text
//! rdma_client [-s server_address] [-p port_number]
//! ```

mod common;

use common::cm_endpoint::{cm_step, manager, step, Endpoint, RECV_WR_ID, SEND_WR_ID};
use common::cm_main::example_main;
use rdmasock::cm::ConnectionParameters;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

const PROGRAM: &str = "rdma_client";
/// librdmacm's `rdma_create_ep` resolves with 2000 ms timeouts.
const RESOLVE_TIMEOUT: Duration = Duration::from_millis(2000);
/// The C example blocks without a time limit.
const FOREVER: Duration = Duration::MAX;

fn main() {
    example_main(PROGRAM, "127.0.0.1", run)
}

fn run(server: &str, port: u16) -> Result<(), String> {
    let dst: SocketAddr = (server, port)
        .to_socket_addrs()
        .map_err(step("rdma_getaddrinfo"))?
        .next()
        .ok_or_else(|| format!("rdma_getaddrinfo: no address for {server}"))?;
    let id = manager()
        .resolve(dst, RESOLVE_TIMEOUT)
        .map_err(cm_step("rdma_create_ep"))?;
    let ep = Endpoint::new(id.as_ref(), PROGRAM)?;
    ep.post_recv()?;
    id.connect(&ep.qp, &ConnectionParameters::default(), FOREVER)
        .map_err(step("rdma_connect"))?;
    let result = ep
        .post_send()
        .and_then(|()| ep.wait_for(SEND_WR_ID, "rdma_get_send_comp"))
        .and_then(|_| ep.wait_for(RECV_WR_ID, "rdma_get_recv_comp").map(drop));
    let _ = id.disconnect(&ep.qp);
    result
}
