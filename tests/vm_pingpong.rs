//! The cm-based `pingpong` example (the README's main job) on the VM's soft devices: both
//! ends in one process (`--local`, the README's command) and server and client as two
//! processes, on rxe0 and on siw0, polling and event mode. Each run must print
//! ibv_rc_pingpong's two closing lines with the byte and iteration counts asked for.

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

fn local(device: &str, extra: &[&str]) {
    device_ip(device); // asserts that the device is there
    let (size, iters) = (4096u64, 200u64);
    let mut cmd = Command::new(example("pingpong"));
    cmd.args(["--local", "-d", device, "-s", "4096", "-n", "200"])
        .args(extra);
    let what = format!("pingpong --local -d {device} {extra:?}");
    check_closing_lines(&run_bounded(&mut cmd, &what), size, iters, &what);
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
