#!/bin/sh
# Runs each fuzz target for a short while (default 20 s). Needs nightly + cargo-fuzz.
set -eu
cd "$(dirname "$0")"
secs="${1:-20}"
for t in mpa_frame ddp_rdmap handshake established stream_hello stream_engine verbs_parsers \
    socket_completions established_crc transmit chunking; do
    cargo +nightly fuzz run "$t" -- -max_total_time="$secs" -rss_limit_mb=2048
done
