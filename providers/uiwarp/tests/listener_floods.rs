//! The listener under floods of TCP clients: clients that connect and never send their MPA
//! request hold at most `HALF_OPEN_MOST` (128) of the listener's fds, each for at most the
//! request timeout (5 s), so that a good client behind 500 of them still connects at once;
//! and `accept` failing for want of fds (`EMFILE`) does not strand the connections in the
//! kernel's queue, which no new edge would announce. Each case runs in a child process whose
//! fd limit (`RLIMIT_NOFILE`) is lowered, so that running out of fds is certain there and
//! harms no other test.

mod loopback;

use loopback::*;
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use rdmasock_uiwarp::driver::connect;
use rdmasock_uiwarp::protocol::{Config, Connection, RegionTable};
use rdmasock_uiwarp::UiwarpListener;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

/// Names the case the child process runs.
const CHILD_ENV: &str = "UIWARP_LISTENER_FLOODS_CHILD";

/// Runs `body` in a child process (this test binary again, with only the case `name`) whose
/// soft fd limit is `fds`, and checks that it passed there.
fn in_child_with_fd_limit(name: &str, fds: u64, body: impl FnOnce()) {
    if std::env::var(CHILD_ENV).as_deref() == Ok(name) {
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        setrlimit(Resource::RLIMIT_NOFILE, fds, hard).unwrap();
        body();
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, name)
        .output()
        .expect("the test binary runs again as the child");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the child process failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran no case:\n{text}");
}

/// An initiator's MPA request, as a client about to connect sends it.
fn mpa_request(private_data: &[u8]) -> Vec<u8> {
    let mut core = Connection::initiator(Config::default(), private_data, Instant::now())
        .expect("an initiator");
    let mut request = Vec::new();
    core.poll_transmit(&RegionTable::new(), &mut request, usize::MAX);
    request
}

/// Whether the listener closed `socket` (end of stream or reset) within `within`.
fn closed_within(socket: &mut TcpStream, within: Duration) -> bool {
    socket.set_read_timeout(Some(within)).unwrap();
    let mut b = [0u8; 64];
    match socket.read(&mut b) {
        Ok(0) => true,
        Ok(n) => panic!("the listener sent {n} bytes to a client that sent nothing"),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => true,
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
        Err(e) => panic!("reading a silent client's socket: {e}"),
    }
}

/// 500 clients connect and stay silent, then a good client connects through a queue pair:
/// it is established within 2 s. With 800 fds, the 500 silent clients' own sockets and an
/// fd per silent connection on the listener's side would not fit; 500 and 128 do. The oldest
/// silent connections were closed to make room, and the newest are closed by the request
/// timeout.
#[test]
fn a_good_client_connects_at_once_behind_500_silent_ones() {
    in_child_with_fd_limit(
        "a_good_client_connects_at_once_behind_500_silent_ones",
        800,
        || {
            let (a, b) = sides(caps(), false);
            let listener = UiwarpListener::bind("127.0.0.1:0".parse().unwrap(), 128).unwrap();
            let addr = listener.local_addr();
            let mut silent = Vec::new();
            for i in 0..500 {
                let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
                    .unwrap_or_else(|e| {
                        panic!("silent client {i} could not connect (the listener stopped accepting?): {e}")
                    });
                silent.push(s);
            }
            let started = Instant::now();
            let bound = Duration::from_secs(2);
            std::thread::scope(|s| {
                let bq = &b.qp;
                let listener = &listener;
                let server = s.spawn(move || {
                    let req = listener
                        .get_request(Some(bound))
                        .expect("the good client's request within 2 s");
                    assert_eq!(req.private_data(), b"good");
                    req.accept(bq, b"welcome", bound).unwrap();
                });
                let pd = connect(&a.qp, addr, b"good", bound)
                    .expect("the good client connects within 2 s");
                assert_eq!(pd, b"welcome");
                server.join().unwrap();
            });
            let took = started.elapsed();
            println!("the good client connected {took:?} after 500 silent ones");
            assert!(took < bound, "{took:?}");
            assert!(
                closed_within(&mut silent[0], Duration::from_secs(1)),
                "the oldest silent connection was closed to make room"
            );
            // The request timeout (5 s from its accept) ends the newest.
            let last = silent.last_mut().unwrap();
            assert!(
                closed_within(last, Duration::from_secs(8)),
                "the newest silent connection is closed by the request timeout"
            );
        },
    );
}

/// With every fd taken, a client's connection waits in the kernel's queue (`accept` fails
/// with `EMFILE`); once fds are free again, its MPA request reaches the listener without any
/// other connection arriving.
#[test]
fn running_out_of_fds_does_not_strand_the_accept_queue() {
    in_child_with_fd_limit(
        "running_out_of_fds_does_not_strand_the_accept_queue",
        256,
        || {
            let listener = UiwarpListener::bind("127.0.0.1:0".parse().unwrap(), 8).unwrap();
            let mut filler = Vec::new();
            loop {
                match std::fs::File::open("/dev/null") {
                    Ok(f) => filler.push(f),
                    Err(e) if e.raw_os_error() == Some(libc::EMFILE) => break,
                    Err(e) => panic!("opening /dev/null: {e}"),
                }
            }
            // One fd for the client's socket; none is left for the listener's accept.
            drop(filler.pop());
            let mut client = TcpStream::connect(listener.local_addr()).unwrap();
            client.write_all(&mpa_request(b"stranded?")).unwrap();
            assert!(
                listener
                    .get_request(Some(Duration::from_millis(200)))
                    .is_err(),
                "no fd to accept the connection with"
            );
            drop(filler);
            let req = listener
                .get_request(Some(Duration::from_secs(2)))
                .expect("the queued connection's request once fds are free");
            assert_eq!(req.private_data(), b"stranded?");
        },
    );
}
