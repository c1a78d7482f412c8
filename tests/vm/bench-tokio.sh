#!/bin/bash
# bench-tokio.sh - a benchmark, not a test: rdmasock::tokio::RdmaStream on rxe0 in the VM
# (tests/vm/run.sh --rxe), with examples/bench_tokio --vm:
#
#   tests/vm/bench-tokio.sh [--rounds R] [--iters N] [--requests N] [--megabytes M]
#                           [--markdown FILE]
#
# Builds the release bench_tokio example (--features tokio), boots the VM and runs it on
# rxe0's address: RdmaStream against the blocking RdmaSocket in event mode and in its
# default adaptive wait (64 B request/response latency, the median of N round trips
# (default 2000); a 1 MiB-write stream of M MiB (default 64)), and tonic's requests/s over
# RdmaStream against tonic over TCP on the same address (N calls of 64 B on 8 channels,
# default 4000), with the process's CPU time per call (getrusage). Each row runs R rounds
# (default 3), both sides back to back; the table gives each side's median and range, the
# ratio RdmaStream / other of the medians, and the median of each round's own ratio.
#
# With --markdown FILE the table also replaces the bench-tokio-vm section of FILE
# (normally docs/BENCHMARKS.md, between <!-- bench-tokio-vm:begin --> and
# <!-- bench-tokio-vm:end -->), with the date and the machine; FILE must lie under the
# project directory (the VM writes it).
#
# The VM runs under TCG: absolute numbers are far from hardware; read the ratios. Exit
# status: bench_tokio's (0 when every run finished), 125 on VM setup failure.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

rounds=3 iters=2000 requests=4000 megabytes=64 markdown=()
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --megabytes) megabytes=$2; shift 2 ;;
    --markdown) markdown=(--markdown "$(realpath -m "${2:?--markdown needs a file}")"); shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
    *) echo "bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ ${#markdown[@]} -gt 0 ] && [[ ${markdown[1]} != "$ROOT"/* ]]; then
  echo "bench: --markdown ${markdown[1]} is outside $ROOT, which the VM cannot write" >&2
  exit 2
fi
cd "$ROOT"
echo "bench: building the release bench_tokio example" >&2
cargo build --release --features tokio --example bench_tokio >&2
target_dir=$(cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bench=$target_dir/release/examples/bench_tokio
[ -x "$bench" ] || { echo "bench: $bench was not built" >&2; exit 1; }
exec "$HERE/run.sh" --rxe --timeout "${RDMASOCK_VM_TIMEOUT:-3000}" -- \
  "$bench" --vm --rounds "$rounds" --iters "$iters" --requests "$requests" \
  --megabytes "$megabytes" "${markdown[@]}"
