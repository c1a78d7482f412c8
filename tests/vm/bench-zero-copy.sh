#!/bin/bash
# bench-zero-copy.sh - a benchmark, not a test: RdmaSocket's zero-copy writes from
# registered buffers against perftest's ib_write_bw -R (the floor: raw RDMA WRITEs, no
# stream) and against the copying socket, on rxe0, with the VM's default CPU and with
# RDMASOCK_VM_CPU=max,-erms,-fsrm (no fast `rep movsb`: copies cost what they cost on a
# CPU without it), one VM boot each (tests/vm/run.sh --rxe).
#
#   tests/vm/bench-zero-copy.sh [--megabytes M] [--rounds R] [--sizes "65536 1048576"]
#                               [--cpus "max max,-erms,-fsrm"] [--recv-ring BYTES]
#                               [--markdown FILE]
#
# Builds the release bench_zero_copy example and, in each VM, runs for each message size
# (default 64 KiB and 1 MiB) ib_write_bw -R -s SIZE over M MiB (default 64) R times (default
# 3), then bench_zero_copy --device rxe0 (R rounds); every contender's best run counts (the
# floor moves by several per cent from run to run under TCG): the copying socket
# (write_all), zero-copy writes pipelined 8 buffers deep (submit_registered) and one at a
# time (write_registered). Prints one table per CPU setting: MiB/s of each, the ratios
# zero-copy / ib_write_bw (target >= 0.95) and zero-copy / copy (target >= 1.1 at 1 MiB),
# the writing thread's CPU time per MiB (user + system) of the copying and the zero-copy
# socket with their ratio, the zero-copy writer's blocking waits per MiB (each one a
# wait for the reader to give back a receive-ring half), and the zero-copy reader's CPU time
# per MiB (its copy out of the ring and its waits). With --recv-ring BYTES the sockets'
# receive rings grow up to BYTES instead of their default largest size.
#
# What the floor measures: ib_write_bw -R's client posts -n RDMA WRITEs of SIZE bytes into
# one buffer of the server's, keeping up to its TX depth in flight (128, or -n when that is
# smaller: 64 at 1 MiB) and asking a completion for every one (its CQ moderation is 1 at
# these counts), and reports the bytes over the time from its first post to its last
# completion ("BW average"); the server only waits for the end (busy-polling, as the socket's
# reader may). No receive is consumed and no buffer is given back: the stream's writer
# instead has at most its peer's receive ring in flight (two halves of 64 KiB by default)
# and each message consumes a receive at the reader. Both move the same bytes in messages
# of the same size.
#
# With --markdown FILE each table also replaces its section of FILE (normally
# docs/BENCHMARKS.md, between <!-- bench-zero-copy:begin --> and <!-- bench-zero-copy:end -->,
# and bench-zero-copy-no-erms for the second CPU setting), with the date and the machine;
# see tests/vm/bench-markdown.sh. FILE must lie under the project directory.
#
# The VM runs under TCG: absolute numbers are far from hardware and noisy when the host is
# loaded; read the ratios. Exit status: 0 when every run finished, 1 when one failed, 125 on
# VM setup failure.
#
# Inside the VM the script is re-run as:
#   bench-zero-copy.sh --guest BENCH MEGABYTES ROUNDS SIZES [RECV_RING]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# ------------------------------------------------------------------ in the VM ----
if [ "${1:-}" = --guest ]; then
  ours=$2 megabytes=$3 rounds=$4 sizes=$5 recv_ring=${6:-}
  command -v ib_write_bw > /dev/null || { echo "bench: ib_write_bw missing (apt-get install perftest)"; exit 1; }
  [ -x "$ours" ] || { echo "bench: $ours missing"; exit 1; }
  [ -e /sys/class/infiniband/rxe0 ] || { echo "bench: no rxe0 in the VM"; exit 1; }
  ip=${RDMA_VM_RXE_IP:?RDMA_VM_RXE_IP unset: run this through tests/vm/run.sh}
  port=19400
  results=$(mktemp)
  # floor SIZE: ib_write_bw -R's average MiB/s over MEGABYTES MiB (perftest's MB is 2^20),
  # the best of ROUNDS runs, as bench_zero_copy reports the best of its rounds
  floor() {
    local size=$1 best= round
    for round in $(seq "$rounds"); do
      floor_once "$size" || continue
      if [ -z "$best" ] || awk -v a="$value" -v b="$best" 'BEGIN { exit !(a > b) }'; then
        best=$value
      fi
    done
    [ -n "$best" ] || return 1
    echo "floor $size $best" >> "$results"
  }
  # floor_once SIZE: one ib_write_bw -R run; its MiB/s in $value
  floor_once() {
    local size=$1 n out try sout
    value=
    n=$(( (megabytes << 20) / size ))
    [ "$n" -ge 5 ] || n=5
    for try in 1 2; do
      port=$((port + 1))
      local flags=(-R -F -d rxe0 -s "$size" -n "$n" -p "$port")
      sout=$(mktemp)
      ib_write_bw "${flags[@]}" > "$sout" 2>&1 &
      local spid=$!
      sleep 1
      out=$(timeout 300 ib_write_bw "${flags[@]}" "$ip" 2>&1) || out=
      wait "$spid" 2> /dev/null || true
      rm -f "$sout"
      value=$(echo "$out" | awk -v s="$size" -v n="$n" '$1 == s && $2 == n { print $4; exit }')
      [ -n "$value" ] && break
      echo "bench: ib_write_bw $size gave no result line (try $try):" >&2
      echo "$out" >&2
    done
    [ -n "$value" ]
  }
  status=0
  for size in $sizes; do
    floor "$size" || status=1
  done
  ring_args=()
  [ -z "$recv_ring" ] || ring_args=(--recv-ring "$recv_ring")
  out=$(timeout 1800 "$ours" --device rxe0 --sizes "$(echo $sizes | tr ' ' ,)" \
    --megabytes "$megabytes" --rounds "$rounds" "${ring_args[@]}" 2>&1) || { echo "bench: bench_zero_copy failed:" >&2; echo "$out" >&2; status=1; }
  echo "$out" | awk '$1 == "RESULT" && $2 == "bw" { print $3, $4, $5, $6, $7, $8 }' >> "$results"
  echo "zero-copy writes on rxe0 (RDMASOCK_VM_CPU=${RDMASOCK_VM_CPU:-max}${recv_ring:+, receive rings up to $recv_ring bytes}): best of $rounds rounds of $megabytes MiB, ib_write_bw's too"
  awk '
    $1 == "floor" { floor[$2] = $3; sizes[$2] = 1; next }
    { bw[$1, $2] = $3; cpu[$1, $2] = $4; waits[$1, $2] = $5; reader[$1, $2] = $6; sizes[$2] = 1 }
    END {
      printf "%9s %12s %10s %10s %10s %9s %9s %12s %12s %11s %12s %12s\n", "size", "ib_write_bw", "copy", "zero-copy", "zc-block", "zc/floor", "zc/copy", "copy us/MiB", "zc us/MiB", "CPU zc/copy", "zc waits/MiB", "zc rd us/MiB"
      for (s in sizes) {
        f = floor[s]; c = bw["copy", s]; z = bw["zero-copy", s]; b = bw["zero-copy-blocking", s]
        printf "%9d %12s %10s %10s %10s %9s %9s %12s %12s %11s %12s %12s\n", s, f, c, z, b,
          (f > 0 ? sprintf("%.2f", z / f) : "-"), (c > 0 ? sprintf("%.2f", z / c) : "-"),
          cpu["copy", s], cpu["zero-copy", s],
          (cpu["copy", s] > 0 ? sprintf("%.2f", cpu["zero-copy", s] / cpu["copy", s]) : "-"),
          waits["zero-copy", s], reader["zero-copy", s]
      }
    }' "$results" | sort -n -k1,1   # the header (not a number) sorts first
  echo "targets: zc/floor >= 0.95 at 64 KiB and 1 MiB; zc/copy >= 1.10 at 1 MiB"
  rm -f "$results"
  exit $status
fi

# ------------------------------------------------------------------ on the host ----
megabytes=64 rounds=3 sizes="65536 1048576" cpus="max max,-erms,-fsrm" markdown= recv_ring=
while [ $# -gt 0 ]; do
  case $1 in
    --megabytes) megabytes=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --recv-ring) recv_ring=$2; shift 2 ;;
    --markdown) markdown=$(realpath -m "${2:?--markdown needs a file}"); shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
    *) echo "bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -n "$markdown" ] && [ -n "$recv_ring" ]; then
  echo "bench: --markdown writes the default sockets' tables: run --recv-ring without it" >&2
  exit 2
fi
if [ -n "$markdown" ] && [[ $markdown != "$ROOT"/* ]]; then
  echo "bench: --markdown $markdown is outside $ROOT, which the VM cannot write" >&2
  exit 2
fi
cd "$ROOT"
# shellcheck source=bench-markdown.sh
. "$HERE/bench-markdown.sh"
echo "bench: building the release bench_zero_copy example" >&2
cargo build --release --example bench_zero_copy >&2
target_dir=$(cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bench=$target_dir/release/examples/bench_zero_copy
[ -x "$bench" ] || { echo "bench: $bench was not built" >&2; exit 1; }
command_line="tests/vm/bench-zero-copy.sh --megabytes $megabytes --rounds $rounds${recv_ring:+ --recv-ring $recv_ring}"
status=0
for cpu in $cpus; do
  section=bench-zero-copy
  [ "$cpu" = max ] || section=bench-zero-copy-no-erms
  export RDMASOCK_VM_CPU=$cpu
  bench_markdown_run "$markdown" "$section" "RDMASOCK_VM_CPU=$cpu $command_line" "zero-copy writes on rxe0" "targets:" -- \
    "$HERE/run.sh" --rxe --timeout "${RDMASOCK_VM_TIMEOUT:-3000}" -- \
    "$HERE/bench-zero-copy.sh" --guest "$bench" "$megabytes" "$rounds" "$sizes" "$recv_ring" || status=$?
done
exit $status
