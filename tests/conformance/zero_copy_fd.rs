//! Zero-copy submissions (`RdmaSocket::submit_registered`) driven by a poll(2) loop that
//! watches nothing but the socket's readiness fd: the fd turns readable when a submitted
//! buffer can be taken back and when a refused submission can go on; a short submission's
//! rest, submitted from `CompletedWrite::sent` before anything else, keeps every byte in
//! order and sends none twice, also through a small ring whose reader stalls.

use super::Fixture;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use rdmasock::{RdmaSocket, RegisteredBuf, SocketOptions};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read};
use std::ops::Range;
use std::os::fd::AsFd;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// What [`submit_on_fd`] saw.
#[derive(Debug)]
struct Submitted {
    /// Bytes submitted.
    total: usize,
    /// Submissions that took part of what they were given.
    short: usize,
    /// Submissions refused (`WouldBlock`), the buffer handed back unused.
    refused: usize,
    /// poll(2) wakeups after which neither a buffer came back nor a submission went.
    idle_wakeups: usize,
}

/// Submits `count` buffers of `len` bytes (three in rotation, each refilled when it came
/// back whole) on the nonblocking socket `c`, waiting only in poll(2) on its fd. The rest of
/// a short submission goes next, from the `sent` its buffer came back with, before any other
/// buffer. `first_refusal` runs when a submission is first refused.
fn submit_on_fd(
    c: &RdmaSocket,
    count: usize,
    len: usize,
    mut first_refusal: impl FnMut(),
) -> Submitted {
    let mut free: Vec<RegisteredBuf> = (0..3).map(|_| RegisteredBuf::new(len).unwrap()).collect();
    // Each submission in flight, oldest first: its buffer's first byte, the range it took.
    let mut in_flight: VecDeque<(*const u8, Range<usize>)> = VecDeque::new();
    // The buffer to submit next, and from where.
    let mut pending: Option<(RegisteredBuf, usize)> = None;
    // A short submission's buffer is in flight: its rest goes before any other buffer.
    let mut rest_owed = false;
    let mut seen = Submitted {
        total: 0,
        short: 0,
        refused: 0,
        idle_wakeups: 0,
    };
    let (mut fresh, mut woke) = (0, false);
    while fresh < count || !in_flight.is_empty() || pending.is_some() {
        let mut progressed = false;
        while let Some(done) = c.completed_registered() {
            let (identity, range) = in_flight.pop_front().expect("a buffer comes back once");
            assert_eq!(done.buf.as_ptr(), identity, "buffers come back in order");
            assert_eq!(done.sent, range.end, "it sent what its submission took");
            done.result.expect("its sends completed");
            if range.end < len {
                assert!(pending.is_none(), "nothing was submitted after a short one");
                pending = Some((done.buf, range.end));
            } else {
                free.push(done.buf);
            }
            progressed = true;
        }
        if pending.is_none() && !rest_owed && fresh < count {
            if let Some(mut buf) = free.pop() {
                contents(&mut buf, fresh);
                fresh += 1;
                pending = Some((buf, 0));
            }
        }
        if let Some((buf, from)) = pending.take() {
            let identity = buf.as_ptr();
            match c.submit_registered_range(buf, from..) {
                Ok(n) => {
                    assert!(n > 0 && from + n <= len, "took {n} bytes from {from}");
                    in_flight.push_back((identity, from..from + n));
                    rest_owed = from + n < len;
                    seen.short += usize::from(rest_owed);
                    seen.total += n;
                    progressed = true;
                }
                Err(refused) => {
                    assert_eq!(refused.error.kind(), ErrorKind::WouldBlock);
                    assert_eq!(refused.buf.as_ptr(), identity, "the buffer comes back");
                    seen.refused += 1;
                    if seen.refused == 1 {
                        first_refusal();
                    }
                    pending = Some((refused.buf, from));
                }
            }
        }
        assert_eq!(c.registered_in_flight(), in_flight.len());
        seen.idle_wakeups += usize::from(woke && !progressed);
        woke = false;
        if !progressed {
            let mut fds = [PollFd::new(c.as_fd(), PollFlags::POLLIN)];
            let n = nix::poll::poll(&mut fds, PollTimeout::from(20_000u16)).expect("poll");
            assert_eq!(n, 1, "the fd turned readable within 20 s: {seen:?}");
            woke = true;
        }
    }
    seen
}

/// What the `k`th buffer submitted holds.
fn contents(buf: &mut [u8], k: usize) {
    buf.fill(k as u8 ^ 0xa5);
    let at = k % buf.len();
    buf[at] = k as u8;
}

/// Reads `s` to end of stream on a thread of its own once `start` says so (or is dropped),
/// comparing what comes with buffers of `len` bytes as [`contents`] fills them, in order
/// (a comparison, not a hash: the reader keeps up with the device); how many bytes came,
/// and where the first that differed was.
fn check_when(
    mut s: RdmaSocket,
    start: mpsc::Receiver<()>,
    len: usize,
) -> thread::JoinHandle<(usize, Option<usize>)> {
    thread::spawn(move || {
        let _ = start.recv();
        let mut buf = vec![0u8; 1 << 20];
        let mut expected = vec![0u8; len];
        let (mut total, mut wrong) = (0, None);
        loop {
            let n = s.read(&mut buf).expect("the reader's read");
            if n == 0 {
                return (total, wrong);
            }
            let mut piece = &buf[..n];
            while !piece.is_empty() {
                let (k, at) = (total / len, total % len);
                if at == 0 {
                    contents(&mut expected, k);
                }
                let take = piece.len().min(len - at);
                if wrong.is_none() && piece[..take] != expected[at..at + take] {
                    let off = (0..take).find(|&i| piece[i] != expected[at + i]);
                    wrong = off.map(|i| total + i);
                }
                total += take;
                piece = &piece[take..];
            }
        }
    })
}

/// A close timeout that a slow emulated device cannot run out: a close torn down halfway
/// would end the reader's stream early.
/// Bounds the wakeups that found nothing to do: a fd that stayed readable when nothing could
/// go on would spin the loop without end.
fn assert_few_idle_wakeups(seen: &Submitted, count: usize) {
    assert!(
        seen.idle_wakeups <= 2 * count + 8,
        "the fd stayed readable with nothing to do: {seen:?}"
    );
}

/// A poll(2) loop on the socket's fd alone submits 24 buffers of 256 KiB and takes each
/// back: the fd turns readable whenever a buffer can be taken back or a refused submission
/// can go on (no wakeup lost: poll never times out), and the peer reads every buffer whole
/// and in order.
pub(crate) fn submitted_buffers_come_back_on_the_socket_fd_under_poll(f: &Fixture) {
    const LEN: usize = 1 << 20;
    const COUNT: usize = 12;
    let opts = SocketOptions::builder()
        .recv_ring(4 * LEN)
        .max_transfer(LEN as u32)
        .close_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let (s, c) = f.pair_with(&opts);
    let (go, start) = mpsc::channel();
    go.send(()).unwrap();
    let reader = check_when(s, start, LEN);
    c.set_nonblocking(true).unwrap();
    let seen = submit_on_fd(&c, COUNT, LEN, || {});
    assert_eq!(c.registered_in_flight(), 0);
    c.close()
        .expect("the close finishes: the peer has every byte");
    let (got, wrong) = reader.join().expect("reader");
    assert_eq!(seen.total, COUNT * LEN, "{seen:?}");
    assert_eq!(
        (got, wrong),
        (seen.total, None),
        "bytes read, first wrong one: {seen:?}"
    );
    assert_few_idle_wakeups(&seen, COUNT);
}

/// Short submissions: through a 16 KiB receive ring whose reader stalls, the first 64 KiB
/// buffer goes out in part (the count says how much, and the buffer comes back with that
/// `sent`), its rest is refused with the buffer handed back unused until the reader drains,
/// and each rest, submitted before any other buffer, keeps the stream whole: the peer reads
/// every buffer whole and in order, so no byte moved or came twice.
pub(crate) fn a_short_submission_s_rest_keeps_the_stream_in_order(f: &Fixture) {
    const LEN: usize = 64 << 10;
    const COUNT: usize = 16;
    let opts = SocketOptions::builder()
        .recv_ring(16 << 10)
        .close_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let (s, c) = f.pair_with(&opts);
    let (go, start) = mpsc::channel();
    let reader = check_when(s, start, LEN);
    c.set_nonblocking(true).unwrap();
    let seen = submit_on_fd(&c, COUNT, LEN, || go.send(()).unwrap());
    c.close()
        .expect("the close finishes: the peer has every byte");
    let (got, wrong) = reader.join().expect("reader");
    assert!(
        seen.short >= 1 && seen.refused >= 1,
        "a 64 KiB buffer through a 16 KiB ring went short and a rest was refused: {seen:?}"
    );
    assert_eq!(seen.total, COUNT * LEN, "{seen:?}");
    assert_eq!(
        (got, wrong),
        (seen.total, None),
        "bytes read, first wrong one: {seen:?}"
    );
    assert_few_idle_wakeups(&seen, COUNT * LEN / (8 << 10));
}
