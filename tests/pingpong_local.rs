//! The README's first command, `pingpong --local`, on this host: with no kernel RDMA device
//! it must run on the userspace iWARP provider, say so once on stderr, and print
//! ibv_rc_pingpong's closing lines for both ends.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/pingpong_local-HASH -> target/<profile>/examples
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

#[test]
fn pingpong_local_runs_on_the_userspace_provider_without_kernel_rdma() {
    let has_kernel_rdma = std::fs::read_dir("/sys/class/infiniband")
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    let mut child = Command::new(example("pingpong"))
        .args(["--local", "-s", "4096", "-n", "200"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the pingpong example");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().expect("poll pingpong").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("pingpong --local still running after 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("collect output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "pingpong --local failed ({}): {stdout} {stderr}",
        out.status
    );
    let bytes = stdout
        .lines()
        .filter(|l| l.starts_with("1638400 bytes in ") && l.ends_with(" Mbit/sec"))
        .count();
    let iters = stdout
        .lines()
        .filter(|l| l.starts_with("200 iters in ") && l.ends_with(" usec/iter"))
        .count();
    assert_eq!((bytes, iters), (2, 2), "both ends' closing lines: {stdout}");
    if !has_kernel_rdma {
        assert_eq!(
            stderr.matches("using the userspace iWARP provider").count(),
            1,
            "the fallback to uiwarp is said once on stderr: {stderr}"
        );
    }
}
