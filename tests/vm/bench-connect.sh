#!/bin/bash
# bench-connect.sh - a benchmark, not a test: what a connection costs to make, on rxe0 and
# siw0 in the VM (tests/vm/run.sh --both), with examples/bench_connect:
#
#   tests/vm/bench-connect.sh [--count N] [--parallel P] [--markdown FILE]
#
# Builds the release bench_connect example, boots the VM and runs it on each device's
# address: connect+accept latency (mean, median, 99th percentile; from the connect call to
# the echo of the first byte) and connections/s, N one at a time (default 100) and N by P
# threads at once (default 64), for RdmaSocket, kernel TCP and rsocket (the same TCP code
# under LD_PRELOAD=librspreload.so), with the ratios rdmasock / rsocket and rdmasock / TCP
# (targets: latency ratio <= 1.00 and connections/s with 64 at once >= 1.00 against
# rsocket on rxe0), and on rxe0 the phases of an RdmaSocket connect (--phases).
#
# With --markdown FILE each device's table also replaces its bench-connect-DEVICE section
# of FILE (normally docs/BENCHMARKS.md), with the date and the machine; FILE must lie under
# the project directory (the VM writes it).
#
# The VM runs under TCG: absolute numbers are far from hardware; read the ratios. Exit
# status: the last bench_connect's (0 when every run finished), 125 on VM setup failure.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

count=100 parallel=64 markdown=()
while [ $# -gt 0 ]; do
  case $1 in
    --count) count=$2; shift 2 ;;
    --parallel) parallel=$2; shift 2 ;;
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
echo "bench: building the release bench_connect example" >&2
cargo build --release --example bench_connect >&2
target_dir=$(cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bench=$target_dir/release/examples/bench_connect
[ -x "$bench" ] || { echo "bench: $bench was not built" >&2; exit 1; }
common="--count $count --parallel $parallel ${markdown[*]}"
exec "$HERE/run.sh" --both --timeout "${RDMASOCK_VM_TIMEOUT:-3000}" -- \
  "$bench --device rxe0 --phases $common && $bench --device siw0 $common"
