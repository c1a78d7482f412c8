//! The `--markdown FILE` option of the benchmarks: each writes its own section of FILE
//! (normally `docs/BENCHMARKS.md`), between `<!-- NAME:begin -->` and `<!-- NAME:end -->`,
//! and leaves the rest of the file as it is. The VM benchmark scripts do the same through
//! `tests/vm/bench-markdown.sh`.

use std::fs;
use std::io;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Replaces the section `name` of the markdown file at `path` with `body` (which should end
/// with a newline), between its begin and end markers; appends the section when the file has
/// none, and creates the file when it does not exist.
pub(crate) fn replace_section(path: &Path, name: &str, body: &str) -> io::Result<()> {
    let begin = format!("<!-- {name}:begin -->");
    let end = format!("<!-- {name}:end -->");
    let section = format!("{begin}\n{body}{end}\n");
    let old = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let new = splice(&old, &begin, &end, &section);
    fs::write(path, new)
}

/// `text` with the lines from `begin` to `end` (both whole lines) replaced by `section`, or
/// with `section` appended after a blank line when the markers are missing.
fn splice(text: &str, begin: &str, end: &str, section: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.iter().position(|l| *l == begin);
    let stop = start.and_then(|s| lines[s..].iter().position(|l| *l == end).map(|e| s + e));
    let mut out = String::new();
    match (start, stop) {
        (Some(s), Some(e)) => {
            for line in &lines[..s] {
                out.push_str(line);
                out.push('\n');
            }
            out.push_str(section);
            for line in &lines[e + 1..] {
                out.push_str(line);
                out.push('\n');
            }
        }
        _ => {
            out.push_str(text);
            if !text.is_empty() {
                if !text.ends_with('\n') {
                    out.push('\n');
                }
                out.push('\n');
            }
            out.push_str(section);
        }
    }
    out
}

/// Where the benchmark runs: the CPU model, the number of CPUs, and whether this is the test
/// VM (`RDMA_VM` set by `tests/vm/run.sh`, with its `RDMASOCK_VM_CPU` setting) or the host.
pub(crate) fn machine() -> String {
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, model)| model.trim().to_string())
        })
        .unwrap_or_else(|| "an unknown CPU".to_string());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let place = if std::env::var_os("RDMA_VM").is_some() {
        let setting = std::env::var("RDMASOCK_VM_CPU").unwrap_or_else(|_| "max".to_string());
        format!("in the test VM under TCG (`RDMASOCK_VM_CPU={setting}`)")
    } else {
        "on the host".to_string()
    };
    format!("{cpu}, {cpus} CPUs, {place}")
}

/// The current time as `YYYY-MM-DD HH:MM UTC`.
pub(crate) fn now_utc() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_date(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60
    )
}

/// The proleptic Gregorian date `days` days after 1970-01-01: counted in 400-year eras of
/// 146,097 days, with years starting on March 1 so that the leap day ends a year.
fn civil_date(days: u64) -> (u64, u64, u64) {
    let shifted = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = shifted / 146_097;
    let day_of_era = shifted % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // 0 = March
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    (year, month, day)
}
