//! The kernel devices' connections share the process's one rdma_cm event channel (rxe0 and
//! siw0, in the VM): with [`PAIRS`] connections open (both ends in this process) the process
//! holds one `/dev/infiniband/rdma_cm` fd besides its listener's, and at most two fds per
//! connection end; the thread count stays put. Events reach the right connection: the
//! connections whose peer closes hear it (the close of both ends finishes, which takes the
//! rdma_cm DISCONNECTED of each), while the others, whose events share the channel, go on
//! echoing; then everything is released but the process's channel.
mod connections_support;
#[path = "vm_support/mod.rs"]
mod vm_support;

use connections_support::{assert_all_released, count, hash, message};
use rdmasock::{RdmaListener, RdmaSocket, SocketOptions};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

/// Connections open at once (each with both ends in this process).
const PAIRS: usize = 50;
/// The most fds a connection's end may hold: its completion channel and its event fd.
const FDS_PER_END: usize = 2;
/// Fds of the process's own (not a connection's) that may be opened while the connections
/// are made.
const PROCESS_WIDE_FDS: usize = 4;
/// The bound on every wait and close in these tests.
const BOUND: Duration = Duration::from_secs(60);

/// The fds of this process open on the rdma_cm device node.
fn rdma_cm_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.as_os_str() == "/dev/infiniband/rdma_cm")
        .count()
}

/// Waits (bounded) until [`rdma_cm_fds`] is `want`.
fn expect_rdma_cm_fds(want: usize, when: &str) {
    let deadline = Instant::now() + BOUND;
    loop {
        let now = rdma_cm_fds();
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{when}: {now} fds on /dev/infiniband/rdma_cm, expected {want}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// One connection: the end that connected and the end the listener accepted.
struct Pair {
    client: RdmaSocket,
    server: RdmaSocket,
}

/// Connection `i`'s message of round `k`, from the client to the server and back.
fn echo(pair: &mut Pair, i: usize, k: usize) {
    let m = message(i, k);
    let mut got = [0u8; 64];
    pair.client
        .write_all(&m)
        .unwrap_or_else(|e| panic!("connection {i}: the client's write: {e}"));
    pair.server
        .read_exact(&mut got)
        .unwrap_or_else(|e| panic!("connection {i}: the server's read: {e}"));
    pair.server
        .write_all(&got)
        .unwrap_or_else(|e| panic!("connection {i}: the server's write: {e}"));
    pair.client
        .read_exact(&mut got)
        .unwrap_or_else(|e| panic!("connection {i}: the client's read: {e}"));
    assert_eq!(hash(&got), hash(&m), "connection {i}, round {k}");
}

/// Closes `first` on a thread of its own (on iWARP a close waits for the peer's), then
/// `second` once it has read the end of the stream; both closes must finish, which each
/// does only once its rdma_cm DISCONNECTED arrived.
fn close_from(first: RdmaSocket, mut second: RdmaSocket, i: usize) {
    let closing = thread::spawn(move || first.close());
    let mut buf = [0u8; 16];
    match second.read(&mut buf) {
        Ok(0) => {}
        other => panic!("connection {i}: after the peer's close, a read gave {other:?}"),
    }
    second
        .close()
        .unwrap_or_else(|e| panic!("connection {i}: the second close: {e}"));
    closing
        .join()
        .expect("the first close's thread")
        .unwrap_or_else(|e| panic!("connection {i}: the first close: {e}"));
}

fn connect_pair(listener: &RdmaListener, addr: SocketAddr, opts: &SocketOptions) -> Pair {
    let client = RdmaSocket::connect_with(addr, opts).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    for s in [&client, &server] {
        s.set_read_timeout(Some(BOUND)).unwrap();
        s.set_write_timeout(Some(BOUND)).unwrap();
    }
    Pair { client, server }
}

fn share_one_channel(ip: IpAddr) {
    let opts = SocketOptions::builder()
        .close_timeout(BOUND)
        .connect_timeout(BOUND)
        .build()
        .unwrap();
    let listener = RdmaListener::bind_with((ip, 0), &opts).expect("bind");
    let addr = listener.local_addr().unwrap();
    // The first connection brings the per-process state (the process's channel and its
    // thread, the device context): the baseline is taken with one opened and closed.
    let first = connect_pair(&listener, addr, &opts);
    close_from(first.client, first.server, 0);
    assert_all_released(usize::MAX, usize::MAX);
    expect_rdma_cm_fds(2, "with no connection open");
    let (fds, threads) = (count("/proc/self/fd"), count("/proc/self/task"));

    let mut pairs: Vec<Pair> = (0..PAIRS)
        .map(|_| connect_pair(&listener, addr, &opts))
        .collect();
    for (i, pair) in pairs.iter_mut().enumerate() {
        echo(pair, i, 0);
    }
    let opened = count("/proc/self/fd") - fds;
    println!(
        "{PAIRS} connections, both ends here: {:.2} fds per end",
        opened as f64 / (2 * PAIRS) as f64
    );
    assert_eq!(
        rdma_cm_fds(),
        2,
        "one rdma_cm fd for the process's connections, one for the listener"
    );
    assert!(
        opened <= FDS_PER_END * 2 * PAIRS + PROCESS_WIDE_FDS,
        "{opened} fds opened with {PAIRS} connections' {} ends: more than {FDS_PER_END} each",
        2 * PAIRS
    );
    assert_eq!(
        count("/proc/self/task"),
        threads,
        "threads do not grow with the connections"
    );

    // The servers of the even connections close first: those hear it, the odd ones echo on.
    let (even, mut odd): (Vec<_>, Vec<_>) =
        pairs.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
    for (i, pair) in even {
        close_from(pair.server, pair.client, i);
    }
    for (i, pair) in odd.iter_mut() {
        echo(pair, *i, 1);
    }
    // Then the clients of the odd ones.
    for (i, pair) in odd {
        close_from(pair.client, pair.server, i);
    }
    assert_all_released(fds, threads);
    expect_rdma_cm_fds(2, "after every connection closed");
    drop(listener);
    expect_rdma_cm_fds(1, "after the listener's drop (the process's channel stays)");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn connections_on_rxe0_share_one_rdma_cm_fd_and_each_hears_its_own_close() {
    share_one_channel(vm_support::device_ip("rxe0"));
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn connections_on_siw0_share_one_rdma_cm_fd_and_each_hears_its_own_close() {
    share_one_channel(vm_support::device_ip("siw0"));
}
