#!/bin/bash
# two-hosts.sh - RdmaSocket across two hosts: two VMs (tests/vm/run.sh --both, one vCPU
# each) wired NIC to NIC through qemu socket netdevs on the host's loopback, so that the
# bytes leave one guest's rxe0/siw0 on its wire and enter the other's.
#
#   tests/vm/two-hosts.sh [--timeout S] [--test NAME] [FILTER...]
#     FILTER: test names to run, and other arguments, as libtest takes them
#     --test NAME: the test binary tests/NAME.rs (default two_hosts; tests/vm/soak.sh runs
#     two_hosts_soak, which a plain run leaves out)
#
# Builds tests/two_hosts.rs and the rc_pingpong example (dev profile), starts VM A (host 2, the server role, listening
# wire), then VM B (host 3, the client role, connecting wire); each runs that binary with
# --ignored --test-threads=1, in the same order, and each test pairs with the same test on
# the other VM. The client's tests check that the NIC carried the stream (its counters).
# Prints both VMs' output and "two-hosts: N passed, N failed"; exits 0 when both sides
# passed every test, 1 when a test failed, 125 when a VM could not be set up. When the wire
# between the VMs stalls, which no test can cause or cure, both VMs are stopped and the
# whole run is made once more, saying so; a second stall is a failure (125). A stall is
# either a VM's NIC whose transmit queue timed out (tests/vm/run.sh exit 126) or, seen
# from this host, a qemu that has left frames unread on its wire socket for $STUCK_S s
# (no guest here ever stops taking frames: the tests cut the wire inside the guest with
# tc, its NIC keeps receiving).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
timeout_s=900
test_name=two_hosts
while [ $# -gt 0 ]; do
  case $1 in
    --timeout) timeout_s=$2; shift 2 ;;
    --test) test_name=$2; shift 2 ;;
    -*) echo "usage: $0 [--timeout S] [--test NAME] [FILTER...]" >&2; exit 2 ;;
    *) break ;;
  esac
done
filters=""; [ $# -gt 0 ] && filters=$(printf ' %q' "$@")
cd "$ROOT"

echo "two-hosts: building tests/$test_name.rs and the rc_pingpong example" >&2
# the VM suite's build (tests/vm/run.sh): the same packages and features, so nothing is rebuilt
build=(--workspace --features rdmasock/tokio)
cargo build "${build[@]}" --example rc_pingpong || { echo "two-hosts: cargo build --example rc_pingpong failed" >&2; exit 125; }
bin=$(cargo test "${build[@]}" --no-run --test "$test_name" --message-format=json-render-diagnostics \
  | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[ -n "$bin" ] && [ -x "$bin" ] || { echo "two-hosts: the test binary was not built" >&2; exit 125; }

# A free pair of host ports for the two wires (eth0, eth1).
port=${RDMASOCK_VM_WIRE_PORT:-15790}
while ss -ltn | awk '{ print $4 }' | grep -qE ":($port|$((port + 1)))\$"; do port=$((port + 2)); done
export RDMASOCK_VM_WIRE_PORT=$port

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
start_side() {   # start_side ROLE HOST PEER WIRE: runs in the background, pid in $logs/ROLE.pid
  rm -f "$logs/$1.rc"
  (
    "$HERE/run.sh" --both --cpus 1 --mem 1G --host "$2" --peer "$3" --wire "$4" --timeout "$timeout_s" \
      -- "RDMA_VM_ROLE=$1 $bin --ignored --test-threads=1$filters" > "$logs/$1.log" 2>&1 &
    echo $! > "$logs/$1.pid"
    wait $!
    echo $? > "$logs/$1.rc"
  ) &
}
# The wire sockets' unread bytes (Recv-Q) on this host, a line "LOCAL>PEER RECVQ" each.
wire_queues() {
  ss -tnH state established "( sport = :$port or sport = :$((port + 1)) or dport = :$port or dport = :$((port + 1)) )" \
    | awk '{ print $3 ">" $4, $1 }'
}
STUCK_S=${RDMASOCK_WIRE_STUCK_S:-60}
# One run of both VMs; returns 126 when the wire stalled (both VMs are stopped then).
run_pair() {
  start_side server 2 3 listen
  # qemu's connecting side needs the listening socket up at its start.
  for _ in $(seq 600); do
    ss -ltn | awk '{ print $4 }' | grep -qE ":$((port + 1))\$" && break
    [ -e "$logs/server.rc" ] && break
    sleep 0.1
  done
  start_side client 3 2 connect
  local -A last=() same=()
  local stalled=
  while [ ! -e "$logs/server.rc" ] || [ ! -e "$logs/client.rc" ]; do
    for side in server client; do
      [ "$(cat "$logs/$side.rc" 2>/dev/null)" = 126 ] && stalled="$side's NIC timed out"
    done
    # A socket whose unread bytes stay the same, and above 0, for STUCK_S samples: its
    # qemu has stopped reading the wire.
    while read -r sock queued; do
      if [ "$queued" != 0 ] && [ "${last[$sock]:-}" = "$queued" ]; then
        same[$sock]=$((${same[$sock]:-0} + 1))
      else
        same[$sock]=0
      fi
      last[$sock]=$queued
      if [ "${same[$sock]}" -ge "$STUCK_S" ]; then
        stalled="the qemu at $sock left $queued bytes unread for ${STUCK_S} s"
        echo "two-hosts: wire sockets now: $(wire_queues | tr '\n' ' ')" >> "$logs/stall"
      fi
    done < <(wire_queues)
    if [ -n "$stalled" ]; then
      echo "two-hosts: the wire between the VMs stalled: $stalled" >> "$logs/stall"
      for side in server client; do
        [ -e "$logs/$side.rc" ] || kill "$(cat "$logs/$side.pid" 2>/dev/null)" 2>/dev/null
      done
      wait
      return 126
    fi
    sleep 1
  done
  wait
  return 0
}
if ! run_pair; then
  for side in server client; do
    echo "===== VM ${side} (first run, stopped) ====="
    cat "$logs/$side.log"
  done
  cat "$logs/stall"
  echo "two-hosts: the wire stalled below the tests (see above): running both VMs once more"
  rm -f "$logs/stall"
  if ! run_pair; then
    cat "$logs/stall"
    echo "two-hosts: the wire stalled again"
    for side in server client; do echo 125 > "$logs/$side.rc"; done
  fi
fi

status=0
passed=0 failed=0
for side in server client; do
  echo "===== VM ${side} ====="
  cat "$logs/$side.log"
  rc=$(cat "$logs/$side.rc" 2>/dev/null || echo 125)
  p=$(grep -c '^test .* \.\.\. ok$' "$logs/$side.log")
  f=$(grep -c '^test .* \.\.\. FAILED$' "$logs/$side.log")
  passed=$((passed + p)) failed=$((failed + f))
  if [ "$rc" = 125 ] || [ "$rc" = 124 ]; then
    status=125
  elif [ "$rc" != 0 ] || [ "$p" = 0 ]; then
    [ $status = 0 ] && status=1
  fi
done
[ $status = 125 ] && echo "two-hosts: a VM failed to start or timed out (see its log above)"
echo "two-hosts: $passed passed, $failed failed"
exit $status
