//! `rdma_server` and `rdma_client` (librdmacm's twins, on the connection-manager interface)
//! on this host: without kernel RDMA the registry hands them the userspace iWARP provider's
//! connection manager, and they must talk to each other over loopback as they do on rxe and
//! siw in the VM (tests/vm_cm_examples.rs). Also the examples' client when the server's reply
//! and its disconnect arrive before the client looks for its send completion.

#[allow(dead_code)]
#[path = "../examples/common/cm_endpoint.rs"]
mod cm_endpoint;

use cm_endpoint::{accept, get_request, step, Endpoint, RECV_WR_ID, SEND_WR_ID};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rdmasock::cm::{CmListener, CmNotice, ConnectionParameters};
use rdmasock::{connection_manager_for, ProviderKind};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[path = "example_support/mod.rs"]
mod example_support;
use example_support::{example, output_within};

/// How long any one step may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(60);

/// Whether this host's kernel has an RDMA device (then the automatic choice would take it,
/// and 127.0.0.1 is out of its reach: the test forces the userspace provider).
fn kernel_has_rdma() -> bool {
    std::fs::read_dir("/sys/class/infiniband")
        .map(|mut d| d.next().is_some())
        .unwrap_or(false)
}

/// Whether some TCP socket listens on `port` (IPv4 or IPv6), as /proc/net/tcp{,6} report.
fn tcp_listening(port: u16) -> bool {
    let needle = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|file| {
        std::fs::read_to_string(file).is_ok_and(|text| {
            text.lines().skip(1).any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 3 && f[1].ends_with(&needle) && f[3] == "0A"
            })
        })
    })
}

/// A port no socket uses now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("0.0.0.0:0")
        .and_then(|l| l.local_addr())
        .expect("a free TCP port")
        .port()
}

fn start(name: &str, args: &[&str]) -> Child {
    let mut command = Command::new(example(name));
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if kernel_has_rdma() {
        command.env(rdmasock::PROVIDER_ENV, "uiwarp");
    }
    command
        .spawn()
        .unwrap_or_else(|e| panic!("start the {name} example: {e}"))
}

/// Waits for `child` to exit within [`PATIENCE`] (killing it otherwise) and returns its
/// output.
fn finish(child: Child, name: &str) -> Output {
    output_within(child, PATIENCE, name)
}

#[test]
fn rdma_server_and_rdma_client_talk_over_the_userspace_provider() {
    let port = free_port().to_string();
    let server = start("rdma_server", &["-p", &port]);
    let deadline = Instant::now() + PATIENCE;
    while !tcp_listening(port.parse().unwrap()) {
        assert!(
            Instant::now() < deadline,
            "rdma_server listens on no TCP port {port} after {PATIENCE:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = finish(
        start("rdma_client", &["-s", "127.0.0.1", "-p", &port]),
        "rdma_client",
    );
    let server = finish(server, "rdma_server");
    let text = |o: &Output| {
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let ((so, se), (co, ce)) = (text(&server), text(&client));
    let report = format!(
        "server {}: {so}{se}\nclient {}: {co}{ce}",
        server.status, client.status
    );
    assert!(
        server.status.success() && client.status.success(),
        "{report}"
    );
    assert_eq!(so, "rdma_server: start\nrdma_server: end 0\n", "{report}");
    assert_eq!(co, "rdma_client: start\nrdma_client: end 0\n", "{report}");
    if !kernel_has_rdma() {
        for (name, stderr) in [("rdma_server", &se), ("rdma_client", &ce)] {
            assert_eq!(
                stderr
                    .matches("using the userspace iWARP provider (uiwarp)")
                    .count(),
                1,
                "{name} says once that it falls back to uiwarp: {report}"
            );
        }
    }
}

/// Runs `f` on a thread of its own; fails the test if it does not return within
/// [`PATIENCE`].
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(PATIENCE)
        .unwrap_or_else(|e| panic!("{what}: no result within {PATIENCE:?} ({e})"))
}

/// The examples' server side of the exchange, on `listener`.
fn serve(listener: Box<dyn CmListener>) -> Result<(), String> {
    let request = get_request(listener.as_ref()).map_err(step("rdma_get_request"))?;
    let id = request.endpoint;
    let ep = Endpoint::new(id.as_ref(), "rdma_server")?;
    ep.post_recv()?;
    accept(id.as_ref(), &ep.qp).map_err(step("rdma_accept"))?;
    ep.wait_for(RECV_WR_ID, "rdma_get_recv_comp")?;
    ep.post_send()?;
    ep.wait_for(SEND_WR_ID, "rdma_get_send_comp")?;
    id.disconnect(&ep.qp).map_err(step("rdma_disconnect"))
}

/// The client's SEND completion and the server's reply come out of one poll of the single
/// CQ, after the server has disconnected: waiting for the SEND must keep the reply's
/// completion for the receive wait that follows.
#[test]
fn reply_and_disconnect_arrive_before_the_client_polls() {
    let uiwarp = connection_manager_for(ProviderKind::Uiwarp);
    let listener = uiwarp
        .listen("127.0.0.1:0".parse().unwrap(), 1)
        .expect("listen");
    let addr = listener.local_addr().expect("the listener's address");
    let server = std::thread::spawn(move || serve(listener));
    within("the client", move || {
        let id = uiwarp.resolve(addr, PATIENCE).expect("resolve");
        let client = Endpoint::new(id.as_ref(), "rdma_client").expect("client endpoint");
        client.post_recv().expect("client post_recv");
        id.connect(&client.qp, &ConnectionParameters::default(), PATIENCE)
            .expect("connect");
        client.post_send().expect("client post_send");
        server.join().expect("server thread").expect("server");

        // The server has sent its reply and closed; the client's engine reads both (its CQ
        // is not armed, so nothing waits for an application thread): the disconnect notice
        // comes after the reply's completion is queued.
        let mut fds = [PollFd::new(id.event_fd(), PollFlags::POLLIN)];
        let ready = poll(&mut fds, PollTimeout::from(5000u16)).expect("poll the event fd");
        assert_eq!(ready, 1, "the client saw no disconnect within 5 s");
        assert_eq!(
            id.poll_notice().expect("poll_notice"),
            Some(CmNotice::Disconnected)
        );

        client
            .wait_for(SEND_WR_ID, "rdma_get_send_comp")
            .expect("the SEND's completion");
        client
            .wait_for(RECV_WR_ID, "rdma_get_recv_comp")
            .expect("the reply's completion, polled together with the SEND's");
    });
}
