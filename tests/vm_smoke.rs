//! Smoke test of the VM harness itself: the soft-RDMA device the other VM tests rely on
//! is really there. Runs only in the VM (`tests/vm/run.sh`), where these tests are run
//! with `--ignored`; on the host they are ignored.

mod vm_support;

use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::process::Command;

const IGNORE_REASON: &str = "needs the VM: run tests/vm/run.sh";

/// The state of port 1 of an RDMA device, as sysfs words it ("4: ACTIVE").
fn port_state(device: &str) -> String {
    let path = format!("/sys/class/infiniband/{device}/ports/1/state");
    fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {path}: {error}; is {device} created?"))
        .trim()
        .to_owned()
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn uverbs0_is_a_character_device() {
    let path = "/dev/infiniband/uverbs0";
    let metadata = fs::metadata(path).unwrap_or_else(|error| {
        panic!("{path} is missing ({error}): run inside the VM ({IGNORE_REASON})")
    });
    assert!(
        metadata.file_type().is_char_device(),
        "{path} is not a character device"
    );
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rxe0_port_is_active() {
    let state = port_state("rxe0");
    assert!(
        state.ends_with("ACTIVE"),
        "rxe0 port 1 is {state:?}, expected ACTIVE"
    );
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rdma_core_ibv_devinfo_sees_rxe0() {
    let output = Command::new("ibv_devinfo")
        .args(["-d", "rxe0"])
        .output()
        .expect("cannot run ibv_devinfo: apt-get install ibverbs-utils");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "ibv_devinfo -d rxe0 failed ({}): {stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("hca_id:\trxe0"),
        "no hca_id rxe0 in:\n{stdout}"
    );
    assert!(
        stdout.contains("PORT_ACTIVE"),
        "rxe0's port is not active:\n{stdout}"
    );
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn every_device_the_vm_announces_is_active() {
    let listed = std::env::var("RDMA_VM_DEVICES")
        .expect("RDMA_VM_DEVICES is unset: run inside the VM (tests/vm/run.sh)");
    let devices: Vec<&str> = listed.split_whitespace().collect();
    assert!(
        devices.contains(&"rxe0"),
        "RDMA_VM_DEVICES={listed:?} lacks rxe0"
    );
    for device in devices {
        let state = port_state(device);
        assert!(
            state.ends_with("ACTIVE"),
            "{device} port 1 is {state:?}, expected ACTIVE"
        );
    }
}

/// The report a VM test prints for a process that hangs (`vm_support::where_stuck`) really
/// shows where it waits: every thread's kernel stack and gdb's backtrace. Checked on a
/// `sleep`, whose kernel stack must name the sleep and whose backtrace must have frames.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn a_stuck_process_report_has_kernel_stacks_and_backtraces() {
    let mut child = Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("start sleep");
    // Let it reach its sleep (a report taken during exec would show exec instead).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let stat = format!("/proc/{}/stat", child.id());
    while !fs::read_to_string(&stat).is_ok_and(|s| s.contains(") S ")) {
        assert!(std::time::Instant::now() < deadline, "sleep never slept");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let report = vm_support::where_stuck(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert!(report.contains("kernel stack of"), "{report}");
    assert!(
        report.contains("nanosleep"),
        "no sleep in the kernel stack:\n{report}"
    );
    assert!(
        report.lines().any(|l| l.starts_with("#0")),
        "no gdb frames:\n{report}"
    );
    assert!(report.contains("rdma res show cm_id:"), "{report}");
}
