//! How a blocking call waits for progress: [`WaitPolicy`] decides, for one connection, whether
//! a call that found nothing to do busy-polls (and for how long), naps on a timer first, or
//! arms the completion channel and sleeps in poll(2); it learns from the connection's recent
//! waits (the adaptive mode) and counts them ([`WaitStats`]). [`CallWait`] (`call_wait.rs`)
//! is one blocking call's side of it: when its wait began, the nap it took, its deadline. Neither knows the
//! protocol engine or the verbs objects; the driver loop (`Shared::run`) does what they say.
#![forbid(unsafe_code)]

use crate::protocol::{ProgressMode, MIN_ADAPTIVE_SPIN};
use std::io;

pub(crate) use super::call_wait::CallWait;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The longest typical wait that an adaptive wait naps through before it spins (see
/// [`WaitPolicy::plan`]); waits longer than this are an idle peer, not a slow round trip.
pub(crate) const MAX_NAPPED_WAIT: Duration = Duration::from_millis(20);

/// How many times the shortest recent wait an adaptive wait spins when an outlier has lifted
/// the slowest recent wait past the cap (see [`WaitPolicy::plan`]).
const SHORT_WAIT_MARGIN: u32 = 4;

/// A spin yields the CPU once in this many polls of the completion queue.
const YIELD_EVERY: u32 = 128;

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

/// What a blocking call that found no progress does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Busy-poll the completion queue until this instant ([`spin_until`]).
    Spin(Instant),
    /// Sleep this long on a timer, outside the connection's lock, then look again; the spin
    /// after it is planned already ([`CallWait::napped`]).
    Nap(Duration),
    /// Arm the completion channel; sleep in poll(2) if that finds nothing (or return
    /// `WouldBlock` on a nonblocking socket).
    ArmAndSleep,
}

/// One connection's waiting policy: the progress mode, what it learnt from recent waits, and
/// the statistics.
#[derive(Debug, Clone)]
pub(crate) struct WaitPolicy {
    mode: ProgressMode,
    /// Decaying maximum of recent waits (adaptive mode only).
    estimate: Duration,
    /// Decaying minimum of recent waits (adaptive mode only; `None` before the first).
    shortest: Option<Duration>,
    /// The last blocking wait's start and end, until the next wait learns from it.
    ended_wait: Option<(Instant, Instant)>,
    /// What blocking calls did when they had to wait.
    pub(crate) stats: WaitStats,
}

impl WaitPolicy {
    pub(crate) fn new(mode: ProgressMode) -> WaitPolicy {
        WaitPolicy {
            mode,
            estimate: Duration::ZERO,
            shortest: None,
            ended_wait: None,
            stats: WaitStats::default(),
        }
    }

    /// What `call`, which found no progress, does next: spin (on until the end planned at
    /// its first wait), nap first (when the plan says so and the deadline allows), or arm
    /// and sleep (a nonblocking call, or a spin that is over). The first wait of a call reads
    /// the clock, learns from the wait before and is counted.
    #[inline]
    pub(crate) fn next_step(&mut self, call: &mut CallWait) -> Step {
        if call.nonblocking {
            return Step::ArmAndSleep;
        }
        if let Some((_, end)) = call.spinning {
            return Step::Spin(end);
        }
        let start = Instant::now();
        self.learn_ended_wait();
        let plan = self.plan();
        if !call.counted {
            call.counted = true;
            self.stats.waits += 1;
        }
        let nap = call.deadline.map_or(plan.nap, |d| {
            plan.nap.min(d.saturating_duration_since(start))
        });
        if nap.is_zero() {
            let end = start + plan.spin;
            call.spinning = Some((start, end));
            return Step::Spin(end);
        }
        call.nap_planned = Some((start, plan.spin));
        Step::Nap(nap)
    }

    /// The nap [`next_step`](Self::next_step) planned is taken.
    pub(crate) fn nap_taken(&mut self) {
        self.stats.naps += 1;
    }

    /// The call sleeps in poll(2).
    pub(crate) fn channel_sleep(&mut self) {
        self.stats.channel_sleeps += 1;
    }

    /// `call`'s attempt went through: learns how long its wait lasted, if it waited. A call
    /// whose progress was there at the first look after a nap learns only that the nap was
    /// too long (the progress came during it, at a time unknown).
    #[inline(always)]
    pub(crate) fn call_ended(&mut self, call: &CallWait) {
        match (call.spinning, call.napped) {
            (Some(_), Some(nap)) => {
                self.stats.overslept_naps += 1;
                self.learn_ended_wait();
                self.record_overslept(nap);
            }
            (Some((start, _)), None) => {
                // Learnt from when the next wait is planned: the arithmetic stays off the
                // way from the bytes' arrival to the caller, and the policy sees the same
                // waits in the same order.
                self.ended_wait = Some((start, call.spun_to.unwrap_or_else(Instant::now)));
            }
            _ => {}
        }
    }

    /// Feeds the wait [`call_ended`](Self::call_ended) kept, if any, to the estimates.
    fn learn_ended_wait(&mut self) {
        if let Some((start, end)) = self.ended_wait.take() {
            self.record(end.saturating_duration_since(start));
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
    fn record_overslept(&mut self, nap: Duration) {
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
    /// next short wait brings it back (see [`WaitPolicy::plan`]).
    fn record(&mut self, waited: Duration) {
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

/// Busy-polls with `poll` (which makes progress and says whether it found any) until `end`;
/// when something happened, the time read just before the poll that found it (`None`:
/// nothing did). One poll in [`YIELD_EVERY`] also yields the CPU, so that a runnable thread
/// on the same CPU (the kernel's softirq thread finishing a soft device's work, the peer of a
/// same-host connection) waits at most that many polls for it. The polls do not `pause`
/// (`std::hint::spin_loop`): each one reads the clock and the queue anyway, and under QEMU's
/// TCG a `pause` leaves the CPU loop (~260 ns), and neither a `pause` nor a `sched_yield`
/// between polls helps: a reply that arrives during one waits for its end. The spin
/// also ends, without progress, as soon as another caller waits for the connection's lock
/// (`contenders`): a clone writing while this one reads must not wait out the whole budget;
/// this caller then sleeps in poll(2), which releases the lock.
#[inline]
pub(crate) fn spin_until(
    end: Instant,
    contenders: &AtomicU32,
    mut poll: impl FnMut() -> io::Result<bool>,
) -> io::Result<Option<Instant>> {
    let mut spins = 0u32;
    loop {
        let now = Instant::now();
        if now >= end {
            return Ok(None);
        }
        if poll()? {
            return Ok(Some(now));
        }
        if contenders.load(Ordering::Relaxed) > 0 {
            return Ok(None);
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(YIELD_EVERY) {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    fn adaptive() -> WaitPolicy {
        WaitPolicy::new(ProgressMode::Adaptive {
            max_spin: Duration::from_millis(1),
        })
    }

    #[test]
    fn fixed_modes_ignore_the_waits() {
        let mut event = WaitPolicy::new(ProgressMode::Event);
        let mut busy = WaitPolicy::new(ProgressMode::BusyPoll { spin: 50 * US });
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
        let mut busy = WaitPolicy::new(ProgressMode::BusyPoll { spin: ms });
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

    #[test]
    fn a_call_plans_its_wait_once_and_a_nonblocking_call_never_spins() {
        let mut p = WaitPolicy::new(ProgressMode::BusyPoll { spin: 50 * US });
        let mut nonblocking = CallWait::new(None, true);
        assert_eq!(p.next_step(&mut nonblocking), Step::ArmAndSleep);
        assert_eq!(p.stats.waits, 0, "a nonblocking call does not wait");
        let mut call = CallWait::new(None, false);
        let Step::Spin(end) = p.next_step(&mut call) else {
            panic!("busy-poll mode spins");
        };
        call.not_yet();
        assert_eq!(
            p.next_step(&mut call),
            Step::Spin(end),
            "the same spin goes on"
        );
        assert_eq!(p.stats.waits, 1, "one call, one wait");
        assert!(!call.spun(None));
        p.call_ended(&call);
        assert!(
            p.ended_wait.is_some(),
            "learnt when the next wait is planned"
        );
        let mut next = CallWait::new(None, false);
        p.next_step(&mut next);
        assert!(p.ended_wait.is_none());
        assert_eq!(p.stats.waits, 2);
    }

    #[test]
    fn a_nap_is_bounded_by_the_deadline_and_an_overslept_one_is_counted() {
        let mut p = adaptive();
        for _ in 0..4 {
            p.record(2200 * US);
        }
        let mut call = CallWait::new(None, false);
        assert_eq!(p.next_step(&mut call), Step::Nap(1700 * US));
        let mut short = CallWait::new(Some(Duration::from_millis(1)), false);
        match p.next_step(&mut short) {
            Step::Nap(nap) => assert!(nap <= Duration::from_millis(1), "{nap:?}"),
            step => panic!("{step:?}"),
        }
        p.nap_taken();
        call.napped(1700 * US);
        p.call_ended(&call);
        assert_eq!(p.stats.naps, 1);
        assert_eq!(p.stats.overslept_naps, 1);
        assert_eq!(
            p.plan().nap,
            Duration::ZERO,
            "850 us is under the cap: no nap"
        );
        // A call that waited for nothing teaches nothing.
        p.call_ended(&CallWait::new(None, false));
        assert!(p.ended_wait.is_none());
    }

    #[test]
    fn a_timed_out_call_says_how_long_it_waited() {
        let mut call = CallWait::new(Some(Duration::ZERO), false);
        let e = call.sleep_bound().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(
            e.to_string(),
            "timed out after 0ns waiting on the RDMA connection"
        );
        assert!(call.take_woke());
        let mut unbounded = CallWait::new(None, false);
        assert_eq!(unbounded.sleep_bound().unwrap(), None);
    }
}
