//! The stream engine on a simulated RDMA fabric: two engines, their "registered memory" as
//! plain vectors, and a reliable-connected fabric that executes each side's work requests in
//! order (RDMA RC semantics: placement before the completion, receives consumed in order,
//! receiver-not-ready stalls instead of losing a message), with seeded interleaving of the two
//! applications, the two directions and the two completion queues.

#[path = "stream_sim/fabric.rs"]
mod fabric;

use fabric::{local_regions, pair, small_config, Fabric, Rng};
use rdmasock::protocol::{
    ByteOrder, CopySpan, Hello, HelloError, LocalRegions, Message, Op, Payload, Received,
    RemoteSge, StreamConfig, StreamConfigBuilder, StreamEngine, StreamError, WrId, SGE_LEN,
    TARGET_LIST_LEN,
};

#[test]
#[cfg_attr(
    miri,
    ignore = "128 MiB through the simulated fabric: hours under miri; the smaller simulations run the same engine paths"
)]
fn bulk_64_mib_each_way_with_half_close() {
    let cfg = StreamConfig::builder().build().unwrap();
    let mut f = Fabric::connect([cfg.clone(), cfg], [64 << 20, 64 << 20], 0x5eed_0001);
    f.run(256 * 1024);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "21 MiB through the simulated fabric: hours under miri; the smaller simulations run the same engine paths"
)]
fn bulk_with_big_rings_and_selective_signalling() {
    let cfg = StreamConfig::builder()
        .send_ring(1 << 20)
        .recv_ring(2 << 20)
        .max_transfer(512 * 1024)
        .signal_interval(16)
        .build()
        .unwrap();
    let mut f = Fabric::connect([cfg.clone(), cfg], [16 << 20, 5 << 20], 0x5eed_0002);
    f.run(1 << 20);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "24 seeded runs of 0.5 MB each: hours under miri; the smaller simulations run the same engine paths"
)]
fn small_rings_many_seeds() {
    for seed in 0..24u64 {
        let a = small_config()
            .signal_interval(1 + (seed % 4) as u16)
            .send_ring(4096 + 1000 * (seed % 3) as usize)
            .build()
            .unwrap();
        let b = small_config().inline_threshold(0).build().unwrap();
        let mut f = Fabric::connect([a, b], [300_000, 200_000 + seed as usize], seed);
        f.run(20_000);
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "six runs of 7 MiB each: hours under miri; the smaller simulations run the same engine paths"
)]
fn write_plus_send_mode_for_iwarp() {
    for seed in 0..6u64 {
        let mk = |b: StreamConfigBuilder| b.write_with_send(true).build().unwrap();
        let (a, b) = if seed % 2 == 0 {
            (mk(small_config()), mk(small_config().inline_threshold(8)))
        } else {
            (
                mk(StreamConfig::builder()),
                mk(StreamConfig::builder().signal_interval(8)),
            )
        };
        let mut f = Fabric::connect([a, b], [4 << 20, 3 << 20], 0x1a4b + seed);
        f.run(100_000);
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "two runs of 2 MiB each: an hour under miri; the smaller simulations run the same engine paths"
)]
fn peers_of_different_byte_order() {
    let a = small_config().byte_order(ByteOrder::Big).build().unwrap();
    let b = small_config()
        .byte_order(ByteOrder::Little)
        .write_with_send(false)
        .build()
        .unwrap();
    let mut f = Fabric::connect([a, b], [1 << 20, 1 << 20], 7);
    f.run(10_000);
    let a = small_config()
        .byte_order(ByteOrder::Big)
        .write_with_send(true)
        .build()
        .unwrap();
    let b = small_config()
        .byte_order(ByteOrder::Little)
        .write_with_send(true)
        .build()
        .unwrap();
    let mut f = Fabric::connect([a, b], [1 << 20, 1 << 20], 8);
    f.run(10_000);
}

#[test]
fn credits_exhausted_then_replenished_in_batches() {
    let b = StreamConfig::builder()
        .recv_queue_depth(16)
        .build()
        .unwrap();
    let mut f = pair(StreamConfig::builder().build().unwrap(), b);
    for i in 0..16 {
        assert!(f.sides[0].engine.readiness().writable, "message {i}");
        assert_eq!(f.sides[0].app_write(100), Ok(100));
        f.pump();
    }
    assert_eq!(f.sides[0].app_write(100), Err(StreamError::WouldBlock));
    assert!(!f.sides[0].engine.readiness().writable);
    assert_eq!(f.sides[1].engine.readable_bytes(), 1600);
    // Credits come back once half the receive queue's worth was consumed, not before.
    for _ in 0..7 {
        assert_eq!(f.sides[1].app_read(100, false), Ok(100));
        f.pump();
        assert!(!f.sides[0].engine.readiness().writable);
    }
    assert_eq!(f.sides[1].app_read(100, true), Ok(100));
    f.pump();
    assert!(f.sides[0].engine.readiness().writable);
    for _ in 0..8 {
        assert_eq!(f.sides[0].app_write(100), Ok(100));
    }
    assert_eq!(f.sides[0].app_write(100), Err(StreamError::WouldBlock));
}

#[test]
fn receive_ring_exhausted_then_a_half_is_readvertised() {
    let b = StreamConfig::builder().recv_ring(4096).build().unwrap();
    let mut f = pair(StreamConfig::builder().build().unwrap(), b);
    // Both halves (2 KiB each) were advertised: 4 KiB fit, then the writer must wait.
    assert_eq!(f.sides[0].app_write(10_000), Ok(4096));
    f.pump();
    assert_eq!(f.sides[0].app_write(1), Err(StreamError::WouldBlock));
    assert!(!f.sides[0].engine.readiness().writable);
    assert_eq!(f.sides[1].app_read(2047, false), Ok(2047));
    f.pump();
    assert!(
        !f.sides[0].engine.readiness().writable,
        "half 0 is not free yet"
    );
    assert_eq!(f.sides[1].app_read(1, false), Ok(1));
    f.pump();
    assert!(f.sides[0].engine.readiness().writable);
    assert_eq!(f.sides[0].app_write(10_000), Ok(2048));
    f.pump();
    assert_eq!(f.sides[1].app_read(10_000, false), Ok(4096));
}

#[test]
fn keepalive_is_invisible_and_finds_a_dead_peer() {
    let cfg = StreamConfig::builder().build().unwrap();
    let mut f = pair(cfg.clone(), cfg);
    let posted_receives = f.sides[1].rq.len();
    assert!(f.sides[0].engine.keepalive());
    let op = f.sides[0].engine.pop_op().expect("a keepalive write");
    assert!(
        matches!(
            op,
            Op::Write {
                payload: Payload::Empty,
                signaled: true,
                ..
            }
        ),
        "{op:?}"
    );
    f.sides[0]
        .engine
        .on_send_completion(op.wr_id().unwrap(), true);
    assert!(f.sides[0].engine.keepalive());
    f.sides[0].drain_ops();
    f.pump();
    assert_eq!(
        f.sides[1].rq.len(),
        posted_receives,
        "the peer consumed a receive"
    );
    assert_eq!(f.sides[1].engine.readiness(), f.sides[0].engine.readiness());
    assert!(f.sides[0].engine.all_sends_done() && f.sides[0].engine.error().is_none());

    f.dead = true;
    assert!(f.sides[0].engine.keepalive());
    f.sides[0].drain_ops();
    f.pump();
    let r = f.sides[0].engine.readiness();
    assert!(r.error && r.readable && r.writable, "{r:?}");
    assert!(matches!(
        f.sides[0].app_read(10, false),
        Err(StreamError::ConnectionReset(_))
    ));
    assert!(matches!(
        f.sides[0].app_write(10),
        Err(StreamError::ConnectionReset(_))
    ));
    assert!(!f.sides[0].engine.keepalive());
}

#[test]
fn malformed_hello_and_protocol_violations_are_errors() {
    let cfg = StreamConfig::builder().build().unwrap();
    let local = local_regions();
    let mut e = StreamEngine::new(cfg.clone(), local);
    let good = e.hello().to_bytes();
    assert_eq!(
        Hello::parse(&good[..20]),
        Err(HelloError::TooShort { len: 20 })
    );
    let mut v2 = good;
    v2[0] = 2;
    let err = Hello::parse(&v2).unwrap_err();
    assert_eq!(err, HelloError::UnsupportedVersion { version: 2 });
    assert!(StreamError::from(err).to_string().contains("version 2"));
    assert_eq!(e.write(1, |_| {}), Err(StreamError::NotConnected));
    let peer = Hello::parse(&good).unwrap();
    e.on_connected(&peer).unwrap();
    assert!(matches!(
        e.on_connected(&peer),
        Err(StreamError::Protocol(_))
    ));

    // A reserved operation in the immediate data.
    let target = [0u8; 32];
    e.on_receive(WrId(1 << 63), Received::Immediate(0x2000_0010), &target);
    assert!(matches!(e.error(), Some(StreamError::Protocol(_))));
    assert!(e.readiness().error);

    // Data beyond the advertised buffer.
    let mut e = StreamEngine::new(cfg, local);
    e.on_connected(&peer).unwrap();
    e.on_receive(WrId(1 << 63), Received::Immediate(64 * 1024 + 1), &target);
    assert!(matches!(e.error(), Some(StreamError::Protocol(_))));
    assert!(matches!(e.read(10, |_| {}), Err(StreamError::Protocol(_))));
}

/// Our regions as a test engine advertises them.

#[test]
fn the_target_list_is_read_only_for_a_buffer_update() {
    let cfg = StreamConfig::builder().build().unwrap();
    let local = local_regions();
    let mut e = StreamEngine::new(cfg, local);
    let peer = Hello::parse(&e.hello().to_bytes()).unwrap();
    e.on_connected(&peer).unwrap();
    let data = Received::Immediate(Message::Data(10).encode());
    e.on_receive_with(WrId(1 << 63), data, |_| {
        panic!("a data message read the target list")
    });
    assert_eq!(e.error(), None);
    let mut reads = 0;
    let update = Received::Immediate(Message::Sgl(5).encode());
    e.on_receive_with(WrId(1 << 63), update, |list: &mut [u8; TARGET_LIST_LEN]| {
        reads += 1;
        list.fill(0);
    });
    assert_eq!(reads, 1);
    assert_eq!(e.error(), None);
}

/// A buffer advertisement whose address range runs past the end of the address space fails
/// the stream with a protocol error (fuzzing found that writing into it overflowed the
/// address); so does one longer than a data message can count.
#[test]
fn an_advertised_buffer_that_overflows_is_a_protocol_error() {
    for (addr, length, says) in [
        (u64::MAX - 100, 4096u32, "overflows"),
        (0x1000, 1 << 29, "29-bit"),
    ] {
        let cfg = StreamConfig::builder().build().unwrap();
        let mut e = StreamEngine::new(cfg.clone(), local_regions());
        let peer = Hello::parse(&e.hello().to_bytes()).unwrap();
        e.on_connected(&peer).unwrap();
        while e.pop_op().is_some() {}
        // The peer RDMA-writes entry 1 of our target list, then says so.
        let mut list = [0u8; TARGET_LIST_LEN];
        list[SGE_LEN..].copy_from_slice(&RemoteSge::new(addr, 7, length).encode(cfg.byte_order()));
        let update = Received::Immediate(Message::Sgl(64).encode());
        e.on_receive(WrId(1 << 63), update, &list);
        let err = e.error().expect("the advertisement is refused").to_string();
        assert!(
            err.contains(says) && err.contains(&format!("{addr:#x}")),
            "{err}"
        );
        // Nothing is written towards it: writes report the error.
        assert!(e.write(128 * 1024, |_| {}).is_err());
    }
}

/// The bytes an rsocket peer sees: our hello, the buffer advertisement written into its
/// target list, and the immediate data of data messages.
#[test]
fn wire_bytes_match_rsocket() {
    for (peer_flags, order) in [(0x02u8, ByteOrder::Little), (0x03, ByteOrder::Big)] {
        let cfg = StreamConfig::builder()
            .byte_order(ByteOrder::Little)
            .build()
            .unwrap();
        let local = LocalRegions {
            recv_ring_addr: 0x7f00_0000_0000,
            recv_ring_rkey: 0x1111,
            target_list_addr: 0x7f00_1000_0000,
            target_list_rkey: 0x2222,
        };
        let mut e = StreamEngine::new(cfg, local);
        assert_eq!(
            e.hello().to_bytes(),
            [
                1, 0x80, 0x01, 0x80, 0, 0, 0, 0, // version, flags (LE, rdmasock), credits 384
                0, 0, 0x7f, 0, 0x10, 0, 0, 0, 0, 0, 0x22, 0x22, 0, 0, 0, 2, // target list
                0, 0, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0x11, 0x11, 0, 1, 0, 0, // first half, 64 KiB
            ]
        );
        let mut rsocket = [0u8; 40];
        rsocket[0] = 1;
        rsocket[1] = peer_flags;
        rsocket[2..4].copy_from_slice(&384u16.to_be_bytes());
        rsocket[8..16].copy_from_slice(&0x5000_0000u64.to_be_bytes());
        rsocket[16..20].copy_from_slice(&0x77u32.to_be_bytes());
        rsocket[20..24].copy_from_slice(&2u32.to_be_bytes());
        rsocket[24..32].copy_from_slice(&0x6000_0000u64.to_be_bytes());
        rsocket[32..36].copy_from_slice(&0x88u32.to_be_bytes());
        rsocket[36..40].copy_from_slice(&65536u32.to_be_bytes());
        while e.pop_op().is_some() {}
        e.on_connected(&Hello::parse(&rsocket).unwrap()).unwrap();
        let Some(Op::WriteWithImm {
            payload,
            remote_addr,
            rkey,
            imm,
            inline,
            ..
        }) = e.pop_op()
        else {
            panic!("expected the second half's advertisement");
        };
        assert_eq!(
            (remote_addr, rkey, imm, inline),
            (0x5000_0010, 0x77, 0x8000_0180, true)
        );
        let sge = rdmasock::protocol::RemoteSge::new(0x7f00_0001_0000, 0x1111, 65536);
        assert_eq!(
            payload.small_bytes().unwrap(),
            &sge.encode(order)[..SGE_LEN]
        );
        assert_eq!(e.write(5, |_| {}), Ok(5));
        let Some(Op::WriteWithImm {
            remote_addr,
            rkey,
            imm,
            inline,
            ..
        }) = e.pop_op()
        else {
            panic!("expected a data write");
        };
        assert_eq!(
            (remote_addr, rkey, imm, inline),
            (0x6000_0000, 0x88, 5, true)
        );
        // Using up the first half clears its target entry before the last write.
        assert_eq!(e.write(65531, |_| {}), Ok(65531));
        assert_eq!(e.pop_op(), Some(Op::ClearTargetEntry { offset: 0 }));
        let Some(Op::WriteWithImm {
            remote_addr,
            imm,
            inline,
            ..
        }) = e.pop_op()
        else {
            panic!("expected a data write");
        };
        assert_eq!((remote_addr, imm, inline), (0x6000_0005, 65531, false));
        assert_eq!(e.write(1, |_| {}), Err(StreamError::WouldBlock));
    }
}

#[test]
fn random_immediates_never_panic() {
    let cfg = StreamConfig::builder()
        .recv_queue_depth(16)
        .build()
        .unwrap();
    let local = LocalRegions {
        recv_ring_addr: 0,
        recv_ring_rkey: 1,
        target_list_addr: 0x100_0000,
        target_list_rkey: 2,
    };
    let mut rng = Rng(0xdead_beef);
    // Under miri, which interprets every instruction, a few engines: the same paths, fewer draws.
    let engines = if cfg!(miri) { 4 } else { 200 };
    for _ in 0..engines {
        let mut e = StreamEngine::new(cfg.clone(), local);
        let peer = e.hello();
        e.on_connected(&peer).unwrap();
        let mut target = [0u8; 32];
        for _ in 0..64 {
            let word = rng.next() as u32;
            target[(rng.below(32)) as usize] = rng.next() as u8;
            match rng.below(4) {
                0 => e.on_send_completion(WrId(rng.below(8)), rng.below(2) == 0),
                1 => e.on_receive_failed(WrId(1 << 63), None),
                _ => e.on_receive(WrId(1 << 63), Received::Immediate(word), &target),
            }
            let _ = e.read(rng.below(70_000) as usize, |c: CopySpan| {
                assert!(c.ring_offset + c.len <= 128 * 1024)
            });
            let _ = e.write(rng.below(70_000) as usize, |c: CopySpan| {
                assert!(c.ring_offset + c.len <= 128 * 1024)
            });
            while e.pop_op().is_some() {}
        }
    }
}

/// A driver that feeds a buffer update before carrying out a queued clear must not make the
/// engine reuse the used-up entry still in memory.
#[test]
fn stale_target_entry_is_not_reused() {
    let cfg = StreamConfig::builder()
        .send_ring(256 * 1024)
        .build()
        .unwrap();
    let local = LocalRegions {
        recv_ring_addr: 0x10_0000,
        recv_ring_rkey: 1,
        target_list_addr: 0x20_0000,
        target_list_rkey: 2,
    };
    let mut e = StreamEngine::new(cfg.clone(), local);
    let peer = StreamEngine::new(cfg, local).hello();
    e.on_connected(&peer).unwrap();
    while e.pop_op().is_some() {}
    // The peer advertised its second half into entry 1; we use up entry 0.
    let mut target = [0u8; 32];
    let half1 = rdmasock::protocol::RemoteSge::new(0x10_0000 + 65536, 1, 65536);
    target[16..].copy_from_slice(&half1.encode(ByteOrder::native()));
    e.on_receive(
        WrId(1 << 63),
        Received::Immediate(0x8000_0000 | 400),
        &target,
    );
    while e.pop_op().is_some() {}
    assert_eq!(e.write(65536, |_| {}), Ok(65536));
    // Entry 0's memory still describes half 0 while the clear waits in the queue.
    let half0 = rdmasock::protocol::RemoteSge::new(0x10_0000, 1, 65536);
    target[..16].copy_from_slice(&half0.encode(ByteOrder::native()));
    assert!(e.write(65536, |_| {}).is_ok(), "entry 1 is usable");
    e.on_receive(
        WrId(1 << 63),
        Received::Immediate(0x8000_0000 | 401),
        &target,
    );
    assert_eq!(e.write(1, |_| {}), Err(StreamError::WouldBlock));
    assert_eq!(e.pop_op(), Some(Op::ClearTargetEntry { offset: 0 }));
}

/// `received_end` is where the peer's next bytes land: past everything received, read or
/// not, modulo the ring (the socket brings the pages there in ahead of the peer's writes on
/// devices that pin nothing).
#[test]
fn received_end_follows_the_bytes_round_the_ring() {
    let ring = 8192;
    let small = || {
        StreamConfig::builder()
            .recv_ring(ring)
            .send_ring(ring)
            .build()
            .unwrap()
    };
    let mut f = pair(small(), small());
    assert_eq!(f.sides[1].engine.received_end(), 0);
    let (mut read, mut wrapped) = (0usize, false);
    // Under miri, which interprets every instruction, fewer messages: a few rounds still wrap.
    let messages = if cfg!(miri) { 24 } else { 200 };
    for i in 0..messages {
        let n = 1 + (i * 977) % 3000;
        if f.sides[0].app_write(n).is_ok() {
            f.pump();
        }
        let queued = f.sides[1].engine.readable_bytes();
        let end = f.sides[1].engine.received_end();
        assert_eq!(end, (read + queued) % ring, "message {i}");
        wrapped |= read + queued >= ring;
        if let Ok(k) = f.sides[1].app_read(queued.min(2500), false) {
            read += k;
        }
        f.pump();
    }
    assert!(wrapped, "the test went round the ring");
}

/// The socket layer's writer feeds completions only when `has_headroom` says the send side is
/// down to half (or a write found nothing free). A one-way stream under that policy must
/// still move every byte, and the writer must leave completions unfed for many writes.
#[test]
#[cfg_attr(
    miri,
    ignore = "four runs of 8 MiB each: hours under miri; the smaller simulations run the same engine paths"
)]
fn a_writer_that_feeds_completions_only_without_headroom_streams_everything() {
    // (seed, configuration, whether its rings are big enough for writes to skip feeding)
    for (seed, cfg, skips) in [
        (1u64, StreamConfig::builder(), true),
        (2, StreamConfig::builder().signal_interval(8), true),
        (3, small_config().write_with_send(true), false),
        (
            4,
            StreamConfig::builder()
                .write_with_send(true)
                .signal_interval(4),
            true,
        ),
    ] {
        let cfg = cfg.build().unwrap();
        let total = 8 << 20;
        let mut f = Fabric::connect([cfg.clone(), cfg], [total, 0], seed);
        f.pump();
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let (mut skipped, mut fed) = (0usize, 0usize);
        let mut idle = 0;
        while f.sides[1].received < total {
            let w = &mut f.sides[0];
            if w.sent < total {
                let n = 1 + rng.below(8192) as usize;
                match w.app_write(n) {
                    Ok(_) if w.engine.has_headroom() => skipped += 1,
                    Ok(_) | Err(StreamError::WouldBlock) => {
                        fed += 1;
                        while f.sides[0].poll() {}
                    }
                    Err(e) => panic!("write: {e}"),
                }
            }
            let mut moved = false;
            for _ in 0..1 + rng.below(4) {
                moved |= matches!(f.execute(0), fabric::Step::Progress);
                moved |= matches!(f.execute(1), fabric::Step::Progress);
            }
            while f.sides[1].poll() {
                moved = true;
            }
            let r = &mut f.sides[1];
            moved |= r.app_read(1 + rng.below(65536) as usize, false).is_ok();
            idle = if moved { 0 } else { idle + 1 };
            assert!(idle < 1000, "stalled (seed {seed}): {}", f.dump());
        }
        assert_eq!(
            f.sides[1].recv_hash.0, f.sides[0].sent_hash.0,
            "seed {seed}"
        );
        assert!(
            !skips || skipped > fed,
            "seed {seed}: the writer fed completions after {fed} writes and skipped {skipped}"
        );
    }
}
