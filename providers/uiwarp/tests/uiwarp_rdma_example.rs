//! The `uiwarp_rdma` example's client when the server's reply and its disconnect arrive before
//! the client looks for its send completion: the interop flake against rdma-core's
//! `rdma_server` on siw, where the client never exited. Both completions came out of one poll
//! of the single CQ, the send wait kept the SEND's and dropped the reply's, and the receive
//! wait then slept for a completion that had already been taken.

#[allow(dead_code)]
#[path = "../examples/uiwarp_rdma/endpoint.rs"]
mod endpoint;

use endpoint::Endpoint;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rdmasock_uiwarp::{connect, disconnect, Notice, UiwarpListener};
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(5);

fn server(listener: UiwarpListener) -> Result<(), String> {
    let request = listener
        .get_request(Some(PATIENCE))
        .map_err(|e| format!("get_request: {e}"))?;
    let ep = Endpoint::new(PATIENCE)?;
    ep.post_recv()?;
    request
        .accept(&ep.qp, &[], PATIENCE)
        .map_err(|e| format!("accept: {e}"))?;
    ep.wait_recv()?;
    ep.post_send()?;
    ep.wait_send()?;
    disconnect(&ep.qp).map_err(|e| format!("disconnect: {e}"))
}

#[test]
fn reply_and_disconnect_arrive_before_the_client_polls() {
    let listener = UiwarpListener::bind("127.0.0.1:0".parse().unwrap(), 1).expect("bind");
    let addr = listener.local_addr();
    let server = std::thread::spawn(move || server(listener));

    let client = Endpoint::new(PATIENCE).expect("client endpoint");
    client.post_recv().expect("client post_recv");
    connect(&client.qp, addr, &[], PATIENCE).expect("connect");
    client.post_send().expect("client post_send");
    server.join().expect("server thread").expect("server");

    // The server has sent its reply and closed; the client's engine reads both (its CQ is not
    // armed, so nothing waits for an application thread): the disconnect notice comes after
    // the reply's completion is queued.
    let e = rdmasock_uiwarp::driver::endpoint(&client.qp).expect("the client's endpoint");
    let mut fds = [PollFd::new(e.notice_fd(), PollFlags::POLLIN)];
    let ready = poll(&mut fds, PollTimeout::from(5000u16)).expect("poll on the notice fd");
    assert_eq!(ready, 1, "the client saw no disconnect within 5 s");
    assert_eq!(e.poll_notice(), Some(Notice::Disconnected));

    client.wait_send().expect("the SEND's completion");
    client
        .wait_recv()
        .expect("the reply's completion, polled together with the SEND's");
}
