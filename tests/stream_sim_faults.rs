//! Honest results under injected faults, on the simulated RDMA fabric
//! (tests/stream_sim/fabric.rs): a flush never reports bytes delivered that a failed
//! completion or a failed connection may have lost, it does report bytes delivered that the
//! peer's credit updates acknowledged whatever became of their completions, and a SEND
//! shorter than a message is a protocol error; where a completion does not prove placement
//! (iWARP), a flush waits for the placement fence.

#[path = "stream_sim/fabric.rs"]
mod fabric;

use fabric::{pair, small_config, Completion, Fabric, Kind, Step, TARGET_KEY};
use rdmasock::protocol::{Received, StreamConfig, StreamError, WrId, FENCE_READ_LEN};
use std::net::Shutdown;

fn is_reset(r: Result<(), StreamError>) -> bool {
    matches!(r, Err(StreamError::ConnectionReset(_)))
}

/// The fabric fails every request once the peer is gone: a flush waiting for written bytes
/// returns the reset, in both send modes, signalled every message or not.
#[test]
fn flush_fails_when_written_bytes_complete_with_an_error() {
    for write_with_send in [false, true] {
        for interval in [1, 4] {
            let cfg = small_config()
                .signal_interval(interval)
                .write_with_send(write_with_send)
                .build()
                .unwrap();
            let mut f = pair(cfg.clone(), cfg);
            assert_eq!(f.sides[0].app_write(100), Ok(100));
            f.dead = true;
            assert_eq!(f.sides[0].engine.flush(), Err(StreamError::WouldBlock));
            f.sides[0].drain_ops();
            f.pump();
            let flushed = f.sides[0].engine.flush();
            assert!(
                is_reset(flushed.clone()),
                "write_with_send {write_with_send}, interval {interval}: {flushed:?}"
            );
            assert_eq!(f.sides[1].engine.readable_bytes(), 0, "nothing arrived");
            // And it stays an error: nothing later turns it into a success.
            f.pump();
            assert!(is_reset(f.sides[0].engine.flush()));
        }
    }
}

/// The connection fails (a keepalive's completion) while written bytes are still
/// outstanding: the flush says so at once, without waiting for their completions.
#[test]
fn flush_fails_when_the_connection_fails_with_bytes_outstanding() {
    let cfg = small_config().signal_interval(4).build().unwrap();
    let mut f = pair(cfg.clone(), cfg);
    assert_eq!(f.sides[0].app_write(100), Ok(100));
    assert!(f.sides[0].engine.keepalive());
    f.sides[0].drain_ops();
    // The keepalive fails first (a completion the fabric never delivered for the data).
    let keepalive = f.sides[0].sq.back().unwrap().wr_id;
    f.sides[0].sq.clear();
    f.sides[0].cq.push_back(Completion::Send(keepalive, false));
    f.sides[0].poll();
    assert!(f.sides[0].engine.error().is_some());
    assert!(is_reset(f.sides[0].engine.flush()));
}

/// Bytes the peer acknowledged stay delivered: a connection that fails afterwards (a
/// keepalive's failed completion) does not make a flush of them fail.
#[test]
fn flush_of_acknowledged_bytes_stays_ok_after_a_later_failure() {
    let cfg = small_config().signal_interval(1).build().unwrap();
    let mut f = pair(cfg.clone(), cfg);
    assert_eq!(f.sides[0].app_write(100), Ok(100));
    f.pump();
    assert_eq!(f.sides[0].engine.flush(), Ok(()));
    f.dead = true;
    assert!(f.sides[0].engine.keepalive());
    f.sides[0].drain_ops();
    f.pump();
    assert!(f.sides[0].engine.error().is_some(), "the keepalive failed");
    assert_eq!(f.sides[0].engine.flush(), Ok(()));
}

/// The connection manager closed the connection (the stream is not failed) and the queue
/// pair flushed the written bytes: the flush reports them lost.
#[test]
fn flush_fails_when_sends_are_flushed_after_a_close() {
    let cfg = small_config().signal_interval(1).build().unwrap();
    let mut f = pair(cfg.clone(), cfg);
    assert_eq!(f.sides[0].app_write(100), Ok(100));
    f.sides[0].engine.on_cm_disconnected();
    f.dead = true;
    f.pump();
    assert!(f.sides[0].engine.error().is_none(), "a close, not a reset");
    assert!(f.sides[0].engine.all_sends_done());
    assert!(is_reset(f.sides[0].engine.flush()));
}

/// Executes every request side `from` posted that the fabric can.
fn execute_all(f: &mut Fabric, from: usize) {
    while matches!(f.execute(from), Step::Progress) {}
}

/// Side 0 writes 4096 bytes (two unsignalled data messages) and side 1 reads them all,
/// which frees a ring half and sends a credit update; the update reaches side 0's
/// completion queue. Returns the fabric with that update not yet fed.
fn written_read_and_acknowledged(write_with_send: bool) -> Fabric {
    let cfg = small_config()
        .signal_interval(8)
        .write_with_send(write_with_send)
        .build()
        .unwrap();
    let mut f = pair(cfg.clone(), cfg);
    assert_eq!(f.sides[0].app_write(4096), Ok(4096));
    execute_all(&mut f, 0);
    while f.sides[1].poll() {}
    assert_eq!(f.sides[1].app_read(4096, false), Ok(4096));
    let updates = f.sides[0].cq.len();
    execute_all(&mut f, 1);
    assert!(
        f.sides[0].cq.len() > updates,
        "side 1 sent no credit update"
    );
    f
}

/// The peer read the bytes and acknowledged them in a credit update, then went away: the
/// flush's signalled zero-length WRITE after them fails, retiring the unsignalled data
/// requests with an error, yet the flush reports the bytes delivered — whether the update
/// is fed before or after the failed completion.
#[test]
fn flush_of_bytes_the_peer_acknowledged_in_credits_is_ok_when_the_last_send_fails() {
    for write_with_send in [false, true] {
        for update_first in [true, false] {
            let mut f = written_read_and_acknowledged(write_with_send);
            if update_first {
                while f.sides[0].poll() {}
            }
            let updates: Vec<_> = f.sides[0].cq.drain(..).collect();
            f.dead = true;
            assert_eq!(
                f.sides[0].engine.flush(),
                Err(StreamError::WouldBlock),
                "the data requests are unsignalled: the flush waits for a completion"
            );
            f.sides[0].drain_ops();
            execute_all(&mut f, 0);
            while f.sides[0].poll() {}
            assert!(f.sides[0].engine.error().is_some(), "the zero WRITE failed");
            f.sides[0].cq.extend(updates);
            while f.sides[0].poll() {}
            assert_eq!(
                f.sides[0].engine.flush(),
                Ok(()),
                "write_with_send {write_with_send}, update first {update_first}"
            );
        }
    }
}

/// Bytes written after the peer's last credit update, or landed but not yet read, are not
/// proven: when their completions fail the flush fails, though earlier bytes were
/// acknowledged.
#[test]
fn flush_of_bytes_past_the_peers_credits_fails_when_their_sends_fail() {
    for write_with_send in [false, true] {
        for land in [false, true] {
            let mut f = written_read_and_acknowledged(write_with_send);
            while f.sides[0].poll() {}
            assert_eq!(f.sides[0].app_write(100), Ok(100));
            if land {
                execute_all(&mut f, 0);
                while f.sides[1].poll() {}
                assert_eq!(f.sides[1].engine.readable_bytes(), 100);
            }
            f.dead = true;
            assert_eq!(f.sides[0].engine.flush(), Err(StreamError::WouldBlock));
            f.sides[0].drain_ops();
            f.pump();
            let flushed = f.sides[0].engine.flush();
            assert!(
                is_reset(flushed.clone()),
                "write_with_send {write_with_send}, landed {land}: {flushed:?}"
            );
        }
    }
}

/// Seeded random traffic both ways, then the fabric fails every request: a flush reports
/// side 0's bytes delivered only when side 1 holds every one of them (both answers come up
/// among the seeds).
#[test]
fn a_flush_after_random_traffic_is_ok_only_when_every_byte_arrived() {
    let (mut ok, mut failed) = (0, 0);
    for seed in 0..300u64 {
        let interval = [1u16, 4, 8][seed as usize % 3];
        let cfg = small_config()
            .signal_interval(interval)
            .write_with_send(seed % 2 == 1)
            .build()
            .unwrap();
        let mut f = Fabric::connect([cfg.clone(), cfg], [1 << 40, 1 << 40], seed);
        let steps = 20 + f.rng.below(400);
        for _ in 0..steps {
            f.step(6000);
        }
        // What already landed at side 1 counts; nothing moves after this.
        while f.sides[1].poll() {}
        f.dead = true;
        let flushed = loop {
            match f.sides[0].engine.flush() {
                Err(StreamError::WouldBlock) => {
                    f.sides[0].drain_ops();
                    f.pump();
                }
                other => break other,
            }
        };
        let arrived = f.sides[1].received + f.sides[1].engine.readable_bytes();
        if flushed.is_ok() {
            assert_eq!(
                arrived,
                f.sides[0].sent,
                "seed {seed}: the flush said Ok with bytes missing\n{}",
                f.dump()
            );
            ok += 1;
        } else {
            assert!(is_reset(flushed.clone()), "seed {seed}: {flushed:?}");
            failed += 1;
        }
    }
    println!("{ok} flushes succeeded, {failed} failed");
    assert!(ok > 0 && failed > 0, "{ok} succeeded, {failed} failed");
}

/// `abort` (the driver could not copy a write's bytes): what was queued is dropped, and
/// the flush reports the bytes the write accepted as undelivered.
#[test]
fn an_aborted_write_is_never_flushed_as_delivered() {
    let cfg = small_config().build().unwrap();
    let mut f = pair(cfg.clone(), cfg);
    let written = f.sides[0].engine.write(100, |_| {});
    assert_eq!(written, Ok(100));
    f.sides[0]
        .engine
        .abort(StreamError::Copy("out of range".into()));
    assert!(!f.sides[0].engine.has_ops(), "nothing queued is posted");
    assert!(matches!(
        f.sides[0].engine.flush(),
        Err(StreamError::Copy(_))
    ));
}

/// In write+send mode a SEND shorter than a message word is a protocol error: its slot
/// holds an earlier message's word, which must not be decoded again.
#[test]
fn a_short_message_send_is_a_protocol_error() {
    let cfg = small_config().write_with_send(true).build().unwrap();
    let mut f = pair(cfg.clone(), cfg);
    let target = f.sides[1].target.clone();
    f.sides[1]
        .engine
        .on_receive(WrId(1 << 63), Received::ShortMessage(2), &target);
    match f.sides[1].engine.error() {
        Some(StreamError::Protocol(why)) => assert!(why.contains("SEND of 2 bytes"), "{why}"),
        other => panic!("expected a protocol error, got {other:?}"),
    }
    assert_eq!(f.sides[1].engine.readable_bytes(), 0);
}

/// Sends `side` posted, completed successfully where signalled but not delivered: how
/// iWARP completes a WRITE or SEND once its TCP socket took the bytes.
fn complete_undelivered(f: &mut Fabric, side: usize) {
    f.sides[side].drain_ops();
    let posted: Vec<_> = f.sides[side].sq.drain(..).collect();
    for p in posted.iter().filter(|p| p.signaled) {
        f.sides[side].cq.push_back(Completion::Send(p.wr_id, true));
    }
    while f.sides[side].poll() {}
}

/// Where a WRITE completes once the local TCP took it (iWARP, a placement fence asked for),
/// a flush waits for the fence after the data: every data completion succeeding is not
/// enough, and a fence that fails makes the flush fail.
#[test]
fn a_flush_waits_for_the_placement_fence_and_fails_with_it() {
    let cfg = fencing_config();
    let mut f = pair(cfg.clone(), cfg);
    assert!(f.sides[0].engine.proves_placement_by_read());
    assert_eq!(f.sides[0].app_write(100), Ok(100));
    complete_undelivered(&mut f, 0);
    assert!(f.sides[0].engine.all_sends_done(), "every send completed");
    assert_eq!(
        f.sides[0].engine.flush(),
        Err(StreamError::WouldBlock),
        "the fence is still to come"
    );
    f.sides[0].drain_ops();
    let fence = f.sides[0].sq.pop_back().expect("the fence");
    assert!(matches!(fence.kind, Kind::Read) && fence.signaled);
    f.sides[0]
        .cq
        .push_back(Completion::Send(fence.wr_id, false));
    f.sides[0].poll();
    let flushed = f.sides[0].engine.flush();
    assert!(is_reset(flushed.clone()), "{flushed:?}");
    assert_eq!(f.sides[1].engine.readable_bytes(), 0, "nothing arrived");
}

/// The fence that comes back proves the bytes placed: the flush returns `Ok`, and a later
/// flush with nothing new written needs no other fence. Without a fence asked for, the
/// flush returns `Ok` once the completions came.
#[test]
fn a_placement_fence_that_comes_back_proves_the_flush() {
    let cfg = fencing_config();
    let mut f = pair(cfg.clone(), cfg);
    assert_eq!(f.sides[0].app_write(100), Ok(100));
    assert_eq!(f.sides[0].engine.flush(), Err(StreamError::WouldBlock));
    f.sides[0].drain_ops();
    assert!(f.sides[0]
        .sq
        .back()
        .is_some_and(|p| matches!(p.kind, Kind::Read)));
    f.pump();
    assert_eq!(f.sides[0].engine.flush(), Ok(()));
    assert_eq!(f.sides[1].engine.readable_bytes(), 100);
    assert_eq!(f.sides[0].engine.flush(), Ok(()), "no new fence");
    f.sides[0].drain_ops();
    assert!(f.sides[0].sq.is_empty());

    let cfg = small_config().write_with_send(true).build().unwrap();
    let mut f = pair(cfg.clone(), cfg);
    assert!(!f.sides[0].engine.proves_placement_by_read());
    assert_eq!(f.sides[0].app_write(100), Ok(100));
    complete_undelivered(&mut f, 0);
    assert_eq!(f.sides[0].engine.flush(), Ok(()));
}

/// The fence is a one-byte READ of the first byte of the peer's target list, the memory its
/// hello names (the kernel's siw refuses a zero-length READ, which names no memory, with a
/// TERMINATE; the fabric refuses a READ of anything but that byte).
#[test]
fn the_placement_fence_reads_the_first_byte_of_the_peers_target_list() {
    let cfg = fencing_config();
    let mut f = pair(cfg.clone(), cfg);
    assert_eq!(FENCE_READ_LEN, 1);
    assert_eq!(f.sides[0].app_write(100), Ok(100));
    assert_eq!(f.sides[0].engine.flush(), Err(StreamError::WouldBlock));
    f.sides[0].drain_ops();
    let fence = f.sides[0].sq.back().expect("the fence");
    assert!(matches!(fence.kind, Kind::Read));
    let target_list = f.sides[1].engine.hello().target_sgl;
    assert_eq!(
        (fence.remote_addr, fence.rkey),
        (target_list.addr, target_list.key)
    );
    assert_eq!(fence.rkey, TARGET_KEY[1]);
    f.pump();
    assert_eq!(f.sides[0].engine.flush(), Ok(()));
    assert_eq!(f.sides[1].engine.readable_bytes(), 100);
}

/// A close sends the fence before its DISCONNECT (once the peer has that, it may answer no
/// more READs); when the connection breaks after the data completed, the fence is flushed
/// with an error and the close says the bytes may not have arrived.
#[test]
fn a_close_fences_before_its_disconnect_and_fails_when_the_fence_is_flushed() {
    let cfg = fencing_config();
    let mut f = pair(cfg.clone(), cfg);
    assert_eq!(f.sides[0].app_write(100), Ok(100));
    complete_undelivered(&mut f, 0);
    f.sides[0].engine.shutdown(Shutdown::Both);
    f.sides[0].drain_ops();
    let kinds: Vec<bool> = f.sides[0]
        .sq
        .iter()
        .map(|p| matches!(p.kind, Kind::Read))
        .collect();
    assert_eq!(
        kinds.first(),
        Some(&true),
        "the fence goes first, then the DISCONNECT"
    );
    assert!(kinds.len() > 1 && !kinds[1..].contains(&true));
    f.dead = true;
    f.pump();
    let flushed = f.sides[0].engine.flush();
    assert!(is_reset(flushed.clone()), "{flushed:?}");
    assert!(f.sides[0].engine.undelivered().is_some());
    assert_eq!(f.sides[1].engine.readable_bytes(), 0, "nothing arrived");
}

/// A fencing side against a peer whose hello does not say it answers a fence (an rsocket
/// peer, which grants no READs on iWARP, or an rdmasock peer configured without fences)
/// sends no fence: its flush returns `Ok` once the completions came, and the peer's hello
/// lacks the flag. Against a peer that says it does, the fence is used.
#[test]
fn no_placement_fence_against_a_peer_that_does_not_answer_one() {
    let fencing = fencing_config();
    let plain = small_config().write_with_send(true).build().unwrap();
    let mut f = pair(fencing.clone(), plain);
    assert!(f.sides[0].engine.hello().answers_fence());
    assert!(!f.sides[1].engine.hello().answers_fence());
    assert!(!f.sides[0].engine.proves_placement_by_read());
    assert_eq!(f.sides[0].app_write(100), Ok(100));
    f.pump();
    assert_eq!(f.sides[0].engine.flush(), Ok(()));
    assert_eq!(f.sides[1].engine.readable_bytes(), 100);
    f.sides[0].drain_ops();
    assert!(
        !f.sides[0].sq.iter().any(|p| matches!(p.kind, Kind::Read)),
        "no READ posted to a peer that does not answer one"
    );
    let f = pair(fencing.clone(), fencing);
    assert!(f.sides[0].engine.proves_placement_by_read());
}

/// The connection manager reports the connection gone after the data's sends completed
/// (the local TCP took them) and before a fence went out (a removed device, a broken
/// connection): no fence can go out any more, so the flush waits for the flushed receives
/// rather than vouching for bytes no fence proved, and fails when they say the connection
/// broke.
#[test]
fn a_flush_after_disconnected_with_unfenced_bytes_waits_and_fails_with_the_break() {
    let cfg = fencing_config();
    let mut f = pair(cfg.clone(), cfg);
    assert_eq!(f.sides[0].app_write(100), Ok(100));
    complete_undelivered(&mut f, 0);
    f.sides[0].engine.on_cm_disconnected();
    assert_eq!(
        f.sides[0].engine.flush(),
        Err(StreamError::WouldBlock),
        "no fence proved the bytes placed"
    );
    f.sides[0].drain_ops();
    assert!(
        !f.sides[0].sq.iter().any(|p| matches!(p.kind, Kind::Read)),
        "no fence after the connection is gone"
    );
    f.sides[0].engine.on_receive_failed(WrId(1 << 63), None);
    let flushed = f.sides[0].engine.flush();
    assert!(is_reset(flushed.clone()), "{flushed:?}");
    assert!(f.sides[0].engine.undelivered().is_some());
    assert_eq!(f.sides[1].engine.readable_bytes(), 0, "nothing arrived");
}

/// The connection fails while every send has completed but no fence went out yet: the
/// bytes are unproven, so neither a flush nor `undelivered` vouches for them. Bytes a fence
/// proved before the failure stay vouched for.
#[test]
fn a_failure_before_the_fence_leaves_the_bytes_unproven() {
    let mut f = fenced_pair_after_a_proved_flush();
    assert_eq!(f.sides[0].app_write(100), Ok(100));
    complete_undelivered(&mut f, 0);
    f.sides[0].engine.on_receive_failed(WrId(1 << 63), None);
    let flushed = f.sides[0].engine.flush();
    assert!(is_reset(flushed.clone()), "{flushed:?}");
    assert!(f.sides[0].engine.undelivered().is_some());

    // Everything fenced, then the failure: nothing is unproven.
    let mut f = fenced_pair_after_a_proved_flush();
    f.sides[0].engine.on_receive_failed(WrId(1 << 63), None);
    assert_eq!(f.sides[0].engine.undelivered(), None);
    assert_eq!(f.sides[0].engine.flush(), Ok(()));
}

/// A fencing pair whose side 0 wrote 100 bytes and flushed them, the fence proving them.
fn fenced_pair_after_a_proved_flush() -> Fabric {
    let cfg = fencing_config();
    let mut f = pair(cfg.clone(), cfg);
    assert_eq!(f.sides[0].app_write(100), Ok(100));
    assert_eq!(f.sides[0].engine.flush(), Err(StreamError::WouldBlock));
    f.sides[0].drain_ops();
    f.pump();
    assert_eq!(f.sides[0].engine.flush(), Ok(()), "the fence proved them");
    f
}

/// Write+send mode (iWARP) with placement fences asked for.
fn fencing_config() -> StreamConfig {
    small_config()
        .write_with_send(true)
        .placement_fence(true)
        .build()
        .unwrap()
}
