//! Our `rdma_server` and `rdma_client` examples (librdmacm's twins) against each other and
//! against rdma-core's, both ways, on rxe0 and on siw0. Runs only in the VM
//! (`tests/vm/run.sh`, which runs these with `--ignored --test-threads=1`); each test panics
//! when its device or the VM's address is missing.

mod vm_support;

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

/// Waits until an rdma_cm id listens on `port` (as `rdma res show cm_id` reports).
fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let needle = format!(":{port} ");
    loop {
        let out = Command::new("rdma")
            .args(["res", "show", "cm_id"])
            .output()
            .expect("cannot run `rdma` (iproute2)");
        let text = String::from_utf8_lossy(&out.stdout);
        if text
            .lines()
            .any(|l| l.contains("state LISTEN") && l.contains(&needle))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "nothing listens on port {port} after 30 s:\n{text}"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `server` on `port`, waits until it listens, runs `client`; both under `timeout`.
/// Returns (server stdout, client stdout) after checking both exited 0.
fn run_pair(server: &[String], client: &[String], port: u16) -> (String, String) {
    let srv = Command::new("timeout")
        .arg("120")
        .args(server)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {server:?}: {e}"));
    wait_listening(port);
    let cli = Command::new("timeout")
        .arg("120")
        .args(client)
        .output()
        .unwrap_or_else(|e| panic!("cannot start {client:?}: {e}"));
    let srv = vm_support::finish_within(srv, Duration::from_secs(100), server);
    let (so, co) = (
        String::from_utf8_lossy(&srv.stdout).into_owned(),
        String::from_utf8_lossy(&cli.stdout).into_owned(),
    );
    let report = format!(
        "server {server:?}: {}\n{so}{}\nclient {client:?}: {}\n{co}{}",
        srv.status,
        String::from_utf8_lossy(&srv.stderr),
        cli.status,
        String::from_utf8_lossy(&cli.stderr)
    );
    assert!(srv.status.success() && cli.status.success(), "{report}");
    (so, co)
}

fn ours(name: &str, args: &[&str]) -> Vec<String> {
    let mut v = vec![vm_support::example(name).display().to_string()];
    v.extend(args.iter().map(|a| a.to_string()));
    v
}

fn rdma_core(name: &str, args: &[&str]) -> Vec<String> {
    let mut v = vec![name.to_string()];
    v.extend(args.iter().map(|a| a.to_string()));
    v
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn our_rdma_server_and_client() {
    let ip = vm_support::device_ip("rxe0").to_string();
    let (so, co) = run_pair(
        &ours("rdma_server", &["-p", "7481"]),
        &ours("rdma_client", &["-s", &ip, "-p", "7481"]),
        7481,
    );
    assert_eq!(so, "rdma_server: start\nrdma_server: end 0\n");
    assert_eq!(co, "rdma_client: start\nrdma_client: end 0\n");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn our_rdma_server_with_rdma_core_client() {
    let ip = vm_support::device_ip("rxe0").to_string();
    let (so, co) = run_pair(
        &ours("rdma_server", &["-p", "7482"]),
        &rdma_core("rdma_client", &["-s", &ip, "-p", "7482"]),
        7482,
    );
    assert_eq!(so, "rdma_server: start\nrdma_server: end 0\n");
    assert!(co.ends_with("rdma_client: end 0\n"), "{co}");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rdma_core_server_with_our_rdma_client() {
    let ip = vm_support::device_ip("rxe0").to_string();
    let (so, co) = run_pair(
        &rdma_core("rdma_server", &["-p", "7483"]),
        &ours("rdma_client", &["-s", &ip, "-p", "7483"]),
        7483,
    );
    assert!(so.ends_with("rdma_server: end 0\n"), "{so}");
    assert_eq!(co, "rdma_client: start\nrdma_client: end 0\n");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn our_rdma_client_without_server_says_refused() {
    let ip = vm_support::device_ip("rxe0").to_string();
    let out = Command::new("timeout")
        .arg("120")
        .args(ours("rdma_client", &["-s", &ip, "-p", "7484"]))
        .output()
        .expect("run rdma_client");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(255), "{text}");
    assert!(
        text.contains(&format!(
            "rdma_connect: connection to {ip}:7484 refused: nothing listens on port 7484"
        )),
        "{text}"
    );
    assert!(text.ends_with("rdma_client: end -1\n"), "{text}");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn iwarp_our_rdma_server_with_rdma_core_client() {
    let ip = vm_support::device_ip("siw0").to_string();
    let (so, co) = run_pair(
        &ours("rdma_server", &["-p", "7485"]),
        &rdma_core("rdma_client", &["-s", &ip, "-p", "7485"]),
        7485,
    );
    assert_eq!(so, "rdma_server: start\nrdma_server: end 0\n");
    assert!(co.ends_with("rdma_client: end 0\n"), "{co}");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn iwarp_rdma_core_server_with_our_rdma_client() {
    let ip = vm_support::device_ip("siw0").to_string();
    let (so, co) = run_pair(
        &rdma_core("rdma_server", &["-p", "7486"]),
        &ours("rdma_client", &["-s", &ip, "-p", "7486"]),
        7486,
    );
    assert!(so.ends_with("rdma_server: end 0\n"), "{so}");
    assert_eq!(co, "rdma_client: start\nrdma_client: end 0\n");
}
