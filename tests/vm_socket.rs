//! The socket conformance suite (`conformance/`) on the kernel's rxe0 (soft-RoCE) in the VM
//! (`tests/vm/run.sh`, which runs these with `--ignored --test-threads=1`, and once more with
//! `RDMASOCK_PROVIDER=ibverbs`: the same tests through rdma-core's libibverbs), then what only
//! the VM's setup has: an address on no RDMA device, one nobody answers, and loopback beside
//! kernel devices. Each test panics when rxe0 or the VM's address is missing. siw0 runs the
//! suite in `vm_socket_siw.rs`.

#[macro_use]
mod conformance;

use conformance::{kernel_cm, run_tcp_swap, vm_support};
use rdmasock::{RdmaListener, RdmaSocket, SocketOptions};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

mod rxe {
    conformance_tests! {
        fixture: crate::conformance::Fixture::rxe();
        attributes: [#[ignore = "needs the VM: run tests/vm/run.sh"]];
        cases: [
            connect_start_polled_until_connected_then_data_both_ways,
            connect_start_refused_says_what_connect_says,
            connect_start_to_a_black_hole_times_out_at_the_deadline,
            dropping_connect_start_at_each_stage_leaks_nothing,
            sixty_four_connect_starts_on_one_thread_driven_by_poll,
            connect_accept_echo,
            fork_while_streaming_children_exec_or_drop_what_they_inherited,
            huge_page_rings_carry_a_checked_stream_or_say_what_to_reserve,
            iomap_iowrite_both_ways_checked_by_hash,
            registered_iowrite_lands_in_the_window_and_frees_the_buffer_on_return,
            iowrite_outside_a_window_is_refused_and_the_connection_stays,
            iomap_is_off_unless_the_peer_asks,
            ipv6_connect_accept_echo_and_stream,
            large_stream_each_way_at_once_checked_by_hash,
            small_pieces_both_ways_with_and_without_nodelay,
            vectored_reads_and_writes_each_way_checked_by_hash,
            small_rings_selective_signalling_and_event_mode,
            writes_held_for_coalescing_arrive_with_the_writer_idle,
            flush_on_a_nonblocking_socket_returns_ok,
            nonblocking_read_and_peek,
            half_close_client_first,
            half_close_server_first,
            shutdown_read_reads_eof_but_keeps_what_the_peer_sends,
            shutdown_both_closes_each_direction_at_both_ends,
            one_thread_shuts_down_both_ends_then_drops_them_without_waiting,
            peer_closes_after_echo_and_flush_then_close_is_ok,
            peer_vanishes_reads_end_within_keepalive_time,
            connection_refused_without_listener,
            a_cloned_listener_accepts_from_two_threads,
            a_blocking_accept_leaves_a_clone_s_nonblocking_accept_free,
            mio_readiness_is_truthful_per_direction,
            mio_echo_server_with_64_concurrent_nonblocking_connections,
            mio_event_follows_would_block,
            mio_drives_sixty_four_connections,
            socket_fd_is_level_triggered_per_direction,
            socket_fd_loses_no_wakeup_when_both_directions_block,
            listener_fd_is_readable_while_accept_may_go_on,
            sixty_four_socket_fds_under_level_triggered_epoll,
            sixty_four_socket_fds_under_edge_triggered_epoll,
            socket_fd_and_mio_agree,
            mio_tcp_server_example_loop,
            poll_echo_server_with_64_clients_on_one_poll_loop,
            read_and_write_timeouts,
            steady_slow_answers_nap_without_losing_data_or_timeouts,
            wait_stats_count_each_mode_s_waits,
            a_spinning_read_lets_a_clone_write,
            tcp_swap_example_runs_on_the_device,
            zero_copy_writes_of_each_size_interleaved_with_copying_writes,
            a_pool_on_huge_pages_carries_a_checked_stream_or_says_what_to_reserve,
            a_registered_buffer_may_be_overwritten_when_its_write_returns,
            a_registered_buffer_serves_several_connections_and_devices,
            submitted_buffers_come_back_on_the_socket_fd_under_poll,
            a_short_submission_s_rest_keeps_the_stream_in_order,
            submitted_buffers_come_back_in_order_on_mio_events,
        ];
        not_applicable: [
            thousand_connect_close_cycles_leak_nothing =>
                "vm_socket_cycles.rs runs it: a binary of its own, for the suite's time limit",
        ];
    }
}

/// The VM's rxe0 address; panics (loudly) outside the VM or without rxe0.
fn vm_ip() -> std::net::IpAddr {
    vm_support::device_ip("rxe0")
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn address_on_no_rdma_device_names_the_devices() {
    let ip = vm_ip();
    // The kernel's connection manager alone (the default falls back to the userspace iWARP
    // provider for addresses without a kernel device).
    let opts = SocketOptions::default();
    let err = RdmaSocket::connect_via(kernel_cm(), "127.0.0.1:7302", &opts)
        .expect_err("loopback has no RDMA device");
    eprintln!("error text: {err}");
    let text = err.to_string();
    assert!(text.contains("127.0.0.1 is on no RDMA device"), "{text}");
    assert!(text.contains(&format!("rxe0 (netdev eth0: {ip}")), "{text}");
    let err =
        RdmaListener::bind_via(kernel_cm(), "127.0.0.1:7303", &opts).expect_err("bind on loopback");
    eprintln!("error text: {err}");
    assert!(err.to_string().contains("127.0.0.1"), "{err}");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn unanswered_address_times_out_naming_it() {
    vm_ip();
    let addr: SocketAddr = "10.99.0.77:7304".parse().unwrap();
    let start = Instant::now();
    let err = RdmaSocket::connect_timeout(&addr, Duration::from_millis(1500))
        .expect_err("nobody has 10.99.0.77");
    let waited = start.elapsed();
    eprintln!("error text after {waited:?}: {err}");
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
    assert!(err.to_string().contains("10.99.0.77"), "{err}");
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
}

/// With rxe0 and siw0 present, an address no kernel device serves (loopback) still works:
/// the default connection manager falls back to the userspace iWARP provider and says so
/// once on stderr (listener and client both pick it). With a kernel provider forced
/// (`RDMASOCK_PROVIDER=ibverbs`, the suite's bridge run), there is no fallback: tcp_swap
/// fails naming the address and the devices.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn loopback_beside_kernel_devices_falls_back_to_uiwarp_and_says_so_once() {
    vm_ip();
    let forced = std::env::var("RDMASOCK_PROVIDER").unwrap_or_default();
    if forced.is_empty() || forced.contains("uiwarp") {
        loopback_falls_back_to_uiwarp();
    } else {
        loopback_fails_with_a_kernel_provider_forced(&forced);
    }
}

/// tcp_swap on loopback, the default connection manager: uiwarp serves it, said once.
fn loopback_falls_back_to_uiwarp() {
    let stderr = run_tcp_swap("127.0.0.1".parse().unwrap());
    let notice = "rdmasock: no kernel RDMA device serves 127.0.0.1:";
    assert_eq!(
        stderr.matches(notice).count(),
        1,
        "the fallback is said exactly once: {stderr}"
    );
    assert!(
        stderr.contains("using the userspace iWARP provider (uiwarp)"),
        "{stderr}"
    );
}

/// tcp_swap on loopback with `RDMASOCK_PROVIDER=forced` (a kernel provider): it fails,
/// naming the address, and no fallback is tried.
fn loopback_fails_with_a_kernel_provider_forced(forced: &str) {
    let out = std::process::Command::new(vm_support::example("tcp_swap"))
        .arg("127.0.0.1")
        .output()
        .expect("run the tcp_swap example");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "RDMASOCK_PROVIDER={forced}: no fallback"
    );
    assert!(
        stderr.contains("127.0.0.1 is on no RDMA device") && !stderr.contains("uiwarp"),
        "RDMASOCK_PROVIDER={forced}: {stderr}"
    );
}
