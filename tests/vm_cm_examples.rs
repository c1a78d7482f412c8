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

/// Whose example runs.
#[derive(Clone, Copy)]
enum Who {
    /// Ours: it prints exactly its start and end lines.
    Ours,
    /// rdma-core's: it prints more before its end line.
    RdmaCore,
}

/// librdmacm's examples' port when `-p` is not given.
const DEFAULT_PORT: u16 = 7471;

/// `server` (`rdma_server -p PORT`) and `client` (`rdma_client -s IP -p PORT`, IP being
/// `device`'s address) exchange their message: both end with "end 0". With `port` `None`
/// neither gets `-p`: both must use [`DEFAULT_PORT`].
fn exchange(device: &str, server: Who, client: Who, port: Option<u16>) {
    let ip = vm_support::device_ip(device).to_string();
    let port_text = port.map(|p| p.to_string());
    let port_args: Vec<&str> = match &port_text {
        Some(p) => vec!["-p", p],
        None => vec![],
    };
    let command = |who: Who, name: &str, args: &[&str]| match who {
        Who::Ours => ours(name, args),
        Who::RdmaCore => rdma_core(name, args),
    };
    let client_args: Vec<&str> = ["-s", ip.as_str()]
        .into_iter()
        .chain(port_args.iter().copied())
        .collect();
    let (so, co) = run_pair(
        &command(server, "rdma_server", &port_args),
        &command(client, "rdma_client", &client_args),
        port.unwrap_or(DEFAULT_PORT),
    );
    ended_well(server, "rdma_server", &so);
    ended_well(client, "rdma_client", &co);
}

fn ended_well(who: Who, name: &str, out: &str) {
    match who {
        Who::Ours => assert_eq!(out, format!("{name}: start\n{name}: end 0\n")),
        Who::RdmaCore => assert!(out.ends_with(&format!("{name}: end 0\n")), "{out}"),
    }
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn our_rdma_server_and_client() {
    exchange("rxe0", Who::Ours, Who::Ours, Some(7481));
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn our_rdma_server_with_rdma_core_client() {
    exchange("rxe0", Who::Ours, Who::RdmaCore, Some(7482));
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rdma_core_server_with_our_rdma_client() {
    exchange("rxe0", Who::RdmaCore, Who::Ours, Some(7483));
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
    exchange("siw0", Who::Ours, Who::RdmaCore, Some(7485));
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn iwarp_rdma_core_server_with_our_rdma_client() {
    exchange("siw0", Who::RdmaCore, Who::Ours, Some(7486));
}

/// With no `-p` our examples use librdmacm's default port, 7471, as rdma-core's do: our
/// server serves rdma-core's client, and rdma-core's server ours.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn default_port_matches_rdma_core_both_ways() {
    exchange("rxe0", Who::Ours, Who::RdmaCore, None);
    exchange("rxe0", Who::RdmaCore, Who::Ours, None);
}

/// `-s` makes a server listen on that one address, as rdma-core's does: with the server on
/// rxe0's address, rdma_cm shows its listener there, a client asking for the same port at
/// siw0's address finds nobody, and one at rxe0's address is served.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn server_address_flag_listens_on_that_address_as_rdma_core_does() {
    let rxe = vm_support::device_ip("rxe0").to_string();
    let siw = vm_support::device_ip("siw0").to_string();
    for (who, port) in [(Who::Ours, 7487u16), (Who::RdmaCore, 7488)] {
        let p = port.to_string();
        let server_args = ["-s", rxe.as_str(), "-p", p.as_str()];
        let server = match who {
            Who::Ours => ours("rdma_server", &server_args),
            Who::RdmaCore => rdma_core("rdma_server", &server_args),
        };
        let srv = Command::new("timeout")
            .arg("120")
            .args(&server)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {server:?}: {e}"));
        wait_listening(port);
        let ids = Command::new("rdma")
            .args(["res", "show", "cm_id"])
            .output()
            .expect("cannot run `rdma` (iproute2)");
        let ids = String::from_utf8_lossy(&ids.stdout);
        assert!(
            ids.lines()
                .any(|l| l.contains("state LISTEN") && l.contains(&format!("{rxe}:{port} "))),
            "{server:?} should listen on {rxe}:{port}:\n{ids}"
        );
        let elsewhere = Command::new("timeout")
            .arg("60")
            .args(rdma_core("rdma_client", &["-s", &siw, "-p", &p]))
            .output()
            .expect("run rdma_client");
        assert!(
            !elsewhere.status.success(),
            "{server:?}: a client at {siw}:{port} was served: {}",
            String::from_utf8_lossy(&elsewhere.stdout)
        );
        let client = rdma_core("rdma_client", &["-s", &rxe, "-p", &p]);
        let cli = Command::new("timeout")
            .arg("120")
            .args(&client)
            .output()
            .unwrap_or_else(|e| panic!("cannot start {client:?}: {e}"));
        let srv = vm_support::finish_within(srv, Duration::from_secs(100), &server);
        let (so, co) = (
            String::from_utf8_lossy(&srv.stdout).into_owned(),
            String::from_utf8_lossy(&cli.stdout).into_owned(),
        );
        assert!(
            srv.status.success() && cli.status.success(),
            "server {server:?}: {}\n{so}\nclient: {}\n{co}",
            srv.status,
            cli.status
        );
        ended_well(who, "rdma_server", &so);
        ended_well(Who::RdmaCore, "rdma_client", &co);
    }
}
