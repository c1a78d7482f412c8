//! The socket conformance suite (`conformance/`) on the kernel's siw0 (soft-iWARP) in the VM
//! (`tests/vm/run.sh --both`, the suite's default, which runs these with `--ignored
//! --test-threads=1`): the socket sends data as RDMA WRITE + 4-byte SEND there (iWARP has no
//! write-with-immediate), and the side that closes first waits for the peer's close. Each
//! test panics when siw0 or the VM's address is missing. The rdma-core bridge run of the
//! suite skips every test named `*siw*`: it covers rxe0 (`vm_socket.rs`).

#[macro_use]
mod conformance;

mod siw {
    conformance_tests! {
        fixture: crate::conformance::Fixture::siw();
        attributes: [#[ignore = "needs the VM with siw0: run tests/vm/run.sh --both"]];
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
            small_rings_selective_signalling_and_event_mode,
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
