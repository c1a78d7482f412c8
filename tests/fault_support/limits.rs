//! Limits hit on purpose, each in a peer process whose limit is lowered: the fd limit
//! (`RLIMIT_NOFILE`) at connection N, and a locked-memory limit (`RLIMIT_MEMLOCK`) too small
//! for `RdmaSocket::connect` and for `RdmaListener::accept`.

use super::peer::{is_pattern, pattern, report, Peer};
use super::{Detection, Fault, Row};
use crate::conformance::Fixture;
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use rdmasock::{RdmaListener, RdmaSocket};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

/// How long a step may take (under the VM's emulation too).
const STEP: Duration = Duration::from_secs(60);

/// Connections the fd peer opens before its limit is lowered.
const BEFORE_LIMIT: usize = 8;

/// Connections the fd peer tries past the limit before it gives up looking for the failure.
const PAST_LIMIT: usize = 64;

/// Bytes each kept connection echoes once the limit was hit.
const ECHOED: usize = 4096;

/// The locked-memory limit of the memlock peers: half of the smallest ring a connection
/// starts with, so its first registration fails.
const MEMLOCK: u64 = (rdmasock::socket::DEFAULT_RING_MIN / 2) as u64;

/// Echoes every connection `listener` accepts, each on a thread of its own, for as long as
/// the test process runs (or until 100 accepts in a row fail).
pub(crate) fn echo_all(listener: RdmaListener) {
    thread::spawn(move || {
        let mut failures = 0;
        while failures < 100 {
            // A connection that failed half-made (the peer hit its limit) fails one accept.
            let Ok((s, _)) = listener.accept() else {
                failures += 1;
                continue;
            };
            failures = 0;
            echo(s);
        }
    });
}

/// Echoes `s` on a thread of its own until end of stream or an error.
fn echo(mut s: RdmaSocket) {
    thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n @ 1..) = s.read(&mut buf) {
            if s.write_all(&buf[..n]).is_err() {
                return;
            }
        }
    });
}

/// One round trip of [`ECHOED`] pattern bytes; whether they came back intact.
pub(crate) fn round_trip(s: &mut RdmaSocket) -> std::io::Result<bool> {
    let mut out = vec![0u8; ECHOED];
    pattern(0, &mut out);
    s.write_all(&out)?;
    s.flush()?;
    let mut back = vec![0u8; ECHOED];
    s.read_exact(&mut back)?;
    Ok(is_pattern(0, &back))
}

/// The fd peer: [`BEFORE_LIMIT`] connections to `addr`, then a fd limit of what is open
/// plus 2, then connections until one fails (reported: `failed MADE MICROS KIND: TEXT`),
/// then a round trip on every connection kept (`kept COUNT INTACT`).
pub(crate) fn fds_peer(addr: &str, before: usize) {
    let mut kept = Vec::new();
    for _ in 0..before {
        let mut c = RdmaSocket::connect(addr).expect("connect before the limit");
        assert!(round_trip(&mut c).expect("a round trip before the limit"));
        kept.push(c);
    }
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, open + 2, hard).unwrap();
    let mut made = 0;
    loop {
        if made == PAST_LIMIT {
            report("no failure");
            break;
        }
        let start = Instant::now();
        match RdmaSocket::connect(addr) {
            Ok(c) => {
                kept.push(c);
                made += 1;
            }
            Err(e) => {
                let micros = start.elapsed().as_micros();
                report(&format!("failed {made} {micros} {:?}: {e}", e.kind()));
                break;
            }
        }
    }
    let count = kept.len();
    let intact = kept
        .iter_mut()
        .map(round_trip)
        .filter(|r| matches!(r, Ok(true)))
        .count();
    report(&format!("kept {count} {intact}"));
}

/// Lowers this process's locked-memory limit to [`MEMLOCK`] and, as root, becomes nobody
/// (root's CAP_IPC_LOCK would ignore the limit; the VM's /dev/infiniband/* are mode 0666).
fn lower_memlock() {
    setrlimit(Resource::RLIMIT_MEMLOCK, MEMLOCK, MEMLOCK).unwrap();
    if nix::unistd::geteuid().is_root() {
        nix::unistd::setuid(nix::unistd::Uid::from_raw(65534)).unwrap();
    }
}

/// Reports a call's failure as `failed 0 MICROS KIND: TEXT`, or `ok`.
fn report_result<T>(start: Instant, r: std::io::Result<T>) {
    match r {
        Ok(_) => report("ok"),
        Err(e) => {
            let micros = start.elapsed().as_micros();
            report(&format!("failed 0 {micros} {:?}: {e}", e.kind()));
        }
    }
}

/// The memlock peer of `connect`: connects to `addr` under the lowered limit.
pub(crate) fn memlock_connect_peer(addr: &str) {
    lower_memlock();
    let start = Instant::now();
    report_result(start, RdmaSocket::connect(addr));
}

/// The memlock peer of `accept`: listens on `ip` under the lowered limit (reported:
/// `listening ADDR`), and accepts one connection.
pub(crate) fn memlock_accept_peer(ip: &str) {
    lower_memlock();
    let l = RdmaListener::bind(format!("{ip}:0")).expect("bind under the lowered limit");
    report(&format!("listening {}", l.local_addr().unwrap()));
    let start = Instant::now();
    report_result(start, l.accept());
}

/// A peer's `failed MADE MICROS KIND: TEXT` report: (MADE, the call's time, `KIND: TEXT`).
fn parse_failure(rest: &str) -> (usize, Duration, String) {
    let mut words = rest.splitn(3, ' ');
    let made = words.next().unwrap().parse().unwrap();
    let micros = words.next().unwrap().parse().unwrap();
    (
        made,
        Duration::from_micros(micros),
        words.next().unwrap().to_string(),
    )
}

/// The fd-exhaustion row: the peer's fd limit is lowered at connection [`BEFORE_LIMIT`];
/// asserts that a connect then fails saying so, and that every connection kept goes on
/// carrying bytes intact.
pub(crate) fn fds(f: &Fixture, case: &str) -> Row {
    let (l, addr) = f.listener();
    echo_all(l);
    let role = format!("fds {addr} {BEFORE_LIMIT}");
    let mut peer = Peer::spawn(&f.test_name(case), &role, None);
    let failed = peer.wait_for("failed ", STEP);
    let kept = peer.wait_for("kept ", STEP);
    let (_, said) = peer.finish(STEP);
    let failed = failed.unwrap_or_else(|| panic!("no connect failed: {said:?}"));
    let kept = kept.unwrap_or_else(|| panic!("no round trips after the limit: {said:?}"));
    let (made, took, text) = parse_failure(&failed);
    let (count, intact): (usize, usize) = {
        let mut w = kept.split(' ').map(|w| w.parse().unwrap());
        (w.next().unwrap(), w.next().unwrap())
    };
    let row = Row {
        provider: f.provider,
        fault: Fault::Fds,
        detection: Detection::After(took),
        seen: format!(
            "connection {} fails: {text}; the {count} open connections go on (a round trip \
             of {ECHOED} bytes on each: {intact} intact)",
            BEFORE_LIMIT + made + 1
        ),
        lost: ((count - intact) * ECHOED) as u64,
    };
    row.print();
    assert!(
        text.contains("Too many open files") || text.contains("RLIMIT_NOFILE"),
        "the failed connect names the fd limit: {text}"
    );
    assert_eq!(intact, count, "every connection kept goes on");
    assert!(took < Duration::from_secs(10), "the failure took {took:?}");
    row
}

/// Asserts a memlock peer's failure names the limit and what to do; the row.
fn memlock_row(f: &Fixture, fault: Fault, failed: Option<String>, said: &[String]) -> Row {
    let failed = failed.unwrap_or_else(|| panic!("the call did not fail: {said:?}"));
    let (_, took, text) = parse_failure(&failed);
    let row = Row {
        provider: f.provider,
        fault,
        detection: Detection::After(took),
        seen: text.clone(),
        lost: 0,
    };
    row.print();
    assert!(
        text.contains("RLIMIT_MEMLOCK") && text.contains("ulimit -l"),
        "the error names the limit and what to do: {text}"
    );
    row
}

/// The memlock row of `connect`: the peer connects to a listener here under a locked-memory
/// limit too small for its rings.
pub(crate) fn memlock_connect(f: &Fixture, case: &str) -> Row {
    let (l, addr) = f.listener();
    echo_all(l);
    let role = format!("memlock-connect {addr}");
    let mut peer = Peer::spawn(&f.test_name(case), &role, None);
    let failed = peer.wait_for("failed ", STEP);
    let (_, said) = peer.finish(STEP);
    memlock_row(f, Fault::MemlockConnect, failed, &said)
}

/// The memlock row of `accept`: the peer listens under a locked-memory limit too small for
/// its rings; a connection from here makes its `accept` fail.
pub(crate) fn memlock_accept(f: &Fixture, case: &str) -> Row {
    let role = format!("memlock-accept {}", f.ip);
    let mut peer = Peer::spawn(&f.test_name(case), &role, None);
    let addr: SocketAddr = peer
        .wait_for("listening ", STEP)
        .unwrap_or_else(|| panic!("the peer did not listen: {:?}", peer.said))
        .parse()
        .unwrap();
    let connecting = thread::spawn(move || {
        RdmaSocket::connect_timeout(&addr, Duration::from_secs(20)).map(|_| ())
    });
    let failed = peer.wait_for("failed ", STEP);
    let (_, said) = peer.finish(STEP);
    let connected = connecting.join().expect("the connecting thread");
    eprintln!("the connecting side: {connected:?}");
    memlock_row(f, Fault::MemlockAccept, failed, &said)
}
