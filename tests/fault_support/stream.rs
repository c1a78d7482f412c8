//! The stream faults: a peer process reads a stream and checks every byte; the fault comes
//! once the peer has every byte a flush vouched for; then the writer goes on writing and
//! flushing, and a reader waits, until a call fails or the window passes.

use super::peer::{pattern, Peer};
use super::removal::SpareDevice;
use super::{Detection, Fault, Row};
use crate::conformance::{Fixture, Provider, Wire};
use rdmasock::{RdmaListener, SocketOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// The keepalive interval of every stream fault.
pub(crate) const KEEPALIVE: Duration = Duration::from_millis(500);

/// Bytes streamed before the fault.
const BEFORE: u64 = 1 << 20;

/// Bytes per write.
const CHUNK: usize = 64 << 10;

/// How long a step without the fault may take (under the VM's emulation too).
const STEP: Duration = Duration::from_secs(30);

/// How long after the fault the row waits for a call to fail, per provider: for a stopped
/// peer, past the time the keepalive finds a cut wire (uiwarp: an interval plus the liveness
/// timeout of three intervals, at least 2 s, and an eighth of it between its checks; rxe: the queue pair's retries, about 16 s);
/// siw's keepalive finds nothing before TCP's retransmission limit (minutes).
pub(crate) fn stop_window(provider: Provider) -> Duration {
    match provider {
        Provider::Uiwarp => Duration::from_secs(5),
        Provider::Rxe => Duration::from_secs(20),
        Provider::Siw => Duration::from_secs(5),
    }
}

/// The bound on the detection of `fault` on `provider`, which the test asserts.
pub(crate) fn bound(fault: Fault, provider: Provider) -> Duration {
    match (fault, provider) {
        // The peer's kernel resets its TCP connection.
        (Fault::Kill, Provider::Uiwarp) => Duration::from_secs(5),
        // The kernel destroys the peer's connection ids and disconnects.
        (Fault::Kill, _) => Duration::from_secs(30),
        // An interval, the liveness timeout (3 intervals, at least 2 s), a margin of 5 s.
        (Fault::Cut, _) => KEEPALIVE + Duration::from_secs(2) + Duration::from_secs(5),
        (Fault::Removal, _) => Duration::from_secs(30),
        _ => stop_window(provider),
    }
}

/// How the fault is injected into the connection to the peer.
enum Injection {
    Signal(&'static str),
    Cut(Wire),
    Remove(SpareDevice),
}

/// The first failure of a call after the fault.
struct Failure {
    after: Duration,
    error: io::Error,
}

/// Whether `e` is a call's own timeout running out, not the connection failing.
fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock)
}

/// Injects `fault` into a live stream to a peer process and measures the row; asserts the
/// detection is within [`bound`] (for a stopped peer: that nothing failed within the window,
/// and that every byte arrives once the peer goes on), and that bytes lost, if any, made the
/// close fail. `case` is the calling test's case name (the peer runs it again).
/// [`measure_nothing_lost`] asserts no byte was lost too.
pub(crate) fn measure(f: &Fixture, fault: Fault, case: &str) -> Row {
    let opts = SocketOptions::builder()
        .keepalive(Some(KEEPALIVE))
        .build()
        .unwrap();
    // uiwarp's stopped peer: in a namespace of its own whose TCP receive buffers are small,
    // so that its window surely fills once it stops.
    let mut small_window: Option<Wire> = None;
    let (injection, ip): (Option<Injection>, IpAddr) = match fault {
        Fault::Cut => {
            let wire = Wire::new();
            let ip = IpAddr::V4(wire.near_ip);
            (Some(Injection::Cut(wire)), ip)
        }
        Fault::Removal => {
            let spare = SpareDevice::create(f.provider);
            let ip = spare.ip();
            (Some(Injection::Remove(spare)), ip)
        }
        Fault::Kill => (Some(Injection::Signal("KILL")), f.ip),
        Fault::Stop if f.provider == Provider::Uiwarp => {
            let wire = Wire::new();
            shrink_receive_buffers(&wire.namespace);
            let ip = IpAddr::V4(wire.near_ip);
            small_window = Some(wire);
            (Some(Injection::Signal("STOP")), ip)
        }
        Fault::Stop => (Some(Injection::Signal("STOP")), f.ip),
        _ => panic!("{fault:?} is not a stream fault"),
    };
    let listener = RdmaListener::bind_with(SocketAddr::new(ip, 0), &opts)
        .unwrap_or_else(|e| panic!("bind on {ip}: {e}"));
    let addr = listener.local_addr().unwrap();
    let namespace = match (&injection, &small_window) {
        (Some(Injection::Cut(wire)), _) | (_, Some(wire)) => Some(wire.namespace.clone()),
        _ => None,
    };
    let mut peer = Peer::spawn(
        &f.test_name(case),
        &format!("reader {addr}"),
        namespace.as_deref(),
    );
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(listener.accept().map(|(s, _)| (s, listener)));
    });
    let (mut s, listener) = rx
        .recv_timeout(STEP)
        .unwrap_or_else(|_| panic!("the peer did not connect within {STEP:?}"))
        .unwrap_or_else(|e| panic!("accept the peer: {e}"));

    // The stream before the fault: every byte vouched for, and received.
    let mut buf = vec![0u8; CHUNK];
    let mut written = 0u64;
    while written < BEFORE {
        pattern(written, &mut buf);
        s.write_all(&buf).expect("write before the fault");
        written += CHUNK as u64;
    }
    s.flush().expect("flush before the fault");
    let mut vouched = written;
    assert!(
        peer.wait_got(vouched, STEP),
        "the peer received {} of {vouched} bytes within {STEP:?}",
        peer.got
    );

    let window = match fault {
        Fault::Stop => stop_window(f.provider),
        _ => bound(fault, f.provider) + Duration::from_secs(5),
    };
    let mut injection = injection.expect("an injection");
    let start = Instant::now();
    match &mut injection {
        Injection::Signal(signal) => peer.signal(signal),
        Injection::Cut(wire) => wire.cut(),
        Injection::Remove(spare) => spare.remove(),
    }
    s.set_read_timeout(Some(window)).unwrap();
    s.set_write_timeout(Some(window)).unwrap();
    let reading = {
        let mut r = s.try_clone().unwrap();
        thread::spawn(move || {
            let result = r.read(&mut [0u8; 1]);
            (start.elapsed(), result)
        })
    };
    let mut first: Option<Failure> = None;
    while start.elapsed() < window {
        pattern(written, &mut buf);
        let mut result = Ok(());
        let mut at = 0;
        while at < CHUNK {
            match s.write(&buf[at..]) {
                Ok(n) => {
                    at += n;
                    written += n as u64;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        // A stopped peer answers no flush (its process makes the proof of placement): the
        // writer writes on until the peer's ring and TCP window are full instead.
        let result = match fault {
            Fault::Stop => result,
            _ => result.and_then(|_| s.flush()),
        };
        match result {
            Ok(()) if fault == Fault::Stop => {}
            Ok(()) => vouched = written,
            Err(e) if is_timeout(&e) => break,
            Err(error) => {
                first = Some(Failure {
                    after: start.elapsed(),
                    error,
                });
                break;
            }
        }
    }
    let (read_after, read_result) = reading.join().expect("the reader");
    match read_result {
        Err(error)
            if !is_timeout(&error) && first.as_ref().is_none_or(|f| read_after < f.after) =>
        {
            first = Some(Failure {
                after: read_after,
                error,
            });
        }
        Ok(n) => panic!("a read returned Ok({n}), but the peer sends nothing"),
        _ => {}
    }
    if fault == Fault::Stop {
        peer.signal("CONT");
    }
    // What the close vouches for: every byte written.
    s.set_write_timeout(None).unwrap();
    let closed = s.close();
    if closed.is_ok() {
        vouched = written;
    }
    // A cut peer reads nothing more (and, without a keepalive of its own, never ends).
    let (got, said) = peer.finish(match fault {
        Fault::Cut => Duration::from_secs(1),
        _ => STEP,
    });
    drop(listener);
    drop(small_window);
    if let Injection::Remove(spare) = injection {
        spare.finish();
    }
    let lost = vouched.saturating_sub(got);
    eprintln!(
        "{} {}: written {written}, vouched {vouched}, the peer got {got} ({said:?}); close: \
         {closed:?}",
        f.provider.name(),
        fault.label()
    );
    let row = Row {
        provider: f.provider,
        fault,
        detection: match &first {
            Some(failure) => Detection::After(failure.after),
            None => Detection::NotWithin(window),
        },
        seen: match (&first, fault) {
            (Some(failure), _) => format!("{:?}: {}", failure.error.kind(), failure.error),
            (None, Fault::Stop) => format!(
                "nothing: the transport stays up (the stopped peer's {} keeps acknowledging); \
                 the application's own timeout is the answer. After SIGCONT all {got} bytes \
                 arrived",
                match f.provider {
                    Provider::Uiwarp => "kernel TCP",
                    Provider::Rxe => "rxe device",
                    Provider::Siw => "siw device and kernel TCP",
                }
            ),
            (None, _) => "nothing".to_string(),
        },
        lost,
    };
    row.print();
    assert!(
        !said.iter().any(|l| l.starts_with("corrupt")),
        "the peer received corrupt bytes: {said:?}"
    );
    assert!(
        lost == 0 || closed.is_err(),
        "{lost} bytes vouched for were lost, and the close said nothing"
    );
    match fault {
        Fault::Stop => {
            assert!(
                first.is_none(),
                "a stopped peer failed the connection: {}",
                first.unwrap().error
            );
            assert!(closed.is_ok(), "the close after SIGCONT: {closed:?}");
            assert_eq!(got, written, "every byte arrives after SIGCONT");
        }
        _ => {
            let failure = first.unwrap_or_else(|| panic!("no call failed within {window:?}"));
            let limit = bound(fault, f.provider);
            assert!(
                failure.after <= limit,
                "detected after {:?}, past the bound of {limit:?}: {}",
                failure.after,
                failure.error
            );
        }
    }
    row
}

/// [`measure`], asserting that no byte a call vouched for was lost.
pub(crate) fn measure_nothing_lost(f: &Fixture, fault: Fault, case: &str) -> Row {
    let row = measure(f, fault, case);
    assert_eq!(row.lost, 0, "bytes vouched for and lost");
    row
}

/// Whether a flush's `Ok` on `provider` says the bytes are in the peer's memory (between
/// two rdmasock ends): on rxe a WRITE completes once the peer acknowledged it; uiwarp and
/// siw complete a WRITE once their TCP socket took the bytes, and a flush proves placement
/// with a placement fence, a one-byte RDMA READ of the peer's target list after them,
/// whose response comes only once the peer placed every byte before it.
pub(crate) fn flush_vouches_for_the_peer(provider: Provider) -> bool {
    matches!(provider, Provider::Rxe | Provider::Uiwarp | Provider::Siw)
}

/// [`measure_nothing_lost`] where a flush vouches for the peer, [`measure`] (bytes lost
/// make the close fail) where it vouches for the local TCP socket only.
pub(crate) fn measure_as_vouched(f: &Fixture, fault: Fault, case: &str) -> Row {
    if flush_vouches_for_the_peer(f.provider) {
        measure_nothing_lost(f, fault, case)
    } else {
        measure(f, fault, case)
    }
}

/// TCP receive buffers of at most 16 KiB for the sockets made in network namespace
/// `namespace` (its own `net.ipv4.tcp_rmem`).
fn shrink_receive_buffers(namespace: &str) {
    let status = std::process::Command::new("ip")
        .args(["netns", "exec", namespace])
        .args(["sysctl", "-qw", "net.ipv4.tcp_rmem=4096 16384 16384"])
        .status()
        .expect("run sysctl");
    assert!(status.success(), "set tcp_rmem in {namespace}: {status}");
}
