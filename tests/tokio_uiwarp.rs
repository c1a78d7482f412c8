//! The tokio adapter's suite (`tokio_suite/`) on this host, which has no kernel RDMA: every
//! connection goes through the userspace iWARP provider (uiwarp) on loopback TCP. Needs the
//! `tokio` feature (`cargo test --features tokio`).
#![cfg(feature = "tokio")]

#[macro_use]
mod tokio_suite;

mod uiwarp {
    tokio_tests! {
        fixture: crate::tokio_suite::Fixture::uiwarp();
        attributes: [];
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
