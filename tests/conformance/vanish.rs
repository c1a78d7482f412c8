//! A peer that vanishes without a word: its wire is cut (no FIN, no reset, no disconnect
//! request), and the keepalive alone must find it, within the bound the provider's
//! keepalive settings give. The peer is this test binary run again for the one test, as a
//! child process in a network namespace of its own, reached over a veth pair; taking the
//! child's end of the pair down cuts the wire. (Killing the peer would not do: its kernel
//! says goodbye. Freezing it would not do on iWARP: its kernel's TCP keeps acknowledging.)
//!
//! That is the userspace provider's case. The kernel devices' peers in the VM are killed
//! instead (their kernel answers for them): rdma_cm does not resolve a route from a child
//! namespace there, so their wire cut runs across two VMs, in `two_hosts.rs`
//! (`peer_vanishes_keepalive_fails_the_connection_across_hosts`).

use super::vm_support::sh;
use super::Fixture;
use rdmasock::{RdmaSocket, SocketOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};

/// The environment variable that makes [`peer_vanishes_reads_end_within_keepalive_time`]'s
/// child process the vanishing peer: the listener's address.
const VANISH_ADDR: &str = "RDMASOCK_VANISH_ADDR";

/// The keepalive interval of the test.
const KEEPALIVE: Duration = Duration::from_millis(500);

/// What the bound on the detection allows beyond the provider's own limits: the work of a
/// debug build (under the VM's emulation, for the kernel devices) between the limit and the
/// read's return.
const MARGIN: Duration = Duration::from_secs(5);

/// How long after its last acknowledged packet the userspace provider fails a connection
/// whose wire is cut, with a keepalive of `interval`: its TCP socket's user timeout, three
/// intervals and at least 2 s (see `RdmaSocket::set_keepalive`).
fn allowance(interval: Duration) -> Duration {
    (3 * interval).max(Duration::from_secs(2))
}

/// A cut peer fails the connection: a blocked read returns a `ConnectionReset` error (not
/// end-of-stream: no one closed) within the keepalive interval plus the provider's allowance
/// plus a margin (uiwarp; the kernel devices: [`killed_peer_ends_reads`]); bytes written after the cut are never reported delivered (the flush and
/// the close fail); writes then fail.
pub(crate) fn peer_vanishes_reads_end_within_keepalive_time(f: &Fixture) {
    if let Ok(addr) = std::env::var(VANISH_ADDR) {
        vanishing_peer(&addr, !f.provider.is_kernel_device());
    }
    if f.provider.is_kernel_device() {
        return killed_peer_ends_reads(f);
    }
    let wire = Wire::new();
    let opts = SocketOptions::builder()
        .keepalive(Some(KEEPALIVE))
        .build()
        .unwrap();
    let (l, addr) = f.listener_on(IpAddr::V4(wire.near_ip), &opts);
    let name = f.test_name("peer_vanishes_reads_end_within_keepalive_time");
    let mut peer = wire.spawn(&name, addr);
    let (mut s, _) = l.accept().expect("accept the child");
    let mut b = [0u8; 1];
    s.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"h");

    wire.cut();
    let start = Instant::now();
    // Bytes written after the cut: more than the transport can hold, so that some are
    // still outstanding when the connection fails.
    let writer = s.try_clone().unwrap();
    let writing = thread::spawn(move || {
        let mut writer = writer;
        let chunk = vec![7u8; 64 << 10];
        let mut accepted = 0usize;
        loop {
            match writer.write(&chunk) {
                Ok(n) => accepted += n,
                Err(e) => return (accepted, e, writer.flush()),
            }
        }
    });
    let r = s.read(&mut b);
    let waited = start.elapsed();
    let bound = KEEPALIVE + allowance(KEEPALIVE) + MARGIN;
    eprintln!("after the wire was cut: {r:?} within {waited:?} (bound {bound:?})");
    match &r {
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
        Ok(n) => panic!("the read returned Ok({n}), but no one closed the connection"),
    }
    assert!(
        waited <= bound,
        "the vanished peer was found after {waited:?}: past the bound of {bound:?} (keepalive \
         {KEEPALIVE:?} + the TCP user timeout + margin)"
    );
    let (accepted, write_error, flushed) = writing.join().expect("the writer");
    eprintln!("the writer: {accepted} bytes accepted, then {write_error}; flush: {flushed:?}");
    assert!(
        flushed.is_err(),
        "a flush after the bytes were lost must fail"
    );
    assert!(
        s.write(b"more").is_err(),
        "writes fail once the peer is gone"
    );
    let closed = s.close();
    eprintln!("close: {closed:?}");
    assert!(
        closed.is_err(),
        "a close after the bytes were lost must fail"
    );
    peer.kill().unwrap();
    peer.wait().unwrap();
}

/// The kernel devices' variant: the peer process is killed mid-connection (its kernel
/// then ends the connection for it); with keepalive on, our blocked read ends (end of
/// stream or an error) within 30 s, and a write then fails.
fn killed_peer_ends_reads(f: &Fixture) {
    let (l, addr) = f.listener();
    let name = f.test_name("peer_vanishes_reads_end_within_keepalive_time");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--include-ignored", "--exact", &name, "--nocapture"])
        .env(VANISH_ADDR, addr.to_string())
        .spawn()
        .expect("spawn the child");
    let (mut s, _) = l.accept().expect("accept the child");
    s.set_keepalive(Some(KEEPALIVE)).unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let start = Instant::now();
    let r = s.read(&mut b);
    let waited = start.elapsed();
    eprintln!("after the peer was killed: {r:?} within {waited:?}");
    assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
    assert!(waited < Duration::from_secs(30), "{waited:?}");
    let w = s.write(b"more").and_then(|_| s.flush());
    eprintln!("write after the peer vanished: {w:?}");
    assert!(w.is_err(), "writes fail once the peer is gone");
}

/// The child of [`peer_vanishes_reads_end_within_keepalive_time`]: connects to `addr`, says
/// hello and waits to be killed; it never returns, so it never counts as a test passed.
/// With `big_ring` its receive ring is a fixed `UNPINNED_RING` from the start (a default one
/// starts small and grows only with traffic, which the cut wire stops), so that the writer
/// can have more outstanding than the transport holds.
fn vanishing_peer(addr: &str, big_ring: bool) -> ! {
    let opts = if big_ring {
        SocketOptions::builder().recv_ring(rdmasock::socket::UNPINNED_RING)
    } else {
        SocketOptions::builder()
    };
    let opts = opts.build().unwrap();
    let mut c = RdmaSocket::connect_with(addr, &opts).expect("the child connects");
    c.write_all(b"h").unwrap();
    thread::sleep(Duration::from_secs(600));
    panic!("the vanishing peer was not killed within 600 s");
}

/// A veth pair whose far end is in a network namespace of its own; taken down on drop.
pub(crate) struct Wire {
    /// The far end's network namespace.
    pub(crate) namespace: String,
    near: String,
    far: String,
    /// The near end's address (a listener here is reached from the namespace by it).
    pub(crate) near_ip: Ipv4Addr,
    far_ip: Ipv4Addr,
}

impl Wire {
    /// Sets the pair up (names and a /30 of 10.250.0.0/16 after this process's id and the
    /// pair's number in it, so that tests running at once get pairs of their own).
    pub(crate) fn new() -> Wire {
        static PAIRS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = PAIRS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 10;
        let id = std::process::id() * 10 + n;
        let base = (id % 16_384) * 4;
        let ip =
            |host: u32| Ipv4Addr::new(10, 250, (base >> 8) as u8, (base & 255) as u8 + host as u8);
        let wire = Wire {
            namespace: format!("rdmasock-vanish-{id}"),
            near: format!("rsv{id}a"),
            far: format!("rsv{id}b"),
            near_ip: ip(1),
            far_ip: ip(2),
        };
        let (ns, near, far) = (&wire.namespace, &wire.near, &wire.far);
        sh(&format!(
            "ip netns add {ns} && ip link add {near} type veth peer name {far} && \
             ip link set {far} netns {ns} && ip addr add {}/30 dev {near} && \
             ip link set {near} up && ip netns exec {ns} ip link set lo up && \
             ip netns exec {ns} ip addr add {}/30 dev {far} && \
             ip netns exec {ns} ip link set {far} up",
            wire.near_ip, wire.far_ip
        ));
        wire
    }

    /// Runs test `name` of this binary in the namespace as the peer connecting to `addr`.
    fn spawn(&self, name: &str, addr: SocketAddr) -> Child {
        Command::new("ip")
            .args(["netns", "exec", &self.namespace])
            .arg(std::env::current_exe().unwrap())
            .args(["--include-ignored", "--exact", name, "--nocapture"])
            .env(VANISH_ADDR, addr.to_string())
            .spawn()
            .expect("spawn the child in its namespace")
    }

    /// Takes the far end down: from now on nothing passes either way, and nothing says so.
    pub(crate) fn cut(&self) {
        sh(&format!(
            "ip netns exec {} ip link set {} down",
            self.namespace, self.far
        ));
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        // Deleting the namespace deletes the far end, and with it the near one.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.namespace])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.near])
            .status();
    }
}
