//! The examples a reader runs first, on this host:
//!
//! * the README's first command, `pingpong --local`: with no kernel RDMA device it must run
//!   on the userspace iWARP provider, say so once on stderr, and print ibv_rc_pingpong's
//!   closing lines for both ends;
//! * `tcp_swap` (a program written for TcpStream runs with RdmaSocket after swapping the
//!   type names): the same program text over TCP and over RDMA must print the
//!   same exchange;
//! * `mio_echo local`: a mio event loop serving several clients;
//! * `poll_echo local`: the same on a plain poll(2) loop over the readiness fds.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "example_support/mod.rs"]
mod example_support;
use example_support::example;

/// Runs example `name` with `args` (stdin empty) and returns its stdout and stderr; fails
/// the test if it does not exit successfully within two minutes.
fn run_example(name: &str, args: &[&str]) -> (String, String) {
    let mut child = Command::new(example(name))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start the {name} example: {e}"));
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("poll the example").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{name} {args:?} still running after 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("collect output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{name} {args:?} failed ({}): {stdout}{stderr}",
        out.status
    );
    (stdout, stderr)
}

/// Whether this host's kernel has an RDMA device (then the examples use it, not uiwarp).
fn kernel_has_rdma() -> bool {
    std::fs::read_dir("/sys/class/infiniband")
        .map(|mut d| d.next().is_some())
        .unwrap_or(false)
}

#[test]
fn pingpong_local_runs_on_the_userspace_provider_without_kernel_rdma() {
    let (stdout, stderr) = run_example("pingpong", &["--local", "-s", "4096", "-n", "200"]);
    let bytes = stdout
        .lines()
        .filter(|l| l.starts_with("1638400 bytes in ") && l.ends_with(" Mbit/sec"))
        .count();
    let iters = stdout
        .lines()
        .filter(|l| l.starts_with("200 iters in ") && l.ends_with(" usec/iter"))
        .count();
    assert_eq!((bytes, iters), (2, 2), "both ends' closing lines: {stdout}");
    if !kernel_has_rdma() {
        assert_eq!(
            stderr.matches("using the userspace iWARP provider").count(),
            1,
            "the fallback to uiwarp is said once on stderr: {stderr}"
        );
    }
}

/// The lines a run prints about its exchange (addresses differ between runs, so the
/// `client: A -> B` line is left out), and its stderr.
fn run(args: &[&str]) -> (Vec<String>, String) {
    let (stdout, stderr) = run_example("tcp_swap", args);
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
    if !kernel_has_rdma() {
        assert!(
            stderr.contains("using the userspace iWARP provider (uiwarp)"),
            "without kernel RDMA the RDMA run says it uses uiwarp: {stderr:?}"
        );
    }
}

/// `mio_echo local` (a mio event loop serving many clients) runs on this host too: on
/// loopback over the userspace provider where the kernel has no RDMA device.
#[test]
fn mio_echo_local_serves_its_clients() {
    let (stdout, _) = run_example("mio_echo", &["local", "8", "4096"]);
    assert!(
        stdout.contains("8 clients connected") && stdout.contains("echoed 4096 bytes each"),
        "{stdout}"
    );
}

/// `poll_echo local` (a plain poll(2) loop over the listener's and the connections' fds,
/// and its clients on another) runs on this host too.
#[test]
fn poll_echo_local_serves_its_clients() {
    let (stdout, _) = run_example("poll_echo", &["local", "8", "100000"]);
    assert!(
        stdout.contains("8 clients connected") && stdout.contains("echoed 100000 bytes each"),
        "{stdout}"
    );
}
