//! `examples/tcp_swap.rs` (issue #3: a program written for TcpStream runs with RdmaSocket
//! after swapping the type names): the same program text over TCP and over RDMA must print
//! the same exchange. On a host without kernel RDMA the RDMA run uses the userspace provider
//! on loopback and says so on stderr.

use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/tcp_swap-HASH -> target/<profile>/examples
    let path = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("examples")
        .join(name);
    assert!(
        path.is_file(),
        "example binary {} not found (cargo test builds the examples)",
        path.display()
    );
    path
}

/// The lines a run prints about its exchange (addresses differ between runs, so the
/// `client: A -> B` line is left out), and its stderr.
fn run(args: &[&str]) -> (Vec<String>, String) {
    let out = Command::new(example("tcp_swap"))
        .args(args)
        .output()
        .expect("run the tcp_swap example");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "tcp_swap {args:?} failed ({}): {stdout}{stderr}",
        out.status
    );
    let exchange = stdout
        .lines()
        .filter(|l| l.starts_with("client: got") || l.starts_with("ok: "))
        .map(str::to_string)
        .collect();
    (exchange, stderr)
}

#[test]
fn the_tcp_program_runs_unchanged_over_rdma() {
    let (tcp, _) = run(&["--tcp"]);
    let (rdma, stderr) = run(&[]);
    assert_eq!(
        tcp,
        [
            "client: got \"HELLO\"",
            "client: got \"RDMA SAYS HI\"",
            "client: got \"BYE\"",
            "ok: 3 lines round-tripped"
        ],
        "over TCP"
    );
    assert_eq!(
        rdma, tcp,
        "over RDMA the same program prints the same exchange"
    );
    let kernel_rdma = std::fs::read_dir("/sys/class/infiniband")
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    if !kernel_rdma {
        assert!(
            stderr.contains("using the userspace iWARP provider (uiwarp)"),
            "without kernel RDMA the RDMA run says it uses uiwarp: {stderr:?}"
        );
    }
}
