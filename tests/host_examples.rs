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
use example_support::{example, output_within};

/// Runs example `name` with `args` (stdin empty) and returns its stdout and stderr; fails
/// the test if it does not exit successfully within two minutes.
fn run_example(name: &str, args: &[&str]) -> (String, String) {
    let child = Command::new(example(name))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start the {name} example: {e}"));
    let out = output_within(child, Duration::from_secs(120), &format!("{name} {args:?}"));
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
    let fallbacks = stderr.matches("using the userspace iWARP provider").count();
    if kernel_has_rdma() {
        assert_eq!(fallbacks, 0, "a kernel device serves the run: {stderr}");
    } else {
        assert_eq!(
            fallbacks, 1,
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
    let says_uiwarp = stderr.contains("using the userspace iWARP provider (uiwarp)");
    if kernel_has_rdma() {
        assert!(!says_uiwarp, "a kernel device serves the run: {stderr:?}");
    } else {
        assert!(
            says_uiwarp,
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

/// Starts example `name` with `args` and `env`, its output piped.
fn spawn_example(name: &str, args: &[&str], env: &[(&str, &str)]) -> std::process::Child {
    Command::new(example(name))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start the {name} example: {e}"))
}

/// Waits up to `limit` for `child` to exit (killed and failed past that); returns its exit
/// status and stderr (`stderr` when the caller took the pipe and reads it).
fn exit_within(
    mut child: std::process::Child,
    stderr: Option<std::sync::mpsc::Receiver<String>>,
    limit: Duration,
    what: &str,
) -> (std::process::ExitStatus, String) {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("poll the example").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect output");
            let taken: String = stderr.iter().flat_map(|r| r.try_iter()).collect();
            panic!(
                "{what} still running {limit:?} after its peer failed (it hangs): stderr {:?}",
                taken + &String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("collect output");
    let taken: String = stderr.iter().flat_map(|r| r.iter()).collect();
    (out.status, taken + &String::from_utf8_lossy(&out.stderr))
}

/// A port that nothing listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("an ephemeral port")
        .port()
}

/// The lines of `child`'s stderr as they come (the pipe is taken from it).
fn stderr_lines(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let pipe = std::io::BufReader::new(child.stderr.take().expect("piped stderr"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in pipe.lines().map_while(Result::ok) {
            if tx.send(line + "\n").is_err() {
                break;
            }
        }
    });
    rx
}

/// One side of `pingpong` (two processes over uiwarp) dies mid-run: the other prints its
/// error (`pingpong: server read, iteration N: ...`) and exits non-zero, within 30 s.
#[test]
fn pingpong_ends_with_the_error_when_its_peer_dies() {
    for dies in ["server", "client"] {
        let port = free_port().to_string();
        let many = ["-s", "64", "-n", "2000000000"];
        let mut server = spawn_example("pingpong", &[&["-p", &port][..], &many].concat(), &[]);
        let server_err = stderr_lines(&mut server);
        // The server says so on stderr once a client connected: then the run is under way.
        // A client that came before the server listened is refused: another one tries.
        let deadline = Instant::now() + Duration::from_secs(60);
        let client = loop {
            assert!(Instant::now() < deadline, "no client connected within 60 s");
            let mut c = spawn_example(
                "pingpong",
                &[&["-p", &port][..], &many, &["127.0.0.1"]].concat(),
                &[],
            );
            let connected = loop {
                if let Ok(line) = server_err.recv_timeout(Duration::from_millis(50)) {
                    if line.contains("connection from") {
                        break true;
                    }
                }
                if c.try_wait().expect("poll the client").is_some() {
                    break false;
                }
            };
            if connected {
                break c;
            }
        };
        let what = if dies == "server" {
            "the client"
        } else {
            "the server"
        };
        let (status, stderr) = if dies == "server" {
            server.kill().expect("kill");
            server.wait().expect("reap");
            exit_within(client, None, Duration::from_secs(30), what)
        } else {
            let mut client = client;
            client.kill().expect("kill");
            client.wait().expect("reap");
            exit_within(server, Some(server_err), Duration::from_secs(30), what)
        };
        assert!(
            !status.success(),
            "{what} exited with success after its peer died"
        );
        assert!(
            stderr.contains("pingpong: ") && stderr.contains("iteration"),
            "{what} says what failed: {stderr:?}"
        );
    }
}

/// `pingpong --local` with a provider forced that no device here is of (this host has
/// none): it says so and exits non-zero, instead of listening on an address that provider
/// cannot serve and hanging.
#[test]
fn pingpong_local_ends_with_the_error_when_the_forced_provider_has_no_device() {
    assert!(
        !kernel_has_rdma(),
        "this test expects a host without kernel RDMA devices"
    );
    let child = spawn_example(
        "pingpong",
        &["--local", "-n", "10"],
        &[("RDMASOCK_PROVIDER", "siw")],
    );
    let (status, stderr) = exit_within(child, None, Duration::from_secs(30), "pingpong --local");
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("pingpong: RDMASOCK_PROVIDER=siw forces the siw provider"),
        "{stderr:?}"
    );
}
