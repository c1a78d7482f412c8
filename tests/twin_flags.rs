//! The examples that twin an rdma-core tool take every option the installed tool lists, the
//! way a new user tries them: for each twin, the tool's usage text (it prints it on an
//! unknown option) gives its options, short and long, and whether each takes a value; the
//! twin's own usage must list the same set, reject the unknown option with the tool's exit
//! status, and accept each listed option (each form, with a value where it takes one)
//! without calling it unknown. The runs end quickly without a device: each names a device
//! or address that does not exist.
//!
//! The tools come from rdma-core's ibverbs-utils and rdmacm-utils (tests/setup.sh installs
//! them); a missing tool fails the test.

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

#[path = "example_support/mod.rs"]
mod example_support;
use example_support::{example, output_within};

/// One option a usage text lists.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Flag {
    short: Option<char>,
    long: Option<String>,
    takes_value: bool,
}

impl Flag {
    /// Each way to write it on a command line with `value`: `-x value` and `--long=value`.
    fn forms(&self, value: &str) -> Vec<Vec<String>> {
        let mut forms = Vec::new();
        if let Some(c) = self.short {
            let mut f = vec![format!("-{c}")];
            if self.takes_value {
                f.push(value.to_string());
            }
            forms.push(f);
        }
        if let Some(l) = &self.long {
            forms.push(vec![if self.takes_value {
                format!("--{l}={value}")
            } else {
                format!("--{l}")
            }]);
        }
        forms
    }
}

/// The options a usage text lists, one a line: `-p, --port=<port>   text` (getopt_long
/// tools) or `[-p port_number]` (getopt tools). A value is `=<...>` after the long form, or
/// a word after the short one inside its brackets. Lines reporting the unknown option are
/// skipped.
fn usage_flags(text: &str) -> BTreeSet<Flag> {
    let mut flags = BTreeSet::new();
    for line in text.lines() {
        if line.contains("invalid option") || line.contains("unrecognized option") {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let mut flag = Flag {
            short: None,
            long: None,
            takes_value: false,
        };
        for (i, word) in words.iter().enumerate() {
            let bracketed = word.starts_with('[');
            let w = word.trim_start_matches('[').trim_end_matches([',', ']']);
            if let Some(long) = w
                .strip_prefix("--")
                .filter(|l| l.starts_with(|c: char| c.is_ascii_alphanumeric()))
            {
                let (name, value) = match long.split_once('=') {
                    Some((n, _)) => (n, true),
                    None => (long, false),
                };
                assert!(
                    flag.long.is_none(),
                    "two long options on one line: {line:?}"
                );
                flag.long = Some(name.to_string());
                flag.takes_value |= value;
            } else if let Some(c) = short_option(w) {
                assert!(
                    flag.short.is_none(),
                    "two short options on one line: {line:?}"
                );
                flag.short = Some(c);
                let value_follows = words.get(i + 1).is_some_and(|next| {
                    next.ends_with(']') && short_option(next.trim_end_matches(']')).is_none()
                });
                flag.takes_value |= bracketed && !word.ends_with(']') && value_follows;
            }
        }
        if flag.short.is_some() || flag.long.is_some() {
            flags.insert(flag);
        }
    }
    flags
}

/// `c` when `word` is `-c` (one letter or digit).
fn short_option(word: &str) -> Option<char> {
    let mut chars = word.strip_prefix('-')?.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if c.is_ascii_alphanumeric() => Some(c),
        _ => None,
    }
}

/// Runs `program` with `args` (stdin empty) to its end within 30 s; `None` when the
/// program is not installed.
fn run(program: &PathBuf, args: &[String]) -> Option<Output> {
    let child = match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == ErrorKind::NotFound => return None,
        Err(e) => panic!("cannot start {}: {e}", program.display()),
    };
    let what = format!("{} {args:?}", program.display());
    Some(output_within(child, Duration::from_secs(30), &what))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// What a parser says about an option it does not take (ours and getopt's) or a value it
/// lacks, and the usage text printed then.
const REFUSALS: [&str; 6] = [
    "invalid option",
    "unrecognized option",
    "requires an argument",
    "doesn't allow an argument",
    "not supported by this twin",
    "usage:",
];

/// Checks twin `ours` against rdma-core's `tool`. `value` gives the value an option
/// (short name) is tried with; `guard` is added after an option other than its own
/// (`guard.0`) so that the run ends at once without a device.
fn check_twin(tool: &str, ours: &str, value: fn(char) -> &'static str, guard: (char, &[&str])) {
    let unknown = vec!["-h".to_string()];
    let theirs_out = run(&PathBuf::from(tool), &unknown).unwrap_or_else(|| {
        panic!(
            "{tool} is not installed: it comes with rdma-core's ibverbs-utils/rdmacm-utils; \
             run tests/setup.sh"
        )
    });
    let ours_path = example(ours);
    let ours_out = run(&ours_path, &unknown).expect("the example exists");
    let (theirs_text, ours_text) = (text(&theirs_out), text(&ours_out));
    let listed = usage_flags(&theirs_text);
    assert_eq!(
        usage_flags(&ours_text),
        listed,
        "{ours}'s usage must list the options {tool}'s lists\n{tool}:\n{theirs_text}\n\
         {ours}:\n{ours_text}"
    );
    if !listed.is_empty() {
        assert_eq!(
            ours_out.status.code(),
            theirs_out.status.code(),
            "{ours} -h must exit as {tool} -h does\n{theirs_text}\n{ours_text}"
        );
    }
    for flag in &listed {
        let v = flag.short.map(value).unwrap_or("1");
        for form in flag.forms(v) {
            let mut args = form.clone();
            if flag.short != Some(guard.0) {
                args.extend(guard.1.iter().map(|s| s.to_string()));
            }
            let out = run(&ours_path, &args).expect("the example exists");
            let said = text(&out);
            let lower = said.to_lowercase();
            for refusal in REFUSALS {
                assert!(
                    !lower.contains(&refusal.to_lowercase()),
                    "{ours} {args:?} refused an option {tool} lists ({refusal:?}):\n{said}"
                );
            }
        }
    }
}

#[test]
fn the_usage_extraction_reads_both_styles() {
    let getopt = "rdma_server: invalid option -- 'h'\nusage: rdma_server\n\t[-s server_address]\n\
                  \t[-p port_number]\n\t[-v]\n";
    let long = "Options:\n  -p, --port=<port>      listen on port\n  -o, --odp\t\t    use odp\n\
                  --verbose   alone\n";
    let f = |short, long: Option<&str>, takes_value| Flag {
        short,
        long: long.map(str::to_string),
        takes_value,
    };
    assert_eq!(
        usage_flags(getopt),
        [
            f(Some('s'), None, true),
            f(Some('p'), None, true),
            f(Some('v'), None, false)
        ]
        .into()
    );
    assert_eq!(
        usage_flags(long),
        [
            f(Some('p'), Some("port"), true),
            f(Some('o'), Some("odp"), false),
            f(None, Some("verbose"), false)
        ]
        .into()
    );
}

#[test]
fn rc_pingpong_takes_every_option_of_ibv_rc_pingpong() {
    check_twin(
        "ibv_rc_pingpong",
        "rc_pingpong",
        |c| match c {
            'd' => "no-such-device",
            'p' => "18599",
            'i' => "1",
            'g' | 'l' => "0",
            'm' => "1024",
            's' => "4096",
            _ => "10",
        },
        ('d', &["-d", "no-such-device"]),
    );
}

#[test]
fn devinfo_takes_every_option_of_ibv_devinfo() {
    check_twin(
        "ibv_devinfo",
        "devinfo",
        |c| if c == 'd' { "no-such-device" } else { "1" },
        ('d', &["-d", "no-such-device"]),
    );
}

#[test]
fn devices_takes_what_ibv_devices_takes() {
    // ibv_devices reads no options (its usage lists none): the twin must list none either.
    check_twin("ibv_devices", "devices", |_| "1", ('-', &[]));
}

/// TEST-NET-1: an address no host has, so a server cannot bind it and a client's
/// resolution ends without reaching anyone.
const NOWHERE: &str = "192.0.2.1";

#[test]
fn rdma_server_takes_every_option_of_rdma_server() {
    check_twin(
        "rdma_server",
        "rdma_server",
        |c| if c == 's' { NOWHERE } else { "7499" },
        ('s', &["-s", NOWHERE]),
    );
}

#[test]
fn rdma_client_takes_every_option_of_rdma_client() {
    check_twin(
        "rdma_client",
        "rdma_client",
        |c| if c == 's' { NOWHERE } else { "7499" },
        ('s', &["-s", NOWHERE]),
    );
}
