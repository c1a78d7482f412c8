//! The closing lines of `ibv_rc_pingpong` and of our `rc_pingpong`, parsed whole:
//! `N bytes in X.XX seconds = Y.YY Mbit/sec` and `N iters in X.XX seconds = Y.YY usec/iter`,
//! with the counts, the shared seconds and the rates checked against each other.

/// A number as C's `%.2f` prints it: digits, a point, exactly two digits.
fn two_decimals(text: &str) -> Option<f64> {
    let (int, frac) = text.split_once('.')?;
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    (digits(int) && frac.len() == 2 && digits(frac))
        .then(|| text.parse().ok())
        .flatten()
}

/// Parses "<count> <unit> in <S> seconds = <R> <rate_unit>", the count a plain integer and S
/// and R as `%.2f` prints them: (count, S, R).
fn closing_line(line: &str, unit: &str, rate_unit: &str) -> Option<(u64, f64, f64)> {
    let words: Vec<&str> = line.split(' ').collect();
    match words[..] {
        [count, u, "in", secs, "seconds", "=", rate, ru] if u == unit && ru == rate_unit => {
            let plain = !count.is_empty()
                && count.bytes().all(|b| b.is_ascii_digit())
                && (count == "0" || !count.starts_with('0'));
            Some((
                plain.then(|| count.parse().ok()).flatten()?,
                two_decimals(secs)?,
                two_decimals(rate)?,
            ))
        }
        _ => None,
    }
}

/// Checks that the last two lines of a ping-pong's output are rdma-core's closing lines,
///
/// ```text
/// 2*size*iters bytes in S seconds = R Mbit/sec
/// iters iters in S seconds = U usec/iter
/// ```
///
/// with the same S on both, and R and U what those counts and S give, within `%.2f`
/// rounding: R × U = 16 × size (bits per round trip), U × iters ≈ S seconds.
fn closing_lines(out: &str, size: u64, iters: u64) -> Result<(), String> {
    let lines: Vec<&str> = out.lines().collect();
    let [.., bytes_line, iters_line] = lines[..] else {
        return Err("fewer than two lines".into());
    };
    let (bytes, s1, rate) = closing_line(bytes_line, "bytes", "Mbit/sec")
        .ok_or_else(|| format!("not `N bytes in X.XX seconds = Y.YY Mbit/sec`: {bytes_line:?}"))?;
    let (n, s2, usec) = closing_line(iters_line, "iters", "usec/iter")
        .ok_or_else(|| format!("not `N iters in X.XX seconds = Y.YY usec/iter`: {iters_line:?}"))?;
    if (bytes, n) != (2 * size * iters, iters) {
        return Err(format!(
            "{bytes} bytes and {n} iters, expected {} and {iters}",
            2 * size * iters
        ));
    }
    if s1 != s2 {
        return Err(format!("{s1} seconds, then {s2}"));
    }
    let bits = 16.0 * size as f64;
    if (rate * usec - bits).abs() > 0.005 * (rate + usec) + 1e-6 {
        return Err(format!(
            "{rate} Mbit/sec × {usec} usec/iter is not {bits} bits per round trip"
        ));
    }
    let secs = usec * iters as f64 / 1e6;
    if (secs - s1).abs() > 0.005 + 0.005 * iters as f64 / 1e6 + 1e-9 {
        return Err(format!(
            "{usec} usec/iter × {iters} iters is {secs} s, not {s1}"
        ));
    }
    Ok(())
}

pub(crate) fn check_closing_lines(out: &str, size: u64, iters: u64, who: &str) {
    if let Err(e) = closing_lines(out, size, iters) {
        panic!("{who}: closing lines: {e}; output:\n{out}");
    }
}

/// The closing-line check accepts what ibv_rc_pingpong prints and refuses any departure
/// from its format, its counts or its arithmetic.
#[test]
fn closing_lines_are_checked_whole() {
    let rdma_core = [
        "  local address:  LID 0x0000, QPN 0x000011, PSN 0xa9a92c, GID ::ffff:10.99.0.2",
        "  remote address: LID 0x0000, QPN 0x000012, PSN 0x9ab9a6, GID ::ffff:10.99.0.2",
        "2457600 bytes in 0.07 seconds = 288.02 Mbit/sec",
        "300 iters in 0.07 seconds = 227.54 usec/iter",
    ];
    assert_eq!(closing_lines(&rdma_core.join("\n"), 4096, 300), Ok(()));
    let fast = "81920 bytes in 0.00 seconds = 288.58 Mbit/sec\n\
                10 iters in 0.00 seconds = 227.10 usec/iter\n";
    assert_eq!(closing_lines(fast, 4096, 10), Ok(()));
    // 10 round trips of 64 bytes, 1 ms each.
    let good = [
        "1280 bytes in 0.01 seconds = 1.02 Mbit/sec",
        "10 iters in 0.01 seconds = 1000.00 usec/iter",
    ];
    assert_eq!(closing_lines(&good.join("\n"), 64, 10), Ok(()));
    let bad: &[(usize, &str, &str)] = &[
        (
            0,
            "1281 bytes in 0.01 seconds = 1.02 Mbit/sec",
            "1281 bytes",
        ),
        (
            1,
            "11 iters in 0.01 seconds = 1000.00 usec/iter",
            "11 iters",
        ),
        (
            0,
            "1280 bytes in 0.010 seconds = 1.02 Mbit/sec",
            "not `N bytes",
        ),
        (
            0,
            "1280 bytes in 0.01 seconds = 1.0 Mbit/sec",
            "not `N bytes",
        ),
        (
            0,
            "1280 bytes in .01 seconds = 1.02 Mbit/sec",
            "not `N bytes",
        ),
        (
            0,
            "1280 bytes in 0.01 seconds = 1.02 Mbit/s",
            "not `N bytes",
        ),
        (
            0,
            "1280 bytes in 0.01 seconds = 1.02 Mbit/sec ",
            "not `N bytes",
        ),
        (
            0,
            "1280 bytes in  0.01 seconds = 1.02 Mbit/sec",
            "not `N bytes",
        ),
        (
            0,
            "+1280 bytes in 0.01 seconds = 1.02 Mbit/sec",
            "not `N bytes",
        ),
        (
            0,
            "01280 bytes in 0.01 seconds = 1.02 Mbit/sec",
            "not `N bytes",
        ),
        (
            0,
            "1280 bytes in 0.01 seconds = 1.02 Mbit/sec!",
            "not `N bytes",
        ),
        (1, "10 iters in 0.01 seconds = 1000.00 usec", "not `N iters"),
        (
            1,
            "10 iters in 0.01 second = 1000.00 usec/iter",
            "not `N iters",
        ),
        (
            1,
            "10 iters in 0.02 seconds = 1000.00 usec/iter",
            "then 0.02",
        ),
        (
            0,
            "1280 bytes in 0.01 seconds = 2.02 Mbit/sec",
            "bits per round trip",
        ),
        (
            1,
            "10 iters in 0.01 seconds = 2000.00 usec/iter",
            "bits per round trip",
        ),
    ];
    for (i, line, says) in bad {
        let mut lines = good;
        lines[*i] = line;
        let Err(err) = closing_lines(&lines.join("\n"), 64, 10) else {
            panic!("{line:?} was accepted");
        };
        assert!(err.contains(says), "{line:?}: {err}");
    }
    // Rate and time per iteration agree with each other, not with the seconds printed.
    let slow = "1280 bytes in 0.03 seconds = 1.02 Mbit/sec\n\
                10 iters in 0.03 seconds = 1000.00 usec/iter";
    let err = closing_lines(slow, 64, 10).unwrap_err();
    assert!(err.contains("is 0.01 s, not 0.03"), "{err}");
    // Both lines, and last.
    assert!(closing_lines(good[0], 64, 10).is_err());
    let more = format!("{}\n{}\nmore", good[0], good[1]);
    assert!(closing_lines(&more, 64, 10).is_err());
    let swapped = format!("{}\n{}", good[1], good[0]);
    assert!(closing_lines(&swapped, 64, 10).is_err());
}
