//! The connection manager's DISCONNECTED event overtaking the completions of the peer's last
//! messages, on the simulated RDMA fabric (tests/stream_sim/fabric.rs): end-of-stream waits
//! for the flushed receives, which come after every message the peer sent; the stream then
//! ends cleanly when the peer's DISCONNECT was among those messages and fails when it was
//! not. No clock decides.

#[path = "stream_sim/fabric.rs"]
mod fabric;

use fabric::{local_regions, pair, small_config, Completion, Fabric, Step};
use rdmasock::protocol::{StreamConfig, StreamEngine, StreamError};
use std::net::Shutdown;

/// Executes every request side `from` posted that the fabric can: the completions reach
/// the other side's completion queue, not yet fed.
fn execute_all(f: &mut Fabric, from: usize) {
    while matches!(f.execute(from), Step::Progress) {}
}

/// The queue pair of `side` moves to the error state: every receive still posted completes
/// flushed, behind the completions already queued.
fn flush_receives(f: &mut Fabric, side: usize) {
    let s = &mut f.sides[side];
    assert!(!s.rq.is_empty(), "receives are posted");
    while let Some((id, _)) = s.rq.pop_front() {
        s.cq.push_back(Completion::RecvFailed(id));
    }
}

/// Feeds every completion queued at `side`.
fn feed_all(f: &mut Fabric, side: usize) {
    while f.sides[side].poll() {}
}

/// Side 1 writes `bytes` and, when `close` says so, closes with its DISCONNECT; all of it
/// reaches side 0's completion queue unfed, and then side 0's DISCONNECTED comes. Side 0
/// has a send outstanding, which the fabric completes flushed ahead of the peer's messages
/// (a send queue flushed when the queue pair left the connected state).
fn disconnected_before_the_completions(bytes: usize, close: bool) -> Fabric {
    let cfg = small_config().signal_interval(1).build().unwrap();
    let mut f = pair(cfg.clone(), cfg);
    assert_eq!(f.sides[0].app_write(10), Ok(10));
    let outstanding = f.sides[0].sq.pop_front().expect("side 0's write").wr_id;
    assert_eq!(f.sides[1].app_write(bytes), Ok(bytes));
    if close {
        f.sides[1].engine.shutdown(Shutdown::Both);
        f.sides[1].drain_ops();
    }
    execute_all(&mut f, 1);
    f.sides[0]
        .cq
        .push_front(Completion::Send(outstanding, false));
    f.sides[0].engine.on_cm_disconnected();
    f
}

/// Until the completions are fed, neither end-of-stream nor an error: a read waits.
fn read_waits(f: &mut Fabric) {
    assert_eq!(
        f.sides[0].app_read(100, false),
        Err(StreamError::WouldBlock)
    );
    let e = &f.sides[0].engine;
    assert!(e.error().is_none(), "{:?}", e.error());
    assert!(!e.readiness().readable, "{:?}", e.readiness());
    assert!(e.awaits_flush());
    assert_eq!(f.sides[0].app_write(1), Err(StreamError::WriteClosed));
}

#[test]
fn the_peer_s_disconnect_then_the_flush_is_a_clean_end_of_stream() {
    let mut f = disconnected_before_the_completions(100, true);
    read_waits(&mut f);
    // The peer's data and DISCONNECT (and the flushed send ahead of them) are fed.
    feed_all(&mut f, 0);
    assert!(!f.sides[0].engine.awaits_flush(), "the DISCONNECT decided");
    assert!(f.sides[0].engine.readiness().readable);
    assert_eq!(f.sides[0].app_read(1000, false), Ok(100));
    assert_eq!(f.sides[0].app_read(1000, false), Ok(0), "end-of-stream");
    flush_receives(&mut f, 0);
    feed_all(&mut f, 0);
    let e = &f.sides[0].engine;
    assert!(e.error().is_none(), "{:?}", e.error());
    assert_eq!(
        f.sides[0].app_read(1000, false),
        Ok(0),
        "still end-of-stream"
    );
    // Our write's flushed completion: the peer may lack it, and a flush says so.
    assert!(matches!(
        f.sides[0].engine.flush(),
        Err(StreamError::ConnectionReset(_))
    ));
}

#[test]
fn only_the_flush_is_a_reset_after_the_bytes_that_came() {
    let mut f = disconnected_before_the_completions(100, false);
    read_waits(&mut f);
    feed_all(&mut f, 0);
    assert_eq!(
        f.sides[0].app_read(1000, false),
        Ok(100),
        "the bytes that came"
    );
    // All that came is read, and no DISCONNECT: still no end-of-stream.
    read_waits(&mut f);
    flush_receives(&mut f, 0);
    feed_all(&mut f, 0);
    let e = &f.sides[0].engine;
    assert!(!e.awaits_flush());
    assert!(e.readiness().readable && e.readiness().error);
    let err = f.sides[0].app_read(1000, false).expect_err("a reset");
    assert!(matches!(err, StreamError::ConnectionReset(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("the connection broke without a DISCONNECT message from the peer"),
        "{text}"
    );
}

#[test]
fn with_no_receive_posted_the_decision_is_made_at_once() {
    // The engine's receives were never handed to a driver: none can flush, and no message
    // can have arrived.
    let mut e = StreamEngine::new(StreamConfig::default(), local_regions());
    let peer = e.hello();
    e.on_connected(&peer).unwrap();
    e.on_cm_disconnected();
    assert!(!e.awaits_flush());
    let err = e.read(100, |_| {}).expect_err("a reset, not end-of-stream");
    let text = err.to_string();
    assert!(
        text.contains("the connection broke without a DISCONNECT message from the peer"),
        "{text}"
    );

    // With them posted, the same event waits for their flush.
    let mut e = StreamEngine::new(StreamConfig::default(), local_regions());
    while e.pop_op().is_some() {}
    e.on_connected(&peer).unwrap();
    e.on_cm_disconnected();
    assert!(e.awaits_flush());
    assert_eq!(e.read(100, |_| {}), Err(StreamError::WouldBlock));
}

#[test]
fn a_read_side_already_closed_stays_at_end_of_stream() {
    let cfg = small_config().build().unwrap();
    let mut f = pair(cfg.clone(), cfg);
    f.sides[0].engine.shutdown(Shutdown::Read);
    f.sides[0].engine.on_cm_disconnected();
    assert_eq!(f.sides[0].app_read(100, false), Ok(0));
}
