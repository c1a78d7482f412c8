#!/bin/bash
# bench-rc-pingpong.sh - a benchmark, not a test: our rc_pingpong example
# against rdma-core's ibv_rc_pingpong, on the same rxe0 in one VM boot.
#
#   tests/vm/bench-rc-pingpong.sh [--reps N] [--iters N] [--sizes "4096 64"] [--modes "poll events"]
#                                 [--baseline BINARY] [--markdown FILE]
#
# Builds the release rc_pingpong example, boots the VM once (tests/vm/run.sh --rxe) and,
# inside it, runs for each message size (4096 B, 64 B) and mode (polling, -e events)
# ours<->ours and theirs<->theirs with identical flags (-d rxe0 -g 1 -s SIZE -n ITERS
# [-e]), N times each (default 5), alternating which pair goes first (and which starts
# each size/mode).  It parses the client's closing line "ITERS iters in S seconds =
# U usec/iter" and measures its CPU time (user + system), prints each sample, then a
# table: size, mode, the median usec/iter of ours and of rdma-core, their ratio (ours /
# rdma-core; <= 1.00 means ours is no slower), the ratio of the fastest runs, and the
# median client CPU time per iteration of each (where the time goes in -e mode).
#
# With --baseline (an earlier build of the rc_pingpong example, copied aside), that binary
# runs as a third contender "baseline" in the same rotation, and a second table compares
# it with ours (before/after a change, in one VM boot).
#
# With --markdown FILE the tables also replace this script's section of FILE (normally
# docs/BENCHMARKS.md, between <!-- bench-rc-pingpong:begin --> and <!-- bench-rc-pingpong:end -->), with the date and
# the machine; see tests/vm/bench-markdown.sh.
#
# The VM runs under TCG, so absolute numbers are far from hardware and noisy when the
# host is loaded; the ratio of interleaved runs is what to read.  Exit status: 0 when
# every run finished (whatever the ratio), 1 when a run failed, 125 on VM setup failure.
#
# Inside the VM the script is re-run as:
#   bench-rc-pingpong.sh --guest EXAMPLE REPS ITERS SIZES MODES [BASELINE]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# ------------------------------------------------------------------ in the VM ----
if [ "${1:-}" = --guest ]; then
  ours=$2 reps=$3 iters=$4 sizes=$5 modes=$6 baseline=${7:-}
  [ -z "$baseline" ] || [ -x "$baseline" ] || { echo "bench: baseline $baseline missing"; exit 1; }
  theirs=$(command -v ibv_rc_pingpong) || { echo "bench: ibv_rc_pingpong missing (apt-get install ibverbs-utils)"; exit 1; }
  [ -x "$ours" ] || { echo "bench: $ours missing"; exit 1; }
  [ -e /sys/class/infiniband/rxe0 ] || { echo "bench: no rxe0 in the VM"; exit 1; }
  ip=${RDMA_VM_IP:?RDMA_VM_IP unset: run this through tests/vm/run.sh}
  port=18700
  samples=$(mktemp)
  listening() { ss -Hltn "sport = :$1" | grep -q .; }
  # pair WHO BINARY FLAG... : one server+client run; appends "size mode who usec" to $samples
  pair() {
    local who=$1 bin=$2 size=$3 mode=$4
    shift 4
    local p=$port
    port=$((port + 1))
    local flags=(-d rxe0 -g 1 -s "$size" -n "$iters" -p "$p" "$@")
    local sout cout
    sout=$(mktemp) cout=$(mktemp)
    "$bin" "${flags[@]}" > "$sout" 2>&1 &
    local spid=$!
    for _ in $(seq 300); do
      listening "$p" && break
      kill -0 "$spid" 2>/dev/null || break
      sleep 0.05
    done
    local ctime=$sout.time TIMEFORMAT='%U %S' ok=1
    { time timeout 300 "$bin" "${flags[@]}" "$ip" > "$cout" 2>&1 || ok=0; } 2> "$ctime"
    if [ $ok = 0 ]; then
      kill "$spid" 2>/dev/null || true
      echo "bench: $who client ${flags[*]} failed:"; cat "$cout"; echo "server:"; cat "$sout"
      return 1
    fi
    local waited=0
    while kill -0 "$spid" 2>/dev/null && [ $waited -lt 600 ]; do sleep 0.05; waited=$((waited + 1)); done
    if kill -0 "$spid" 2>/dev/null; then kill "$spid"; echo "bench: $who server hung"; return 1; fi
    wait "$spid" || { echo "bench: $who server ${flags[*]} failed:"; cat "$sout"; return 1; }
    local usec
    usec=$(sed -n "s/^$iters iters in .* seconds = \([0-9.]*\) usec\/iter\$/\1/p" "$cout")
    [ -n "$usec" ] || { echo "bench: no closing line from the $who client:"; cat "$cout"; return 1; }
    # the client's CPU time (user + system, whole process) per iteration, in usec
    local cpu
    cpu=$(awk -v n="$iters" '{ printf "%.1f", ($1 + $2) * 1e6 / n }' "$ctime")
    echo "$size $mode $who $usec $cpu" >> "$samples"
    echo "  $size $mode $who $usec $cpu"
    rm -f "$ctime"
    rm -f "$sout" "$cout"
  }
  echo "samples (size mode who usec/iter CPU-usec/iter, client side, in run order):"
  group=0
  for size in $sizes; do
    for mode in $modes; do
      extra=()
      [ "$mode" = events ] && extra=(-e)
      group=$((group + 1))
      # the contenders, rotated by one place each rep so none always goes first
      who=(ours rdma-core) bins=("$ours" "$theirs")
      if [ -n "$baseline" ]; then who+=(baseline); bins+=("$baseline"); fi
      for rep in $(seq "$reps"); do
        for k in $(seq 0 $((${#who[@]} - 1))); do
          j=$(((k + rep + group) % ${#who[@]}))
          pair "${who[$j]}" "${bins[$j]}" "$size" "$mode" "${extra[@]}"
        done
      done
    done
  done
  echo
  echo "rc_pingpong vs ibv_rc_pingpong on rxe0 (-g 1 -n $iters), median of $reps runs:"
  awk -v sizes="$sizes" -v modes="$modes" '
    { v[$1" "$2" "$3] = v[$1" "$2" "$3] " " $4; c[$1" "$2" "$3] = c[$1" "$2" "$3] " " $5 }
    function least(list,   a, n, i, m) {
      n = split(list, a, " "); m = a[1]
      for (i = 2; i <= n; i++) if (a[i] + 0 < m + 0) m = a[i]
      return m
    }
    function median(list,   a, n, i, j, t) {
      n = split(list, a, " ")
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END {
      printf "| %-5s | %-6s | %-14s | %-19s | %-5s | %-15s | %-13s | %-18s |\n", "size", "mode", "ours usec/iter", "rdma-core usec/iter", "ratio", "ratio of minima", "ours CPU/iter", "rdma-core CPU/iter"
      printf "|-------|--------|----------------|---------------------|-------|-----------------|---------------|--------------------|\n"
      ns = split(sizes, size, " "); nm = split(modes, mode, " ")
      for (s = 1; s <= ns; s++) for (m = 1; m <= nm; m++) {
        k = size[s] " " mode[m]
        o = median(v[k " ours"]); t = median(v[k " rdma-core"])
        printf "| %-5s | %-6s | %14.1f | %19.1f | %5.2f | %15.2f | %13.1f | %18.1f |\n", size[s], mode[m], o, t, o / t, least(v[k " ours"]) / least(v[k " rdma-core"]), median(c[k " ours"]), median(c[k " rdma-core"])
      }
    }' "$samples"
  if [ -n "$baseline" ]; then
    echo
    echo "ours against the baseline build ($baseline), same runs:"
    awk -v sizes="$sizes" -v modes="$modes" '
      { v[$1" "$2" "$3] = v[$1" "$2" "$3] " " $4 }
      function median(list,   a, n, i, j, t) {
        n = split(list, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
      }
      END {
        printf "| %-5s | %-6s | %-18s | %-14s | %-19s | %-16s | %-15s |\n", "size", "mode", "baseline usec/iter", "ours usec/iter", "rdma-core usec/iter", "baseline / rdma", "ours / baseline"
        printf "|-------|--------|--------------------|----------------|---------------------|------------------|-----------------|\n"
        ns = split(sizes, size, " "); nm = split(modes, mode, " ")
        for (s = 1; s <= ns; s++) for (m = 1; m <= nm; m++) {
          k = size[s] " " mode[m]
          b = median(v[k " baseline"]); o = median(v[k " ours"]); t = median(v[k " rdma-core"])
          printf "| %-5s | %-6s | %18.1f | %14.1f | %19.1f | %16.2f | %15.2f |\n", size[s], mode[m], b, o, t, b / t, o / b
        }
      }' "$samples"
  fi
  rm -f "$samples"
  exit 0
fi

# ------------------------------------------------------------------ on the host ----
reps=5 iters=1000 sizes="4096 64" modes="poll events" baseline= markdown=
command_line=$0
while [ $# -gt 0 ]; do
  [ "$1" = --markdown ] || command_line+=" $1${2:+ $2}"
  case $1 in
    --markdown) markdown=$(realpath -m "${2:?--markdown needs a file}"); shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --baseline) baseline=$(realpath "$2"); shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
    *) echo "bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
cd "$ROOT"
echo "bench: building the release rc_pingpong example" >&2
cargo build --release --example rc_pingpong >&2
target_dir=$(cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
ours=$target_dir/release/examples/rc_pingpong
[ -x "$ours" ] || { echo "bench: $ours was not built" >&2; exit 1; }
# shellcheck source=bench-markdown.sh
source "$HERE/bench-markdown.sh"
bench_markdown_run "$markdown" bench-rc-pingpong "${command_line#"$ROOT"/}" "rc_pingpong vs ibv_rc_pingpong" "vm: exit status" -- \
  "$HERE/run.sh" --rxe --timeout "${RDMASOCK_VM_TIMEOUT:-3000}" -- \
  bash "$HERE/bench-rc-pingpong.sh" --guest "$ours" "$reps" "$iters" "$sizes" "$modes" ${baseline:+"$baseline"}
