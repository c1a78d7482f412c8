#!/bin/bash
# bench-connections.sh - a benchmark, not a test: what each connection costs on the kernel
# devices in the VM (tests/vm/run.sh --both), with examples/connections on rxe0 and then on
# siw0, rsocket side by side:
#
#   tests/vm/bench-connections.sh [--counts "1 100 1000"] [--messages M] [--busy BYTES]
#                                 [--markdown FILE] [--debug]
#
# Builds the release connections example, boots the VM and runs it once per device, bound
# to that device's address, with --rsocket rdma-core's librspreload.so (the TcpStream run
# again under LD_PRELOAD, so that both processes make rsocket connections on the same
# device). For each count N it prints RdmaSocket's, TcpStream's and rsocket's cost per
# connection (pinned and registered bytes, regions, fds, threads, RSS idle and busy) with
# the ratios; see examples/connections/main.rs.
#
# With --markdown FILE each device's table also replaces its section of FILE (normally
# docs/BENCHMARKS.md, between <!-- bench-connections-vm-rxe0:begin --> and
# <!-- bench-connections-vm-rxe0:end -->, and the same for siw0); FILE must lie under the
# project directory (the VM writes it).
#
# --debug uses the dev profile's build (to check the script quickly; its numbers are not the
# benchmark's).
#
# The VM runs under TCG with 2 GiB of memory: keep N within what both processes' pinned
# rings fit (RdmaSocket pins 256 KiB a connection on each side by default). Exit status:
# non-zero when a device's run failed, 125 on VM setup failure.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

counts="1 100 1000" messages=4 busy=262144 markdown= profile=release
while [ $# -gt 0 ]; do
  case $1 in
    --counts) counts=$2; shift 2 ;;
    --messages) messages=$2; shift 2 ;;
    --busy) busy=$2; shift 2 ;;
    --debug) profile=debug; shift ;;
    --markdown) markdown=$(realpath -m "${2:?--markdown needs a file}"); shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
    *) echo "bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -n "$markdown" ] && [[ $markdown != "$ROOT"/* ]]; then
  echo "bench: --markdown $markdown is outside $ROOT, which the VM cannot write" >&2
  exit 2
fi
preload=$(ls /usr/lib/*/rsocket/librspreload.so 2>/dev/null | head -n 1)
[ -n "$preload" ] || { echo "bench: no librspreload.so (rdma-core's rsocket): run tests/setup.sh" >&2; exit 1; }
cd "$ROOT"
echo "bench: building the $profile connections example" >&2
if [ "$profile" = release ]; then
  cargo build --release --example connections >&2
else
  cargo build --example connections >&2
fi
target_dir=$(cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bench=$target_dir/$profile/examples/connections
[ -x "$bench" ] || { echo "bench: $bench was not built" >&2; exit 1; }
# One run per device, in the VM (which sees the target directory at the same path); each
# device's address comes from the VM's environment.
inner=$target_dir/bench-connections-vm.sh
{
  printf 'bench=%q counts=%q messages=%q busy=%q markdown=%q preload=%q\n' \
    "$bench" "$counts" "$messages" "$busy" "$markdown" "$preload"
  cat <<'INNER'
status=0
for dev in rxe0 siw0; do
  case $dev in rxe0) ip=$RDMA_VM_RXE_IP ;; siw0) ip=$RDMA_VM_SIW_IP ;; esac
  echo "===== connections on $dev ($ip) ====="
  md=()
  [ -n "$markdown" ] && md=(--markdown "$markdown" --section "bench-connections-vm-$dev")
  "$bench" --counts "$counts" --bind "$ip:0" --messages "$messages" --busy "$busy" \
    --rsocket "$preload" "${md[@]}" || status=1
done
exit $status
INNER
} >"$inner"
exec "$HERE/run.sh" --both --timeout "${RDMASOCK_VM_TIMEOUT:-3000}" -- bash "$inner"
