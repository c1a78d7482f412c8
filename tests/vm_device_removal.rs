//! An RDMA device removed under live sockets, in the VM (`tests/vm/run.sh`, which runs these
//! with `--ignored --test-threads=1`): a soft-RoCE device of the test's own (`rxe9` on a
//! dummy netdev, so the suite's rxe0 stays) is deleted while a listener and a connection
//! use it. The connection's reads fail (naming the removal, or the connection broken when the
//! peer's id went first), the listener's `accept` returns an
//! error instead of waiting forever, and once they are dropped the kernel completes the
//! removal (`rdma link delete` returns). Panics when it is not run in the VM.

use rdmasock::{RdmaListener, RdmaSocket};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

#[path = "vm_support/mod.rs"]
mod vm_support;

/// The device the test makes and removes, its netdev and its address.
const DEVICE: &str = "rxe9";
const NETDEV: &str = "rmdummy0";
const ADDRESS: &str = "10.98.9.1";

/// `rxe9` on a dummy netdev with [`ADDRESS`], its port ACTIVE. On drop, the netdev is
/// deleted when the device is gone; a device still there gets a removal started and left
/// running: after a failed check a socket or listener may still hold the device, and the
/// kernel's removal (and a netdev deletion under it) would wait in an uninterruptible sleep,
/// hanging the test instead of failing it.
struct SpareDevice;

impl SpareDevice {
    fn create() -> SpareDevice {
        vm_support::device_ip("rxe0");
        vm_support::sh(&format!(
            "ip link add {NETDEV} type dummy && ip addr add {ADDRESS}/24 dev {NETDEV} && \
             ip link set {NETDEV} up && rdma link add {DEVICE} type rxe netdev {NETDEV}"
        ));
        let spare = SpareDevice;
        let state = format!("/sys/class/infiniband/{DEVICE}/ports/1/state");
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
}

impl Drop for SpareDevice {
    fn drop(&mut self) {
        if std::path::Path::new(&format!("/sys/class/infiniband/{DEVICE}")).exists() {
            let _ = Command::new("rdma")
                .args(["link", "delete", DEVICE])
                .stderr(Stdio::null())
                .spawn();
        } else {
            let _ = Command::new("ip").args(["link", "del", NETDEV]).status();
        }
    }
}

/// Expects `r` to be an error that names the device's removal.
fn assert_removed<T: std::fmt::Debug>(what: &str, r: std::io::Result<T>) -> std::io::Error {
    let err = r.expect_err(what);
    eprintln!("{what}: {err}");
    assert!(
        err.to_string().contains("was removed (DEVICE_REMOVAL)"),
        "{what}: {err}"
    );
    err
}

/// Expects `r` to be a connection's end caused by the removal: the removal itself, or (when
/// the kernel destroyed the peer's id on the same device first and its DREQ arrived before
/// this id's DEVICE_REMOVAL) the connection broken without the peer's DISCONNECT message.
fn assert_ended_by_removal<T: std::fmt::Debug>(what: &str, r: std::io::Result<T>) {
    let err = r.expect_err(what);
    eprintln!("{what}: {err}");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{what}: {err}");
    let text = err.to_string();
    assert!(
        text.contains("was removed (DEVICE_REMOVAL)")
            || text.contains("the connection broke without a DISCONNECT message"),
        "{what}: {err}"
    );
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn removing_the_device_fails_its_sockets_and_listener_and_completes() {
    let spare = SpareDevice::create();
    let l = RdmaListener::bind(format!("{ADDRESS}:0")).expect("bind on rxe9's address");
    let addr: SocketAddr = l.local_addr().unwrap();
    let server = thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept on rxe9");
        let mut b = [0u8; 2];
        s.read_exact(&mut b).expect("the client's bytes");
        s.write_all(&b).expect("echo");
        // Waits for the next client, which never comes: the removal must end this.
        let accepted = l.accept().map(|_| ());
        (s, accepted)
    });
    let mut c = RdmaSocket::connect(addr).expect("connect over rxe9");
    c.write_all(b"hi").unwrap();
    let mut b = [0u8; 2];
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"hi");

    let delete = Command::new("rdma")
        .args(["link", "delete", DEVICE])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rdma link delete");
    // A bound on the wait: a read that never learned of the removal fails as a timeout.
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    assert_ended_by_removal("the client's read", c.read(&mut b));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !server.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the listener's accept still waits 30 s after the device's removal"
        );
        thread::sleep(Duration::from_millis(20));
    }
    let (mut s, accepted) = server.join().expect("server thread");
    let err = assert_removed("the listener's accept", accepted);
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    assert_ended_by_removal("the server's read", s.read(&mut b));
    assert!(
        c.write_all(b"more").and_then(|_| c.flush()).is_err(),
        "writes fail after the removal"
    );

    // With every user gone, the kernel finishes the removal.
    drop((c, s));
    let out = vm_support::finish_within(
        delete,
        Duration::from_secs(30),
        &["rdma link delete".to_string(), DEVICE.to_string()],
    );
    assert!(
        out.status.success(),
        "rdma link delete {DEVICE}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !std::path::Path::new(&format!("/sys/class/infiniband/{DEVICE}")).exists(),
        "{DEVICE} is still there"
    );
    drop(spare);
}

/// Several connections on one device share one device context (see
/// `rdmasock::socket::open_device_contexts`): its removal fails every one of them with the
/// removal error, the kernel completes the removal once they are dropped (the shared
/// context closes with the last), and the device added again under the same name is opened
/// afresh and carries a connection.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn a_removal_under_a_shared_context_fails_every_socket_on_it_and_completes() {
    const CONNECTIONS: usize = 4;
    let spare = SpareDevice::create();
    let l = RdmaListener::bind(format!("{ADDRESS}:0")).expect("bind on rxe9's address");
    let addr: SocketAddr = l.local_addr().unwrap();
    let mut pairs = Vec::new();
    for i in 0..CONNECTIONS {
        // The listener answers a request within accept: the connect runs beside it.
        let client = thread::spawn(move || RdmaSocket::connect(addr).expect("connect over rxe9"));
        let (mut s, _) = l.accept().expect("accept on rxe9");
        let mut c = client.join().expect("client thread");
        c.write_all(&[i as u8]).unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        assert_eq!(b[0], i as u8);
        pairs.push((c, s));
    }
    assert_eq!(
        rdmasock::socket::open_device_contexts(),
        1,
        "{} connections on {DEVICE} share one context",
        2 * CONNECTIONS
    );
    let delete = Command::new("rdma")
        .args(["link", "delete", DEVICE])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rdma link delete");
    for (i, (c, s)) in pairs.iter_mut().enumerate() {
        for (side, socket) in [("client", c), ("server", s)] {
            socket
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            let mut b = [0u8; 1];
            assert_ended_by_removal(
                &format!("connection {i}'s {side} read"),
                socket.read(&mut b),
            );
        }
    }
    drop(pairs);
    drop(l);
    let out = vm_support::finish_within(
        delete,
        Duration::from_secs(30),
        &["rdma link delete".to_string(), DEVICE.to_string()],
    );
    assert!(
        out.status.success(),
        "rdma link delete {DEVICE}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(rdmasock::socket::open_device_contexts(), 0);
    drop(spare);

    // The same name again: a new device, opened afresh.
    let spare = SpareDevice::create();
    let l = RdmaListener::bind(format!("{ADDRESS}:0")).expect("bind on the new rxe9's address");
    let addr: SocketAddr = l.local_addr().unwrap();
    let client =
        thread::spawn(move || RdmaSocket::connect(addr).expect("connect over the new rxe9"));
    let (mut s, _) = l.accept().expect("accept on the new rxe9");
    let mut c = client.join().expect("client thread");
    c.write_all(b"again").unwrap();
    let mut b = [0u8; 5];
    s.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"again");
    assert_eq!(rdmasock::socket::open_device_contexts(), 1);
    drop((c, s, l));
    assert_eq!(rdmasock::socket::open_device_contexts(), 0);
    let out = Command::new("rdma")
        .args(["link", "delete", DEVICE])
        .output()
        .expect("rdma link delete");
    assert!(
        out.status.success(),
        "rdma link delete {DEVICE} after the test"
    );
    drop(spare);
}
