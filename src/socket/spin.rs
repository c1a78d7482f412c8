//! How long a blocking wait busy-polls before it sleeps: the progress mode's budget, and the
//! adaptive mode's estimate of how long this connection's waits last.
#![forbid(unsafe_code)]

use crate::stream::{ProgressMode, MIN_ADAPTIVE_SPIN};
use std::time::Duration;

/// The spin budget of one connection's blocking waits.
#[derive(Debug, Clone)]
pub(crate) struct SpinPolicy {
    mode: ProgressMode,
    /// Decaying maximum of recent waits (adaptive mode only).
    estimate: Duration,
}

impl SpinPolicy {
    pub(crate) fn new(mode: ProgressMode) -> SpinPolicy {
        SpinPolicy {
            mode,
            estimate: Duration::ZERO,
        }
    }

    /// How long the next blocking wait may busy-poll before it arms the queue and sleeps.
    pub(crate) fn budget(&self) -> Duration {
        match self.mode {
            ProgressMode::Event => Duration::ZERO,
            ProgressMode::BusyPoll { spin } => spin,
            ProgressMode::Adaptive { max_spin } => {
                let floor = MIN_ADAPTIVE_SPIN.min(max_spin);
                if self.estimate > max_spin {
                    floor
                } else {
                    (self.estimate * 2).clamp(floor, max_spin)
                }
            }
        }
    }

    /// A blocking wait ended after `waited`. The estimate is a decaying maximum: it takes a
    /// longer wait at once and forgets 1/32 per wait, so the spin covers the slow tail of a
    /// round trip, not just its mean. A wait past the cap counts as twice the cap: an idle
    /// spell stops the spinning, and about twenty short waits bring it back.
    pub(crate) fn record(&mut self, waited: Duration) {
        let ProgressMode::Adaptive { max_spin } = self.mode else {
            return;
        };
        let decayed = self.estimate - self.estimate / 32;
        self.estimate = decayed.max(waited.min(max_spin * 2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    fn adaptive() -> SpinPolicy {
        SpinPolicy::new(ProgressMode::Adaptive {
            max_spin: Duration::from_millis(1),
        })
    }

    #[test]
    fn fixed_modes_ignore_the_waits() {
        let mut event = SpinPolicy::new(ProgressMode::Event);
        let mut busy = SpinPolicy::new(ProgressMode::BusyPoll { spin: 50 * US });
        for p in [&mut event, &mut busy] {
            p.record(Duration::from_secs(1));
            p.record(US);
        }
        assert_eq!(event.budget(), Duration::ZERO);
        assert_eq!(busy.budget(), 50 * US);
    }

    #[test]
    fn adaptive_spins_twice_the_slowest_recent_wait() {
        let mut p = adaptive();
        assert_eq!(
            p.budget(),
            MIN_ADAPTIVE_SPIN,
            "nothing known yet: the floor"
        );
        p.record(100 * US);
        assert_eq!(p.budget(), 200 * US);
        // Short waits between slow ones barely lower it: the slow tail stays covered.
        p.record(5 * US);
        assert!(p.budget() >= 190 * US, "{:?}", p.budget());
        p.record(300 * US);
        assert_eq!(p.budget(), 600 * US);
        // Only a long run of short waits brings it down to the floor.
        for _ in 0..200 {
            p.record(2 * US);
        }
        assert_eq!(p.budget(), MIN_ADAPTIVE_SPIN);
    }

    #[test]
    fn adaptive_never_spins_past_the_cap_and_sleeps_after_an_idle_wait() {
        let mut p = adaptive();
        p.record(700 * US);
        assert_eq!(p.budget(), Duration::from_millis(1), "capped");
        p.record(Duration::from_secs(5));
        assert_eq!(p.budget(), MIN_ADAPTIVE_SPIN, "an idle peer: sleep at once");
        // Busy again: a few short waits still sleep, about twenty bring the spin back.
        for _ in 0..5 {
            p.record(100 * US);
        }
        assert_eq!(p.budget(), MIN_ADAPTIVE_SPIN);
        for _ in 0..25 {
            p.record(100 * US);
        }
        assert!(p.budget() >= 200 * US, "{:?}", p.budget());
    }
}
