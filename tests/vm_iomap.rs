//! rsocket's iomap against rdma-core in the VM (`tests/vm/run.sh` runs these with `--ignored
//! --test-threads=1`), on rxe0 and on siw0 (rsocket's iWARP mode, WRITE plus SEND):
//!
//! * rdma-core's `riostream` (riomap, riowrite, the marker byte it spins on, `-T v` byte
//!   counts) as server with our `riostream` twin (`examples/riostream.rs`, on
//!   `RdmaSocket::iomap`/`iowrite`) as client, then the roles swapped, at 64 B, 4 KiB and
//!   64 KiB;
//! * a Python peer calling the rsocket API through ctypes
//!   (`tests/rsocket_support/iomap_peer.py`: rsetsockopt RDMA_IOMAPSIZE, riomap, riowrite,
//!   riounmap, rsend/rrecv) against an `RdmaSocket`, each side writing a pattern into the
//!   other's window that the owner checks byte for byte, and our writes past the peer's
//!   window refused without touching it; as client and as server.

mod vm_support;

use rdmasock::{RdmaListener, RdmaSocket, SocketOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(240);
const PEER_WINDOW: usize = 100_000;

/// A program started, and the reader of its stdout after the first line.
struct Started {
    child: Child,
    rest: Option<std::thread::JoinHandle<String>>,
}

/// Starts `program args` with its stdout piped, and waits for its first line: the header
/// riostream prints once it listens (or the Python peer's "listening"). Under `stdbuf -oL`:
/// rdma-core's riostream writes its stdout through C stdio, which holds a pipe's lines
/// until it exits.
fn start_listening(program: &str, args: &[String]) -> Started {
    let mut child = Command::new("stdbuf")
        .arg("-oL")
        .arg(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {program}: {e}"));
    let stdout = child.stdout.take().expect("stdout");
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .expect("the server's first line");
    assert!(
        !line.is_empty(),
        "{program} {args:?} ended before listening"
    );
    // The rest of its output is read when it finishes.
    let rest = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = reader.read_to_string(&mut text);
        text
    });
    Started {
        child,
        rest: Some(rest),
    }
}

fn finish(started: Started, what: &str) -> String {
    let out = vm_support::finish_within(started.child, LIMIT, &[what.to_string()]);
    let mut stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if let Some(rest) = started.rest {
        stdout += &rest.join().unwrap_or_default();
    }
    assert!(
        out.status.success(),
        "{what} failed ({}): stdout {stdout:?} stderr {:?}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn run_to_end(program: &str, args: &[String]) -> Started {
    let child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {program}: {e}"));
    Started { child, rest: None }
}

/// riostream's custom test between `server` and `client` programs, at each size.
fn riostream_pair(device: &str, port: u16, ours_serve: bool) {
    let ip = vm_support::device_ip(device).to_string();
    let twin = vm_support::example("riostream").display().to_string();
    let (server, client) = if ours_serve {
        (twin.as_str(), "riostream")
    } else {
        ("riostream", twin.as_str())
    };
    for (i, (size, count, iters)) in [(64, 10, 200), (4096, 10, 50), (65536, 4, 10)]
        .into_iter()
        .enumerate()
    {
        let port = (port + i as u16).to_string();
        let test = |role: &str| -> Vec<String> {
            [role, &ip, "-p", &port, "-S", &size.to_string(), "-C"]
                .into_iter()
                .map(String::from)
                .chain([
                    count.to_string(),
                    "-I".into(),
                    iters.to_string(),
                    "-T".into(),
                    "v".into(),
                ])
                .collect()
        };
        let what = format!("{server} serving {client} on {device} at {size} bytes");
        let s = start_listening(server, &test("-b"));
        let c = run_to_end(client, &test("-s"));
        let client_out = finish(c, &format!("{what}: client"));
        let server_out = finish(s, &format!("{what}: server"));
        for out in [&client_out, &server_out] {
            assert!(
                out.lines().any(|l| l.starts_with("custom")),
                "{what}: no result line in {out:?}"
            );
        }
    }
}

fn peer_script() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/rsocket_support/iomap_peer.py"
    )
    .to_string()
}

fn byte_at(i: usize, mul: usize, add: usize) -> u8 {
    ((mul * i + add) % 251) as u8
}

/// Our side of the Python peer's exchange (see the script's documentation).
fn play_with_peer(mut s: RdmaSocket, what: &str) {
    assert!(!s.peer_is_rdmasock(), "{what}: the peer is plain rsocket");
    assert_eq!(s.iomap_slots(), 2, "{what}: the peer's table size");
    let mut b = [0u8; 1];
    s.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"R");
    let data: Vec<u8> = (0..PEER_WINDOW).map(|i| byte_at(i, 13, 5)).collect();
    let mut done = 0;
    for piece in [64usize, 4096, 65536].into_iter().cycle() {
        if done == PEER_WINDOW {
            break;
        }
        let n = piece.min(PEER_WINDOW - done);
        let mut sent = 0;
        while sent < n {
            sent += s
                .iowrite(&data[done + sent..done + n], 0x1000 + (done + sent) as u64)
                .unwrap_or_else(|e| panic!("{what}: iowrite: {e}"));
        }
        done += n;
    }
    s.write_all(b"W").unwrap();
    let window = s.iomap(PEER_WINDOW, Some(0x2000)).expect("iomap");
    s.write_all(b"M").unwrap();
    s.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"D");
    let mut got = vec![0u8; PEER_WINDOW];
    window.read_at(0, &mut got).unwrap();
    let want: Vec<u8> = (0..PEER_WINDOW).map(|i| byte_at(i, 7, 3)).collect();
    assert!(
        got == want,
        "{what}: our window holds what the peer riowrote"
    );
    // Refused at the writer: past the end, below the window, nothing mapped there.
    for (offset, len) in [(0x1000 + PEER_WINDOW as u64 - 8, 64), (0xfff, 8), (0, 8)] {
        let e = s.iowrite(&vec![0xEE; len], offset).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{what}: {e}");
    }
    s.write_all(b"E").unwrap();
    window.unmap().expect("unmap");
    assert_eq!(s.read(&mut b).unwrap(), 0, "{what}: the peer closed");
}

fn options() -> SocketOptions {
    SocketOptions::builder().iomap_size(2).build().unwrap()
}

fn python_serves(device: &str, port: u16) {
    let ip: IpAddr = vm_support::device_ip(device);
    let what = format!("the rsocket API serving on {device}");
    let args: Vec<String> = [peer_script(), "server".into(), ip.to_string()]
        .into_iter()
        .chain([port.to_string(), PEER_WINDOW.to_string()])
        .collect();
    let peer = start_listening("/usr/bin/python3", &args);
    let s = RdmaSocket::connect_with(SocketAddr::new(ip, port), &options())
        .unwrap_or_else(|e| panic!("{what}: connect: {e}"));
    play_with_peer(s, &what);
    let out = finish(peer, &what);
    assert!(out.contains("iomap_peer: ok"), "{what}: {out:?}");
}

fn python_connects(device: &str, port: u16) {
    let ip: IpAddr = vm_support::device_ip(device);
    let what = format!("the rsocket API connecting on {device}");
    let listener = RdmaListener::bind_with(SocketAddr::new(ip, port), &options()).unwrap();
    let args: Vec<String> = [peer_script(), "client".into(), ip.to_string()]
        .into_iter()
        .chain([port.to_string(), PEER_WINDOW.to_string()])
        .collect();
    let peer = run_to_end("/usr/bin/python3", &args);
    let (s, _) = listener
        .accept()
        .unwrap_or_else(|e| panic!("{what}: accept: {e}"));
    play_with_peer(s, &what);
    let out = finish(peer, &what);
    assert!(out.contains("iomap_peer: ok"), "{what}: {out:?}");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn riostream_serves_our_riostream_on_rxe0() {
    riostream_pair("rxe0", 18571, false);
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn our_riostream_serves_riostream_on_rxe0() {
    riostream_pair("rxe0", 18575, true);
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rsocket_api_iomap_both_ways_on_rxe0() {
    python_serves("rxe0", 18579);
    python_connects("rxe0", 18580);
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn riostream_serves_our_riostream_on_siw0() {
    riostream_pair("siw0", 18581, false);
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn our_riostream_serves_riostream_on_siw0() {
    riostream_pair("siw0", 18585, true);
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rsocket_api_iomap_both_ways_on_siw0() {
    python_serves("siw0", 18589);
    python_connects("siw0", 18590);
}
