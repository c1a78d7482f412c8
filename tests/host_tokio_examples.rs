//! The tokio examples end to end on this host: `hyper_echo` (HTTP/1.1 with hyper) and
//! `grpc_echo` (gRPC with tonic), each over RdmaStream (the userspace iWARP provider on
//! loopback where the kernel has no RDMA device) and over TCP (`--tcp`), with small bodies on
//! several connections at once and with bodies larger than a socket's rings; and each
//! example's server and client as two processes.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

#[path = "example_support/mod.rs"]
mod example_support;
use example_support::{example, output_within};

/// Waits up to two minutes for `child` to exit; kills it and fails the test past that.
fn finish(child: Child, what: &str) -> (bool, String) {
    let out = output_within(child, Duration::from_secs(120), what);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Runs example `name` with `args` and returns its stdout and stderr together; fails the
/// test unless it exits successfully.
fn run_example(name: &str, args: &[&str]) -> String {
    let child = Command::new(example(name))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start the {name} example: {e}"));
    let (ok, text) = finish(child, &format!("{name} {args:?}"));
    assert!(ok, "{name} {args:?} failed: {text}");
    text
}

/// `name` in one process with `transport_args` (`[]` or `["--tcp"]`): 300 requests of 64 B
/// on 6 connections, then 12 of 300,000 B (more than a ring holds) on 3, all echoed.
fn local_runs(name: &str, transport_args: &[&str], done: &str) {
    let over = if transport_args.is_empty() {
        "RdmaStream"
    } else {
        "TcpStream"
    };
    for (requests, connections, size) in [("300", "6", "64"), ("12", "3", "300000")] {
        let mut args = transport_args.to_vec();
        args.extend([
            "--requests",
            requests,
            "--connections",
            connections,
            "--size",
            size,
        ]);
        let text = run_example(name, &args);
        assert!(
            text.contains(&format!(
                "{requests} requests of {size} B on {connections} connections over {over}: "
            )) && text.contains(&format!("ok: {requests} {done} echoed")),
            "{name} {args:?}: {text}"
        );
    }
}

#[test]
fn hyper_echo_over_rdma_and_over_tcp() {
    local_runs("hyper_echo", &[], "bodies");
    local_runs("hyper_echo", &["--tcp"], "bodies");
}

#[test]
fn grpc_echo_over_rdma_and_over_tcp() {
    local_runs("grpc_echo", &[], "calls");
    local_runs("grpc_echo", &["--tcp"], "calls");
}

/// `name server 127.0.0.1:0` in one process, `name client ADDRESS` (the address the server
/// printed) in another.
fn server_and_client(name: &str, done: &str) {
    let mut server = Command::new(example(name))
        .args(["server", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("start the {name} server: {e}"));
    let mut first = String::new();
    BufReader::new(server.stdout.as_mut().expect("server stdout"))
        .read_line(&mut first)
        .expect("read the server's first line");
    let address = first
        .strip_prefix(&format!("{name}: serving on "))
        .and_then(|rest| rest.strip_suffix(" over RdmaStream\n"));
    let Some(address) = address else {
        let _ = server.kill();
        panic!("{name} server's first line: {first:?}");
    };
    let client = Command::new(example(name))
        .args(["--requests", "50", "client", address])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start the {name} client: {e}"));
    let (ok, text) = finish(client, &format!("{name} client"));
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        ok && text.contains(&format!("ok: 50 {done} echoed")),
        "{text}"
    );
}

#[test]
fn hyper_echo_server_and_client_in_two_processes() {
    server_and_client("hyper_echo", "bodies");
}

#[test]
fn grpc_echo_server_and_client_in_two_processes() {
    server_and_client("grpc_echo", "calls");
}
