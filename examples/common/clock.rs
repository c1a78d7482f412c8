//! Timing a ping-pong's round trips with one clock read each: a stamp when each round trip
//! starts, the next one's stamp (or the last) as its end, and the arithmetic after the loop.
//! perftest's latency tools time the same way (one `get_cycles` an iteration); reading the
//! clock twice a round trip and converting each sample at once put ~1 µs of the client's
//! own work into every round trip under QEMU (two clock reads and floating-point helpers:
//! a clock read alone ~100 ns there), which `rstream` (one clock read a run) does not pay.

use std::time::Instant;

/// The round trips of one ping-pong run: `warm` untimed ones first, then the timed ones.
pub(crate) struct RoundTrips {
    warm: usize,
    stamps: Vec<Instant>,
}

impl RoundTrips {
    /// Room for `warm + timed` round trips, allocated now (nothing allocates in the loop).
    pub(crate) fn new(warm: usize, timed: usize) -> RoundTrips {
        RoundTrips {
            warm,
            stamps: Vec::with_capacity(warm + timed + 1),
        }
    }

    /// Call at the start of every round trip (warm-up ones too).
    #[inline]
    pub(crate) fn start(&mut self) {
        self.stamps.push(Instant::now());
    }

    /// Call once after the last round trip: the timed round trips' durations in
    /// microseconds, each divided by `divisor` (2 for one-way times).
    pub(crate) fn finish(mut self, divisor: f64) -> Samples {
        self.stamps.push(Instant::now());
        let mut sorted: Vec<f64> = self.stamps[self.warm..]
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64() * 1e6 / divisor)
            .collect();
        assert!(!sorted.is_empty(), "no timed round trip");
        sorted.sort_by(f64::total_cmp);
        Samples { sorted }
    }
}

/// Timed durations, sorted.
pub(crate) struct Samples {
    sorted: Vec<f64>,
}

impl Samples {
    /// The mean.
    pub(crate) fn average(&self) -> f64 {
        self.sorted.iter().sum::<f64>() / self.sorted.len() as f64
    }

    /// The median (the upper one of an even count).
    pub(crate) fn median(&self) -> f64 {
        self.sorted[self.sorted.len() / 2]
    }

    /// The `q` quantile (0.0 to 1.0), by rank.
    pub(crate) fn quantile(&self, q: f64) -> f64 {
        self.sorted[((self.sorted.len() - 1) as f64 * q) as usize]
    }
}
