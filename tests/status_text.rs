//! Our status and event texts against rdma-core's, computed at test time from the real
//! libibverbs: `WcStatus::text` vs `ibv_wc_status_str` and `AsyncEventKind::text` vs
//! `ibv_event_type_str`, for every defined value and some out-of-range ones.
//!
//! libibverbs is loaded by a `python3` child through ctypes (the library itself never
//! links it). Both must be installed (`apt-get install libibverbs1 python3`, as `.ci/run`
//! does); the tests fail, not skip, when they are missing.
#![forbid(unsafe_code)]

use rdmasock_verbs::{AsyncEventKind, WcStatus};
use std::process::Command;

/// Loads libibverbs.so.1 and prints `FUNCTION(n)` for each argument, one per line.
const LOOKUP: &str = r#"
import ctypes, sys
try:
    lib = ctypes.CDLL("libibverbs.so.1")
except OSError as e:
    sys.stderr.write("cannot load libibverbs.so.1: %s\n" % e)
    sys.exit(3)
fn = getattr(lib, sys.argv[1])
fn.restype = ctypes.c_char_p
fn.argtypes = [ctypes.c_int]
for arg in sys.argv[2:]:
    sys.stdout.write(fn(int(arg)).decode("latin-1") + "\n")
"#;

/// rdma-core's texts for `values` from its `function`, in order.
fn rdma_core_texts(function: &str, values: &[i32]) -> Vec<String> {
    let out = Command::new("python3")
        .arg("-c")
        .arg(LOOKUP)
        .arg(function)
        .args(values.iter().map(i32::to_string))
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run python3 ({e}): this test calls libibverbs through python3's ctypes; \
                 install it with `apt-get install python3 libibverbs1`"
            )
        });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() != Some(3),
        "{stderr}this test compares our texts with rdma-core's libibverbs: install it with \
         `apt-get install libibverbs1`"
    );
    assert!(
        out.status.success(),
        "python3 calling {function} failed ({}): {stderr}",
        out.status
    );
    let texts: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(
        texts.len(),
        values.len(),
        "{function}: expected one line per value, got {texts:?}"
    );
    texts
}

/// Compares `ours(value)` with rdma-core's text for each value; all mismatches at once.
fn compare(function: &str, values: &[i32], ours: impl Fn(i32) -> &'static str) {
    let theirs = rdma_core_texts(function, values);
    let mismatches: Vec<String> = values
        .iter()
        .zip(&theirs)
        .filter(|(v, t)| ours(**v) != t.as_str())
        .map(|(v, t)| format!("{v}: ours {:?}, rdma-core {t:?}", ours(*v)))
        .collect();
    assert!(
        mismatches.is_empty(),
        "{function} differs:\n{}",
        mismatches.join("\n")
    );
    // A library that answered "unknown" everywhere would make the comparison empty.
    assert_eq!(theirs[0], ours(values[0]));
    assert_ne!(
        theirs[0], "unknown",
        "{function}(0) should be a known value"
    );
}

#[test]
fn wc_status_text_matches_ibv_wc_status_str() {
    // 0..=23 are IBV_WC_SUCCESS..IBV_WC_TM_RNDV_INCOMPLETE; then out of range, and -1,
    // which is u32::MAX as the kernel's unsigned status.
    let values: Vec<i32> = (0..=23).chain([24, 25, 1000, -1]).collect();
    compare("ibv_wc_status_str", &values, |v| {
        WcStatus::from_raw(v as u32).text()
    });
}

#[test]
fn async_event_text_matches_ibv_event_type_str() {
    // 0..=19 are IBV_EVENT_CQ_ERR..IBV_EVENT_WQ_FATAL; then out of range.
    let values: Vec<i32> = (0..=19).chain([20, 21, 1000, -1]).collect();
    compare("ibv_event_type_str", &values, |v| {
        AsyncEventKind::from_raw(v as u32).text()
    });
}
