#!/bin/bash
# two-vm.sh - across hosts: examples/rdma_server in one VM (10.99.0.10), examples/rdma_client
# in another (10.99.0.11), wired by a qemu socket netdev on the host's 127.0.0.1.
#
#   cm/scripts/two-vm.sh [rxe|siw]     (build the examples first: cargo build --examples)
#
# Exits 0 when both print "end 0". Uses /work/shared/vm/run-in-vm.sh (VM_RUNNER overrides);
# for siw set VM_EXTRA_MODULES to the directory holding siw.ko. Takes about a minute (TCG).
set -uo pipefail
kind=${1:-rxe}
root=$(cd "$(dirname "$0")/../.." && pwd)
runner=${VM_RUNNER:-/work/shared/vm/run-in-vm.sh}
target=$(cd "$root" && cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
examples=${RDMASOCK_EXAMPLES_DIR:-$target/debug/examples}
port=${PORT:-15893}
logs=$(mktemp -d)
for e in rdma_server rdma_client; do
  [ -x "$examples/$e" ] || { echo "two-vm: $examples/$e missing: cargo build --examples" >&2; exit 125; }
done
VM_CPUS=1 VM_NETDEV="socket,listen=127.0.0.1:$port" VM_MAC=52:54:00:00:00:1a \
  "$runner" --rdma "$kind" --ip 10.99.0.10/24 --timeout 300 \
  "timeout 200 $examples/rdma_server" > "$logs/server" 2>&1 &
server=$!
sleep 2
# The client retries while the server VM is still booting (REJECTED / unreachable).
VM_CPUS=1 VM_NETDEV="socket,connect=127.0.0.1:$port" VM_MAC=52:54:00:00:00:1b \
  "$runner" --rdma "$kind" --ip 10.99.0.11/24 --timeout 300 \
  "for i in \$(seq 40); do timeout 30 $examples/rdma_client -s 10.99.0.10 > /tmp/c.log 2>&1 && break; sleep 2; done; cat /tmp/c.log" \
  > "$logs/client" 2>&1
wait "$server"
echo "--- server VM"; cat "$logs/server"
echo "--- client VM"; cat "$logs/client"
grep -q '^rdma_server: end 0' "$logs/server" && grep -q '^rdma_client: end 0' "$logs/client"
status=$?
rm -rf "$logs"
[ $status -eq 0 ] && echo "two-vm ($kind): ok" || echo "two-vm ($kind): FAILED"
exit $status
