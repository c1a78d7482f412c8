//! RdmaSocket across two hosts: two VMs wired together (`tests/vm/two-hosts.sh`), one in the
//! server role, one in the client role, each running these tests in the same order
//! (`--ignored --test-threads=1`). Within one VM a connection never leaves the device (rxe
//! loops it back inside the driver, siw over the loopback interface); here the bytes cross
//! the wire between the two guests, which each test checks on the NIC's counters.
//!
//! Each test panics when the role, the peer's address or the device is missing.

use rdmasock::{RdmaListener, RdmaSocket, SocketOptions};
use rdmasock_uiwarp::UiwarpCm;
use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

#[path = "rsocket_support/mod.rs"]
mod rsocket_support;
#[path = "socket_support/mod.rs"]
mod socket_support;
#[path = "two_hosts_support/mod.rs"]
mod two_hosts_support;
#[path = "vm_support/mod.rs"]
mod vm_support;

use two_hosts_support::{
    bounded, device, nic_bytes, pingpong, role, wire_state, Role, WireCut, MEET, STALL,
};

/// Bytes the client sends (and gets back) per test.
const TOTAL: usize = 8 << 20;
/// The bytes of the client's stream: deterministic, so the server needs no copy to check.
fn pattern(at: usize, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        let x = (at + i) as u64;
        *b = (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8;
    }
}

/// Server: accepts one connection on `addr` (through `cm` when given), checks the stream
/// against the pattern while echoing it back, until the client's end-of-stream.
fn serve(addr: SocketAddr, cm: Option<&'static UiwarpCm>) {
    let opts = SocketOptions::default();
    let l = match cm {
        Some(cm) => RdmaListener::bind_via(cm, addr, &opts),
        None => RdmaListener::bind_with(addr, &opts),
    }
    .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(l.accept());
    });
    let (s, peer) = rx
        .recv_timeout(MEET)
        .unwrap_or_else(|_| panic!("no client connected to {addr} within {MEET:?}"))
        .unwrap_or_else(|e| panic!("accept on {addr}: {e}"));
    let mut s = bounded(s);
    assert_ne!(peer.ip(), addr.ip(), "the client is on the other host");
    assert_eq!(s.local_addr().unwrap(), addr);
    let mut buf = vec![0u8; 256 << 10];
    let mut want = vec![0u8; buf.len()];
    let mut got = 0usize;
    loop {
        let n = s.read(&mut buf).expect("server read");
        if n == 0 {
            break;
        }
        pattern(got, &mut want[..n]);
        assert!(buf[..n] == want[..n], "bytes {got}..{} differ", got + n);
        got += n;
        s.write_all(&buf[..n]).expect("server write");
    }
    assert_eq!(got, TOTAL, "the server got the whole stream");
}

/// Client: connects to `addr` (retrying while the server's listener is not up yet), sends
/// the pattern in random pieces while reading the echo, checks it by hash, and checks that
/// `netdev` carried at least that much each way.
fn call(addr: SocketAddr, netdev: &str, cm: Option<&'static UiwarpCm>) {
    let opts = SocketOptions::default();
    let end = Instant::now() + MEET;
    let c = loop {
        let r = match cm {
            Some(cm) => RdmaSocket::connect_via(cm, addr, &opts),
            None => RdmaSocket::connect_with(addr, &opts),
        };
        match r {
            Ok(c) => break bounded(c),
            // The server's listener is not up yet (refused), or its address not yet known.
            Err(_) if Instant::now() < end => thread::sleep(Duration::from_millis(200)),
            Err(e) => panic!("connect to {addr} for {MEET:?}: {e}"),
        }
    };
    assert_eq!(c.peer_addr().unwrap(), addr);
    assert_ne!(c.local_addr().unwrap().ip(), addr.ip());
    let (tx0, rx0) = (nic_bytes(netdev, "tx_bytes"), nic_bytes(netdev, "rx_bytes"));
    let mut w = c.try_clone().expect("try_clone");
    let writer = thread::spawn(move || {
        let mut h = DefaultHasher::new();
        let mut at = 0usize;
        let mut rng = socket_support::Rng(0x2545_F491_4F6C_DD1D);
        let mut buf = vec![0u8; 300_000];
        while at < TOTAL {
            let n = (1 + rng.below(buf.len())).min(TOTAL - at);
            pattern(at, &mut buf[..n]);
            w.write_all(&buf[..n]).expect("client write");
            h.write(&buf[..n]);
            at += n;
        }
        w.shutdown(Shutdown::Write).expect("shutdown write");
        h.finish()
    });
    let (got, echoed) = socket_support::receive_random(&c, 0x9E37_79B9, 200_000);
    let sent = writer.join().expect("writer thread");
    assert_eq!(got, TOTAL, "the whole echo came back");
    assert_eq!(echoed, sent, "the echo matches what was sent");
    let (tx, rx) = (
        nic_bytes(netdev, "tx_bytes") - tx0,
        nic_bytes(netdev, "rx_bytes") - rx0,
    );
    assert!(
        tx >= TOTAL as u64 && rx >= TOTAL as u64,
        "{netdev} carried {tx} bytes out and {rx} in for {TOTAL} each way: the stream did not \
         cross the wire"
    );
}

/// Runs this VM's side of one connection: `own` and `peer` are the address variables of the
/// server's NIC as each side sees it.
fn across(
    dev: &str,
    netdev: &str,
    own: &str,
    peer: &str,
    port: u16,
    cm: Option<&'static UiwarpCm>,
) {
    device(dev);
    match role() {
        Role::Server => serve(SocketAddr::new(vm_support::env_ip(own), port), cm),
        Role::Client => call(SocketAddr::new(vm_support::env_ip(peer), port), netdev, cm),
    }
}

#[test]
#[ignore = "needs two wired VMs: run tests/vm/two-hosts.sh"]
fn rxe_ipv4_stream_across_hosts() {
    across(
        "rxe0",
        "eth0",
        "RDMA_VM_RXE_IP",
        "RDMA_VM_PEER_RXE_IP",
        7601,
        None,
    );
}

#[test]
#[ignore = "needs two wired VMs: run tests/vm/two-hosts.sh"]
fn rxe_ipv6_stream_across_hosts() {
    across(
        "rxe0",
        "eth0",
        "RDMA_VM_RXE_IP6",
        "RDMA_VM_PEER_RXE_IP6",
        7602,
        None,
    );
}

#[test]
#[ignore = "needs two wired VMs: run tests/vm/two-hosts.sh"]
fn siw_ipv4_stream_across_hosts() {
    across(
        "siw0",
        "eth1",
        "RDMA_VM_SIW_IP",
        "RDMA_VM_PEER_SIW_IP",
        7603,
        None,
    );
}

#[test]
#[ignore = "needs two wired VMs: run tests/vm/two-hosts.sh"]
fn siw_ipv6_stream_across_hosts() {
    across(
        "siw0",
        "eth1",
        "RDMA_VM_SIW_IP6",
        "RDMA_VM_PEER_SIW_IP6",
        7604,
        None,
    );
}

/// The userspace provider on the client's side against the kernel's siw on the server's
/// (uiwarp talks to a real iWARP peer on another host).
#[test]
#[ignore = "needs two wired VMs: run tests/vm/two-hosts.sh"]
fn uiwarp_client_to_siw_server_across_hosts() {
    let cm = match role() {
        Role::Server => None,
        Role::Client => Some(&UiwarpCm),
    };
    across(
        "siw0",
        "eth1",
        "RDMA_VM_SIW_IP",
        "RDMA_VM_PEER_SIW_IP",
        7605,
        cm,
    );
}

/// The kernel's siw on the client's side against the userspace provider on the server's.
#[test]
#[ignore = "needs two wired VMs: run tests/vm/two-hosts.sh"]
fn siw_client_to_uiwarp_server_across_hosts() {
    let cm = match role() {
        Role::Server => Some(&UiwarpCm),
        Role::Client => None,
    };
    across(
        "siw0",
        "eth1",
        "RDMA_VM_SIW_IP",
        "RDMA_VM_PEER_SIW_IP",
        7606,
        cm,
    );
}

/// Our `rc_pingpong` and rdma-core's `ibv_rc_pingpong` across the wire on rxe0, each as the
/// server once, checking the data (`-c`); the client checks the NIC carried it.
#[test]
#[ignore = "needs two wired VMs: run tests/vm/two-hosts.sh"]
fn rc_pingpong_and_ibv_rc_pingpong_across_hosts() {
    device("rxe0");
    let ours = vm_support::example("rc_pingpong");
    let theirs = PathBuf::from("ibv_rc_pingpong");
    match role() {
        Role::Server => {
            pingpong(ours, 18611, None);
            pingpong(theirs, 18612, None);
        }
        Role::Client => {
            let peer = vm_support::env_ip("RDMA_VM_PEER_RXE_IP");
            let tx0 = nic_bytes("eth0", "tx_bytes");
            let out = pingpong(theirs, 18611, Some(peer));
            assert!(out.contains(&format!("GID ::ffff:{peer}")), "{out}");
            pingpong(ours, 18612, Some(peer));
            // 2 x 300 messages of 4096 bytes went out.
            let tx = nic_bytes("eth0", "tx_bytes") - tx0;
            assert!(
                tx >= 2 * 300 * 4096,
                "eth0 sent only {tx} bytes for two ping-pongs"
            );
        }
    }
}

/// rdma-core's rsocket (`rstream`) and our socket across the wire on rxe0, each as the
/// server once: rstream's custom exchange, its byte pattern checked on both ends (rstream
/// checks its side with `-T v`). The client checks that rxe0 carried the bytes as RDMA
/// packets and eth0 as frames on the wire.
#[test]
#[ignore = "needs two wired VMs: run tests/vm/two-hosts.sh"]
fn rstream_and_rdmasocket_across_hosts() {
    use rsocket_support::{
        carried_by_rdma, finish, growth, packets, play_client, play_server, rstream, rxe_mtu,
        Exchange,
    };
    // rstream serves on `theirs`, we serve on `ours`.
    let (theirs, ours) = (18621, 18622);
    device("rxe0");
    let exchange = Exchange {
        size: 65_000,
        count: 8,
    };
    match role() {
        Role::Server => {
            let own = vm_support::env_ip("RDMA_VM_RXE_IP");
            let what = "rstream server on rxe0, RdmaSocket client on the other host";
            let server = rstream(theirs, exchange, &["-b", &own.to_string()], false);
            finish(server, what);
            let what = "RdmaListener server on rxe0, rstream client on the other host";
            let addr = SocketAddr::new(own, ours);
            let l = RdmaListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
            let (tx, rx) = mpsc::channel();
            thread::spawn(move || {
                let _ = tx.send(l.accept());
            });
            let (s, peer) = rx
                .recv_timeout(MEET)
                .unwrap_or_else(|_| panic!("rstream did not connect to {addr} within {MEET:?}"))
                .unwrap_or_else(|e| panic!("accept on {addr}: {e}"));
            let s = bounded(s);
            assert_ne!(peer.ip(), own, "rstream is on the other host");
            assert!(!s.peer_is_rdmasock(), "rstream is plain rsocket");
            play_server(s, exchange, what);
        }
        Role::Client => {
            let peer = vm_support::env_ip("RDMA_VM_PEER_RXE_IP");
            let before = packets();
            let tx0 = nic_bytes("eth0", "tx_bytes");
            let what = "RdmaSocket client, rstream server on rxe0 of the other host";
            let addr = SocketAddr::new(peer, theirs);
            let end = Instant::now() + MEET;
            let c = loop {
                match RdmaSocket::connect(addr) {
                    Ok(c) => break bounded(c),
                    Err(_) if Instant::now() < end => thread::sleep(Duration::from_millis(200)),
                    Err(e) => panic!("{what}: connect to {addr} for {MEET:?}: {e}"),
                }
            };
            assert!(!c.peer_is_rdmasock(), "rstream is plain rsocket");
            play_client(c, exchange, what);
            let what = "rstream client, RdmaListener server on rxe0 of the other host";
            loop {
                let client = rstream(ours, exchange, &["-s", &peer.to_string()], false);
                let out = vm_support::finish_within_explained(
                    client,
                    STALL,
                    &[what.to_string()],
                    wire_state,
                );
                if out.status.success() {
                    let stdout = String::from_utf8_lossy(&out.stdout);
                    assert!(
                        stdout.contains("custom") && !stdout.contains("verification failed"),
                        "{what}: rstream did not report a verified custom test: {stdout}"
                    );
                    break;
                }
                assert!(
                    Instant::now() < end,
                    "{what}: rstream kept failing for {MEET:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                thread::sleep(Duration::from_millis(200));
            }
            // The client sent exchange.total() bytes over both exchanges, and got as many.
            let tx = nic_bytes("eth0", "tx_bytes") - tx0;
            eprintln!("rstream across hosts on rxe0: eth0 sent {tx} bytes");
            assert!(
                tx >= exchange.total(),
                "eth0 sent only {tx} bytes for {} bytes each way",
                exchange.total()
            );
            let grown = growth(before);
            assert!(
                carried_by_rdma(grown, exchange.total(), rxe_mtu()),
                "rxe0 carried only {grown:?} packets for {} bytes each way",
                exchange.total()
            );
        }
    }
}

/// How long the client keeps its wire cut in the vanishing-peer test: well past the
/// server's detection (a 500 ms keepalive, then the transport's 7 retries), so that nothing
/// the client sends when it comes back (a DREQ) can be what ended the server's connections.
const CUT: Duration = Duration::from_secs(45);

/// siw0's wire cut, for the fault table (`two_hosts_support::siw_cut`): with keepalive on,
/// nothing fails within the window (only TCP's retransmission limit ends a siw connection),
/// and the bytes written during the cut arrive intact once the wire is mended. The server
/// writes the row to [`SIW_WIRE_CUT_ROW`].
#[test]
#[ignore = "needs two wired VMs: run tests/vm/two-hosts.sh"]
fn siw_wire_cut_is_not_detected_and_loses_nothing_once_mended() {
    device("siw0");
    two_hosts_support::siw_cut::run(SIW_WIRE_CUT_ROW);
}

/// Where the server of [`siw_wire_cut_is_not_detected_and_loses_nothing_once_mended`] writes
/// siw0's wire-cut row of the fault table (`tests/fault-table.sh`).
const SIW_WIRE_CUT_ROW: &str =
    concat!(env!("CARGO_TARGET_TMPDIR"), "/fault-table-siw-wire-cut.row");

/// Where the server of [`peer_vanishes_keepalive_fails_the_connection_across_hosts`] writes
/// rxe0's wire-cut row of the fault table (`tests/fault-table.sh`).
const WIRE_CUT_ROW: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/fault-table-wire-cut.row");

/// A peer that vanishes without a word (its wire cut: no DREQ, no reset) fails the
/// connection within the keepalive time plus the transport's retries, on a blocking reader
/// and on a socket that only sits registered with mio (its keepalives come from the readiness
/// thread), and over the userspace iWARP provider on the same wire (whose keepalive WRITE
/// completes once TCP takes it: the liveness timeout the keepalive sets ends it). The server
/// accepts two connections on rxe0 and one over uiwarp, each with a 500 ms keepalive; the
/// client echoes a byte on each, cuts eth0's wire for [`CUT`] ([`WireCut`]: the frames are
/// dropped inside the guest, the NIC stays up), then mends it for the tests after this one.
/// Bytes the server writes on rxe0 once the cut is in place (the uiwarp connection failed)
/// are never vouched for: their flush fails.
/// The server writes the fault table's wire-cut row of rxe to [`WIRE_CUT_ROW`].
#[test]
#[ignore = "needs two wired VMs: run tests/vm/two-hosts.sh"]
fn peer_vanishes_keepalive_fails_the_connection_across_hosts() {
    device("rxe0");
    match role() {
        Role::Server => {
            let addr = SocketAddr::new(vm_support::env_ip("RDMA_VM_RXE_IP"), 7611);
            let opts = SocketOptions::builder()
                .keepalive(Some(Duration::from_millis(500)))
                .build()
                .unwrap();
            let l =
                RdmaListener::bind_with(addr, &opts).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
            let (tx, rx) = mpsc::channel();
            thread::spawn(move || {
                for _ in 0..2 {
                    let _ = tx.send(l.accept());
                }
            });
            let accept = || {
                let (mut s, _) = rx
                    .recv_timeout(MEET)
                    .unwrap_or_else(|_| panic!("no client at {addr} within {MEET:?}"))
                    .unwrap_or_else(|e| panic!("accept on {addr}: {e}"));
                let mut b = [0u8; 1];
                s.read_exact(&mut b).expect("the client's byte");
                s.write_all(&b).expect("echo");
                s
            };
            let (blocking, mut registered) = (accept(), accept());
            let uiwarp_addr = SocketAddr::new(addr.ip(), 7612);
            let ul = RdmaListener::bind_via(&UiwarpCm, uiwarp_addr, &opts)
                .unwrap_or_else(|e| panic!("bind {uiwarp_addr} over uiwarp: {e}"));
            let (tx, rx) = mpsc::channel();
            thread::spawn(move || {
                let _ = tx.send(ul.accept());
            });
            let (mut over_tcp, _) = rx
                .recv_timeout(MEET)
                .unwrap_or_else(|_| panic!("no client at {uiwarp_addr} within {MEET:?}"))
                .unwrap_or_else(|e| panic!("accept on {uiwarp_addr}: {e}"));
            let mut b = [0u8; 1];
            over_tcp
                .read_exact(&mut b)
                .expect("the uiwarp client's byte");
            over_tcp.write_all(&b).expect("echo");
            let start = Instant::now();
            let read_until_failure = move |mut s: RdmaSocket| {
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                let r = s.read(&mut [0u8; 1]);
                (r, start.elapsed())
            };
            // Bytes written once the cut is in place (the uiwarp connection on the same wire
            // failed): no flush may vouch for them, they cannot cross.
            let (cut_seen, cut_in_place) = mpsc::channel();
            let writing = {
                let mut w = blocking.try_clone().expect("clone the blocking connection");
                thread::spawn(move || {
                    let _ = cut_in_place.recv();
                    let bytes = vec![0x77u8; 64 << 10];
                    let flushed = w.write_all(&bytes).and_then(|_| w.flush());
                    (bytes.len() as u64, flushed)
                })
            };
            let reader = thread::spawn(move || read_until_failure(blocking));
            let uiwarp_reader = thread::spawn(move || {
                let failed = read_until_failure(over_tcp);
                let _ = cut_seen.send(());
                failed
            });
            use mio::{Events, Interest, Poll, Token};
            registered.set_nonblocking(true).unwrap();
            let mut poll = Poll::new().unwrap();
            poll.registry()
                .register(&mut registered, Token(1), Interest::READABLE)
                .unwrap();
            let mut events = Events::with_capacity(8);
            let mio_result = loop {
                match registered.read(&mut [0u8; 1]) {
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    r => break r,
                }
                let left = Duration::from_secs(60).saturating_sub(start.elapsed());
                assert!(!left.is_zero(), "no mio event within 60 s of silence");
                poll.poll(&mut events, Some(left)).expect("mio poll");
            };
            let mio_waited = start.elapsed();
            let (blocking_result, blocking_waited) = reader.join().expect("reader thread");
            let (uiwarp_result, uiwarp_waited) = uiwarp_reader.join().expect("uiwarp reader");
            let (after_cut, flushed) = writing.join().expect("the writer");
            eprintln!("{after_cut} bytes written after the cut; the flush: {flushed:?}");
            let lost = if flushed.is_ok() { after_cut } else { 0 };
            // The fault table's row, in a file of the target directory, which
            // tests/fault-table.sh reads (libtest keeps a passing test's output).
            if let Err(e) = &blocking_result {
                let row = format!(
                    "fault-table-row 23 | rxe | wire cut (keepalive on) | {:.1} s | {:?}: {} \
                     | {lost} |",
                    blocking_waited.as_secs_f64(),
                    e.kind(),
                    e.to_string().replace('|', "\\|")
                );
                eprintln!("{row}");
                std::fs::write(WIRE_CUT_ROW, row + "\n").expect("write the fault table's row");
            }
            assert_eq!(lost, 0, "a flush vouched for bytes written after the cut");
            // rxe: 6 retries of the QP's ack timeout; uiwarp: the 2 s liveness timeout a
            // 500 ms keepalive sets, after the first keepalive that goes unacknowledged.
            let (rxe_bound, uiwarp_bound) = (Duration::from_secs(40), Duration::from_secs(10));
            for (what, r, waited, cause, bound) in [
                (
                    "blocking read",
                    blocking_result,
                    blocking_waited,
                    "retry counter exceeded",
                    rxe_bound,
                ),
                (
                    "read after a mio event",
                    mio_result,
                    mio_waited,
                    "retry counter exceeded",
                    rxe_bound,
                ),
                (
                    "blocking read over uiwarp",
                    uiwarp_result,
                    uiwarp_waited,
                    "stopped acknowledging",
                    uiwarp_bound,
                ),
            ] {
                eprintln!("{what} after {waited:?}: {r:?}");
                let err = r.expect_err("the vanished peer fails the connection");
                assert_eq!(
                    err.kind(),
                    std::io::ErrorKind::ConnectionReset,
                    "{what}: {err}"
                );
                assert!(
                    err.to_string().contains(cause),
                    "{what}: says {cause:?}, not a disconnect: {err}"
                );
                assert!(waited < bound, "{what} took {waited:?}");
            }
        }
        Role::Client => {
            let addr = SocketAddr::new(vm_support::env_ip("RDMA_VM_PEER_RXE_IP"), 7611);
            let end = Instant::now() + MEET;
            let connect = || loop {
                match RdmaSocket::connect(addr) {
                    Ok(c) => {
                        let mut c = bounded(c);
                        c.write_all(b"k").unwrap();
                        let mut b = [0u8; 1];
                        c.read_exact(&mut b).expect("the echo");
                        break c;
                    }
                    Err(_) if Instant::now() < end => thread::sleep(Duration::from_millis(200)),
                    Err(e) => panic!("connect to {addr} for {MEET:?}: {e}"),
                }
            };
            let kept = (connect(), connect());
            let uiwarp_addr = SocketAddr::new(addr.ip(), 7612);
            let over_tcp = loop {
                match RdmaSocket::connect_via(&UiwarpCm, uiwarp_addr, &SocketOptions::default()) {
                    Ok(c) => {
                        let mut c = bounded(c);
                        c.write_all(b"u").unwrap();
                        let mut b = [0u8; 1];
                        c.read_exact(&mut b).expect("the uiwarp echo");
                        break c;
                    }
                    Err(_) if Instant::now() < end => thread::sleep(Duration::from_millis(200)),
                    Err(e) => panic!("connect to {uiwarp_addr} over uiwarp for {MEET:?}: {e}"),
                }
            };
            let cut = WireCut::new("eth0");
            let (dropped_in, _) = cut.dropped();
            thread::sleep(CUT);
            let (more_in, out) = cut.dropped();
            drop(cut);
            // The server's keepalives (and its TCP's) met the cut.
            assert!(
                more_in > dropped_in,
                "the cut dropped {} frames in ({out} out) in {CUT:?}: the server's keepalives \
                 never reached it",
                more_in - dropped_in
            );
            drop((kept, over_tcp));
        }
    }
}
