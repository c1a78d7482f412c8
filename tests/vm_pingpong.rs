//! The cm-based `pingpong` example (the README's main job) on the VM's soft devices: both
//! ends in one process (`--local`, the README's command) and server and client as two
//! processes, on rxe0 and on siw0, polling and event mode. Each run must print
//! ibv_rc_pingpong's two closing lines with the byte and iteration counts asked for; `-e`
//! must make the waits sleep on the completion channel, and a client's `-d` must pick the
//! device it connects through.

mod vm_support;

use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};
use vm_support::{device_ip, example};

/// Runs `cmd` to completion within 120 s (killed and failed past that); returns its output.
fn run_bounded(cmd: &mut Command, what: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("poll child").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect output");
            panic!(
                "{what} still running after 120 s: stdout {:?} stderr {:?}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collect output")
}

fn check_closing_lines(out: &Output, size: u64, iters: u64, what: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what} failed ({}): stdout {stdout:?} stderr {stderr:?}",
        out.status
    );
    let bytes = format!("{} bytes in ", size * iters * 2);
    let l1 = stdout
        .lines()
        .any(|l| l.starts_with(&bytes) && l.contains(" seconds = ") && l.ends_with(" Mbit/sec"));
    let l2 = stdout.lines().any(|l| {
        l.starts_with(&format!("{iters} iters in "))
            && l.contains(" seconds = ")
            && l.ends_with(" usec/iter")
    });
    assert!(
        l1 && l2,
        "{what}: closing lines missing or malformed: stdout {stdout:?} stderr {stderr:?}"
    );
}

/// Runs `pingpong --local` on `device` (200 exchanges of 4 KiB) with `extra` flags, checks
/// its closing lines and returns its output.
fn local(device: &str, extra: &[&str]) -> Output {
    device_ip(device); // asserts that the device is there
    let (size, iters) = (4096u64, 200u64);
    let mut cmd = Command::new(example("pingpong"));
    cmd.args(["--local", "-d", device, "-s", "4096", "-n", "200"])
        .args(extra);
    let what = format!("pingpong --local -d {device} {extra:?}");
    let out = run_bounded(&mut cmd, &what);
    check_closing_lines(&out, size, iters, &what);
    out
}

/// How one end's blocking calls waited, from its `  END waits: W (channel sleeps S, naps
/// N)` line on stderr.
#[derive(Debug)]
struct Waits {
    waits: u64,
    channel_sleeps: u64,
    naps: u64,
}

/// The `end` ("client" or "server") line of `stderr`; panics when it is missing.
fn waits(stderr: &str, end: &str) -> Waits {
    let prefix = format!("{end} waits: ");
    let line = stderr
        .lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line: {stderr:?}"));
    let numbers: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|t| !t.is_empty())
        .map(|t| t.parse().unwrap())
        .collect();
    match numbers[..] {
        [waits, channel_sleeps, naps] => Waits {
            waits,
            channel_sleeps,
            naps,
        },
        _ => panic!("malformed `{prefix}` line: {line:?}"),
    }
}

/// Server and client as two processes; the client retries while the server is starting.
fn two_processes(device: &str, port: u16, extra: &[&str]) {
    let ip = device_ip(device);
    let (size, iters) = (1000u64, 300u64);
    let common = |c: &mut Command| {
        c.args([
            "-d",
            device,
            "-s",
            "1000",
            "-n",
            "300",
            "-p",
            &port.to_string(),
        ])
        .args(extra);
    };
    let mut server_cmd = Command::new(example("pingpong"));
    common(&mut server_cmd);
    let what_s = format!("pingpong server -d {device} {extra:?}");
    let server = thread::spawn(move || run_bounded(&mut server_cmd, &what_s));
    let what_c = format!("pingpong client -d {device} {extra:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let client = loop {
        let mut c = Command::new(example("pingpong"));
        common(&mut c);
        c.arg(ip.to_string());
        let out = run_bounded(&mut c, &what_c);
        let refused = String::from_utf8_lossy(&out.stderr).contains("refused");
        if out.status.success() || !refused || Instant::now() > deadline {
            break out;
        }
        thread::sleep(Duration::from_millis(100));
    };
    check_closing_lines(&client, size, iters, &what_c);
    let server = server.join().expect("server thread");
    check_closing_lines(&server, size, iters, "pingpong server");
}

/// `-e` switches both ends' sockets to event mode: each wait sleeps on the completion
/// channel at once (as many channel sleeps as waits, give or take a wake-up for the other
/// completion) and never naps; without it the adaptive busy-poll ends nearly every wait in
/// its spin (a handful of sleeps in 200 waits on rxe0 and siw0). Half the waits divides the
/// two with a wide margin either way.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn events_flag_makes_the_waits_sleep_on_the_channel() {
    for device in ["rxe0", "siw0"] {
        for events in [false, true] {
            let flags: &[&str] = if events { &["-e"] } else { &[] };
            let out = local(device, flags);
            let stderr = String::from_utf8_lossy(&out.stderr);
            for end in ["client", "server"] {
                let w = waits(&stderr, end);
                println!("{device} {flags:?} {end}: {w:?}");
                assert!(w.waits >= 100, "{device} {flags:?} {end}: {w:?}");
                let slept_mostly = w.channel_sleeps * 2 >= w.waits;
                if events {
                    assert!(
                        slept_mostly && w.naps == 0,
                        "{device} -e {end}: event mode must sleep on the channel: {w:?}"
                    );
                } else {
                    assert!(
                        !slept_mostly,
                        "{device} {end}: polling mode must mostly spin: {w:?}"
                    );
                }
            }
        }
    }
}

/// A client's `-d` picks the device it connects through: `-d siw0` towards rxe0's address
/// is refused before connecting, naming the address, the device and the route's source;
/// `-d rxe0` then reaches the waiting server, which served that one connection only.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn client_connects_only_through_the_device_d_names() {
    let (rxe, siw) = (device_ip("rxe0"), device_ip("siw0"));
    let port = 18713u16;
    let args = |device: &str| -> Vec<String> {
        [
            "-d",
            device,
            "-s",
            "1000",
            "-n",
            "50",
            "-p",
            &port.to_string(),
        ]
        .iter()
        .map(|a| a.to_string())
        .collect()
    };
    let mut server_cmd = Command::new(example("pingpong"));
    server_cmd.args(args("rxe0"));
    let server = thread::spawn(move || run_bounded(&mut server_cmd, "pingpong server -d rxe0"));
    let mut wrong = Command::new(example("pingpong"));
    wrong.args(args("siw0")).arg(rxe.to_string());
    let out = run_bounded(&mut wrong, "pingpong client -d siw0");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "-d siw0 reached {rxe}: {stderr}");
    let expected = format!(
        "pingpong: {rxe}:{port} is not reached through siw0 ({siw}): the route to it leaves \
         from {rxe}"
    );
    assert!(
        stderr.contains(&expected),
        "expected `{expected}`: {stderr}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let client = loop {
        let mut c = Command::new(example("pingpong"));
        c.args(args("rxe0")).arg(rxe.to_string());
        let out = run_bounded(&mut c, "pingpong client -d rxe0");
        let refused = String::from_utf8_lossy(&out.stderr).contains("refused");
        if out.status.success() || !refused || Instant::now() > deadline {
            break out;
        }
        thread::sleep(Duration::from_millis(100));
    };
    check_closing_lines(&client, 1000, 50, "pingpong client -d rxe0");
    let server = server.join().expect("server thread");
    check_closing_lines(&server, 1000, 50, "pingpong server -d rxe0");
    let served = String::from_utf8_lossy(&server.stderr);
    assert_eq!(served.matches("connection from").count(), 1, "{served}");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn local_on_rxe0_polling_and_events() {
    local("rxe0", &[]);
    local("rxe0", &["-e"]);
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn local_on_siw0_polling_and_events() {
    local("siw0", &[]);
    local("siw0", &["-e"]);
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn server_and_client_on_rxe0() {
    two_processes("rxe0", 18711, &[]);
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn server_and_client_on_siw0() {
    two_processes("siw0", 18712, &["-e"]);
}

/// A new user's first try with a provider forced, in a VM with rxe0 (first) and siw0:
/// `RDMASOCK_PROVIDER=siw pingpong --local` must run on siw0, whose address it must pick
/// (rxe0's address is one the forced siw provider cannot serve: the client was refused
/// there, and the process hung with only the server's line printed).
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn forced_siw_local_runs_on_siw0_with_rxe0_listed_first() {
    let (rxe, siw) = (device_ip("rxe0"), device_ip("siw0"));
    let mut cmd = Command::new(example("pingpong"));
    cmd.args(["--local", "-s", "4096", "-n", "200"])
        .env("RDMASOCK_PROVIDER", "siw");
    let what = "RDMASOCK_PROVIDER=siw pingpong --local";
    let out = run_bounded(&mut cmd, what);
    check_closing_lines(&out, 4096, 200, what);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("local mode: server on {siw}:")),
        "{what} must listen on siw0's address {siw}, not rxe0's {rxe}: {stderr}"
    );
}

/// `RDMASOCK_PROVIDER=rxe pingpong --local` on rxe0's address, and a client that fails
/// (forced onto siw, which cannot serve rxe0's address) ends the run with its error, non-zero,
/// instead of leaving the process waiting on the server thread.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn a_failing_client_ends_pingpong_with_its_error() {
    let rxe = device_ip("rxe0");
    let mut cmd = Command::new(example("pingpong"));
    cmd.args(["--local", "-d", "rxe0", "-s", "64", "-n", "10"])
        .env("RDMASOCK_PROVIDER", "siw");
    let what = "RDMASOCK_PROVIDER=siw pingpong --local -d rxe0";
    let out = run_bounded(&mut cmd, what);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{what} succeeded: {stderr}");
    assert!(
        stderr.contains("pingpong: ") && stderr.contains(&rxe.to_string()),
        "{what} prints its error: {stderr}"
    );
}
