//! What the benchmarks share: the stream trait both kinds of socket implement, the
//! summary of a contender's rounds, and a thread's CPU time.

use nix::sys::resource::{getrusage, UsageWho};
use rdmasock::socket::WaitStats;
use rdmasock::RdmaSocket;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// This thread's CPU time (user plus system) so far.
pub(crate) fn thread_cpu() -> Duration {
    let usage = getrusage(UsageWho::RUSAGE_THREAD).expect("getrusage");
    let time =
        |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
    time(usage.user_time()) + time(usage.system_time())
}

/// A stream a benchmark drives: `TcpStream` or `RdmaSocket`.
pub(crate) trait Stream: Read + Write + Send + 'static {
    /// The socket's wait counters (an RdmaSocket's only).
    fn waits(&self) -> Option<WaitStats>;
}

impl Stream for TcpStream {
    fn waits(&self) -> Option<WaitStats> {
        None
    }
}

impl Stream for RdmaSocket {
    fn waits(&self) -> Option<WaitStats> {
        Some(self.wait_stats())
    }
}

/// The median and range of one side's rounds.
pub(crate) struct Summary {
    /// The median round.
    pub median: f64,
    /// The least round.
    pub min: f64,
    /// The greatest round.
    pub max: f64,
}

impl Summary {
    /// The median, least and greatest of `v`; all NaN when `v` is empty.
    pub(crate) fn of(mut v: Vec<f64>) -> Summary {
        if v.is_empty() {
            return Summary {
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            };
        }
        v.sort_by(f64::total_cmp);
        Summary {
            median: v[v.len() / 2],
            min: v[0],
            max: v[v.len() - 1],
        }
    }

    /// `median [min-max]`: the median with one decimal, the range with `range_decimals`.
    pub(crate) fn text(&self, range_decimals: usize) -> String {
        let d = range_decimals;
        format!("{:.1} [{:.d$}-{:.d$}]", self.median, self.min, self.max)
    }
}
