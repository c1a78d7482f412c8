//! How blocking calls wait: read and write timeouts, the adaptive wait's naps, the counts
//! `wait_stats` keeps per wait mode, and a busy-polling read that lets a clone write.

use super::Fixture;
use rdmasock::SocketOptions;
use std::io::{ErrorKind, Read, Write};
use std::thread;
use std::time::{Duration, Instant};

/// A read with nothing coming ends at its timeout; a writer whose peer does not read fills
/// the rings and then times out; a zero timeout is refused.
pub(crate) fn read_and_write_timeouts(f: &Fixture) {
    let opts = SocketOptions::builder()
        .send_ring(4096)
        .recv_ring(8192)
        .build()
        .unwrap();
    let (s, mut c) = f.pair_with(&opts);
    c.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert_eq!(c.read_timeout().unwrap(), Some(Duration::from_millis(300)));
    let start = Instant::now();
    let err = c
        .read(&mut [0u8; 8])
        .expect_err("no data: the read times out");
    let waited = start.elapsed();
    eprintln!("read timed out after {waited:?}: {err}");
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err}"
    );
    assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(3));
    // The peer does not read: the writer fills the rings and then times out.
    c.set_write_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let chunk = vec![5u8; 4096];
    let start = Instant::now();
    let err = loop {
        if let Err(e) = c.write(&chunk) {
            break e;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "writes never blocked"
        );
    };
    eprintln!("write timed out: {err}");
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err}"
    );
    assert!(c.set_read_timeout(Some(Duration::ZERO)).is_err());
    drop(s);
}

/// Steady waits of a few milliseconds (a peer that answers 3 ms after each request) put the
/// default adaptive wait into its nap-then-spin plan: every answer still arrives, a
/// clone writes while the reader naps, and a read timeout shorter than the nap still ends the
/// read (the nap is cut to the deadline).
pub(crate) fn steady_slow_answers_nap_without_losing_data_or_timeouts(f: &Fixture) {
    let (server, client) = f.pair();
    const ROUNDS: u8 = 40;
    let answering = thread::spawn(move || {
        let mut s = server;
        for i in 0..ROUNDS {
            let mut b = [0u8; 1];
            s.read_exact(&mut b).expect("request");
            assert_eq!(b, [i]);
            thread::sleep(Duration::from_millis(3));
            s.write_all(&[i ^ 0xff]).expect("answer");
        }
        // The clone below writes once while the client naps.
        let mut b = [0u8; 1];
        s.read_exact(&mut b).expect("the clone's byte");
        assert_eq!(b, [0xab]);
        s
    });
    let mut c = client;
    for i in 0..ROUNDS {
        c.write_all(&[i]).unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).expect("answer");
        assert_eq!(b, [i ^ 0xff]);
    }
    let clone = c.try_clone().unwrap();
    let writer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(1));
        (&clone)
            .write_all(&[0xab])
            .expect("write from a clone while the reader waits");
        (&clone).flush().unwrap();
    });
    // No answer comes now: the read must end at its timeout, well before a second passes.
    c.set_read_timeout(Some(Duration::from_millis(2))).unwrap();
    let started = Instant::now();
    let mut b = [0u8; 1];
    let err = c.read(&mut b).expect_err("nothing to read");
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    writer.join().unwrap();
    let _s = answering.join().unwrap();
}

/// `wait_stats` counts what the blocking calls did: with answers 20 ms after each request,
/// the reads wait; in event mode the waits sleep on the channel, busy-polling for up to
/// 500 ms never does, and neither naps. A read whose thread was held off the CPU until the
/// answer was there does not wait (a loaded CI machine did that to one read in 30 with a
/// 1 ms delay): the counts must reach half the rounds, which a missing count cannot.
pub(crate) fn wait_stats_count_each_mode_s_waits(f: &Fixture) {
    const ROUNDS: u64 = 30;
    let event = SocketOptions::builder().event_mode().build().unwrap();
    let busy = SocketOptions::builder()
        .busy_poll(Duration::from_millis(500))
        .build()
        .unwrap();
    for (mode, opts) in [("event", event), ("busy-poll", busy)] {
        let (server, client) = f.pair_with(&opts);
        let answering = thread::spawn(move || {
            let mut s = server;
            for _ in 0..ROUNDS {
                let mut b = [0u8; 1];
                s.read_exact(&mut b).expect("request");
                thread::sleep(Duration::from_millis(20));
                s.write_all(&b).expect("answer");
            }
            s
        });
        let mut c = client;
        let before = c.wait_stats();
        for i in 0..ROUNDS {
            c.write_all(&[i as u8]).unwrap();
            let mut b = [0u8; 1];
            c.read_exact(&mut b).expect("answer");
            assert_eq!(b, [i as u8]);
        }
        let w = c.wait_stats();
        let _s = answering.join().unwrap();
        let waits = w.waits - before.waits;
        let sleeps = w.channel_sleeps - before.channel_sleeps;
        // A write may wait too (for its completion), and a woken read may sleep again.
        assert!(
            waits >= ROUNDS / 2,
            "{mode}: {waits} waits in {ROUNDS} rounds: {w:?}"
        );
        assert_eq!(w.naps, 0, "{mode}: only the adaptive mode naps: {w:?}");
        if mode == "event" {
            assert!(
                sleeps >= ROUNDS / 2,
                "{mode}: {sleeps} channel sleeps: {w:?}"
            );
        } else {
            assert_eq!(sleeps, 0, "{mode}: a 500 ms spin slept: {w:?}");
        }
    }
}

/// A clone's write is not held up by a clone's blocking read that is busy-polling under the
/// connection's lock: the spin ends as soon as another caller waits for the lock. With a
/// 5 s spin budget and no such yield, the write (and so the echo the read waits for) would
/// wait out the whole spin.
pub(crate) fn a_spinning_read_lets_a_clone_write(f: &Fixture) {
    let opts = SocketOptions::builder()
        .busy_poll(Duration::from_secs(5))
        .build()
        .unwrap();
    let (mut server, client) = f.pair_with(&opts);
    let start = Instant::now();
    let reader = client.try_clone().unwrap();
    let (started, is_reading) = std::sync::mpsc::channel();
    let read = std::thread::spawn(move || {
        let mut b = [0u8; 1];
        started.send(()).unwrap();
        (&reader).read_exact(&mut b).unwrap();
        b[0]
    });
    is_reading.recv().unwrap();
    // Not hiding a race: this only makes it likely that the reader is already spinning when
    // the write comes (the case under test); the assertion holds in every interleaving.
    std::thread::sleep(Duration::from_millis(50));
    (&client).write_all(b"x").unwrap();
    let mut b = [0u8; 1];
    server.read_exact(&mut b).unwrap();
    server.write_all(b"y").unwrap();
    assert_eq!(read.join().unwrap(), b'y');
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "the write waited for the read's spin: the echo took {took:?}"
    );
}
