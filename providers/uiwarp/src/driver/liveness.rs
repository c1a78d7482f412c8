//! The verdict on a peer that stops acknowledging what a connection sent (the keepalive's
//! liveness timeout), from the kernel's view of the TCP connection.
#![forbid(unsafe_code)]

use rdmasock_verbs::TcpProgress;
use std::time::{Duration, Instant};

/// The verdict on a peer that stops acknowledging, judged from `TCP_INFO` every
/// [`Liveness::period`], instead of `TCP_USER_TIMEOUT`: Linux applies that timeout to
/// zero-window probing too, and so gives up on a peer whose kernel answers every probe but
/// whose application stopped reading (a stopped process) once its window stays full that
/// long. Here the peer is lost when sent segments stay unacknowledged, without any
/// acknowledged byte, for `timeout`; or, when nothing is in flight but bytes wait for the
/// peer's window, when two zero-window probes in a row went unanswered and no
/// acknowledgement came for `timeout`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Liveness {
    timeout: Duration,
    /// When to look next.
    next_check: Instant,
    /// The bytes acknowledged when sent segments were first seen waiting, and when.
    stalled: Option<(u64, Instant)>,
}

impl Liveness {
    /// A verdict for `timeout`, first looked at one period from `now`.
    pub(crate) fn new(timeout: Duration, now: Instant) -> Liveness {
        Liveness {
            timeout,
            next_check: now + Liveness::period(timeout),
            stalled: None,
        }
    }

    /// The timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// When to look next.
    pub(crate) fn next_check(&self) -> Instant {
        self.next_check
    }

    /// How often the connection's progress is looked at: an eighth of the timeout, at least
    /// 10 ms, so the verdict comes within the timeout and a quarter of it.
    fn period(timeout: Duration) -> Duration {
        (timeout / 8).max(Duration::from_millis(10))
    }

    /// Whether `progress` says the peer stopped acknowledging, at `now`.
    pub(crate) fn lost(&mut self, progress: &TcpProgress, now: Instant) -> bool {
        self.next_check = now + Liveness::period(self.timeout);
        if progress.unacknowledged_segments > 0 {
            match self.stalled {
                Some((acknowledged, since)) if acknowledged == progress.bytes_acknowledged => {
                    now.duration_since(since) >= self.timeout
                }
                _ => {
                    self.stalled = Some((progress.bytes_acknowledged, now));
                    false
                }
            }
        } else {
            self.stalled = None;
            progress.unsent_bytes > 0
                && progress.unanswered_probes >= 2
                && progress.since_last_acknowledgement >= self.timeout
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    fn progress(
        unacknowledged: u32,
        unsent: u32,
        probes: u8,
        since_ms: u64,
        acked: u64,
    ) -> TcpProgress {
        TcpProgress {
            unacknowledged_segments: unacknowledged,
            unsent_bytes: unsent,
            unanswered_probes: probes,
            since_last_acknowledgement: Duration::from_millis(since_ms),
            bytes_acknowledged: acked,
        }
    }

    #[test]
    fn segments_unacknowledged_for_the_timeout_are_a_lost_peer() {
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        let mut l = Liveness::new(second, t0);
        assert!(!l.lost(&progress(3, 0, 0, 0, 100), t0));
        assert!(!l.lost(&progress(3, 0, 0, 900, 100), t0 + second / 2));
        assert!(l.lost(&progress(3, 0, 0, 1000, 100), t0 + second));
    }

    #[test]
    fn acknowledged_progress_or_nothing_in_flight_starts_the_wait_again() {
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        let mut l = Liveness::new(second, t0);
        assert!(!l.lost(&progress(3, 0, 0, 0, 100), t0));
        assert!(!l.lost(&progress(3, 0, 0, 0, 200), t0 + second));
        assert!(!l.lost(&progress(3, 0, 0, 900, 200), t0 + 2 * second - second / 10));
        assert!(!l.lost(&progress(0, 0, 0, 5000, 300), t0 + 3 * second));
        assert!(!l.lost(&progress(1, 0, 0, 5000, 300), t0 + 4 * second));
        assert!(l.lost(&progress(1, 0, 0, 6000, 300), t0 + 5 * second));
    }

    #[test]
    fn a_full_window_is_a_lost_peer_only_when_probes_go_unanswered() {
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        let mut l = Liveness::new(second, t0);
        // The peer's kernel answers each probe, however far apart they come.
        assert!(!l.lost(&progress(0, 65536, 0, 3000, 100), t0 + 3 * second));
        assert!(!l.lost(&progress(0, 65536, 1, 6000, 100), t0 + 6 * second));
        // Two in a row unanswered, and nothing acknowledged for the timeout.
        assert!(!l.lost(&progress(0, 65536, 2, 500, 100), t0 + 7 * second));
        assert!(l.lost(&progress(0, 65536, 2, 1000, 100), t0 + 8 * second));
    }

    /// A TCP connection whose receiver stops reading, its window full: the sender's kernel
    /// probes the window and the receiver's kernel answers. `TCP_USER_TIMEOUT` gives up on
    /// it (the kernel applies it to zero-window probing); the verdict here never does.
    #[test]
    fn a_receiver_that_stops_reading_with_a_full_window_is_not_lost() {
        let timeout = Duration::from_millis(1000);
        let (mut judged, _judged_peer) = stalled_pair();
        let (mut timed, _timed_peer) = stalled_pair();
        socket2::SockRef::from(&timed)
            .set_tcp_user_timeout(Some(timeout))
            .unwrap();
        let start = Instant::now();
        let mut l = Liveness::new(timeout, start);
        let mut timed_out = None;
        while start.elapsed() < 4 * timeout {
            let now = Instant::now();
            if now >= l.next_check() {
                let p = rdmasock_verbs::tcp_progress(judged.as_fd()).unwrap();
                assert!(
                    !l.lost(&p, now),
                    "declared lost after {:?}: {p:?}",
                    start.elapsed()
                );
            }
            // Keeps both sockets' send queues non-empty, as a writer would.
            let _ = judged.write(&[0u8; 1024]);
            if timed_out.is_none() {
                if let Err(e) = timed.write(&[0u8; 1024]) {
                    if e.kind() != std::io::ErrorKind::WouldBlock {
                        timed_out = Some((start.elapsed(), e));
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let (after, e) = timed_out.expect("TCP_USER_TIMEOUT gave up on the full window");
        assert_eq!(
            e.raw_os_error(),
            Some(libc::ETIMEDOUT),
            "{e} after {after:?}"
        );
    }

    /// A nonblocking loopback connection whose receiver (returned second, never read) has a
    /// small receive buffer, written until the sender would block: the window is full.
    fn stalled_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let receiver_socket =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        receiver_socket.set_recv_buffer_size(4096).unwrap();
        receiver_socket
            .connect(&listener.local_addr().unwrap().into())
            .unwrap();
        let (mut sender, _) = listener.accept().unwrap();
        sender.set_nonblocking(true).unwrap();
        let chunk = [0u8; 4096];
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match sender.write(&chunk) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("filling the window: {e}"),
            }
            assert!(Instant::now() < deadline, "the window never filled");
        }
        (sender, receiver_socket.into())
    }
}
