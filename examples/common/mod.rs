//! What the examples share: getopt-style option parsing (std only) and C-style number parsing
//! (`strtol(s, NULL, 0)`) for the rdma-core twins, the benchmarks' stream trait and summary
//! of rounds, and which address to use on this machine.
#![allow(dead_code)] // each example uses a different part

pub(crate) mod address;
pub(crate) mod bench;
pub(crate) mod clock;
pub(crate) mod cm_endpoint;
pub(crate) mod cm_main;
pub(crate) mod markdown;
pub(crate) mod pingpong;

/// One option an example takes.
pub(crate) struct OptSpec {
    /// Short name (`-p`).
    pub short: char,
    /// Long name (`--port`), or `""` where the option has none (a plain `getopt` tool's).
    pub long: &'static str,
    /// Whether it takes a value.
    pub takes_value: bool,
}

/// The options found, in command-line order, and the other arguments.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    /// (short name, value) in order.
    pub opts: Vec<(char, Option<String>)>,
    /// Positional arguments.
    pub free: Vec<String>,
}

/// Parses `args` (without the program name) like getopt_long: `-p 1`, `-p1`, `-ec`,
/// `--port=1`, `--port 1`, `--` ends the options. An unknown option or a missing value is an
/// error naming it.
pub(crate) fn parse_args(args: &[String], specs: &[OptSpec]) -> Result<Parsed, String> {
    let mut out = Parsed::default();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            out.free.extend(args[i..].iter().cloned());
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let spec = specs
                .iter()
                .find(|s| !s.long.is_empty() && s.long == name)
                .ok_or_else(|| format!("unrecognized option '--{name}'"))?;
            let value = if spec.takes_value {
                match inline {
                    Some(v) => Some(v),
                    None => {
                        let v = args
                            .get(i)
                            .ok_or_else(|| format!("option '--{name}' requires an argument"))?;
                        i += 1;
                        Some(v.clone())
                    }
                }
            } else if inline.is_some() {
                return Err(format!("option '--{name}' doesn't allow an argument"));
            } else {
                None
            };
            out.opts.push((spec.short, value));
        } else if a.len() > 1 && a.starts_with('-') {
            let chars: Vec<char> = a[1..].chars().collect();
            let mut k = 0;
            while k < chars.len() {
                let c = chars[k];
                k += 1;
                let spec = specs
                    .iter()
                    .find(|s| s.short == c)
                    .ok_or_else(|| format!("invalid option -- '{c}'"))?;
                if !spec.takes_value {
                    out.opts.push((c, None));
                    continue;
                }
                let rest: String = chars[k..].iter().collect();
                let value = if !rest.is_empty() {
                    rest
                } else {
                    let v = args
                        .get(i)
                        .ok_or_else(|| format!("option requires an argument -- '{c}'"))?;
                    i += 1;
                    v.clone()
                };
                out.opts.push((c, Some(value)));
                break;
            }
        } else {
            out.free.push(a.clone());
        }
    }
    Ok(out)
}

/// C's `strtol(s, NULL, 0)`: decimal, `0x` hex or leading-`0` octal, optional sign; the
/// longest valid prefix counts and no digits at all give 0.
pub(crate) fn c_long(s: &str) -> i64 {
    let s = s.trim_start();
    let (neg, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (radix, digits) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (16, h)
    } else if s.len() > 1 && s.starts_with('0') {
        (8, &s[1..])
    } else {
        (10, s)
    };
    let mut v: i64 = 0;
    for c in digits.chars() {
        match c.to_digit(radix) {
            Some(d) => {
                v = v
                    .saturating_mul(i64::from(radix))
                    .saturating_add(i64::from(d))
            }
            None => break,
        }
    }
    if neg {
        -v
    } else {
        v
    }
}
