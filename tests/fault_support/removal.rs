//! A spare kernel RDMA device of the fault test's own, on a dummy netdev (the suite's rxe0
//! and siw0 stay), for the device-removal row: created, then removed under a live stream.

use crate::conformance::vm_support;
use crate::conformance::Provider;
use std::net::IpAddr;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The spare device's netdev.
const NETDEV: &str = "ftdummy0";

/// A device (`rxe8` or `siw8`) on [`NETDEV`] with address 10.98.8.1, its port ACTIVE. On
/// drop, the netdev is deleted once the device is gone; a device still there gets its removal
/// started and left running (a socket still holding it would make the kernel's removal wait
/// in an uninterruptible sleep, hanging the test instead of failing it).
pub(crate) struct SpareDevice {
    name: String,
    removing: Option<Child>,
}

impl SpareDevice {
    /// Creates the spare device of `provider`'s type (rxe or siw); panics outside the VM.
    pub(crate) fn create(provider: Provider) -> SpareDevice {
        let kind = match provider {
            Provider::Rxe => "rxe",
            Provider::Siw => "siw",
            Provider::Uiwarp => panic!("the userspace provider has no device to remove"),
        };
        vm_support::device_ip(&format!("{kind}0"));
        let name = format!("{kind}8");
        vm_support::sh(&format!(
            "ip link add {NETDEV} type dummy && ip addr add 10.98.8.1/24 dev {NETDEV} && \
             ip link set {NETDEV} up && rdma link add {name} type {kind} netdev {NETDEV}"
        ));
        let state = format!("/sys/class/infiniband/{name}/ports/1/state");
        let spare = SpareDevice {
            name,
            removing: None,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = std::fs::read_to_string(&state).unwrap_or_default();
            if s.contains("ACTIVE") {
                break spare;
            }
            assert!(Instant::now() < deadline, "{state} is {s:?} after 10 s");
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The device's address.
    pub(crate) fn ip(&self) -> IpAddr {
        "10.98.8.1".parse().unwrap()
    }

    /// Starts `rdma link delete` (which returns once the device's users let it go).
    pub(crate) fn remove(&mut self) {
        let child = Command::new("rdma")
            .args(["link", "delete", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rdma link delete");
        self.removing = Some(child);
    }

    /// With the device's users gone: waits for the removal to finish (30 s at most).
    pub(crate) fn finish(mut self) {
        let child = self.removing.take().expect("the removal was started");
        let what = ["rdma link delete".to_string(), self.name.clone()];
        let out = vm_support::finish_within(child, Duration::from_secs(30), &what);
        assert!(
            out.status.success(),
            "rdma link delete {}: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for SpareDevice {
    fn drop(&mut self) {
        let present =
            std::path::Path::new(&format!("/sys/class/infiniband/{}", self.name)).exists();
        if present && self.removing.is_none() {
            let _ = Command::new("rdma")
                .args(["link", "delete", &self.name])
                .stderr(Stdio::null())
                .spawn();
        } else if !present {
            let _ = Command::new("ip").args(["link", "del", NETDEV]).status();
        }
    }
}
