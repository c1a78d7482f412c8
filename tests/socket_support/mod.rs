//! Stream checks shared by the socket conformance suite (`conformance/`) and the other socket
//! tests: random write and read sizes, both directions at once, checked by hash.
//!
//! ```ignore
//! #[path = "socket_support/mod.rs"]
//! mod socket_support;
//! socket_support::both_ways(server, client, 64 << 20, 300_000);
//! ```
#![allow(dead_code)] // each test binary uses a different part

pub(crate) mod random_stream;
pub(crate) mod readiness;

pub(crate) use random_stream::{RandomSink, RandomSource};

use rdmasock::{RdmaListener, RdmaSocket, SocketOptions};
use std::io::{ErrorKind, IoSlice, IoSliceMut, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::thread;
use std::time::Instant;

/// A deterministic xorshift generator (no dependencies).
pub(crate) struct Rng(pub u64);

impl Rng {
    /// The next value (a zero state, where xorshift would stay, restarts from a constant).
    pub(crate) fn next(&mut self) -> u64 {
        if self.0 == 0 {
            self.0 = 0x2545_f491_4f6c_dd1d;
        }
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value in `0..n`.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Which calls move the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Calls {
    /// `write` and `read`.
    Plain,
    /// `write_vectored` and `read_vectored`, each piece cut into a few slices at random
    /// points (empty slices included).
    Vectored,
}

/// `buf` cut at up to three random points, in order.
fn cut<'a>(rng: &mut Rng, buf: &'a [u8]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = (0..rng.below(4))
        .map(|_| rng.below(buf.len() + 1))
        .collect();
    points.sort_unstable();
    let mut parts = Vec::new();
    let mut at = 0;
    for p in points {
        parts.push(&buf[at..p]);
        at = p;
    }
    parts.push(&buf[at..]);
    parts
}

/// Writes all of `parts` with `write_vectored`, advancing past what each call took.
fn write_all_vectored(mut s: &RdmaSocket, mut parts: Vec<&[u8]>) {
    while parts.iter().any(|p| !p.is_empty()) {
        let slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
        let mut n = s.write_vectored(&slices).expect("write_vectored");
        assert!(n > 0, "write_vectored took nothing");
        while n > 0 {
            let first = parts[0].len().min(n);
            parts[0] = &parts[0][first..];
            n -= first;
            if parts[0].is_empty() {
                parts.remove(0);
            }
        }
    }
}

/// Writes `total` pseudo-random bytes in pseudo-random pieces of at most `max_piece`, then
/// flushes and shuts down writing; returns their hash.
pub(crate) fn send_random(s: &RdmaSocket, total: usize, seed: u64, max_piece: usize) -> u64 {
    send_random_with(s, total, seed, max_piece, Calls::Plain)
}

/// [`send_random`] with the given calls.
pub(crate) fn send_random_with(
    mut s: &RdmaSocket,
    total: usize,
    seed: u64,
    max_piece: usize,
    calls: Calls,
) -> u64 {
    let mut source = RandomSource::new(total, seed, max_piece);
    while let Some((rng, piece)) = source.next_piece() {
        match calls {
            Calls::Plain => s.write_all(piece).expect("write"),
            Calls::Vectored => write_all_vectored(s, cut(rng, piece)),
        }
    }
    s.flush().expect("flush");
    s.shutdown(Shutdown::Write).expect("shutdown write");
    source.hash()
}

/// Reads to end of stream in pseudo-random pieces of at most `max_piece`; returns (bytes,
/// hash).
pub(crate) fn receive_random(s: &RdmaSocket, seed: u64, max_piece: usize) -> (usize, u64) {
    receive_random_with(s, seed, max_piece, Calls::Plain)
}

/// [`receive_random`] with the given calls.
pub(crate) fn receive_random_with(
    mut s: &RdmaSocket,
    seed: u64,
    max_piece: usize,
    calls: Calls,
) -> (usize, u64) {
    let mut sink = RandomSink::new(seed, max_piece);
    loop {
        let (rng, buf) = sink.next_buffer();
        let n = match calls {
            Calls::Plain => s.read(buf).expect("read"),
            Calls::Vectored => {
                // The slices tile the buffer in order, so the bytes read are buf[..n].
                let bounds: Vec<(usize, usize)> = {
                    let parts = cut(rng, buf);
                    let mut at = 0;
                    parts
                        .iter()
                        .map(|p| {
                            at += p.len();
                            (at - p.len(), at)
                        })
                        .collect()
                };
                let mut rest = buf;
                let mut slices = Vec::new();
                for (a, b) in bounds {
                    let (head, tail) = std::mem::take(&mut rest).split_at_mut(b - a);
                    slices.push(IoSliceMut::new(head));
                    rest = tail;
                }
                s.read_vectored(&mut slices).expect("read_vectored")
            }
        };
        if !sink.took(n) {
            return sink.result();
        }
    }
}

/// Both directions at once on one connection: each side writes `total` bytes from a writer
/// thread (a clone) while reading on another, in pieces of at most `max_piece`.
pub(crate) fn both_ways(server: RdmaSocket, client: RdmaSocket, total: usize, max_piece: usize) {
    both_ways_with(server, client, total, max_piece, Calls::Plain)
}

/// [`both_ways`] with the given calls.
pub(crate) fn both_ways_with(
    server: RdmaSocket,
    client: RdmaSocket,
    total: usize,
    max_piece: usize,
    calls: Calls,
) {
    let start = Instant::now();
    let run = move |s: RdmaSocket, seed: u64| {
        let writer = s.try_clone().expect("try_clone");
        let w = thread::spawn(move || send_random_with(&writer, total, seed, max_piece, calls));
        let (n, h) = receive_random_with(&s, seed.wrapping_mul(31), max_piece, calls);
        (w.join().expect("writer thread"), n, h, s)
    };
    let srv = thread::spawn(move || run(server, 1));
    let (c_sent, c_got, c_hash, _c) = run(client, 2);
    let (s_sent, s_got, s_hash, _s) = srv.join().expect("server thread");
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "{total} bytes each way in {secs:.2} s: {:.1} MB/s total",
        2.0 * total as f64 / secs / 1e6
    );
    assert_eq!(c_got, total, "the client received every byte");
    assert_eq!(s_got, total, "the server received every byte");
    assert_eq!(c_hash, s_sent, "the client received what the server sent");
    assert_eq!(s_hash, c_sent, "the server received what the client sent");
}

/// Half-close, client first: the client writes a request and shuts down writing (a later
/// write is a broken pipe); the server reads to EOF and still replies; the client reads the
/// reply to EOF. `l` listens on `addr`.
pub(crate) fn half_close_client_first(l: RdmaListener, addr: SocketAddr) {
    let server = thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        let mut got = Vec::new();
        s.read_to_end(&mut got).expect("read to EOF");
        assert_eq!(got, b"request");
        // The client closed its write side only: the reply still goes through.
        s.write_all(b"reply after your EOF")
            .expect("write after peer EOF");
    });
    let mut c = RdmaSocket::connect(addr).expect("connect");
    c.write_all(b"request").unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let err = c.write(b"x").expect_err("writing after shutdown(Write)");
    assert_eq!(err.kind(), ErrorKind::BrokenPipe, "{err}");
    let mut reply = Vec::new();
    c.read_to_end(&mut reply).expect("read reply to EOF");
    assert_eq!(reply, b"reply after your EOF");
    server.join().unwrap();
}

/// Half-close, server first: the server sends a banner and shuts down writing; the client
/// reads it to EOF and still answers; the server reads the answer to EOF.
pub(crate) fn half_close_server_first(l: RdmaListener, addr: SocketAddr) {
    let server = thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        s.write_all(b"banner").unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).expect("read to EOF");
        got
    });
    let mut c = RdmaSocket::connect(addr).expect("connect");
    let mut banner = Vec::new();
    c.read_to_end(&mut banner).expect("banner then EOF");
    assert_eq!(banner, b"banner");
    c.write_all(b"answer after your EOF")
        .expect("write after peer EOF");
    drop(c);
    assert_eq!(server.join().unwrap(), b"answer after your EOF");
}

/// Open file descriptors of this process.
pub(crate) fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// A `/proc/self/status` field in KiB (`VmRSS`, `VmPin`).
pub(crate) fn status_kib(field: &str) -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}

/// Resident memory of this process in KiB.
pub(crate) fn rss_kib() -> usize {
    status_kib("VmRSS")
}

/// How many connect/close cycles a leak test runs: `RDMASOCK_CYCLES`, default 1000.
pub(crate) fn cycles_from_env() -> usize {
    std::env::var("RDMASOCK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// Accepts `accepts` connections on `l`, one after the other, and echoes one byte on each:
/// the server side of the connect/close cycle tests.
pub(crate) fn echo_one_byte_each(l: RdmaListener, accepts: usize) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        for _ in 0..accepts {
            let (mut s, _) = l.accept().expect("accept");
            let mut b = [0u8; 1];
            s.read_exact(&mut b).expect("one byte");
            s.write_all(&b).expect("echo it");
        }
    })
}

/// 127.0.0.1 with port 0 (the kernel picks one).
pub(crate) fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A listener on loopback with `opts`, and the address it got.
pub(crate) fn listener_with(opts: &SocketOptions) -> (RdmaListener, SocketAddr) {
    let l = RdmaListener::bind_with(loopback(), opts).expect("bind on loopback");
    let addr = l.local_addr().expect("listener address");
    assert_ne!(addr.port(), 0, "an ephemeral port was chosen");
    (l, addr)
}

/// A connected pair with `opts` on loopback: (the accepted end, the client).
pub(crate) fn loopback_pair(opts: &SocketOptions) -> (RdmaSocket, RdmaSocket) {
    let (l, addr) = listener_with(opts);
    let t = thread::spawn(move || l.accept().expect("accept").0);
    let c = RdmaSocket::connect_with(addr, opts).expect("connect");
    (t.join().expect("accept thread"), c)
}

/// A well-formed rsocket hello (version 1, 64 credits, a 64 KiB buffer) for a hand-made
/// client: a listener takes it and answers; the addresses in it are never used by a test
/// that lets the handshake finish.
pub(crate) fn fake_hello() -> rdmasock::protocol::Hello {
    use rdmasock::protocol::{Hello, RemoteSge};
    Hello {
        flags: 0,
        credits: 64,
        target_iomap_size: 0,
        target_sgl: RemoteSge::new(0x1000, 7, 2),
        data_buf: RemoteSge::new(0x10_0000, 7, 64 << 10),
    }
}

/// An address on `ip` that never answers a connect over TCP (the userspace provider's
/// transport), and what keeps it so while it lives: a TCP listener whose accept queue is
/// full, so that the kernel drops further SYNs.
pub(crate) fn tcp_black_hole(ip: std::net::IpAddr) -> (SocketAddr, Box<dyn std::any::Any>) {
    use socket2::{Domain, Socket, Type};
    let listener = Socket::new(
        Domain::for_address(SocketAddr::new(ip, 0)),
        Type::STREAM,
        None,
    )
    .expect("a TCP socket");
    listener
        .bind(&SocketAddr::new(ip, 0).into())
        .expect("bind a TCP listener");
    listener.listen(0).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    // With a backlog of 0 the queue holds one connection; fill it.
    let filler: Vec<std::net::TcpStream> = (0..2)
        .filter_map(|_| {
            std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(300)).ok()
        })
        .collect();
    assert!(!filler.is_empty(), "a connection fills the accept queue");
    (addr, Box::new((listener, filler)))
}
