//! The soak across two hosts (`tests/vm/soak.sh`, through `tests/vm/two-hosts.sh --test
//! two_hosts_soak`): two wired VMs, one in the server role and one in the client role,
//! move [`total`] bytes (1 GiB unless `RDMASOCK_SOAK_MIB` says otherwise) each way at once
//! over one device, closing the connection gracefully ([`RdmaSocket::close`], its result
//! checked) and connecting again every [`segment`] bytes (64 MiB unless
//! `RDMASOCK_SOAK_SEGMENT_MIB` says otherwise). Each direction is one pseudo-random stream
//! that goes on across the connections; the receiving side checks every byte at its offset
//! in the stream. At the end each side asserts that the whole stream arrived, and prints a
//! row for the soak's table (a line starting with `soak-row: `): MB/s each way, the
//! connections, and the time a reconnect took.
//!
//! A plain `tests/vm/two-hosts.sh` runs `tests/two_hosts.rs` only: these tests are long.
//! Each test panics when the role, the peer's address or the device is missing.

use rdmasock::{RdmaListener, RdmaSocket, SocketOptions};
use rdmasock_uiwarp::UiwarpCm;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

#[path = "rsocket_support/mod.rs"]
mod rsocket_support;
#[path = "socket_support/mod.rs"]
mod socket_support;
#[path = "two_hosts_support/mod.rs"]
mod two_hosts_support;
#[path = "vm_support/mod.rs"]
mod vm_support;

use two_hosts_support::{bounded, device, nic_bytes, role, Role, MEET};

const MIB: u64 = 1 << 20;

/// A size in MiB from the environment variable `var`, or `default`.
fn mib(var: &str, default: u64) -> u64 {
    match std::env::var(var) {
        Ok(v) => {
            let n: u64 = v
                .parse()
                .unwrap_or_else(|e| panic!("{var}={v:?} is not a number of MiB: {e}"));
            assert!(n > 0, "{var}={v:?}: the soak needs at least 1 MiB");
            n * MIB
        }
        Err(_) => default * MIB,
    }
}

/// The bytes each side sends (and receives): `RDMASOCK_SOAK_MIB`, default 1 GiB.
fn total() -> u64 {
    mib("RDMASOCK_SOAK_MIB", 1024)
}

/// The bytes each way between one connection's start and its close:
/// `RDMASOCK_SOAK_SEGMENT_MIB`, default 64 MiB.
fn segment() -> u64 {
    mib("RDMASOCK_SOAK_SEGMENT_MIB", 64)
}

/// One direction's stream: byte `n` is `table[n % table.len()]`. The table is pseudo-random
/// from a seed and its length (8 MiB + 13) divides no segment, so each connection starts
/// the table at another offset; the stream is made and checked by copying and comparing
/// slices, which keeps up with the wire in the unoptimised test build. A byte lost,
/// doubled, moved or changed shows at its offset, and a connection that carries more or
/// fewer than its segment's bytes fails its length check.
struct Stream {
    table: Vec<u8>,
}

impl Stream {
    fn new(seed: u64) -> Stream {
        let len = (8 << 20) + 13;
        let mut rng = socket_support::Rng(seed);
        let mut table = Vec::with_capacity(len + 8);
        while table.len() < len {
            table.extend_from_slice(&rng.next().to_le_bytes());
        }
        table.truncate(len);
        Stream { table }
    }

    /// The stream's bytes from offset `at`, as many as fit `buf`.
    fn fill(&self, at: u64, buf: &mut [u8]) {
        let mut done = 0;
        let mut from = (at % self.table.len() as u64) as usize;
        while done < buf.len() {
            let n = (self.table.len() - from).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&self.table[from..from + n]);
            done += n;
            from = 0;
        }
    }

    /// Panics unless `got` is the stream's bytes from offset `at`, naming the first byte
    /// that differs.
    fn check(&self, at: u64, got: &[u8], want: &mut Vec<u8>) {
        want.resize(got.len(), 0);
        self.fill(at, want);
        if got != &want[..] {
            let i = got.iter().zip(want.iter()).position(|(g, w)| g != w);
            let i = i.expect("slices that differ differ at some byte");
            panic!(
                "the stream's byte {} arrived as {:#04x}, not {:#04x}",
                at + i as u64,
                got[i],
                want[i]
            );
        }
    }
}

/// The seeds of the client's and the server's streams.
const CLIENT_SEED: u64 = 0x5EED_C11E_0000_0001;
const SERVER_SEED: u64 = 0x5EED_5E2F_0000_0002;

/// Moves one segment each way over `socket`, from offset `at` of both streams: a writer
/// thread sends `len` bytes of `out` in pieces of random size and then ends its direction
/// (shutdown); a reader thread checks what arrives against `incoming` until end-of-stream.
/// Then closes the connection, checks the close's result and returns when the close began
/// and the bytes sent and received.
fn exchange(
    socket: RdmaSocket,
    out: &Stream,
    incoming: &Stream,
    at: u64,
    len: u64,
    what: &str,
) -> (Instant, u64, u64) {
    let writer_socket = socket
        .try_clone()
        .unwrap_or_else(|e| panic!("{what}: try_clone: {e}"));
    let reader_socket = socket
        .try_clone()
        .unwrap_or_else(|e| panic!("{what}: try_clone: {e}"));
    let (sent, received) = thread::scope(|scope| {
        let writer = scope.spawn(move || {
            let mut rng = socket_support::Rng(at ^ 0x2545_F491_4F6C_DD1D);
            let mut buf = vec![0u8; 300_000];
            let mut sent = 0u64;
            while sent < len {
                let n = (1 + rng.below(buf.len())).min((len - sent) as usize);
                out.fill(at + sent, &mut buf[..n]);
                (&writer_socket)
                    .write_all(&buf[..n])
                    .unwrap_or_else(|e| panic!("{what}: write at byte {}: {e}", at + sent));
                sent += n as u64;
            }
            writer_socket
                .shutdown(Shutdown::Write)
                .unwrap_or_else(|e| panic!("{what}: shutdown(Write) at byte {}: {e}", at + len));
            sent
        });
        let reader = scope.spawn(move || {
            let mut buf = vec![0u8; 256 << 10];
            let mut want = Vec::new();
            let mut got = 0u64;
            loop {
                let n = (&reader_socket)
                    .read(&mut buf)
                    .unwrap_or_else(|e| panic!("{what}: read at byte {}: {e}", at + got));
                if n == 0 {
                    break;
                }
                assert!(
                    got + n as u64 <= len,
                    "{what}: the connection carried more than its {len} bytes"
                );
                incoming.check(at + got, &buf[..n], &mut want);
                got += n as u64;
            }
            assert_eq!(
                got, len,
                "{what}: end-of-stream after {got} of the connection's {len} bytes"
            );
            got
        });
        let written = writer.join();
        let read = reader.join();
        match (written, read) {
            (Ok(sent), Ok(received)) => (sent, received),
            (Err(panic), _) | (_, Err(panic)) => std::panic::resume_unwind(panic),
        }
    });
    let closing = Instant::now();
    socket
        .close()
        .unwrap_or_else(|e| panic!("{what}: close after byte {}: {e}", at + len));
    (closing, sent, received)
}

/// The folder the soak's rows go to (`RDMASOCK_SOAK_OUT`), if any.
fn out_folder() -> Option<PathBuf> {
    std::env::var_os("RDMASOCK_SOAK_OUT").map(PathBuf::from)
}

/// Now, on the host's clock: the time the host gives a file it writes in `folder` (a
/// folder the host shares with the VM). A guest's clock can run at the wrong rate (its TSC
/// calibrated at boot while the host was busy); the host's cannot.
fn host_now(folder: &Path, name: &str) -> SystemTime {
    let path = folder.join(name);
    std::fs::write(&path, b"soak")
        .and_then(|()| std::fs::metadata(&path))
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("the host's time from {}: {e}", path.display()))
}

/// What one side's soak did; its times are on the host's clock when the soak had the
/// rows' folder to read it from.
struct Soak {
    connections: u32,
    /// From each close's start to the next connection's arrival (one per reconnect).
    reconnects: Vec<Duration>,
    /// From the first connection's arrival to the last close's end.
    elapsed: Duration,
    /// This guest's clock rate against the host's (`None` when not measured).
    clock: Option<f64>,
    sent: u64,
    received: u64,
}

/// One side of the soak: `next(i)` gives connection `i` (the first may wait for the peer;
/// the others must come at once, every call's failure failing the soak).
/// `name` names this side's files in the rows' folder, where it reads the host's clock.
fn soak(role: Role, mut next: impl FnMut(u32) -> RdmaSocket, what: &str, name: &str) -> Soak {
    let (total, segment) = (total(), segment());
    let (client, server) = (Stream::new(CLIENT_SEED), Stream::new(SERVER_SEED));
    let (out, incoming) = match role {
        Role::Client => (&client, &server),
        Role::Server => (&server, &client),
    };
    let mut soak = Soak {
        connections: 0,
        reconnects: Vec::new(),
        elapsed: Duration::ZERO,
        clock: None,
        sent: 0,
        received: 0,
    };
    let folder = out_folder();
    let mut start = None;
    let mut closed: Option<Instant> = None;
    let mut at = 0u64;
    while at < total {
        let socket = next(soak.connections);
        let opened = Instant::now();
        if let Some(closed) = closed {
            soak.reconnects.push(opened - closed);
        }
        start.get_or_insert_with(|| {
            let host = folder
                .as_ref()
                .map(|f| host_now(f, &format!("{name}.start")));
            (opened, host)
        });
        soak.connections += 1;
        let len = segment.min(total - at);
        let what = format!(
            "{what}, connection {} (bytes {at}..{})",
            soak.connections,
            at + len
        );
        let (closing, sent, received) = exchange(socket, out, incoming, at, len, &what);
        closed = Some(closing);
        soak.sent += sent;
        soak.received += received;
        at += len;
    }
    let (start, host_start) = start.expect("at least one connection");
    soak.elapsed = start.elapsed();
    if let (Some(folder), Some(host_start)) = (&folder, host_start) {
        let host = host_now(folder, &format!("{name}.end"))
            .duration_since(host_start)
            .unwrap_or_else(|e| panic!("{what}: the host's clock went back: {e}"));
        let rate = soak.elapsed.as_secs_f64() / host.as_secs_f64();
        for d in &mut soak.reconnects {
            *d = d.div_f64(rate);
        }
        soak.elapsed = host;
        soak.clock = Some(rate);
    }
    assert_eq!(soak.sent, total, "{what}: sent the whole stream");
    assert_eq!(
        soak.received, total,
        "{what}: every byte of the peer's stream arrived intact"
    );
    soak
}

/// `soak`'s row of the soak's table: printed, and written to the file `PORT.SIDE.row` in the
/// folder `RDMASOCK_SOAK_OUT` names, when it names one (`tests/vm/soak.sh` collects them
/// in the order of the tests' ports).
fn report(soak: &Soak, test: &str, port: u16, side: &str) {
    let seconds = soak.elapsed.as_secs_f64();
    let per_reconnect = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
    let (mean, max) = match soak.reconnects.len() {
        0 => ("-".to_string(), "-".to_string()),
        n => (
            per_reconnect(soak.reconnects.iter().sum::<Duration>() / n as u32),
            per_reconnect(*soak.reconnects.iter().max().expect("a reconnect")),
        ),
    };
    let clock = soak.clock.map_or("-".to_string(), |r| format!("{r:.2}"));
    let row = format!(
        "| {test} | {side} | {} | {} | {:.1} | {} | {} | {mean} / {max} | {seconds:.1} | {clock} |",
        soak.sent / MIB,
        soak.received / MIB,
        soak.sent as f64 / seconds / 1e6,
        soak.connections,
        soak.reconnects.len(),
    );
    println!("{row}");
    if let Some(folder) = out_folder() {
        let path = folder.join(format!("{port}.{side}.row"));
        std::fs::write(&path, format!("{row}\n"))
            .unwrap_or_else(|e| panic!("writing the soak's row to {}: {e}", path.display()));
    }
}

/// The server's side: binds `addr` (through `cm` when given) and serves each connection of
/// the soak as it comes.
fn serve(addr: SocketAddr, cm: Option<&'static UiwarpCm>, test: &str) {
    let opts = SocketOptions::default();
    let listener = match cm {
        Some(cm) => RdmaListener::bind_via(cm, addr, &opts),
        None => RdmaListener::bind_with(addr, &opts),
    }
    .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || loop {
        if tx.send(listener.accept()).is_err() {
            break;
        }
    });
    let next = |i: u32| {
        let wait = if i == 0 {
            MEET
        } else {
            two_hosts_support::STALL
        };
        let (s, peer) = rx
            .recv_timeout(wait)
            .unwrap_or_else(|_| {
                panic!(
                    "connection {} did not come to {addr} within {wait:?}",
                    i + 1
                )
            })
            .unwrap_or_else(|e| panic!("accept connection {} on {addr}: {e}", i + 1));
        assert_ne!(peer.ip(), addr.ip(), "the client is on the other host");
        bounded(s)
    };
    let what = format!("soak server at {addr}");
    let soak = soak(
        Role::Server,
        next,
        &what,
        &format!("{}.server", addr.port()),
    );
    report(&soak, test, addr.port(), "server");
}

/// The client's side: connects to `addr` (the first time retrying while the server's
/// listener is not up yet) for each connection of the soak, and checks that `netdev`
/// carried at least the soak's bytes each way.
fn call(addr: SocketAddr, netdev: &str, cm: Option<&'static UiwarpCm>, test: &str) {
    let opts = SocketOptions::default();
    let connect = || match cm {
        Some(cm) => RdmaSocket::connect_via(cm, addr, &opts),
        None => RdmaSocket::connect_with(addr, &opts),
    };
    let next = |i: u32| {
        let end = Instant::now() + MEET;
        loop {
            match connect() {
                Ok(c) => {
                    assert_eq!(c.peer_addr().expect("peer_addr"), addr);
                    break bounded(c);
                }
                // The server's listener is not up yet (refused), or its address not yet known.
                Err(_) if i == 0 && Instant::now() < end => {
                    thread::sleep(Duration::from_millis(200))
                }
                Err(e) if i == 0 => panic!("connect to {addr} for {MEET:?}: {e}"),
                Err(e) => panic!("reconnect {i} to {addr}: {e}"),
            }
        }
    };
    let (tx0, rx0) = (nic_bytes(netdev, "tx_bytes"), nic_bytes(netdev, "rx_bytes"));
    let what = format!("soak client to {addr}");
    let soak = soak(
        Role::Client,
        next,
        &what,
        &format!("{}.client", addr.port()),
    );
    let (tx, rx) = (
        nic_bytes(netdev, "tx_bytes") - tx0,
        nic_bytes(netdev, "rx_bytes") - rx0,
    );
    assert!(
        tx >= soak.sent && rx >= soak.received,
        "{netdev} carried {tx} bytes out and {rx} in for {} each way: the soak did not cross \
         the wire",
        soak.sent
    );
    report(&soak, test, addr.port(), "client");
}

/// Runs this VM's side of one soak: `own` and `peer` are the address variables of the
/// server's NIC as each side sees it; `test` names the row.
fn across(
    test: &str,
    (dev, netdev): (&str, &str),
    (own, peer): (&str, &str),
    port: u16,
    cm: Option<&'static UiwarpCm>,
) {
    device(dev);
    match role() {
        Role::Server => serve(SocketAddr::new(vm_support::env_ip(own), port), cm, test),
        Role::Client => call(
            SocketAddr::new(vm_support::env_ip(peer), port),
            netdev,
            cm,
            test,
        ),
    }
}

#[test]
#[ignore = "a long soak across two wired VMs: run tests/vm/soak.sh"]
fn soak_rxe_ipv4_across_hosts() {
    across(
        "rxe0, IPv4",
        ("rxe0", "eth0"),
        ("RDMA_VM_RXE_IP", "RDMA_VM_PEER_RXE_IP"),
        7701,
        None,
    );
}

#[test]
#[ignore = "a long soak across two wired VMs: run tests/vm/soak.sh"]
fn soak_siw_ipv4_across_hosts() {
    across(
        "siw0, IPv4",
        ("siw0", "eth1"),
        ("RDMA_VM_SIW_IP", "RDMA_VM_PEER_SIW_IP"),
        7702,
        None,
    );
}

/// The userspace provider on the client's side against the kernel's siw on the server's.
#[test]
#[ignore = "a long soak across two wired VMs: run tests/vm/soak.sh"]
fn soak_uiwarp_client_to_siw_server_across_hosts() {
    let cm = match role() {
        Role::Server => None,
        Role::Client => Some(&UiwarpCm),
    };
    across(
        "uiwarp client, siw0 server, IPv4",
        ("siw0", "eth1"),
        ("RDMA_VM_SIW_IP", "RDMA_VM_PEER_SIW_IP"),
        7703,
        cm,
    );
}

#[test]
#[ignore = "a long soak across two wired VMs: run tests/vm/soak.sh"]
fn soak_rxe_ipv6_across_hosts() {
    across(
        "rxe0, IPv6",
        ("rxe0", "eth0"),
        ("RDMA_VM_RXE_IP6", "RDMA_VM_PEER_RXE_IP6"),
        7704,
        None,
    );
}

#[test]
#[ignore = "a long soak across two wired VMs: run tests/vm/soak.sh"]
fn soak_siw_ipv6_across_hosts() {
    across(
        "siw0, IPv6",
        ("siw0", "eth1"),
        ("RDMA_VM_SIW_IP6", "RDMA_VM_PEER_SIW_IP6"),
        7705,
        None,
    );
}
