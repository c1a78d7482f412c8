//! The `run` line a measuring process prints, and the table of a count's runs.
use crate::client::Run;
use crate::measure::Reading;

const FIELDS: usize = 7;

fn fields(r: &Reading) -> [u64; FIELDS] {
    [
        r.rss,
        r.pinned,
        r.fds,
        r.threads,
        r.regions,
        r.registered,
        r.vmalloc,
    ]
}

fn reading(v: &[u64]) -> Reading {
    Reading {
        rss: v[0],
        pinned: v[1],
        fds: v[2],
        threads: v[3],
        regions: v[4],
        registered: v[5],
        vmalloc: v[6],
    }
}

/// `run N CONNECT_SECS` and the four readings' numbers.
pub(crate) fn encode(run: &Run) -> String {
    let mut s = format!("run {} {}", run.n, run.connect_secs);
    for r in [&run.base, &run.idle, &run.busy, &run.closed] {
        for v in fields(r) {
            s.push_str(&format!(" {v}"));
        }
    }
    s
}

/// The run of an `encode`d line.
pub(crate) fn decode(line: &str) -> Option<Run> {
    let mut it = line.strip_prefix("run ")?.split_whitespace();
    let n = it.next()?.parse().ok()?;
    let connect_secs = it.next()?.parse().ok()?;
    let v: Vec<u64> = it.map(|x| x.parse().ok()).collect::<Option<_>>()?;
    if v.len() != 4 * FIELDS {
        return None;
    }
    let at = |i: usize| reading(&v[i * FIELDS..(i + 1) * FIELDS]);
    Some(Run {
        n,
        connect_secs,
        base: at(0),
        idle: at(1),
        busy: at(2),
        closed: at(3),
    })
}

/// One row: a name and a value per stack.
struct Row {
    name: &'static str,
    values: Vec<f64>,
    /// Digits after the point.
    digits: usize,
}

fn per(n: u64, after: u64, before: u64) -> f64 {
    (after as f64 - before as f64) / n.max(1) as f64
}

/// The table of `runs` (RdmaSocket's first) for `n` connections.
pub(crate) fn table(n: usize, runs: &[(&str, Run)]) -> String {
    let rows_of = |f: &dyn Fn(&Run) -> f64, name, digits| Row {
        name,
        values: runs.iter().map(|(_, r)| f(r)).collect(),
        digits,
    };
    let kib = 1024.0;
    let rows = [
        rows_of(
            &|r| per(r.n, r.idle.pinned, r.base.pinned) / kib,
            "pinned KiB / connection (VmPin+VmLck)",
            1,
        ),
        rows_of(
            &|r| per(r.n, r.idle.registered, r.base.registered) / kib,
            "registered KiB / connection",
            1,
        ),
        rows_of(
            &|r| per(r.n, r.idle.regions, r.base.regions),
            "registered regions / connection",
            2,
        ),
        rows_of(
            &|r| per(r.n, r.idle.vmalloc, r.base.vmalloc) / kib,
            "kernel vmalloc KiB / connection, both ends",
            1,
        ),
        rows_of(&|r| per(r.n, r.idle.fds, r.base.fds), "fds / connection", 2),
        rows_of(&|r| r.base.threads as f64, "threads before", 0),
        rows_of(&|r| r.idle.threads as f64, "threads with N open", 0),
        rows_of(
            &|r| per(r.n, r.idle.rss, r.base.rss) / kib,
            "RSS KiB / idle connection",
            1,
        ),
        rows_of(
            &|r| per(r.n, r.busy.rss, r.base.rss) / kib,
            "RSS KiB / busy connection",
            1,
        ),
        rows_of(
            &|r| (r.idle.rss as f64 - r.base.rss as f64) / kib / kib,
            "RSS MiB, N idle, over baseline",
            1,
        ),
        rows_of(
            &|r| r.n as f64 / r.connect_secs.max(1e-9),
            "sequential connects / s",
            0,
        ),
        rows_of(
            &|r| r.closed.fds as f64 - r.base.fds as f64,
            "fds kept after close (process-wide)",
            0,
        ),
        rows_of(
            &|r| r.closed.threads as f64 - r.base.threads as f64,
            "threads kept after close",
            0,
        ),
    ];
    let mut head = format!("N = {n:<6} {:<38}", "");
    for (stack, _) in runs {
        head.push_str(&format!(" {stack:>10}"));
    }
    for (stack, _) in &runs[1..] {
        head.push_str(&format!(" {:>10}", format!("rdma/{stack}")));
    }
    let mut out = format!("{head}\n");
    for row in rows {
        let mut line = format!("{:<45}", row.name);
        for v in &row.values {
            line.push_str(&format!(" {:>10.*}", row.digits, v));
        }
        for v in &row.values[1..] {
            let ratio = row.values[0] / v;
            if ratio.is_finite() {
                line.push_str(&format!(" {ratio:>10.2}"));
            } else {
                line.push_str(&format!(" {:>10}", "-"));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
