//! The tokio examples on the VM's kernel devices: `hyper_echo` (HTTP/1.1 with hyper) and
//! `grpc_echo` (gRPC with tonic) over RdmaStream on rxe0 (RoCE) and on siw0 (iWARP), server
//! and client in one process on the device's address, with small bodies on several
//! connections at once and with bodies larger than a socket's rings. Runs only in the VM
//! (`tests/vm/run.sh`, which runs these with `--ignored --test-threads=1`); each test panics
//! when its device or the VM's address is missing.

mod vm_support;

use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs `name local IP` on `device`'s address with `args`; fails unless it echoed all
/// requests over RdmaStream.
fn run_local(name: &str, device: &str, done: &str, args: &[&str]) {
    let ip = vm_support::device_ip(device).to_string();
    let mut command: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    command.extend(["local".to_string(), ip]);
    let child = Command::new(vm_support::example(name))
        .args(&command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {name}: {e}"));
    let what: Vec<String> = std::iter::once(name.to_string()).chain(command).collect();
    let out = vm_support::finish_within(child, Duration::from_secs(240), &what);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = args[1];
    assert!(
        out.status.success()
            && text.contains(" over RdmaStream: ")
            && text.contains(&format!("ok: {requests} {done} echoed")),
        "{what:?} on {device} ({}): {text}",
        out.status
    );
    assert!(
        !text.contains("userspace iWARP provider"),
        "{what:?} must run on {device}, not on the userspace provider: {text}"
    );
}

/// `name` on `device`: 100 requests of 64 B on 4 connections, then 6 of 300,000 B on 2.
fn both_sizes(name: &str, device: &str, done: &str) {
    run_local(
        name,
        device,
        done,
        &["--requests", "100", "--connections", "4", "--size", "64"],
    );
    run_local(
        name,
        device,
        done,
        &["--requests", "6", "--connections", "2", "--size", "300000"],
    );
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn hyper_echo_on_rxe() {
    both_sizes("hyper_echo", "rxe0", "bodies");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn hyper_echo_on_siw() {
    both_sizes("hyper_echo", "siw0", "bodies");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn grpc_echo_on_rxe() {
    both_sizes("grpc_echo", "rxe0", "calls");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn grpc_echo_on_siw() {
    both_sizes("grpc_echo", "siw0", "calls");
}
