#!/bin/bash
# two-vm.sh - across hosts: examples/rdma_server in one VM (host 2), examples/rdma_client in
# another (host 3), their NICs wired together by tests/vm/run.sh --wire (qemu socket netdevs
# on the host's 127.0.0.1).
#
#   cm/scripts/two-vm.sh [rxe|siw]     (build the examples first: cargo build --examples)
#
# rxe talks over eth0 (10.99.0.N), siw over eth1 (10.99.1.N). Exits 0 when both print
# "end 0". The wire uses ports PORT and PORT+1 (PORT, default 15893, so that it does not
# meet tests/vm/two-hosts.sh's). Takes about a minute (TCG).
set -uo pipefail
kind=${1:-rxe}
case $kind in
  rxe) peer_ip_var=RDMA_VM_PEER_RXE_IP ;;
  siw) peer_ip_var=RDMA_VM_PEER_SIW_IP ;;
  *) echo "two-vm: unknown device kind $kind (rxe or siw)" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/../.." && pwd)
runner=$root/tests/vm/run.sh
target=$(cd "$root" && cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
examples=${RDMASOCK_EXAMPLES_DIR:-$target/debug/examples}
logs=$(mktemp -d)
for e in rdma_server rdma_client; do
  [ -x "$examples/$e" ] || { echo "two-vm: $examples/$e missing: cargo build --examples" >&2; exit 125; }
done
export RDMASOCK_VM_WIRE_PORT=${PORT:-15893}
"$runner" --both --cpus 1 --mem 1G --host 2 --peer 3 --wire listen --timeout 300 -- \
  "timeout 200 $examples/rdma_server" > "$logs/server" 2>&1 &
server=$!
sleep 2
# The client retries while the server VM is still booting (REJECTED / unreachable).
"$runner" --both --cpus 1 --mem 1G --host 3 --peer 2 --wire connect --timeout 300 -- \
  "for i in \$(seq 40); do timeout 30 $examples/rdma_client -s \$$peer_ip_var > /tmp/c.log 2>&1 && break; sleep 2; done; cat /tmp/c.log" \
  > "$logs/client" 2>&1
wait "$server"
echo "--- server VM"; cat "$logs/server"
echo "--- client VM"; cat "$logs/client"
grep -q '^rdma_server: end 0' "$logs/server" && grep -q '^rdma_client: end 0' "$logs/client"
status=$?
rm -rf "$logs"
[ $status -eq 0 ] && echo "two-vm ($kind): ok" || echo "two-vm ($kind): FAILED"
exit $status
