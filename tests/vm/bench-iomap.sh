#!/bin/bash
# bench-iomap.sh - a benchmark, not a test: RdmaSocket's iowrite (rsocket's riowrite) against
# rdma-core's riostream, on rxe0 and siw0, in one VM boot (tests/vm/run.sh --both).
#
#   tests/vm/bench-iomap.sh [--sizes "64 4096 65536"] [--iters N] [--count C] [--reps R]
#                           [--markdown FILE]
#
# Builds the release riostream example (examples/riostream.rs, the twin of rdma-core's
# riostream on RdmaSocket::iomap/iowrite), boots the VM once, and for each device, size and
# round runs a pair of riostreams (server then client, on the device's own address) with
# riostream's custom test, twice:
#   latency:   -S SIZE -C 1 -I N       (N round trips of one transfer each way; usec/xfer
#                                       is half a round trip)
#   bandwidth: -S SIZE -C C -I 1       (C transfers one way, C back; MB/s from
#                                       riostream's usec/xfer, the time of one transfer)
# once with rdma-core's riostream on both ends ("riostream") and once with ours on both
# ends ("RdmaSocket"), back to back in the same round. Each cell is the median over the
# rounds of the client's figure; the ratios RdmaSocket / riostream are taken within each
# round and reduced to their median (a slow spell of the VM slows both sides of one round):
# latency <= 1.00 and bandwidth >= 1.00 mean RdmaSocket is no slower.
#
# With --markdown FILE the table also replaces this script's section of FILE (normally
# docs/BENCHMARKS.md, between <!-- bench-iomap:begin --> and <!-- bench-iomap:end -->); see
# tests/vm/bench-markdown.sh. Under TCG the absolute numbers are far from hardware: read
# the ratios. Exit status: 0 when every run finished, 1 when one failed, 125 on VM setup
# failure.
#
# Inside the VM the script is re-run as:
#   bench-iomap.sh --guest OURS SIZES ITERS COUNT REPS
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# ------------------------------------------------------------------ in the VM ----
if [ "${1:-}" = --guest ]; then
  ours=$2 sizes=$3 iters=$4 count=$5 reps=$6
  rxe_ip=${RDMA_VM_RXE_IP:?RDMA_VM_RXE_IP unset: run this through tests/vm/run.sh}
  siw_ip=${RDMA_VM_SIW_IP:?RDMA_VM_SIW_IP unset: run this through tests/vm/run.sh}
  command -v riostream > /dev/null || { echo "bench: riostream missing (rdmacm-utils)" >&2; exit 1; }
  results=$(mktemp)
  status=0
  port=19400

  # pair TOOL IP ARGS...: the client's result line (the server starts first and prints
  # riostream's header once it listens).
  pair() {
    local tool=$1 ip=$2 sout line
    shift 2
    port=$((port + 1))
    sout=$(mktemp)
    # stdbuf: rdma-core's riostream holds its header in C stdio's buffer until it exits
    stdbuf -oL "$tool" -b "$ip" -p "$port" "$@" > "$sout" 2>&1 &
    local spid=$! waited=0
    until grep -q '^name' "$sout" || [ $waited -ge 300 ]; do sleep 0.1; waited=$((waited + 1)); done
    line=$(timeout 300 "$tool" -s "$ip" -p "$port" "$@" 2>&1 | grep '^custom' || true)
    wait $spid 2>/dev/null || true
    if [ -z "$line" ]; then
      echo "bench: $tool $* on $ip gave no result; its server said:" >&2
      cat "$sout" >&2
      rm -f "$sout"
      return 1
    fi
    rm -f "$sout"
    echo "$line"
  }

  for round in $(seq 1 "$reps"); do
    for dev in rxe0 siw0; do
      ip=$rxe_ip
      [ $dev = siw0 ] && ip=$siw_ip
      for size in $sizes; do
        for who in riostream RdmaSocket; do
          tool=riostream
          [ $who = RdmaSocket ] && tool=$ours
          if line=$(pair "$tool" "$ip" -S "$size" -C 1 -I "$iters"); then
            echo "$dev lat $who $size $(echo "$line" | awk '{ print $NF }') $round" >> "$results"
          else
            status=1
          fi
          if line=$(pair "$tool" "$ip" -S "$size" -C "$count" -I 1); then
            # MB/s from usec/xfer (riostream's Gb/sec has two decimals: 0.00 at 64 B)
            echo "$dev bw $who $size $(echo "$line" | awk -v s="$size" '{ printf "%.2f", s / $NF }') $round" >> "$results"
          else
            status=1
          fi
        done
      done
    done
  done

  # median of the values on stdin
  median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
  cell() { awk -v d="$1" -v k="$2" -v w="$3" -v s="$4" '$1 == d && $2 == k && $3 == w && $4 == s { print $5 }' "$results" | median; }
  ratio() {
    awk -v d="$1" -v k="$2" -v s="$3" '
      $1 == d && $2 == k && $4 == s { v[$3 " " $6] = $5; r[$6] = 1 }
      END { for (i in r) if (v["riostream " i] > 0 && v["RdmaSocket " i] != "") printf "%.2f\n", v["RdmaSocket " i] / v["riostream " i] }' "$results" | median
  }
  echo
  echo "bench: results (iowrite against riostream; $reps round(s), medians; lat: usec/xfer, half a round trip; bw: MB/s, SIZE / usec/xfer)"
  printf '%-6s %-4s %8s %12s %12s %10s\n' device kind size riostream RdmaSocket "ours÷rio"
  for dev in rxe0 siw0; do
    for kind in lat bw; do
      for size in $sizes; do
        printf '%-6s %-4s %8s %12s %12s %10s\n' "$dev" "$kind" "$size" \
          "$(cell $dev $kind riostream "$size")" "$(cell $dev $kind RdmaSocket "$size")" "$(ratio $dev $kind "$size")"
      done
    done
  done
  echo "(lat: ours÷rio <= 1.00 is no slower; bw: >= 1.00 is no slower)"
  echo
  echo "raw results (device kind tool size value round):"
  cat "$results"
  exit $status
fi

# ------------------------------------------------------------------ on the host ----
sizes="64 4096 65536" iters=1000 count=1000 reps=3 markdown=
command_line=$0
while [ $# -gt 0 ]; do
  [ "$1" = --markdown ] || command_line+=" $1${2:+ $2}"
  case $1 in
    --markdown) markdown=$(realpath -m "${2:?--markdown needs a file}"); shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --count) count=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
    *) echo "bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
cd "$ROOT"
echo "bench: building the release riostream example" >&2
cargo build --release --example riostream >&2
target_dir=$(cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
ours=$target_dir/release/examples/riostream
[ -x "$ours" ] || { echo "bench: $ours was not built" >&2; exit 1; }
# shellcheck source=bench-markdown.sh
source "$HERE/bench-markdown.sh"
bench_markdown_run "$markdown" bench-iomap "${command_line#"$ROOT"/}" "bench: results" "raw results" -- \
  "$HERE/run.sh" --both --timeout "${RDMASOCK_VM_TIMEOUT:-3000}" -- \
  bash "$HERE/bench-iomap.sh" --guest "$ours" "$sizes" "$iters" "$count" "$reps"
