#!/bin/bash
# bench-bridge.sh - a benchmark, not a test: RdmaSocket's latency and bandwidth
# on rxe0 through the pure-Rust rxe provider against the rdma-core bridge
# (RDMASOCK_PROVIDER=ibverbs: rdma-core's libibverbs and its rxe provider underneath), in
# one VM boot (tests/vm/run.sh --rxe).
#
#   tests/vm/bench-bridge.sh [--iters N] [--megabytes M] [--sizes "64 4096 65536"] [--reps R]
#                            [--markdown FILE]
#
# Builds the release bench_socket example and, in the VM, runs `bench_socket rdma` on
# rxe0's address R times (default 3) for each provider, alternating pure-Rust and bridge so
# the VM's load affects both alike. Latency is one-way (half a round trip), the median of N
# round trips (default 200) after warm-up; bandwidth is MiB/s of M MiB (default 16) one way
# in 64 KiB writes. Each cell is the best round's (TCG's noise only ever slows a run). Prints
# a table with the ratio pure-Rust / bridge: for latency <= 1.00 means the pure-Rust path is
# no slower, for bandwidth >= 1.00.
#
# Which provider ran is checked for every run, with glibc's loader log (LD_DEBUG=files):
# the bridge runs must load libibverbs.so.1 (RDMASOCK_PROVIDER=ibverbs fails rather than
# falling back), the pure-Rust runs must not.
#
# With --markdown FILE the table also replaces this script's section of FILE (normally
# docs/BENCHMARKS.md, between <!-- bench-bridge:begin --> and <!-- bench-bridge:end -->),
# with the date and the machine; see tests/vm/bench-markdown.sh.
#
# The VM runs under TCG: absolute numbers are far from hardware; read the ratios. Exit
# status: 0 when every run finished and ran on the provider it asked for, 1 otherwise, 125
# on VM setup failure.
#
# Inside the VM the script is re-run as:
#   bench-bridge.sh --guest BENCH_SOCKET ITERS MEGABYTES SIZES REPS
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# ------------------------------------------------------------------ in the VM ----
if [ "${1:-}" = --guest ]; then
  ours=$2 iters=$3 megabytes=$4 sizes=$5 reps=$6
  [ -x "$ours" ] || { echo "bench: $ours missing"; exit 1; }
  [ -e /sys/class/infiniband/rxe0 ] || { echo "bench: no rxe0 in the VM"; exit 1; }
  ip=${RDMA_VM_RXE_IP:?RDMA_VM_RXE_IP unset: run this through tests/vm/run.sh}
  results=$(mktemp) loader=$(mktemp -d)
  status=0

  # one PROVIDER ROUND: one bench_socket run; records "PROVIDER lat|bw SIZE VALUE" lines.
  one() {
    local provider=$1 round=$2 out loaded
    local env=(env -u RDMASOCK_PROVIDER)
    [ "$provider" = bridge ] && env=(env RDMASOCK_PROVIDER=ibverbs)
    rm -f "$loader"/ld.*
    out=$(LD_DEBUG=files LD_DEBUG_OUTPUT="$loader/ld" timeout 600 "${env[@]}" "$ours" rdma "$ip" \
      --sizes "${sizes// /,}" --iters "$iters" --megabytes "$megabytes" 2>&1) || {
      echo "bench: $provider round $round failed:" >&2; echo "$out" >&2; return 1; }
    loaded=no
    grep -qs 'file=libibverbs.so.1' "$loader"/ld.* && loaded=yes
    if [ "$provider" = bridge ] && [ $loaded = no ]; then
      echo "bench: the bridge round $round did not load libibverbs.so.1" >&2; return 1
    fi
    if [ "$provider" = pure-rust ] && [ $loaded = yes ]; then
      echo "bench: the pure-Rust round $round loaded libibverbs.so.1 (the bridge ran)" >&2; return 1
    fi
    echo "$out" | awk -v p="$provider" '$1 == "RESULT" && $2 == "lat" { print p, "lat", $4, $6 }
                                        $1 == "RESULT" && $2 == "bw" { print p, "bw", $4, $5 }' \
      | tee -a "$results" | sed "s/^/  round $round: /" >&2
  }

  for round in $(seq "$reps"); do
    echo "bench: round $round of $reps" >&2
    one pure-rust "$round" || status=1
    one bridge "$round" || status=1
  done

  # value PROVIDER KIND SIZE: the best round's (lowest latency, highest bandwidth)
  value() {
    awk -v p="$1" -v k="$2" -v s="$3" '$1 == p && $2 == k && $3 == s {
        if (!n++ || (k == "lat" && $4 < best) || (k == "bw" && $4 > best)) best = $4 }
      END { if (n) print best }' "$results"
  }
  ratio() { # ratio A B: A / B, or "-" when either is missing
    if [ -n "$1" ] && [ -n "$2" ]; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; else echo -; fi
  }
  echo
  echo "rxe0, RdmaSocket, best of $reps round(s): one-way latency (usec, median of $iters round trips)"
  echo "and bandwidth ($megabytes MiB one way, MiB/s); ratio = pure-Rust rxe / rdma-core bridge"
  printf '%-12s %12s %12s %8s\n' workload pure-Rust bridge ratio
  for size in $sizes; do
    r=$(value pure-rust lat "$size") b=$(value bridge lat "$size")
    printf '%-12s %12s %12s %8s\n' "lat $size" "${r:--}" "${b:--}" "$(ratio "$r" "$b")"
  done
  for size in $(awk '$2 == "bw" { print $3 }' "$results" | sort -un); do
    r=$(value pure-rust bw "$size") b=$(value bridge bw "$size")
    printf '%-12s %12s %12s %8s\n' "bw $size" "${r:--}" "${b:--}" "$(ratio "$r" "$b")"
  done
  echo
  echo "raw results (provider kind size value):"
  cat "$results"
  rm -rf "$results" "$loader"
  exit $status
fi

# ------------------------------------------------------------------ on the host ----
iters=200 megabytes=16 sizes="64 4096 65536" reps=3 markdown=
command_line=$0
while [ $# -gt 0 ]; do
  [ "$1" = --markdown ] || command_line+=" $1${2:+ $2}"
  case $1 in
    --markdown) markdown=$(realpath -m "${2:?--markdown needs a file}"); shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --megabytes) megabytes=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
    *) echo "bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
cd "$ROOT"
echo "bench: building the release bench_socket example" >&2
cargo build --release --example bench_socket >&2
target_dir=$(cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
ours=$target_dir/release/examples/bench_socket
[ -x "$ours" ] || { echo "bench: $ours was not built" >&2; exit 1; }
# shellcheck source=bench-markdown.sh
source "$HERE/bench-markdown.sh"
bench_markdown_run "$markdown" bench-bridge "${command_line#"$ROOT"/}" "rxe0, RdmaSocket, best of" "raw results" -- \
  "$HERE/run.sh" --rxe --timeout "${RDMASOCK_VM_TIMEOUT:-3000}" -- \
  bash "$HERE/bench-bridge.sh" --guest "$ours" "$iters" "$megabytes" "$sizes" "$reps"
