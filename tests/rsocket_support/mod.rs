//! rstream's side of the rsocket interop tests, shared by `vm_rsocket.rs` (one VM) and
//! `two_hosts.rs` (two wired VMs): rstream's custom exchange (`-S size -C count -T v`)
//! played over our socket, running and checking rstream itself, and rxe0's packet counters
//! as the proof that bytes crossed the RDMA device. The including test declares
//! `vm_support` at its root.
#![allow(dead_code)] // each test binary uses a different part

use rdmasock::RdmaSocket;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// rxe0's hardware counters (sysfs).
pub(crate) const COUNTERS: &str = "/sys/class/infiniband/rxe0/ports/1/hw_counters";
/// rdma-core's preload library that turns a TCP program's sockets into rsockets.
pub(crate) const PRELOAD: &str = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so";
/// rstream's sync exchange before the timed transfers.
pub(crate) const SYNC_BYTES: usize = 16;

/// rxe0's packet counters (the device's own, not the kernel TCP stack's).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Packets {
    pub sent: u64,
    pub received: u64,
}

/// One of rxe0's counters; panics (loudly) when it cannot be read.
pub(crate) fn read_counter(name: &str) -> u64 {
    let path = format!("{COUNTERS}/{name}");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("read {path}: {e} (rxe0's hw_counters are needed as proof)"));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{path} holds {text:?}, not a number: {e}"))
}

/// rxe0's packet counters now.
pub(crate) fn packets() -> Packets {
    Packets {
        sent: read_counter("sent_pkts"),
        received: read_counter("rcvd_pkts"),
    }
}

/// rxe's path MTU: the largest IB MTU that fits eth0's MTU less rxe's header allowance.
pub(crate) fn rxe_mtu() -> u64 {
    let text = std::fs::read_to_string("/sys/class/net/eth0/mtu").expect("eth0's MTU (sysfs)");
    let eth: u64 = text.trim().parse().expect("eth0's MTU is a number");
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|&m| m + 80 <= eth)
        .unwrap_or(256)
}

/// How many packets rxe0 carried between `before` and now.
pub(crate) fn growth(before: Packets) -> Packets {
    let now = packets();
    Packets {
        sent: now.sent - before.sent,
        received: now.received - before.received,
    }
}

/// Whether `grown` is enough packets to have carried `bytes` (both directions, all through
/// rxe0 since both ends share it) at `mtu` bytes per packet.
pub(crate) fn carried_by_rdma(grown: Packets, bytes: u64, mtu: u64) -> bool {
    let least = bytes / mtu;
    grown.sent >= least && grown.received >= least
}

/// Panics unless rxe0 carried `bytes`: the proof that the exchange was RDMA, not kernel TCP.
pub(crate) fn assert_carried_by_rdma(what: &str, before: Packets, bytes: u64) {
    let mtu = rxe_mtu();
    let grown = growth(before);
    eprintln!(
        "{what}: {bytes} bytes, rxe0 sent_pkts +{} rcvd_pkts +{} (at least {} needed at MTU {mtu})",
        grown.sent,
        grown.received,
        bytes / mtu
    );
    assert!(
        carried_by_rdma(grown, bytes, mtu),
        "{what}: rxe0 carried only {grown:?} packets for {bytes} bytes (MTU {mtu}): \
         the bytes did not cross the RDMA device (kernel TCP fallback?)"
    );
}

/// rstream's `-T v` byte stream: each direction counts up from 0 (mod 256).
pub(crate) struct Pattern(pub u8);
impl Pattern {
    pub(crate) fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.0;
            self.0 = self.0.wrapping_add(1);
        }
    }
    pub(crate) fn check(&mut self, buf: &[u8], offset: u64, what: &str) {
        for (i, &b) in buf.iter().enumerate() {
            assert_eq!(
                b,
                self.0,
                "{what}: byte {} of the stream differs from rstream's pattern",
                offset + i as u64
            );
            self.0 = self.0.wrapping_add(1);
        }
    }
}

/// One rstream custom test's shape.
#[derive(Clone, Copy)]
pub(crate) struct Exchange {
    pub size: usize,
    pub count: usize,
}
impl Exchange {
    /// Bytes on the wire, both directions, sync included.
    pub(crate) fn total(self) -> u64 {
        2 * (SYNC_BYTES + self.size * self.count) as u64
    }
    pub(crate) fn args(self) -> Vec<String> {
        vec![
            "-S".into(),
            self.size.to_string(),
            "-C".into(),
            self.count.to_string(),
            "-I".into(),
            "1".into(),
        ]
    }
}

/// rstream, blocking calls, data verified; `extra` adds e.g. `-T s` and the role.
pub(crate) fn rstream(port: u16, exchange: Exchange, extra: &[&str], preload: bool) -> Child {
    let mut cmd = Command::new("rstream");
    cmd.args(["-p", &port.to_string(), "-T", "b", "-T", "v"])
        .args(exchange.args())
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if preload {
        assert!(
            std::path::Path::new(PRELOAD).exists(),
            "{PRELOAD} is missing: install rdma-core's librdmacm (package librdmacm1)"
        );
        cmd.env("LD_PRELOAD", PRELOAD);
    }
    cmd.spawn()
        .expect("start rstream (rdma-core's rdmacm-utils package)")
}

/// For a failure message: where a stuck rstream sleeps (see `vm_support::where_stuck`) and
/// rxe0's counters (retries, RNR NAKs, errors).
pub(crate) fn where_stuck(pid: u32) -> String {
    format!(
        "rstream:\n{}\nrxe0 counters: {}",
        crate::vm_support::where_stuck(pid),
        counters_text()
    )
}

/// For a failure message: all of rxe0's counters, `name=value` each, by name.
pub(crate) fn counters_text() -> String {
    let mut counters: Vec<String> = std::fs::read_dir(COUNTERS)
        .map(|dir| {
            dir.flatten()
                .map(|entry| {
                    let value = std::fs::read_to_string(entry.path()).unwrap_or_default();
                    format!("{}={}", entry.file_name().to_string_lossy(), value.trim())
                })
                .collect()
        })
        .unwrap_or_else(|e| vec![format!("({COUNTERS} unreadable: {e})")]);
    counters.sort();
    counters.join(" ")
}

/// How long one rstream run may take: seconds under TCG, and a stuck one must fail its step
/// by name instead of the binary's time limit killing the whole suite.
const RSTREAM_BOUND: Duration = Duration::from_secs(120);

/// How long one read or write of the socket side of an exchange may block.
const SOCKET_BOUND: Duration = Duration::from_secs(60);

/// Waits for an rstream process, bounded by [`RSTREAM_BOUND`]: one still running then is
/// killed and the step fails with where it was stuck.
pub(crate) fn wait_bounded(mut child: Child, what: &str) -> Output {
    let deadline = Instant::now() + RSTREAM_BOUND;
    while child.try_wait().expect("poll rstream").is_none() {
        if Instant::now() > deadline {
            let stuck = where_stuck(child.id());
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect rstream output");
            panic!(
                "{what}: rstream still running after {RSTREAM_BOUND:?}; stdout {:?} stderr {:?}\n{stuck}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collect rstream output")
}

/// Waits for rstream (bounded) and checks it exited 0 and reported its test.
pub(crate) fn finish(child: Child, what: &str) -> Output {
    let out = wait_bounded(child, what);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{what}: rstream said:\n{stdout}{stderr}");
    assert!(
        out.status.success(),
        "{what}: rstream failed ({}): stdout {stdout:?} stderr {stderr:?}",
        out.status
    );
    assert!(
        stdout.contains("custom") && !stdout.contains("verification failed"),
        "{what}: rstream did not report a verified custom test: {stdout:?}"
    );
    out
}

/// Connects to a server that is starting up: retries refusals until `deadline`.
pub(crate) fn connect_when_listening(addr: SocketAddr, server: &mut Child) -> RdmaSocket {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match RdmaSocket::connect(addr) {
            Ok(s) => return s,
            Err(e) => {
                if let Some(status) = server.try_wait().expect("poll rstream") {
                    panic!("rstream server exited ({status}) before accepting: connect said {e}");
                }
                assert!(
                    Instant::now() < deadline,
                    "connect to rstream at {addr}: {e} (for 30 s)"
                );
                thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Reads `len` bytes and checks them against rstream's pattern; `got` counts the stream.
pub(crate) fn read_checked(
    s: &mut RdmaSocket,
    len: usize,
    pattern: &mut Pattern,
    got: &mut u64,
    what: &str,
) {
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf)
        .unwrap_or_else(|e| panic!("{what}: read {len} bytes after {got}: {e}"));
    pattern.check(&buf, *got, what);
    *got += len as u64;
}

/// Writes `len` bytes of rstream's pattern.
pub(crate) fn write_pattern(s: &mut RdmaSocket, len: usize, pattern: &mut Pattern, what: &str) {
    let mut buf = vec![0u8; len];
    pattern.fill(&mut buf);
    s.write_all(&buf)
        .unwrap_or_else(|e| panic!("{what}: write {len} bytes: {e}"));
}

/// Bounds each read and write of an exchange by [`SOCKET_BOUND`]: a peer that stops fails
/// the step that waits on it (a timeout error) instead of hanging the suite.
fn bound_socket(s: &RdmaSocket) {
    s.set_read_timeout(Some(SOCKET_BOUND))
        .expect("set_read_timeout");
    s.set_write_timeout(Some(SOCKET_BOUND))
        .expect("set_write_timeout");
}

/// rstream's client side over our socket; ends by reading the server's close (EOF).
pub(crate) fn play_client(mut s: RdmaSocket, exchange: Exchange, what: &str) {
    bound_socket(&s);
    let (mut out, mut back, mut got) = (Pattern(0), Pattern(0), 0u64);
    write_pattern(&mut s, SYNC_BYTES, &mut out, what);
    read_checked(&mut s, SYNC_BYTES, &mut back, &mut got, what);
    for _ in 0..exchange.count {
        write_pattern(&mut s, exchange.size, &mut out, what);
    }
    for _ in 0..exchange.count {
        read_checked(&mut s, exchange.size, &mut back, &mut got, what);
    }
    let mut rest = Vec::new();
    s.read_to_end(&mut rest)
        .unwrap_or_else(|e| panic!("{what}: EOF after rstream's shutdown: {e}"));
    assert!(rest.is_empty(), "{what}: {} unexpected bytes", rest.len());
}

/// rstream's server side over our socket.
pub(crate) fn play_server(mut s: RdmaSocket, exchange: Exchange, what: &str) {
    bound_socket(&s);
    let (mut out, mut inbound, mut got) = (Pattern(0), Pattern(0), 0u64);
    read_checked(&mut s, SYNC_BYTES, &mut inbound, &mut got, what);
    write_pattern(&mut s, SYNC_BYTES, &mut out, what);
    for _ in 0..exchange.count {
        read_checked(&mut s, exchange.size, &mut inbound, &mut got, what);
    }
    for _ in 0..exchange.count {
        write_pattern(&mut s, exchange.size, &mut out, what);
    }
    s.shutdown(Shutdown::Write)
        .unwrap_or_else(|e| panic!("{what}: shutdown: {e}"));
    let mut rest = Vec::new();
    s.read_to_end(&mut rest)
        .unwrap_or_else(|e| panic!("{what}: EOF after rstream's shutdown: {e}"));
    assert!(rest.is_empty(), "{what}: {} unexpected bytes", rest.len());
}
