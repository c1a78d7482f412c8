//! The socket conformance suite (`conformance/`) on this host, which has no kernel RDMA:
//! every connection goes through the userspace iWARP provider (uiwarp) on loopback TCP (and
//! `[::1]`). Then what only uiwarp has: a stream's naps measured at release speed. What bad
//! input gets is in `uiwarp_errors.rs`.

#[macro_use]
mod conformance;

use conformance::Fixture;
use std::io::{Read, Write};
use std::thread;

mod uiwarp {
    conformance_tests! {
        fixture: crate::conformance::Fixture::uiwarp();
        attributes: [];
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
            zero_copy_writes_of_each_size_interleaved_with_copying_writes,
            a_pool_on_huge_pages_carries_a_checked_stream_or_says_what_to_reserve,
            a_registered_buffer_may_be_overwritten_when_its_write_returns,
            a_registered_buffer_serves_several_connections_and_devices,
            submitted_buffers_come_back_on_the_socket_fd_under_poll,
            a_short_submission_s_rest_keeps_the_stream_in_order,
            submitted_buffers_come_back_in_order_on_mio_events,
        ];
        not_applicable: [
            tcp_swap_example_runs_on_the_device =>
                "asserts a kernel device serves the address; host_examples.rs runs tcp_swap here",
            thousand_connect_close_cycles_leak_nothing =>
                "uiwarp_socket_cycles.rs runs it, in a process of its own: it measures the \
                 process's fds and RSS, which this binary's other cases (64 MiB buffers, \
                 1 MiB rings) change while it runs",
        ];
    }
}

/// A nap that overslept is seen as one, so a stream does not nap through its run. On uiwarp
/// what arrives during a nap waits in the TCP socket until a thread reads it: within 2 ms of
/// a spin the engine leaves the socket to the application. A look after a nap that polled
/// the completion queue only would find nothing, the spin after it would read the bytes at
/// once, and the wait would count as a whole nap, so the next wait would nap as long: a 1 MiB
/// stream whose first waits ran past the spin cap would then nap through its run on both
/// ends, each end's nap holding back what the other end waits for (`bench_uiwarp --only 1m
/// --waits` shows the naps). So the queue is armed before a nap and its events are taken
/// after it, which reads the socket. In each of eight 32 MiB streams, naps that did not
/// oversleep must be a few of each end's waits. A release build only: a debug build
/// processes a 1 MiB chunk for longer than the spin cap, so its waits nap for good reason;
/// `tests/run.sh` runs this test with `--release`.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "needs release speed: tests/run.sh runs it with --release"
)]
fn a_stream_does_not_nap_through_its_run() {
    const CHUNK: usize = 1 << 20;
    const TOTAL: usize = 32 << 20;
    for _ in 0..8 {
        let (server, client) = Fixture::uiwarp().pair();
        let reading = thread::spawn(move || {
            let mut s = server;
            let mut buf = vec![0u8; CHUNK];
            let mut got = 0;
            while got < TOTAL {
                let n = s.read(&mut buf).expect("read");
                assert!(n > 0, "early end of stream after {got} bytes");
                got += n;
            }
            s.wait_stats()
        });
        let mut c = client;
        let chunk = vec![0x5au8; CHUNK];
        for _ in 0..TOTAL / CHUNK {
            c.write_all(&chunk).expect("write");
        }
        let writer = c.wait_stats();
        let reader = reading.join().expect("reader");
        for (end, w) in [("writer", writer), ("reader", reader)] {
            let blind = w.naps - w.overslept_naps;
            assert!(
                blind <= 4 + w.waits / 4,
                "the {end} napped in {} of its {} waits, {blind} of them not seen to \
                 oversleep: {w:?}",
                w.naps,
                w.waits
            );
        }
    }
}
