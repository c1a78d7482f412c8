#!/bin/bash
# uiwarp_siw.sh - interop of the userspace iWARP provider (uiwarp) with the kernel's siw, both
# directions, in one VM boot; the uiwarp side writes a pcap that tshark must decode with good
# CRCs and no malformed frames, and the RdmaSocket captures must hold placement fences (RDMA
# READs) answered across the two providers.
#
#   cargo build --release --example socket_echo --example rdma_server --example rdma_client
#   tests/vm/run.sh --both -- bash tests/vm/interop/uiwarp_siw.sh
#
# UIWARP_EXAMPLES names the directory of those binaries (default: the suite's RDMASOCK_EXAMPLES_DIR, else $CARGO_TARGET_DIR or
# target, /release/examples). Prints PASS/FAIL per case and exits 1 if any failed.
set -u
E=${UIWARP_EXAMPLES:-${RDMASOCK_EXAMPLES_DIR:-${CARGO_TARGET_DIR:-$(pwd)/target}/release/examples}}
IP=${RDMA_VM_SIW_IP:?run in the VM with --both (siw0 on eth1)}
[ -e /sys/class/infiniband/siw0 ] || { echo "FAIL siw0 is missing"; exit 1; }
for b in rdma_server rdma_client socket_echo; do
  [ -x "$E/$b" ] || { echo "FAIL $E/$b is not built (see the header)"; exit 1; }
done
PCAP=/tmp/uiwarp-siw
mkdir -p $PCAP
failed=0
check() { if [ "$1" = 0 ]; then echo "PASS $2"; else echo "FAIL $2 (status $1)"; failed=1; fi; }
wait_cm_listen() { for _ in $(seq 100); do rdma res show cm_id 2>/dev/null | grep -q LISTEN && return; sleep 0.1; done; }
wait_tcp_listen() { for _ in $(seq 100); do ss -ltn | grep -q ":$1 " && return; sleep 0.1; done; }

echo "=== rdma-core rdma_server on siw0 <- our rdma_client on uiwarp"
timeout 60 rdma_server -p 7481 & S=$!
wait_cm_listen
RDMASOCK_PROVIDER=uiwarp RDMASOCK_PCAP=$PCAP/1.pcap timeout 30 "$E/rdma_client" -s "$IP" -p 7481; c=$?
wait $S; s=$?
check $((c | s)) "rdma-core server (siw) <- uiwarp client (client $c, server $s)"

echo "=== our rdma_server on uiwarp <- rdma-core rdma_client on siw0"
RDMASOCK_PROVIDER=uiwarp RDMASOCK_PCAP=$PCAP/2.pcap timeout 60 "$E/rdma_server" -p 7482 & S=$!
wait_tcp_listen 7482
timeout 30 rdma_client -s "$IP" -p 7482; c=$?
wait $S; s=$?
check $((c | s)) "uiwarp server <- rdma-core client (siw) (client $c, server $s)"

# echo_case SERVER CLIENT HOST PORT BYTES PCAP LABEL: RdmaSocket's socket_echo, the server
# on provider SERVER and the client on CLIENT (siw or uiwarp), HOST:PORT; the uiwarp end
# writes PCAP. The siw server is up once rdma_cm lists a listener, uiwarp's once TCP does.
echo_case() {
  local server=$1 client=$2 host=$3 port=$4 bytes=$5 pcap=$6 label=$7 c
  echo "=== RdmaSocket$label: $server (server) <- $client (client)"
  local spcap=() cpcap=()
  [ "$server" = uiwarp ] && spcap=("RDMASOCK_PCAP=$pcap")
  [ "$client" = uiwarp ] && cpcap=("RDMASOCK_PCAP=$pcap")
  env RDMASOCK_PROVIDER="$server" "${spcap[@]}" timeout 120 "$E/socket_echo" server "$host:$port" & S=$!
  if [ "$server" = siw ]; then wait_cm_listen; else wait_tcp_listen "$port"; fi
  env RDMASOCK_PROVIDER="$client" "${cpcap[@]}" timeout 90 "$E/socket_echo" client "$host:$port" "$bytes"; c=$?
  kill $S 2>/dev/null; wait $S 2>/dev/null
  check $c "RdmaSocket $server server <- $client client$label, $bytes bytes echoed"
}
echo_case siw uiwarp "$IP" 7483 4000000 "$PCAP/3.pcap" ""
echo_case uiwarp siw "$IP" 7484 4000000 "$PCAP/4.pcap" ""
# The same two directions over IPv6 (the VM gives eth1 RDMA_VM_SIW_IP6).
IP6=${RDMA_VM_SIW_IP6:?run in the VM (tests/vm/run.sh sets RDMA_VM_SIW_IP6)}
echo_case siw uiwarp "[$IP6]" 7487 1000000 "$PCAP/5.pcap" " over IPv6"
echo_case uiwarp siw "[$IP6]" 7488 1000000 "$PCAP/6.pcap" " over IPv6"

echo "=== same workload, same VM: RdmaSocket siw<->siw against uiwarp<->uiwarp (16 MB echo)"
RDMASOCK_PROVIDER=siw timeout 120 "$E/socket_echo" server "$IP:7485" & S=$!
wait_cm_listen
RDMASOCK_PROVIDER=siw timeout 100 "$E/socket_echo" client "$IP:7485" 16000000 | tee /tmp/siw.txt; c=${PIPESTATUS[0]}
kill $S 2>/dev/null; wait $S 2>/dev/null
check $c "RdmaSocket siw <-> siw, 16 MB echoed"
RDMASOCK_PROVIDER=uiwarp timeout 120 "$E/socket_echo" server "$IP:7486" & S=$!
wait_tcp_listen 7486
RDMASOCK_PROVIDER=uiwarp timeout 100 "$E/socket_echo" client "$IP:7486" 16000000 | tee /tmp/uiwarp.txt; c=${PIPESTATUS[0]}
kill $S 2>/dev/null; wait $S 2>/dev/null
check $c "RdmaSocket uiwarp <-> uiwarp, 16 MB echoed"
echo "siw: $(cat /tmp/siw.txt)"
echo "uiwarp: $(cat /tmp/uiwarp.txt)"

echo "=== tshark on the captures"
# The rsocket payload is not RPC-over-RDMA: tshark's heuristic for it would misreport
# the 4-byte rsocket messages as malformed RPCoRDMA.
T="tshark --disable-protocol rpcordma"
for f in "$PCAP"/*.pcap; do
  [ -s "$f" ] || { check 1 "capture $f is empty"; continue; }
  frames=$($T -r "$f" 2>/dev/null | wc -l)
  mpa=$($T -r "$f" -Y iwarp_mpa 2>/dev/null | wc -l)
  bad=$($T -r "$f" -V 2>/dev/null | grep -ciE "malformed|CRC check: .*\(Bad")
  good=$($T -r "$f" -V 2>/dev/null | grep -c "Good CRC32")
  echo "$f: $frames frames, $mpa MPA, $good good CRCs, $bad bad/malformed"
  # CRCs are in use (uiwarp asks for them and siw accepts): a capture with none checked
  # would prove nothing about them.
  if ! [ "$frames" -gt 0 ] || ! [ "$mpa" -gt 0 ] || ! [ "$good" -gt 0 ] || ! [ "$bad" = 0 ]; then
    # Evidence for a rare failure (once in 32 CI runs, 1.pcap's 5 frames decoded as no MPA):
    # the frames as tshark sees them, and their TCP analysis.
    echo "--- $f, as tshark reads it:"
    $T -r "$f" -o tcp.analyze_sequence_numbers:TRUE 2>&1 | head -20
    $T -r "$f" -V 2>&1 | grep -E "^Frame|Transmission Control|Sequence Number|\[TCP|MPA|Expert" | head -60
    false
  fi
  check $? "tshark decodes $(basename "$f") cleanly"
done

echo "=== placement fences between RdmaSocket ends on uiwarp and siw"
# A flush or close after written bytes proves placement with a one-byte RDMA READ of the
# peer's target list: the socket captures hold READ requests (RDMAP opcode 1) and the
# responses (2) of the other provider.
for n in 3 4 5 6; do
  f=$PCAP/$n.pcap
  requests=$($T -r "$f" -Y "iwarp_rdma.opcode == 1" 2>/dev/null | wc -l)
  responses=$($T -r "$f" -Y "iwarp_rdma.opcode == 2" 2>/dev/null | wc -l)
  [ "$requests" -gt 0 ] && [ "$responses" -gt 0 ]
  check $? "$n.pcap holds placement fences ($requests READ requests, $responses responses)"
done
exit $failed
