//! The userspace provider's listener flooded with raw frames (junk where the MPA request
//! belongs, from several TCP clients at full speed) while a connection on it streams and a
//! second one connects.

use super::limits::{echo_all, round_trip};
use super::peer::{is_pattern, pattern};
use super::{duration_text, Detection, Fault, Row};
use crate::conformance::Fixture;
use rdmasock::RdmaSocket;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

/// The flooding TCP clients.
const FLOODERS: usize = 8;

/// Bytes the streaming connection sends and gets back.
const STREAM: u64 = 16 << 20;

/// How long a flooder goes on before the listener must have dropped it: the listener's
/// MPA request timeout (5 s) and a margin for a busy machine.
const FLOOD_BOUND: Duration = Duration::from_secs(15);

/// How long the second connection may take to connect and make a round trip.
const SECOND_BOUND: Duration = Duration::from_secs(5);

/// Streams [`STREAM`] pattern bytes through the echo on `s`; returns (bytes a flush vouched
/// for, bytes back intact).
fn stream(s: RdmaSocket) -> (u64, u64) {
    let mut writer = s.try_clone().unwrap();
    let writing = thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        let mut at = 0u64;
        while at < STREAM {
            pattern(at, &mut buf);
            writer
                .write_all(&buf)
                .expect("the streaming connection's write");
            at += buf.len() as u64;
        }
        writer.flush().map(|_| at).unwrap_or(0)
    });
    let mut reader = s;
    let mut buf = vec![0u8; 64 << 10];
    let mut intact = 0u64;
    while intact < STREAM {
        let n = reader
            .read(&mut buf)
            .expect("the streaming connection's read");
        assert!(n > 0, "end of stream after {intact} bytes");
        assert!(is_pattern(intact, &buf[..n]), "corrupt at {intact}");
        intact += n as u64;
    }
    (writing.join().expect("the writer"), intact)
}

/// One flooder: junk at `addr` until the listener drops it or [`FLOOD_BOUND`] passes;
/// (when its writes failed, what they said).
fn flooder(addr: std::net::SocketAddr, start: Instant) -> Option<(Duration, String)> {
    let mut tcp = TcpStream::connect(addr).expect("the flooder's TCP connect");
    let junk = vec![0x5au8; 64 << 10];
    while start.elapsed() < FLOOD_BOUND {
        if let Err(e) = tcp.write_all(&junk) {
            return Some((start.elapsed(), e.to_string()));
        }
    }
    None
}

/// The flood row: asserts every flooder is dropped within [`FLOOD_BOUND`], the streaming
/// connection's bytes all come back intact, and the second connection connects and makes a
/// round trip within [`SECOND_BOUND`].
pub(crate) fn flood(f: &Fixture) -> Row {
    let (l, addr) = f.listener();
    echo_all(l);
    let victim = RdmaSocket::connect(addr).expect("the streaming connection");
    let streaming = thread::spawn(move || stream(victim));
    let start = Instant::now();
    let flooders: Vec<_> = (0..FLOODERS)
        .map(|_| thread::spawn(move || flooder(addr, start)))
        .collect();
    let second = {
        let began = Instant::now();
        let mut c = RdmaSocket::connect(addr).expect("the second connection");
        let intact = round_trip(&mut c).expect("the second connection's round trip");
        assert!(intact, "the second connection's bytes came back changed");
        began.elapsed()
    };
    let dropped: Vec<_> = flooders
        .into_iter()
        .map(|t| t.join().expect("a flooder"))
        .collect();
    let (vouched, intact) = streaming.join().expect("the streaming connection");
    let slowest = dropped.iter().flatten().map(|(d, _)| *d).max();
    let flooder_saw = dropped
        .iter()
        .flatten()
        .map(|(_, e)| e.clone())
        .next()
        .unwrap_or_default();
    let row = Row {
        provider: f.provider,
        fault: Fault::Flood,
        detection: match slowest {
            Some(d) if dropped.iter().all(Option::is_some) => Detection::After(d),
            _ => Detection::NotWithin(FLOOD_BOUND),
        },
        seen: format!(
            "the {FLOODERS} flooders' TCP connections are dropped ({flooder_saw}); a stream on \
             the listener sees no error ({intact} bytes echoed intact); a second connection \
             connects and echoes in {}",
            duration_text(second)
        ),
        lost: vouched.saturating_sub(intact),
    };
    row.print();
    assert!(
        dropped.iter().all(Option::is_some),
        "a flooder was not dropped within {FLOOD_BOUND:?}"
    );
    assert_eq!(vouched, STREAM, "the streaming connection's flush");
    assert_eq!(intact, vouched, "bytes vouched for and lost");
    assert!(
        second < SECOND_BOUND,
        "the second connection took {second:?}"
    );
    row
}
