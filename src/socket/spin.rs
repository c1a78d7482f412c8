//! How long a blocking wait busy-polls before it sleeps: the progress mode's budget, and the
//! adaptive mode's estimate of how long this connection's waits last.
#![forbid(unsafe_code)]

use crate::stream::{ProgressMode, MIN_ADAPTIVE_SPIN};
use std::time::Duration;

/// The longest typical wait that an adaptive wait naps through before it spins (see
/// [`SpinPolicy::plan`]); waits longer than this are an idle peer, not a slow round trip.
pub(crate) const MAX_NAPPED_WAIT: Duration = Duration::from_millis(20);

/// How many times the shortest recent wait an adaptive wait spins when an outlier has lifted
/// the slowest recent wait past the cap (see [`SpinPolicy::plan`]).
const SHORT_WAIT_MARGIN: u32 = 4;

/// What a socket's blocking calls did when they had to wait (see
/// [`RdmaSocket::wait_stats`](crate::RdmaSocket::wait_stats)): a diagnostic for choosing a
/// progress mode, like the counters of `TCP_INFO`. Counted over the connection's life, for all
/// its handles.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaitStats {
    /// Blocking calls that found no progress at once and waited.
    pub waits: u64,
    /// Waits that began with a nap: a timed sleep before spinning, taken when recent waits
    /// all ran past the spin cap (see
    /// [`SocketOptionsBuilder::adaptive`](crate::socket::SocketOptionsBuilder::adaptive)).
    pub naps: u64,
    /// Naps after which the progress was already there: the nap was too long, and the next
    /// ones are shortened.
    pub overslept_naps: u64,
    /// Sleeps on the completion channel, after a spin (or instead of one, in event mode)
    /// found nothing.
    pub channel_sleeps: u64,
}

/// How one blocking wait goes: sleep `nap` on a timer (nothing wakes it earlier), then
/// busy-poll for up to `spin`, then arm the queue and sleep until an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WaitPlan {
    pub(crate) nap: Duration,
    pub(crate) spin: Duration,
}

/// The spin budget of one connection's blocking waits.
#[derive(Debug, Clone)]
pub(crate) struct SpinPolicy {
    mode: ProgressMode,
    /// Decaying maximum of recent waits (adaptive mode only).
    estimate: Duration,
    /// Decaying minimum of recent waits (adaptive mode only; `None` before the first).
    shortest: Option<Duration>,
}

impl SpinPolicy {
    pub(crate) fn new(mode: ProgressMode) -> SpinPolicy {
        SpinPolicy {
            mode,
            estimate: Duration::ZERO,
            shortest: None,
        }
    }

    /// How the next blocking wait goes. Adaptive mode spins about twice the slowest recent
    /// wait, up to the cap. When recent waits all ran past the cap but no longer than
    /// [`MAX_NAPPED_WAIT`] (the round trip of a large message on a slow device), the wait
    /// naps until a little before the shortest of them would end (half the cap early, or a
    /// quarter of it for a short one), then spins for up to the cap, instead of sleeping
    /// until the completion channel wakes it: the wake-up latency is gone (rxe0's 64 KiB
    /// ping-pong under QEMU is faster for it), and no wait spins longer than the cap. When the slowest recent wait ran past the cap but the shortest
    /// did not (short waits with an outlier among them), the wait spins four times the
    /// shortest, up to the cap: spinning only the floor there made each of the next twenty or
    /// so waits sleep on the channel and pay its wake-up (rxe0's 4 KiB ping-pong under QEMU,
    /// where one round trip in a few dozen stalls past 1 ms, slept in a fifth of its waits).
    pub(crate) fn plan(&self) -> WaitPlan {
        let spin_only = |spin| WaitPlan {
            nap: Duration::ZERO,
            spin,
        };
        match self.mode {
            ProgressMode::Event => spin_only(Duration::ZERO),
            ProgressMode::BusyPoll { spin } => spin_only(spin),
            ProgressMode::Adaptive { max_spin } => {
                let floor = MIN_ADAPTIVE_SPIN.min(max_spin);
                let spin_within = |spin: Duration| spin_only(spin.clamp(floor, max_spin));
                if self.estimate <= max_spin {
                    return spin_within(self.estimate * 2);
                }
                match self.shortest {
                    // Short waits with a stall among them: spin as the short ones need.
                    Some(s) if s <= max_spin => spin_within(s * SHORT_WAIT_MARGIN),
                    Some(s) if s <= MAX_NAPPED_WAIT && !max_spin.is_zero() => WaitPlan {
                        nap: s - (s / 4).min(max_spin / 2),
                        spin: max_spin,
                    },
                    _ => spin_only(floor),
                }
            }
        }
    }

    /// A blocking wait that napped `nap` found its progress at once after it: it came during
    /// the nap, when is unknown. The next naps are halved (and grow back an eighth of the
    /// difference per wait), so a nap that is too long cannot feed on itself.
    pub(crate) fn record_overslept(&mut self, nap: Duration) {
        let ProgressMode::Adaptive { max_spin } = self.mode else {
            return;
        };
        self.raise_estimate(nap, max_spin);
        self.shortest = Some(nap / 2);
    }

    /// A blocking wait ended after `waited`. The estimate is a decaying maximum: it takes a
    /// longer wait at once and forgets 1/32 per wait, so the spin covers the slow tail of a
    /// round trip, not just its mean. A wait past the cap counts as twice the cap, and lifts
    /// the decaying minimum an eighth of the way: an idle spell stops the spinning, and the
    /// next short wait brings it back (see [`SpinPolicy::plan`]).
    pub(crate) fn record(&mut self, waited: Duration) {
        let ProgressMode::Adaptive { max_spin } = self.mode else {
            return;
        };
        self.raise_estimate(waited, max_spin);
        // The decaying minimum takes a shorter wait at once and moves an eighth of the way
        // towards a longer one: one idle spell (seconds) lifts it past the nap's limit.
        self.shortest = Some(match self.shortest {
            Some(s) if waited > s => s + (waited - s) / 8,
            _ => waited,
        });
    }

    /// The decaying maximum after a wait of `waited`: forgets 1/32, takes a longer wait at
    /// once, and counts a wait past the cap as twice the cap.
    fn raise_estimate(&mut self, waited: Duration, max_spin: Duration) {
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
        assert_eq!(event.plan().spin, Duration::ZERO);
        assert_eq!(busy.plan().spin, 50 * US);
    }

    #[test]
    fn adaptive_spins_twice_the_slowest_recent_wait() {
        let mut p = adaptive();
        assert_eq!(
            p.plan().spin,
            MIN_ADAPTIVE_SPIN,
            "nothing known yet: the floor"
        );
        p.record(100 * US);
        assert_eq!(p.plan().spin, 200 * US);
        // Short waits between slow ones barely lower it: the slow tail stays covered.
        p.record(5 * US);
        assert!(p.plan().spin >= 190 * US, "{:?}", p.plan().spin);
        p.record(300 * US);
        assert_eq!(p.plan().spin, 600 * US);
        // Only a long run of short waits brings it down to the floor.
        for _ in 0..200 {
            p.record(2 * US);
        }
        assert_eq!(p.plan().spin, MIN_ADAPTIVE_SPIN);
    }

    #[test]
    fn steady_waits_past_the_cap_nap_then_spin_and_an_idle_spell_stops_the_naps() {
        let mut p = adaptive();
        let ms = Duration::from_millis(1);
        assert_eq!(p.plan().nap, Duration::ZERO, "nothing known yet");
        for _ in 0..4 {
            p.record(2200 * US);
        }
        // Wakes half the cap before the shortest recent wait would end, then spins the cap.
        assert_eq!(
            p.plan(),
            WaitPlan {
                nap: 1700 * US,
                spin: ms
            }
        );
        // A shorter wait is taken at once; just past the cap, a quarter of it is the margin.
        p.record(1200 * US);
        assert_eq!(p.plan().nap, 900 * US);
        // A nap that overslept (progress at the first look) halves the next one.
        p.record_overslept(3000 * US);
        assert_eq!(p.plan().nap, 1125 * US, "1500 us less a quarter");
        p.record_overslept(600 * US);
        assert_eq!(
            p.plan().nap,
            Duration::ZERO,
            "300 us is under the cap: no nap"
        );
        for _ in 0..12 {
            p.record(2200 * US);
        }
        assert!(p.plan().nap > 900 * US, "{:?}", p.plan());
        // An idle spell: the next waits sleep on the channel at once.
        p.record(Duration::from_secs(3));
        assert_eq!(p.plan().nap, Duration::ZERO);
        assert_eq!(p.plan().spin, MIN_ADAPTIVE_SPIN);
        // Waits under the cap: back to spinning only.
        for _ in 0..200 {
            p.record(300 * US);
        }
        assert_eq!(
            p.plan(),
            WaitPlan {
                nap: Duration::ZERO,
                spin: 600 * US
            }
        );
        // The fixed modes never nap.
        let mut busy = SpinPolicy::new(ProgressMode::BusyPoll { spin: ms });
        busy.record(2 * ms);
        assert_eq!(busy.plan().nap, Duration::ZERO);
    }

    #[test]
    fn adaptive_never_spins_past_the_cap_and_sleeps_after_an_idle_wait() {
        let mut p = adaptive();
        p.record(700 * US);
        assert_eq!(p.plan().spin, Duration::from_millis(1), "capped");
        p.record(Duration::from_secs(5));
        assert_eq!(
            p.plan().spin,
            MIN_ADAPTIVE_SPIN,
            "an idle peer: sleep at once"
        );
        // Busy again: the first short wait brings the spin back, sized by the short waits
        // while the idle spell still counts as the slowest one.
        p.record(100 * US);
        assert_eq!(p.plan().spin, 400 * US);
        for _ in 0..25 {
            p.record(100 * US);
        }
        assert!(p.plan().spin >= 200 * US, "{:?}", p.plan().spin);
    }

    #[test]
    fn one_stall_among_short_waits_keeps_the_spin() {
        let mut p = adaptive();
        for _ in 0..50 {
            p.record(300 * US);
        }
        assert_eq!(p.plan().spin, 600 * US);
        // One wait stalls past the cap: the next waits still spin through a short one.
        p.record(Duration::from_millis(3));
        for _ in 0..5 {
            assert_eq!(p.plan().nap, Duration::ZERO);
            assert!(p.plan().spin >= 600 * US, "{:?}", p.plan());
            assert!(p.plan().spin <= Duration::from_millis(1), "{:?}", p.plan());
            p.record(300 * US);
        }
        // Short waits that spread out (150 to 400 us) stay covered.
        p.record(150 * US);
        assert_eq!(p.plan().spin, 600 * US, "four times the shortest, 150 us");
    }
}
