#!/bin/sh
# Runs each fuzz target for a short while (default 20 s), starting from its committed corpus
# (corpus/TARGET, read only: what the run finds goes to a scratch folder). Needs nightly +
# cargo-fuzz.
set -eu
cd "$(dirname "$0")"
secs="${1:-20}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for t in $(cargo +nightly fuzz list); do
    mkdir -p "$scratch/$t" "corpus/$t"
    cargo +nightly fuzz run "$t" "$scratch/$t" "corpus/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048
done
