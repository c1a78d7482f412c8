#!/bin/sh
# Runs every fuzz target for MINUTES minutes each (default 10), one after another, starting
# from its committed corpus (corpus/TARGET). What a run finds goes to target/long-corpus/TARGET
# (merge it into the committed corpus with `cargo +nightly fuzz cmin`). Stops at the first
# crash and prints the reproducer's path (cargo-fuzz keeps it in artifacts/TARGET); replay it
# with `cargo +nightly fuzz run TARGET PATH`.
# Needs nightly + cargo-fuzz.
set -eu
cd "$(dirname "$0")"
minutes="${1:-10}"
secs=$((minutes * 60))
for t in $(cargo +nightly fuzz list); do
    mkdir -p "target/long-corpus/$t" "corpus/$t" "artifacts/$t"
    echo "=== $t for $minutes min"
    if ! cargo +nightly fuzz run "$t" "target/long-corpus/$t" "corpus/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -timeout=60; then
        crash="$(ls -t "artifacts/$t/" 2>/dev/null | head -n 1)"
        echo "=== $t FAILED; reproducer: fuzz/artifacts/$t/$crash" >&2
        exit 1
    fi
done
echo "=== every target ran $minutes min without a crash"
