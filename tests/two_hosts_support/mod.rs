//! The two-host tests' fixtures (`two_hosts.rs`, `two_hosts_soak.rs`): the VM's role and
//! devices, bounded waits, the ping-pong programs, this side of the wire for failure
//! messages, and the wire cut. The including test declares `vm_support` and
//! `rsocket_support` at its root.
#![allow(dead_code)] // each test binary uses a different part

pub(crate) mod siw_cut;

use rdmasock::verbs::{DeviceList, GidType};
use rdmasock::RdmaSocket;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long the server waits for its client, and the client for its server's listener.
pub(crate) const MEET: Duration = Duration::from_secs(180);
/// How long one blocking read or write on a test's socket may wait: far above what any of
/// these exchanges needs, so that a wire that stops between the two VMs fails the test with
/// a timeout instead of hanging it to the VM's limit.
pub(crate) const STALL: Duration = Duration::from_secs(120);

/// Bounds `s`'s blocking reads and writes (and its clones') by [`STALL`].
pub(crate) fn bounded(s: RdmaSocket) -> RdmaSocket {
    s.set_read_timeout(Some(STALL)).expect("set_read_timeout");
    s.set_write_timeout(Some(STALL)).expect("set_write_timeout");
    s
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Role {
    Server,
    Client,
}

pub(crate) fn role() -> Role {
    match std::env::var("RDMA_VM_ROLE").as_deref() {
        Ok("server") => Role::Server,
        Ok("client") => Role::Client,
        other => panic!(
            "RDMA_VM_ROLE is {other:?}: these tests run in two wired VMs, one server and one \
             client (tests/vm/two-hosts.sh)"
        ),
    }
}

pub(crate) fn device(name: &str) {
    assert!(
        std::path::Path::new("/sys/class/infiniband")
            .join(name)
            .exists(),
        "{name} is missing: tests/vm/two-hosts.sh creates rxe0 on eth0 and siw0 on eth1"
    );
}

/// A NIC's byte counter (`tx_bytes` or `rx_bytes`).
pub(crate) fn nic_bytes(netdev: &str, counter: &str) -> u64 {
    let path = format!("/sys/class/net/{netdev}/statistics/{counter}");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The index of rxe0's RoCE v2 GID for this VM's IPv4 address (`::ffff:a.b.c.d`), from the
/// library's device discovery.
pub(crate) fn roce_v2_gid_index() -> String {
    let mapped = format!("::ffff:{}", crate::vm_support::env_ip("RDMA_VM_RXE_IP"));
    let list = DeviceList::discover().expect("discover the RDMA devices");
    let port = list
        .pick(Some("rxe0"))
        .expect("rxe0 listed")
        .port(1)
        .expect("rxe0 port 1");
    let gid = port
        .gids
        .iter()
        .find(|g| g.gid.to_string() == mapped && g.gid_type == GidType::RoceV2)
        .unwrap_or_else(|| panic!("rxe0 has no RoCE v2 GID {mapped}: {:?}", port.gids));
    gid.index.to_string()
}

/// How long a ping-pong program may run once its peer is there.
pub(crate) const RUN: Duration = Duration::from_secs(60);

/// For a failure message: this host's side of the wire (link counters, neighbours, TCP
/// sockets, rxe0's counters), so that a stall between the two VMs shows on which side the
/// frames stopped.
pub(crate) fn wire_state() -> String {
    let run = |program: &str, args: &[&str]| {
        let out = crate::vm_support::command_text(program, args);
        format!("{program} {}:\n{out}", args.join(" "))
    };
    [
        run("ip", &["-s", "link", "show", "eth0"]),
        run("ip", &["neigh", "show", "dev", "eth0"]),
        run("ss", &["-tnio"]),
        format!(
            "rxe0 counters: {}\n",
            crate::rsocket_support::counters_text()
        ),
    ]
    .concat()
}

/// Runs a ping-pong program (ours or rdma-core's) with rdma-core's flags; `peer`: the
/// client's server. A client retries while the server's port is not open yet.
pub(crate) fn pingpong(program: PathBuf, port: u16, peer: Option<IpAddr>) -> String {
    let what = format!(
        "{} {}",
        program.display(),
        if peer.is_some() { "client" } else { "server" }
    );
    let gid_index = roce_v2_gid_index();
    let end = Instant::now() + MEET;
    loop {
        let mut cmd = Command::new(&program);
        cmd.args(["-d", "rxe0", "-g", &gid_index, "-n", "300", "-c", "-p"])
            .arg(port.to_string());
        if let Some(peer) = peer {
            cmd.arg(peer.to_string());
        }
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        // 300 round trips take a few seconds; a server waits for its client up to MEET.
        let out: Output = crate::vm_support::finish_within_explained(
            child,
            MEET + RUN,
            std::slice::from_ref(&what),
            wire_state,
        );
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            // 300 iterations of 4096 bytes each way.
            assert!(
                stdout.lines().any(|l| l.starts_with("2457600 bytes in ")),
                "{what}: no closing line:\n{stdout}"
            );
            assert!(stdout.contains("300 iters in "), "{what}:\n{stdout}");
            return stdout;
        }
        if peer.is_some() && stderr.contains("Couldn't connect to") && Instant::now() < end {
            thread::sleep(Duration::from_millis(200));
            continue;
        }
        panic!("{what} failed ({}):\n{stdout}\n{stderr}", out.status);
    }
}

/// Runs `tc` with `args`, panicking with its output when it fails.
pub(crate) fn tc(args: &[&str]) -> String {
    let out = Command::new("tc")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run tc (iproute2): {e}"));
    assert!(
        out.status.success(),
        "tc {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A NIC's wire cut inside this guest: every frame in and out is dropped (tc matchall drop
/// on the ingress and egress hooks) while the NIC itself stays up and keeps taking frames
/// off its ring. The peer sees a host that vanished, as with the link taken down, but the
/// NIC, rxe0's port and the guest's routes and neighbours go through no down and up (the
/// one unusual event before both two-host runs that hung). Dropping it mends the wire,
/// also when the test fails.
pub(crate) struct WireCut(&'static str);

impl WireCut {
    pub(crate) fn new(netdev: &'static str) -> WireCut {
        tc(&["qdisc", "add", "dev", netdev, "clsact"]);
        let cut = WireCut(netdev);
        for hook in ["ingress", "egress"] {
            tc(&[
                "filter", "add", "dev", netdev, hook, "matchall", "action", "drop",
            ]);
        }
        cut
    }

    /// The frames the cut has dropped so far: (in, out).
    pub(crate) fn dropped(&self) -> (u64, u64) {
        let dropped = |hook: &str| {
            let text = tc(&["-s", "filter", "show", "dev", self.0, hook]);
            // "Sent 1234 bytes 17 pkt (dropped 17, overlimits 0 requeues 0)"
            text.lines()
                .find_map(|l| l.trim().strip_prefix("Sent "))
                .and_then(|l| l.split_whitespace().nth(2))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no packet count in tc's {hook} statistics:\n{text}"))
        };
        (dropped("ingress"), dropped("egress"))
    }
}

impl Drop for WireCut {
    fn drop(&mut self) {
        let out = Command::new("tc")
            .args(["qdisc", "del", "dev", self.0, "clsact"])
            .output();
        if !matches!(&out, Ok(o) if o.status.success()) && !thread::panicking() {
            panic!("mending {}'s wire (tc qdisc del … clsact): {out:?}", self.0);
        }
    }
}
