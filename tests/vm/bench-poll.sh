#!/bin/bash
# bench-poll.sh - a benchmark, not a test: examples/bench_poll (a nonblocking 64-byte
# ping-pong on plain poll(2) over the sockets' readiness fds against the same on mio) on
# rxe0 and on siw0, in one VM boot (tests/vm/run.sh --both).
#
#   tests/vm/bench-poll.sh [--rounds R] [--iters N] [--connections "1 16"] [--markdown FILE]
#
# Builds the release bench_poll example, boots the VM and runs it there with --device rxe0,
# then --device siw0 (each on its device's address). R rounds per row (default 3), mio and
# poll(2) alternating, N round trips per connection (default 2000: TCG is slow). The target
# is poll(2) / mio <= 1.1. Each round also runs the two loops over TCP sockets on the same
# address: those rows are the floor (poll(2) looks at every fd on each call, epoll does not),
# so read the RDMA rows' ratio against the TCP rows' of the same connection count.
#
# With --markdown FILE each device's table also replaces the bench-poll-rxe0 and
# bench-poll-siw0 sections of FILE (normally docs/BENCHMARKS.md, between
# <!-- bench-poll-rxe0:begin --> and <!-- bench-poll-rxe0:end -->, and the same for siw0),
# with the date and the machine; FILE must lie under the project directory (the VM writes
# it).
#
# The VM runs under TCG: absolute numbers are far from hardware; read the ratios. Exit
# status: the first failing bench_poll's (0 when both finished), 125 on VM setup failure.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

rounds=3 iters=2000 connections="1 16" markdown=()
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
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
echo "bench: building the release bench_poll example" >&2
cargo build --release --example bench_poll >&2
target_dir=$(cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bench=$target_dir/release/examples/bench_poll
[ -x "$bench" ] || { echo "bench: $bench was not built" >&2; exit 1; }
# One quoted command line for the guest's shell: both devices, the first failure's status.
run() {
  printf '%q ' "$bench" --device "$1" --rounds "$rounds" --iters "$iters" \
    --connections "$connections" "${markdown[@]}"
}
exec "$HERE/run.sh" --both --timeout "${RDMASOCK_VM_TIMEOUT:-3000}" -- \
  "$(run rxe0); status=\$?; $(run siw0) || exit; exit \$status"
