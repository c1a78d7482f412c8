//! One blocking call's side of the wait (see [`WaitPolicy`](super::wait::WaitPolicy)): its
//! deadline, when its wait began and until when it spins, the nap it took, and whether it
//! slept. Lives on the caller's stack for one `Shared::run`.
#![forbid(unsafe_code)]

use std::io;
use std::time::{Duration, Instant};

/// One blocking call's wait: from its first look that found nothing to its result.
#[derive(Debug)]
pub(crate) struct CallWait {
    /// A nonblocking call never spins or sleeps.
    pub(super) nonblocking: bool,
    /// The timeout the call obeys (for its error text).
    pub(super) timeout: Option<Duration>,
    /// When the timeout runs out.
    pub(super) deadline: Option<Instant>,
    /// When this call first found it must wait, and until when it may busy-poll.
    pub(super) spinning: Option<(Instant, Instant)>,
    /// A nap planned by [`WaitPolicy::next_step`](super::wait::WaitPolicy::next_step): when
    /// the wait began, and the spin after it.
    pub(super) nap_planned: Option<(Instant, Duration)>,
    /// The call slept in poll(2) (see `Connection::take_events_after_wake`).
    pub(super) woke: bool,
    /// The nap just taken, until the attempt after it has told whether it came too late.
    pub(super) napped: Option<Duration>,
    /// This call's wait is counted in the connection's `WaitStats`.
    pub(super) counted: bool,
    /// When the spin found the progress the attempt then took: the wait's end, without a
    /// clock read after the bytes came (one costs ~100 ns under QEMU).
    pub(super) spun_to: Option<Instant>,
}

impl CallWait {
    /// A call that obeys `timeout` (from now on) and waits unless `nonblocking`.
    #[inline(always)]
    pub(crate) fn new(timeout: Option<Duration>, nonblocking: bool) -> CallWait {
        CallWait {
            nonblocking,
            timeout,
            deadline: timeout.map(|t| Instant::now() + t),
            spinning: None,
            nap_planned: None,
            woke: false,
            napped: None,
            counted: false,
            spun_to: None,
        }
    }

    /// Whether the call returns `WouldBlock` instead of waiting.
    #[inline]
    pub(crate) fn nonblocking(&self) -> bool {
        self.nonblocking
    }

    /// Whether the call has just slept in poll(2); clears it.
    #[inline]
    pub(crate) fn take_woke(&mut self) -> bool {
        std::mem::take(&mut self.woke)
    }

    /// The attempt found nothing again: a nap or spin before it did not bring its progress.
    #[inline]
    pub(crate) fn not_yet(&mut self) {
        self.napped = None;
        self.spun_to = None;
    }

    /// The nap [`WaitPolicy::next_step`](super::wait::WaitPolicy::next_step) planned was
    /// taken (`nap` long); the spin after it runs from now.
    pub(crate) fn napped(&mut self, nap: Duration) {
        if let Some((start, spin)) = self.nap_planned.take() {
            self.napped = Some(nap);
            self.spinning = Some((start, Instant::now() + spin));
        }
    }

    /// The spin ended: when it found progress (`None`: it did not). True when it did.
    #[inline]
    pub(crate) fn spun(&mut self, found_at: Option<Instant>) -> bool {
        self.spun_to = found_at;
        found_at.is_some()
    }

    /// The call is about to sleep in poll(2): how long it may (`None`: no bound), or the
    /// timeout's error when its time is up.
    pub(crate) fn sleep_bound(&mut self) -> io::Result<Option<Duration>> {
        self.woke = true;
        let Some(deadline) = self.deadline else {
            return Ok(None);
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "timed out after {:?} waiting on the RDMA connection",
                    self.timeout.unwrap_or_default()
                ),
            ));
        }
        Ok(Some(left))
    }
}
