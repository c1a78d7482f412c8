//! The engine's timers: one deadline per key (a connection's token, or a token with one of
//! the backstop bits), kept in deadline order so that the engine finds its next wake-up and
//! the timers due without looking at the others. With many connections most keys hold a
//! backstop that is re-armed each millisecond while application threads read the sockets;
//! a scan of every key per engine turn cost more than the backstops' work.
//!
//! Backstop deadlines are rounded up to the next [`TICK`] (see [`Timers::arm_backstop`]),
//! so that the backstops of many connections come due together and the engine wakes once
//! for all of them, not once per connection.
#![forbid(unsafe_code)]

use super::TokenMap;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The grain that backstop deadlines are rounded up to.
pub(crate) const TICK: Duration = Duration::from_micros(250);

/// Deadlines by key, and the same in deadline order.
#[derive(Debug)]
pub(crate) struct Timers {
    by_key: TokenMap<Instant>,
    order: BTreeSet<(Instant, usize)>,
    /// The instant that backstop ticks count from.
    epoch: Instant,
}

impl Timers {
    pub(crate) fn new() -> Timers {
        Timers {
            by_key: TokenMap::default(),
            order: BTreeSet::new(),
            epoch: Instant::now(),
        }
    }

    /// Sets `key`'s deadline to `at` (`None`: clears it); returns the one it had.
    pub(crate) fn set(&mut self, key: usize, at: Option<Instant>) -> Option<Instant> {
        let before = match at {
            Some(t) => self.by_key.insert(key, t),
            None => self.by_key.remove(&key),
        };
        if before != at {
            if let Some(b) = before {
                self.order.remove(&(b, key));
            }
            if let Some(t) = at {
                self.order.insert((t, key));
            }
        }
        before
    }

    /// Whether `key` has a deadline.
    pub(crate) fn contains(&self, key: usize) -> bool {
        self.by_key.contains_key(&key)
    }

    /// Sets `key`'s deadline `after` from `now`, rounded up to the next [`TICK`], unless it
    /// has one; returns whether it set it. A backstop thus comes due between `after` and
    /// `after` + [`TICK`] from `now`.
    pub(crate) fn arm_backstop(&mut self, key: usize, now: Instant, after: Duration) -> bool {
        if self.contains(key) {
            return false;
        }
        let at = self.round_up(now + after);
        self.set(key, Some(at));
        true
    }

    /// `t` rounded up to the next [`TICK`] from the epoch.
    fn round_up(&self, t: Instant) -> Instant {
        let since = t.saturating_duration_since(self.epoch).as_nanos();
        let tick = TICK.as_nanos();
        let ticks = since.div_ceil(tick);
        let nanos = u64::try_from(ticks * tick).unwrap_or(u64::MAX);
        self.epoch + Duration::from_nanos(nanos)
    }

    /// The earliest deadline.
    pub(crate) fn earliest(&self) -> Option<Instant> {
        self.order.first().map(|&(t, _)| t)
    }

    /// Removes and returns a key whose deadline is at or before `now`, earliest first.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<usize> {
        let &(t, key) = self.order.first()?;
        if t > now {
            return None;
        }
        self.order.pop_first();
        self.by_key.remove(&key);
        Some(key)
    }

    /// How many keys have a deadline.
    #[cfg(test)]
    fn len(&self) -> usize {
        debug_assert_eq!(self.by_key.len(), self.order.len());
        self.by_key.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_keys_come_out_in_deadline_order_and_only_once_due() {
        let mut t = Timers::new();
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        t.set(3, Some(t0 + 3 * ms));
        t.set(1, Some(t0 + ms));
        t.set(2, Some(t0 + 2 * ms));
        assert_eq!(t.earliest(), Some(t0 + ms));
        assert_eq!(t.pop_due(t0), None);
        assert_eq!(t.pop_due(t0 + 2 * ms), Some(1));
        assert_eq!(t.pop_due(t0 + 2 * ms), Some(2));
        assert_eq!(t.pop_due(t0 + 2 * ms), None);
        assert_eq!(t.earliest(), Some(t0 + 3 * ms));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn setting_a_key_again_moves_its_one_deadline_and_none_clears_it() {
        let mut t = Timers::new();
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        assert_eq!(t.set(7, Some(t0 + 5 * ms)), None);
        assert_eq!(t.set(7, Some(t0 + ms)), Some(t0 + 5 * ms));
        assert_eq!(t.len(), 1);
        assert_eq!(t.earliest(), Some(t0 + ms));
        assert_eq!(t.set(7, None), Some(t0 + ms));
        assert_eq!(t.len(), 0);
        assert_eq!(t.earliest(), None);
        assert_eq!(t.pop_due(t0 + 10 * ms), None);
    }

    #[test]
    fn a_backstop_comes_due_within_a_tick_after_its_delay_and_is_armed_once() {
        let mut t = Timers::new();
        let ms = Duration::from_millis(1);
        let now = Instant::now() + Duration::from_nanos(12_345);
        assert!(t.arm_backstop(9, now, ms));
        assert!(!t.arm_backstop(9, now + ms / 2, ms));
        let at = t.earliest().unwrap();
        assert!(at >= now + ms && at < now + ms + TICK, "{:?}", at - now);
        assert_eq!(t.pop_due(now + ms - Duration::from_nanos(1)), None);
        assert_eq!(t.pop_due(now + ms + TICK), Some(9));
    }

    #[test]
    fn backstops_armed_within_one_tick_come_due_together() {
        let mut t = Timers::new();
        let ms = Duration::from_millis(1);
        let now = t.epoch + 4 * TICK + Duration::from_nanos(1);
        for (key, offset) in [(1, 0), (2, 100), (3, 200)] {
            t.arm_backstop(key, now + Duration::from_micros(offset), ms);
        }
        let at = t.earliest().unwrap();
        let mut due = Vec::new();
        while let Some(k) = t.pop_due(at) {
            due.push(k);
        }
        assert_eq!(due, [1, 2, 3]);
    }
}
