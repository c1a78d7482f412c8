//! The stream engine's close on the simulated RDMA fabric (tests/stream_sim/fabric.rs):
//! half-close and shutdown, flush, the DISCONNECT exchange and what may follow it, and
//! resets. The bulk and protocol tests are in tests/stream_sim.rs.

#[path = "stream_sim/fabric.rs"]
mod fabric;

use fabric::{local_regions, pair, small_config};
use rdmasock::protocol::{StreamConfig, StreamEngine, StreamError, WrId};
use std::net::Shutdown;

#[test]
fn shutdown_both_and_read_then_write() {
    let cfg = StreamConfig::builder().build().unwrap();
    let mut f = pair(cfg.clone(), cfg.clone());
    assert_eq!(f.sides[0].app_write(1000), Ok(1000));
    f.pump();
    f.sides[1].engine.shutdown(Shutdown::Both);
    f.sides[1].drain_ops();
    f.pump();
    let (a, b) = (f.sides[0].engine.readiness(), f.sides[1].engine.readiness());
    assert!(
        a.disconnected && a.readable && a.writable && !a.error,
        "{a:?}"
    );
    assert!(b.disconnected && !b.error, "{b:?}");
    assert_eq!(f.sides[0].app_write(1), Err(StreamError::WriteClosed));
    assert_eq!(f.sides[0].app_read(10, false), Ok(0));
    // Data that arrived before the close stays readable.
    assert_eq!(f.sides[1].app_read(4000, false), Ok(1000));
    assert_eq!(f.sides[1].app_read(4000, false), Ok(0));

    let mut f = pair(cfg.clone(), cfg);
    f.sides[0].engine.shutdown(Shutdown::Read);
    assert!(
        !f.sides[0].engine.has_ops(),
        "a read shutdown alone sends nothing"
    );
    assert_eq!(f.sides[0].app_write(10), Ok(10));
    f.sides[0].engine.shutdown(Shutdown::Write);
    f.sides[0].drain_ops();
    f.pump();
    assert_eq!(f.sides[1].app_read(100, false), Ok(10));
    assert_eq!(f.sides[1].app_read(100, false), Ok(0));
    assert!(f.sides[0].engine.readiness().disconnected);
    assert!(f.sides[1].engine.readiness().disconnected);
}

#[test]
fn shutdown_waits_for_a_control_slot() {
    let cfg = StreamConfig::builder().build().unwrap();
    let mut f = pair(cfg.clone(), cfg);
    for _ in 0..4 {
        assert!(f.sides[0].engine.keepalive());
    }
    assert!(
        !f.sides[0].engine.keepalive(),
        "all four control slots are busy"
    );
    f.sides[0].engine.shutdown(Shutdown::Write);
    f.sides[0].drain_ops();
    assert_eq!(f.sides[0].sq.len(), 4, "the SHUTDOWN waits");
    assert!(!f.sides[0].engine.all_sends_done());
    f.pump();
    assert!(f.sides[0].engine.all_sends_done());
    assert!(f.sides[1].engine.readiness().read_closed);
    assert_eq!(f.sides[1].app_read(1, false), Ok(0));
    assert_eq!(f.sides[1].app_write(7), Ok(7));
    f.pump();
    assert_eq!(f.sides[0].app_read(100, false), Ok(7));
}

/// The lost wakeup behind the hung small-rings event-mode socket test: with selective
/// signalling the last data posted can be unsignalled, so no completion ever retires it, and a
/// flush (which waits for every send) slept forever. `flush` must make a completion come.
#[test]
fn flush_after_unsignalled_sends_gets_a_completion() {
    for write_with_send in [false, true] {
        let cfg = small_config()
            .signal_interval(4)
            .write_with_send(write_with_send)
            .build()
            .unwrap();
        let mut f = pair(cfg.clone(), cfg);
        assert_eq!(f.sides[0].app_write(100), Ok(100));
        f.pump();
        assert_eq!(f.sides[1].engine.readable_bytes(), 100, "the data arrived");
        assert!(
            !f.sides[0].engine.all_sends_done(),
            "the unsignalled write is still outstanding: nothing will complete it by itself"
        );
        assert_eq!(f.sides[0].engine.flush(), Err(StreamError::WouldBlock));
        f.sides[0].drain_ops();
        assert_eq!(f.sides[0].engine.flush(), Err(StreamError::WouldBlock));
        f.sides[0].drain_ops();
        assert_eq!(f.sides[0].sq.len(), 1, "one signalled request, queued once");
        f.pump();
        assert!(f.sides[0].engine.all_sends_done());
        assert_eq!(f.sides[0].engine.flush(), Ok(()));
        assert_eq!(
            f.sides[1].engine.readable_bytes(),
            100,
            "invisible to the peer"
        );
    }
}

/// A flush while every control slot is busy waits for one, then signals.
#[test]
fn flush_waits_for_a_control_slot() {
    let cfg = small_config().signal_interval(4).build().unwrap();
    let mut f = pair(cfg.clone(), cfg);
    assert_eq!(f.sides[0].app_write(100), Ok(100));
    for _ in 0..4 {
        assert!(f.sides[0].engine.keepalive());
    }
    assert_eq!(f.sides[0].app_write(100), Ok(100));
    f.sides[0].drain_ops();
    assert_eq!(f.sides[0].engine.flush(), Err(StreamError::WouldBlock));
    f.sides[0].drain_ops();
    assert_eq!(f.sides[0].sq.len(), 6, "no slot: the signalled write waits");
    f.pump();
    assert!(f.sides[0].engine.all_sends_done());
    assert_eq!(f.sides[0].engine.flush(), Ok(()));
}

/// The peer's DISCONNECT ends the stream; the driver disconnects once every send completed,
/// which must happen even when the last one was unsignalled.
#[test]
fn peer_disconnect_after_unsignalled_sends_completes_them() {
    let cfg = small_config().signal_interval(4).build().unwrap();
    let mut f = pair(cfg.clone(), cfg);
    assert_eq!(f.sides[0].app_write(100), Ok(100));
    f.pump();
    assert!(!f.sides[0].engine.all_sends_done());
    f.sides[1].engine.shutdown(Shutdown::Both);
    f.sides[1].drain_ops();
    f.pump();
    let r = f.sides[0].engine.readiness();
    assert!(r.disconnected);
    assert!(f.sides[0].engine.all_sends_done());
}

/// `peer_closed` says the peer sends nothing more (the driver's cue on kernel iWARP to run
/// the connection manager's disconnect): our own DISCONNECT completing is not it, the peer's
/// DISCONNECT is. A SHUTDOWN answered with a DISCONNECT leaves its sender still reading (and
/// sending ring updates); SHUTDOWNs that cross are each answered with a DISCONNECT, since
/// either peer may still send ring updates until it has the other's SHUTDOWN.
#[test]
fn peer_closed_means_the_peer_sends_nothing_more() {
    let cfg = StreamConfig::builder().build().unwrap();
    let mut f = pair(cfg.clone(), cfg.clone());
    f.sides[0].engine.shutdown(Shutdown::Both);
    f.sides[0].drain_ops();
    f.pump();
    let (a, b) = (&f.sides[0].engine, &f.sides[1].engine);
    assert!(a.finished(), "our DISCONNECT completed");
    assert!(
        !a.peer_closed(),
        "the peer has not closed: it only received ours"
    );
    assert!(b.peer_closed() && b.finished());

    let mut f = pair(cfg.clone(), cfg.clone());
    f.sides[0].engine.shutdown(Shutdown::Write);
    f.sides[0].drain_ops();
    f.pump();
    assert!(
        !f.sides[1].engine.peer_closed(),
        "a SHUTDOWN: the peer still reads"
    );
    f.sides[1].engine.shutdown(Shutdown::Write);
    f.sides[1].drain_ops();
    f.pump();
    let (a, b) = (&f.sides[0].engine, &f.sides[1].engine);
    assert!(
        a.peer_closed() && a.finished(),
        "the answer was a DISCONNECT"
    );
    assert!(b.finished() && !b.peer_closed(), "side 0 may still read");

    let mut f = pair(cfg.clone(), cfg);
    for side in &mut f.sides {
        side.engine.shutdown(Shutdown::Write);
        side.drain_ops();
    }
    // Side 1's SHUTDOWN reaches side 0 first: side 0 answers with a DISCONNECT, and is not
    // closed itself (side 1 has yet to see side 0's SHUTDOWN).
    assert!(matches!(f.execute(1), fabric::Step::Progress));
    while f.sides[0].poll() {}
    f.sides[0].drain_ops();
    assert!(
        !f.sides[0].engine.peer_closed(),
        "a crossing SHUTDOWN is not a close"
    );
    assert_eq!(
        f.sides[0].sq.len(),
        2,
        "its SHUTDOWN, then the DISCONNECT answering"
    );
    f.pump();
    for side in &f.sides {
        assert!(side.engine.peer_closed() && side.engine.finished());
    }
}

/// Nothing is posted after our DISCONNECT: reading the data that arrived before it frees
/// ring space and message slots, which would make a credit update due, but on iWARP the
/// peer may close its TCP socket as soon as it has the DISCONNECT, and a later segment draws
/// a reset that loses what that socket still had to send. Keepalives stop too.
#[test]
fn nothing_follows_our_disconnect() {
    let cfg = small_config().build().unwrap();
    let mut f = pair(cfg.clone(), cfg);
    for _ in 0..12 {
        assert_eq!(f.sides[1].app_write(10), Ok(10));
        f.sides[1].drain_ops();
    }
    f.sides[0].engine.shutdown(Shutdown::Both);
    f.sides[0].drain_ops();
    let posted = f.sides[0].sq.len();
    assert!(posted > 0, "the DISCONNECT is posted");
    while matches!(f.execute(1), fabric::Step::Progress) {}
    while f.sides[0].poll() {}
    assert_eq!(
        f.sides[0].app_read(1000, false),
        Ok(120),
        "data before the close"
    );
    f.sides[0].drain_ops();
    assert!(
        !f.sides[0].engine.keepalive(),
        "no keepalive after DISCONNECT"
    );
    f.sides[0].drain_ops();
    assert_eq!(
        f.sides[0].sq.len(),
        posted,
        "nothing posted behind the DISCONNECT"
    );
    f.pump();
    assert!(f.sides[0].engine.finished() && f.sides[1].engine.peer_closed());
}

/// The DISCONNECT that answers crossing SHUTDOWNs is a courtesy: the peer (rsocket, which
/// sends none) may have closed its queue pair by the time it arrives. Its failing, with
/// every earlier send acknowledged, ends the stream as a close (reads see end-of-stream),
/// not a reset.
#[test]
fn a_refused_disconnect_after_crossing_shutdowns_is_a_close() {
    let cfg = StreamConfig::builder().build().unwrap();
    let mut f = pair(cfg.clone(), cfg);
    for side in &mut f.sides {
        side.engine.shutdown(Shutdown::Write);
        side.drain_ops();
    }
    // Side 1's SHUTDOWN reaches side 0 and side 0's is acknowledged; then side 1 goes away
    // before side 0's answering DISCONNECT arrives.
    assert!(matches!(f.execute(1), fabric::Step::Progress));
    assert!(matches!(f.execute(0), fabric::Step::Progress));
    while f.sides[0].poll() {}
    f.sides[0].drain_ops();
    assert_eq!(f.sides[0].sq.len(), 1, "the answering DISCONNECT");
    f.dead = true;
    f.pump();
    let e = &f.sides[0].engine;
    assert!(e.error().is_none(), "{:?}", e.error());
    assert!(e.finished() && e.readiness().disconnected);
    assert_eq!(f.sides[0].app_read(10, false), Ok(0), "end-of-stream");
}

/// The peer closes first and its side is gone at once (rxe: the acknowledgement of its
/// DISCONNECT ends its wait, and it disconnects), while that DISCONNECT waits unread in our
/// completion queue. Our close then posts a DISCONNECT of its own, which fails with the
/// connection: it carries no bytes and the peer, which closed, reads nothing more, so the
/// close is clean (every byte we wrote was acknowledged before). Bytes written in that
/// window, after the peer closed, are lost: the peer never read them, and the close says so.
#[test]
fn our_disconnect_refused_after_the_peer_closed_loses_nothing() {
    let cfg = StreamConfig::builder().build().unwrap();
    for write_after_the_peer_closed in [false, true] {
        let mut f = pair(cfg.clone(), cfg.clone());
        // An echo: each side reads what the other wrote, and side 1's flush returns.
        assert_eq!(f.sides[0].app_write(1000), Ok(1000));
        f.pump();
        assert_eq!(f.sides[1].app_read(4000, false), Ok(1000));
        assert_eq!(f.sides[1].app_write(1000), Ok(1000));
        f.pump();
        assert_eq!(f.sides[0].app_read(4000, false), Ok(1000));
        f.pump();
        assert_eq!(f.sides[1].engine.flush(), Ok(()));
        // Side 0 closes: its DISCONNECT is acknowledged, and it is gone.
        f.sides[0].engine.shutdown(Shutdown::Both);
        f.sides[0].drain_ops();
        while matches!(f.execute(0), fabric::Step::Progress) {}
        while f.sides[0].poll() {}
        assert!(f.sides[0].engine.finished(), "side 0 closed");
        assert_eq!(f.sides[1].cq.len(), 1, "side 0's DISCONNECT, not yet fed");
        f.dead = true;
        if write_after_the_peer_closed {
            assert_eq!(f.sides[1].app_write(100), Ok(100));
        }
        f.sides[1].engine.shutdown(Shutdown::Both);
        f.sides[1].drain_ops();
        f.pump();
        let e = &f.sides[1].engine;
        assert!(e.peer_closed() && e.finished(), "{:?}", e.readiness());
        assert!(e.all_sends_done(), "the DISCONNECT's failure was fed");
        if write_after_the_peer_closed {
            let lost = e.undelivered();
            assert!(
                matches!(lost, Some(StreamError::ConnectionReset(_))),
                "bytes the peer never read: {lost:?}"
            );
        } else {
            assert_eq!(e.undelivered(), None, "nothing was lost");
            assert_eq!(e.error(), None);
        }
    }
}

/// A receive flushed while connected is a reset, not an end of stream, and says why the
/// connection ended when the connection manager knows it (uiwarp: TCP gave up on the peer).
#[test]
fn a_flushed_receive_is_a_reset_that_names_its_cause() {
    for cause in [None, Some("the peer stopped acknowledging")] {
        let mut e = StreamEngine::new(StreamConfig::default(), local_regions());
        let peer = e.hello();
        e.on_connected(&peer).unwrap();
        e.on_receive_failed(WrId(1 << 63), cause);
        let err = e.read(100, |_| {}).expect_err("a reset");
        let text = err.to_string();
        assert_eq!(
            std::io::Error::from(err).kind(),
            std::io::ErrorKind::ConnectionReset
        );
        assert!(text.contains("without a DISCONNECT message"), "{text}");
        if let Some(c) = cause {
            assert!(text.ends_with(&format!(": {c}")), "{text}");
        }
    }
}

/// Crossing SHUTDOWNs, but a data message of ours fails before them: the DISCONNECT that
/// answers the SHUTDOWNs failing after it does not make the lost bytes delivered.
#[test]
fn a_refused_farewell_does_not_hide_an_earlier_lost_message() {
    let cfg = StreamConfig::builder().build().unwrap();
    let mut f = pair(cfg.clone(), cfg);
    // Side 1's SHUTDOWN reaches side 0 first.
    f.sides[1].engine.shutdown(Shutdown::Write);
    f.sides[1].drain_ops();
    assert!(matches!(f.execute(1), fabric::Step::Progress));
    while f.sides[0].poll() {}
    // Side 0 writes, then shuts down in turn; then the connection breaks before its data
    // message is executed.
    assert_eq!(f.sides[0].app_write(100), Ok(100));
    f.sides[0].engine.shutdown(Shutdown::Write);
    f.sides[0].drain_ops();
    f.dead = true;
    f.pump();
    let lost = f.sides[0].engine.undelivered();
    assert!(
        matches!(lost, Some(StreamError::ConnectionReset(_))),
        "100 bytes the peer never received: {lost:?}"
    );
}
