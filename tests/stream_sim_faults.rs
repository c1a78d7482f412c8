//! Honest results under injected faults, on the simulated RDMA fabric
//! (tests/stream_sim/fabric.rs): a flush never reports bytes delivered that a failed
//! completion or a failed connection may have lost, and a SEND shorter than a message is a
//! protocol error.

#[path = "stream_sim/fabric.rs"]
mod fabric;

use fabric::{pair, small_config, Completion};
use rdmasock::protocol::{Received, StreamError, WrId};

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
