//! Rings that change size, on the simulated fabric of `stream_sim.rs`: rings that start
//! small, grow (to their largest size at once) while the stream is busy and shrink back when it is idle, with the bytes
//! hash-checked end to end. Each new receive ring gets a new key and the old ring is dropped
//! the moment the engine hands it back, so a write the peer aims at given-back memory fails
//! the test ("write with unknown rkey"); a send ring is replaced the same way, so a posted
//! request that still read the old one would carry the wrong bytes.

#[path = "stream_sim/fabric.rs"]
mod fabric;

#[path = "stream_sim/rsocket_sender.rs"]
mod rsocket_sender;

use fabric::{small_config, Fabric};
use rdmasock::protocol::{StreamConfig, StreamConfigBuilder, StreamError};

/// Adaptive rings: 4 KiB at connect, up to 32 KiB.
fn adaptive(b: StreamConfigBuilder) -> StreamConfig {
    b.send_ring_range(4096, 32 * 1024)
        .recv_ring_range(4096, 32 * 1024)
        .build()
        .unwrap()
}

#[test]
fn a_bulk_stream_grows_both_rings_to_their_largest() {
    let cfg = adaptive(StreamConfig::builder());
    let mut f = Fabric::connect([cfg.clone(), cfg], [4 << 20, 4 << 20], 0x41);
    f.run(64 * 1024);
    for s in &f.sides {
        assert_eq!(s.largest_rings, (32 * 1024, 32 * 1024), "{}", f.dump());
        assert!(s.ring_changes.0 >= 1 && s.ring_changes.1 >= 1);
    }
}

#[test]
fn a_small_ping_pong_keeps_the_smallest_rings() {
    let cfg = adaptive(StreamConfig::builder());
    let mut f = Fabric::connect([cfg.clone(), cfg], [1 << 40, 1 << 40], 0x42);
    f.pump();
    for round in 0..2000 {
        let n = 1 + round % 200;
        let (from, to) = (round % 2, 1 - round % 2);
        assert_eq!(f.sides[from].app_write(n), Ok(n), "{}", f.dump());
        f.pump();
        assert_eq!(f.sides[to].app_read(n, false), Ok(n));
        f.pump();
    }
    for s in &f.sides {
        assert_eq!(s.ring_changes, (0, 0));
        assert_eq!(s.engine.recv_ring_len(), 4096);
        assert_eq!(s.engine.send_ring_len(), 4096);
    }
}

/// Grows both rings with a burst each way, goes idle for two ticks, and checks the send
/// rings are back to their smallest at once and the receive rings once the peer has used
/// up the buffers it holds.
#[test]
fn idle_rings_shrink_back_and_grow_again() {
    let cfg = adaptive(StreamConfig::builder());
    let mut f = Fabric::connect([cfg.clone(), cfg], [1 << 40, 1 << 40], 0x43);
    f.pump();
    let burst = |f: &mut Fabric, n: usize| {
        let mut left = [n, n];
        let mut read = [0, 0];
        while left != [0, 0] || read != [n, n] {
            for s in 0..2 {
                if left[s] > 0 {
                    if let Ok(k) = f.sides[s].app_write(left[s]) {
                        left[s] -= k;
                    }
                }
                f.pump();
                if read[s] < n {
                    match f.sides[s].app_read(n - read[s], false) {
                        Ok(k) => read[s] += k,
                        Err(StreamError::WouldBlock) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                f.pump();
            }
        }
    };
    burst(&mut f, 1 << 20);
    for s in &f.sides {
        assert_eq!(s.engine.recv_ring_len(), 32 * 1024);
        assert_eq!(s.engine.send_ring_len(), 32 * 1024);
    }
    // One tick marks, the next finds nothing moved.
    for s in 0..2 {
        f.sides[s].engine.on_idle_tick();
        assert!(f.sides[s].engine.on_idle_tick(), "idle: a shrink starts");
        f.sides[s].drain_ops();
    }
    f.pump();
    for s in &f.sides {
        assert_eq!(
            s.engine.send_ring_len(),
            4096,
            "the send ring shrinks at once"
        );
        assert_eq!(
            s.engine.recv_ring_len(),
            32 * 1024,
            "the peer holds its buffers"
        );
    }
    // A little traffic uses up the buffers the peers hold: then the receive rings change
    // (and grow again, as the burst fills the small ones).
    burst(&mut f, 64 * 1024);
    for s in &f.sides {
        assert!(s.ring_changes.0 >= 2, "{:?}", s.ring_changes);
    }
    burst(&mut f, 1 << 20);
    for s in &f.sides {
        assert_eq!(s.engine.recv_ring_len(), 32 * 1024);
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "24 seeded runs of 0.5 MB each: hours under miri; the smaller simulations run the same engine paths"
)]
fn adaptive_rings_many_seeds_with_idle_ticks() {
    for seed in 0..24u64 {
        let a = adaptive(
            small_config()
                .signal_interval(1 + (seed % 4) as u16)
                .inline_threshold(if seed % 3 == 0 { 0 } else { 64 }),
        );
        let b = adaptive(small_config().write_with_send(seed % 2 == 1));
        let a = if seed % 2 == 1 {
            adaptive(
                small_config()
                    .write_with_send(true)
                    .signal_interval(1 + (seed % 4) as u16),
            )
        } else {
            a
        };
        let mut f = Fabric::connect([a, b], [300_000, 200_000 + seed as usize], seed);
        f.idle_ticks = true;
        f.no_rnr = seed % 2 == 1;
        if seed % 4 == 3 {
            f.sides[0].defer_receives = true;
            f.sides[1].inline_writes = true;
        }
        f.run(20_000);
    }
}

#[test]
fn a_fixed_ring_never_changes() {
    let cfg = small_config().build().unwrap();
    let mut f = Fabric::connect([cfg.clone(), cfg], [1 << 20, 1 << 20], 0x44);
    f.idle_ticks = true;
    f.run(20_000);
    for s in &f.sides {
        assert_eq!(s.ring_changes, (0, 0));
    }
}

#[test]
fn a_refused_ring_keeps_the_old_one_and_stops_growing() {
    let cfg = adaptive(StreamConfig::builder());
    let mut f = Fabric::connect([cfg.clone(), cfg], [2 << 20, 2 << 20], 0x45);
    f.sides[1].refuse_growth = true;
    f.run(64 * 1024);
    let s = &f.sides[1];
    assert_eq!(s.largest_rings, (4096, 4096), "side 1 kept its rings");
    assert!(s.refused.0 == 1 && s.refused.1 == 1, "{:?}", s.refused);
    assert_eq!(f.sides[0].largest_rings.0, 32 * 1024, "side 0 grew");
}

#[test]
fn a_plain_rsocket_sender_follows_a_growing_and_shrinking_ring() {
    for seed in 0..8u64 {
        rsocket_sender::run(seed, 3 << 20);
    }
}
