//! The tokio adapter's suite (`tokio_suite/`) on the kernel's rxe0 and siw0 in the VM
//! (`tests/vm/run.sh`, which runs these with `--ignored --test-threads=1`, and once more with
//! `RDMASOCK_PROVIDER=ibverbs`: rxe0 through rdma-core's libibverbs, the siw0 tests skipped
//! there), then what only the VM has: rsocket's `rstream` as the peer of an `RdmaStream` and
//! an `RdmaListener`, and an RDMA device removed under a stream and a listener. Needs the
//! `tokio` feature (tests/run.sh and tests/vm/run.sh build with it); each test panics when
//! its device is missing.
#![cfg(feature = "tokio")]

#[macro_use]
mod tokio_suite;
#[path = "rsocket_support/mod.rs"]
mod rsocket_support;

use rdmasock::tokio::{RdmaListener, RdmaStream};
use rsocket_support::SYNC_BYTES;
use rsocket_support::{assert_carried_by_rdma, finish, packets, rstream, Exchange, Pattern};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_suite::{current_thread, vm_support};

mod rxe {
    tokio_tests! {
        fixture: crate::tokio_suite::Fixture::rxe();
        attributes: [#[ignore = "needs the VM: run tests/vm/run.sh"]];
        cases: [
            echo_256_concurrent_connections_on_a_current_thread_runtime,
            sixty_four_mib_each_way_random_sizes_checked_by_hash,
            framed_lines_both_ways,
            a_tokio_peer_against_a_blocking_socket,
            readiness_calls_peek_and_try_io,
            split_into_split_reunite_and_std_round_trips,
            cancelled_reads_and_writes_lose_no_byte,
            half_close_client_first,
            half_close_server_first,
            a_peer_that_drops_its_socket_reads_as_the_end,
            a_killed_peer_ends_reads_under_tokio,
            dropping_a_stream_never_blocks_the_runtime,
            timeouts_around_reads_and_connects,
            cancelled_connects_leave_nothing_behind,
            errors_read_as_the_blocking_api_s,
            zero_copy_writes_hand_the_buffer_back,
            submitted_buffers_come_back_asynchronously_and_a_dropped_submit_loses_none,
            a_write_registered_among_submissions_leaves_theirs_in_order,
            iomap_and_iowrite_on_streams_land_in_order_with_the_stream,
            zero_copy_iowrites_land_in_order_with_the_stream_and_hand_the_buffer_back,
        ];
        not_applicable: [];
    }
}

mod siw {
    tokio_tests! {
        fixture: crate::tokio_suite::Fixture::siw();
        attributes: [#[ignore = "needs the VM: run tests/vm/run.sh"]];
        cases: [
            echo_256_concurrent_connections_on_a_current_thread_runtime,
            sixty_four_mib_each_way_random_sizes_checked_by_hash,
            framed_lines_both_ways,
            a_tokio_peer_against_a_blocking_socket,
            readiness_calls_peek_and_try_io,
            split_into_split_reunite_and_std_round_trips,
            cancelled_reads_and_writes_lose_no_byte,
            half_close_client_first,
            half_close_server_first,
            a_peer_that_drops_its_socket_reads_as_the_end,
            a_killed_peer_ends_reads_under_tokio,
            dropping_a_stream_never_blocks_the_runtime,
            timeouts_around_reads_and_connects,
            cancelled_connects_leave_nothing_behind,
            errors_read_as_the_blocking_api_s,
            zero_copy_writes_hand_the_buffer_back,
            submitted_buffers_come_back_asynchronously_and_a_dropped_submit_loses_none,
            a_write_registered_among_submissions_leaves_theirs_in_order,
            iomap_and_iowrite_on_streams_land_in_order_with_the_stream,
            zero_copy_iowrites_land_in_order_with_the_stream_and_hand_the_buffer_back,
        ];
        not_applicable: [];
    }
}

const EXCHANGE: Exchange = Exchange {
    size: 65_000,
    count: 8,
};

/// rstream's client side over an `RdmaStream`; ends by reading the server's close.
async fn play_client(s: &mut RdmaStream, exchange: Exchange, what: &str) {
    let (mut out, mut back, mut got) = (Pattern(0), Pattern(0), 0u64);
    write_pattern(s, SYNC_BYTES, &mut out, what).await;
    read_checked(s, SYNC_BYTES, &mut back, &mut got, what).await;
    for _ in 0..exchange.count {
        write_pattern(s, exchange.size, &mut out, what).await;
    }
    for _ in 0..exchange.count {
        read_checked(s, exchange.size, &mut back, &mut got, what).await;
    }
    let mut rest = Vec::new();
    s.read_to_end(&mut rest)
        .await
        .unwrap_or_else(|e| panic!("{what}: EOF after rstream's shutdown: {e}"));
    assert!(rest.is_empty(), "{what}: {} unexpected bytes", rest.len());
}

/// rstream's server side over an `RdmaStream`.
async fn play_server(s: &mut RdmaStream, exchange: Exchange, what: &str) {
    let (mut out, mut inbound, mut got) = (Pattern(0), Pattern(0), 0u64);
    read_checked(s, SYNC_BYTES, &mut inbound, &mut got, what).await;
    write_pattern(s, SYNC_BYTES, &mut out, what).await;
    for _ in 0..exchange.count {
        read_checked(s, exchange.size, &mut inbound, &mut got, what).await;
    }
    for _ in 0..exchange.count {
        write_pattern(s, exchange.size, &mut out, what).await;
    }
    s.shutdown()
        .await
        .unwrap_or_else(|e| panic!("{what}: shutdown: {e}"));
    let mut rest = Vec::new();
    s.read_to_end(&mut rest)
        .await
        .unwrap_or_else(|e| panic!("{what}: EOF after rstream's shutdown: {e}"));
    assert!(rest.is_empty(), "{what}: {} unexpected bytes", rest.len());
}

async fn read_checked(
    s: &mut RdmaStream,
    len: usize,
    pattern: &mut Pattern,
    got: &mut u64,
    what: &str,
) {
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf)
        .await
        .unwrap_or_else(|e| panic!("{what}: read {len} bytes after {got}: {e}"));
    pattern.check(&buf, *got, what);
    *got += len as u64;
}

async fn write_pattern(s: &mut RdmaStream, len: usize, pattern: &mut Pattern, what: &str) {
    let mut buf = vec![0u8; len];
    pattern.fill(&mut buf);
    s.write_all(&buf)
        .await
        .unwrap_or_else(|e| panic!("{what}: write {len} bytes: {e}"));
}

/// rstream (rsocket) serves on rxe0 and an `RdmaStream` connects; then an `RdmaListener`
/// serves and rstream connects. rstream verifies the bytes, we verify its, and rxe0's
/// counters show the bytes crossed the device.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rstream_against_a_tokio_stream_both_roles() {
    let ip = vm_support::device_ip("rxe0");
    let ip_text = ip.to_string();
    current_thread(async {
        let what = "rstream server, RdmaStream client";
        let addr = SocketAddr::new(ip, 18481);
        let before = packets();
        let mut server = rstream(18481, EXCHANGE, &["-b", &ip_text], false);
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut s = loop {
            match RdmaStream::connect(addr).await {
                Ok(s) => break s,
                Err(e) => {
                    if let Some(status) = server.try_wait().unwrap() {
                        panic!("rstream exited ({status}) before accepting: {e}");
                    }
                    assert!(Instant::now() < deadline, "connect to rstream: {e} (30 s)");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        play_client(&mut s, EXCHANGE, what).await;
        drop(s);
        tokio::task::spawn_blocking(move || finish(server, what))
            .await
            .unwrap();
        assert_carried_by_rdma(what, before, EXCHANGE.total());

        let what = "rstream client, RdmaListener server";
        let listener = RdmaListener::bind(SocketAddr::new(ip, 18482))
            .await
            .expect("bind on rxe0's address");
        let before = packets();
        let client = rstream(18482, EXCHANGE, &["-s", &ip_text], false);
        let (mut s, peer) = tokio::time::timeout(Duration::from_secs(60), listener.accept())
            .await
            .expect("rstream connects within 60 s")
            .expect("accept rstream's connection");
        assert_eq!(peer.ip(), ip);
        play_server(&mut s, EXCHANGE, what).await;
        drop(s);
        tokio::task::spawn_blocking(move || finish(client, what))
            .await
            .unwrap();
        assert_carried_by_rdma(what, before, EXCHANGE.total());
    });
}

/// The device the removal test makes and removes, its netdev and its address.
const DEVICE: &str = "rxe8";
const NETDEV: &str = "rmdummy1";
const ADDRESS: &str = "10.98.8.1";

/// `rxe8` on a dummy netdev, its port ACTIVE; on drop the netdev goes once the device is
/// gone (a device still there gets a removal started and left running, so that a failed
/// check fails the test instead of hanging it).
struct SpareDevice;

impl SpareDevice {
    fn create() -> SpareDevice {
        vm_support::device_ip("rxe0");
        vm_support::sh(&format!(
            "ip link add {NETDEV} type dummy && ip addr add {ADDRESS}/24 dev {NETDEV} && \
             ip link set {NETDEV} up && rdma link add {DEVICE} type rxe netdev {NETDEV}"
        ));
        let state = format!("/sys/class/infiniband/{DEVICE}/ports/1/state");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = std::fs::read_to_string(&state).unwrap_or_default();
            if s.contains("ACTIVE") {
                return SpareDevice;
            }
            assert!(Instant::now() < deadline, "{state} is {s:?} after 10 s");
            std::thread::sleep(Duration::from_millis(50));
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

/// A device removed under a tokio stream pair and a listener waiting in `accept().await`:
/// the reads end with the blocking API's words (the removal, or the connection broken when
/// the peer's id went first), the accept fails naming the removal, and once the streams are
/// dropped the kernel completes the removal.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn removing_the_device_under_tokio_ends_streams_and_accept() {
    let spare = SpareDevice::create();
    current_thread(async {
        let l = RdmaListener::bind(format!("{ADDRESS}:0"))
            .await
            .expect("bind on rxe8");
        let addr = l.local_addr().unwrap();
        let (accepted, client) = tokio::join!(l.accept(), RdmaStream::connect(addr));
        let (mut s, _) = accepted.expect("accept on rxe8");
        let mut c = client.expect("connect over rxe8");
        c.write_all(b"hi").await.unwrap();
        let mut b = [0u8; 2];
        s.read_exact(&mut b).await.unwrap();
        let waiting_accept = tokio::spawn(async move { l.accept().await.map(|_| ()) });

        let delete = Command::new("rdma")
            .args(["link", "delete", DEVICE])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rdma link delete");
        let bound = Duration::from_secs(30);
        for (what, stream) in [("the client's read", &mut c), ("the server's read", &mut s)] {
            let r = tokio::time::timeout(bound, stream.read(&mut b))
                .await
                .unwrap_or_else(|_| panic!("{what} still waits 30 s after the removal"));
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
        let accepted = tokio::time::timeout(bound, waiting_accept)
            .await
            .expect("the accept ends within 30 s of the removal")
            .expect("accept task");
        let err = accepted.expect_err("accept after the removal");
        eprintln!("the listener's accept: {err}");
        assert!(
            err.to_string().contains("was removed (DEVICE_REMOVAL)"),
            "{err}"
        );
        drop((c, s));
        let out = tokio::task::spawn_blocking(move || {
            vm_support::finish_within(
                delete,
                Duration::from_secs(30),
                &["rdma link delete".to_string(), DEVICE.to_string()],
            )
        })
        .await
        .unwrap();
        assert!(
            out.status.success(),
            "rdma link delete {DEVICE}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !std::path::Path::new(&format!("/sys/class/infiniband/{DEVICE}")).exists(),
            "{DEVICE} is still there"
        );
    });
    drop(spare);
}
