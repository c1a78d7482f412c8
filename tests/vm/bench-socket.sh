#!/bin/bash
# bench-socket.sh - a benchmark, not a test: RdmaSocket's ping-pong
# latency and streaming bandwidth against perftest, rdma-core's rstream and TcpStream, on
# rxe0 and on siw0, in one VM boot (tests/vm/run.sh --both).
#
#   tests/vm/bench-socket.sh [--iters N] [--megabytes M] [--sizes "64 4096 65536"] [--reps R]
#                            [--spin MICROSECONDS] [--ring BYTES] [--markdown FILE]
#
# Builds the release bench_socket and bench_floor examples, boots the VM once, and in it runs, each on the
# device's own address (rxe0: 10.99.0.2 on eth0, siw0: 10.99.1.2 on eth1):
#   rxe0: bench_socket rdma (RdmaSocket) and tcp (TcpStream), ib_send_lat -R, ib_write_lat -R,
#         rstream (latency: -C 1 -I N; bandwidth: -S 65536 -C M*16 -I 1), ib_write_bw -R,
#         and bench_floor: a raw verbs ping-pong with RdmaSocket's wire operations, alone
#         ("floor-raw") and with the least a socket stream must do ("floor-socket": a lock a
#         call, the copy out of the receive ring, the copy into the send ring above 64 B),
#         the latency no socket can beat on this transport
#   siw0: bench_socket rdma and tcp, ib_send_lat -R, ib_write_bw -R, and bench_socket rdma
#         over the userspace provider (RDMASOCK_PROVIDER=uiwarp) on eth1's address (uiwarp
#         against the kernel's siw, same workload), with MPA CRC (uiwarp's default)
#         and without (RDMASOCK_UIWARP_CRC=0: how siw0 talks to siw0), and with siw0's ring
#         size (128 KiB; uiwarp's default is 1 MiB)
#   siw0-crc: bench_socket rdma on siw0 with siw reloaded as siw-crc.ko (built here by
#         build-siw.sh --crc-required: siw asking for MPA CRC, which 6.1's siw never does),
#         so that uiwarp's default wire (CRC on) meets siw on the same wire; a capture of
#         its first connection must show the CRC flag in the MPA request and reply
# Latency is one-way (half a round trip, perftest's convention; rstream's usec/xfer is the
# same), the median of N round trips (default 200) after warm-up: perftest's t_typical and
# bench_socket's median (TCG's scheduling makes averages swing with a few slow round trips);
# rstream reports only the average, so its column is that.
# Bandwidth is MiB/s of M MiB (default 16) in 64 KiB messages: one way for RdmaSocket, TCP
# and ib_write_bw (its "BW average[MB/sec]", MB = 2^20); rstream sends the block and gets it
# back, and its Gb/sec counts both directions, converted to MiB/s the same way. On siw0
# RdmaSocket (siw0, siw0-crc, uiwarp) also streams in 4 KiB and in 1 MiB writes: the
# userspace provider's workload against siw (the sizes bench_uiwarp uses on the host).
# --spin sets RdmaSocket's busy-poll budget per wait (0: event mode; default: the library's
# default, the adaptive wait; perftest polls without end); --ring its send and receive ring
# sizes (default: the library's).
# With --reps R (default 1) the whole sequence runs R times and each cell is the best
# round's (the lowest latency, the highest bandwidth): TCG's noise only ever slows a run.
# Then it prints one table per device with the ratios RdmaSocket / other: for latency
# <= 1.00 means RdmaSocket is no slower; for bandwidth >= 1.00 means no slower. With R > 1
# each table is followed by the same ratios taken within each round (every round runs all
# tools back to back, so a slow spell of the VM slows both sides of a ratio) and reduced to
# their median over the rounds: one lucky round of a peer cannot decide it.
#
# With --markdown FILE the tables also replace this script's section of FILE (normally
# docs/BENCHMARKS.md, between <!-- bench-socket:begin --> and <!-- bench-socket:end -->), with the date and
# the machine; see tests/vm/bench-markdown.sh.
#
# The VM runs under TCG: absolute numbers are far from hardware and noisy when the host is
# loaded; read the ratios. Exit status: 0 when every run finished, 1 when one failed, 125
# on VM setup failure.
#
# Inside the VM the script is re-run as:
#   bench-socket.sh --guest BENCH_SOCKET ITERS MEGABYTES SIZES REPS [SPIN [RING]]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# ------------------------------------------------------------------ in the VM ----
if [ "${1:-}" = --guest ]; then
  ours=$2 iters=$3 megabytes=$4 sizes=$5 reps=$6 spin=${7:-} ring=${8:-}
  for tool in ib_send_lat ib_write_lat ib_write_bw rstream; do
    command -v $tool > /dev/null || { echo "bench: $tool missing (apt-get install perftest rdmacm-utils)"; exit 1; }
  done
  for tool in dumpcap tshark; do   # the siw-crc.ko check
    command -v $tool > /dev/null || { echo "bench: $tool missing (apt-get install tshark)"; exit 1; }
  done
  [ -x "$ours" ] || { echo "bench: $ours missing"; exit 1; }
  floor=$(dirname "$ours")/bench_floor
  [ -x "$floor" ] || { echo "bench: $floor missing"; exit 1; }
  for d in rxe0 siw0; do
    [ -e /sys/class/infiniband/$d ] || { echo "bench: no $d in the VM (run with --both)"; exit 1; }
  done
  rxe_ip=${RDMA_VM_RXE_IP:?RDMA_VM_RXE_IP unset: run this through tests/vm/run.sh}
  siw_ip=${RDMA_VM_SIW_IP:?RDMA_VM_SIW_IP unset: run this through tests/vm/run.sh}
  bw_iters=$((megabytes * 16))   # 64 KiB messages
  siw_chunks=4096,65536,1048576   # the write sizes of siw0's streams (bench_socket --chunks)
  results=$(mktemp)
  port=19100
  log() { echo "  $*" >&2; }
  # record DEVICE KIND TOOL SIZE VALUE
  record() { echo "$* ${rep:-1}" >> "$results"; log "$*"; }

  # server_client NAME SERVER_CMD... -- CLIENT_CMD... : starts the server, runs the client
  # (retried while the server is still coming up), prints the client's output.
  server_client() {
    local name=$1
    shift
    local server=() client=()
    while [ "$1" != -- ]; do server+=("$1"); shift; done
    shift
    client=("$@")
    local sout cout
    sout=$(mktemp) cout=$(mktemp)
    "${server[@]}" > "$sout" 2>&1 &
    local spid=$! tries=0
    sleep 1
    until timeout 300 "${client[@]}" > "$cout" 2>&1; do
      tries=$((tries + 1))
      if ! kill -0 $spid 2>/dev/null || [ $tries -ge 20 ]; then
        kill $spid 2>/dev/null || true
        echo "bench: $name failed: ${client[*]}" >&2; cat "$cout" >&2
        echo "bench: its server: ${server[*]}" >&2; cat "$sout" >&2
        rm -f "$sout" "$cout"
        return 1
      fi
      sleep 1
    done
    local waited=0
    while kill -0 $spid 2>/dev/null && [ $waited -lt 100 ]; do sleep 0.1; waited=$((waited + 1)); done
    kill $spid 2>/dev/null || true
    wait $spid 2>/dev/null || true
    cat "$cout"
    rm -f "$sout" "$cout"
  }

  # perftest DEVICE KIND TOOL SIZE ITERS COLUMN IP [FLAG...]: COLUMN of the result line
  perftest() {
    local dev=$1 kind=$2 tool=$3 size=$4 n=$5 col=$6 ip=$7
    shift 7
    local flags out value try
    # perftest's own pair now and then fails to connect ("Unexpected CM event bl blka 8",
    # REJECTED, about once in a few hundred runs): one more try, on a new port.
    for try in 1 2; do
      port=$((port + 1))
      flags=(-R -F -s "$size" -n "$n" -p "$port" "$@")
      out=$(server_client "$tool" "$tool" "${flags[@]}" -- "$tool" "${flags[@]}" "$ip") && break
      [ $try = 2 ] && return 1
      echo "bench: running $tool $size once more, on port $((port + 1))" >&2
    done
    value=$(echo "$out" | awk -v s="$size" -v n="$n" -v c="$col" '$1 == s && $2 == n { print $c; exit }')
    [ -n "$value" ] || { echo "bench: no result line from $tool:" >&2; echo "$out" >&2; return 1; }
    record "$dev" "$kind" "$tool" "$size" "$value"
  }

  # ours DEVICE IP [uiwarp|uiwarp-nocrc|uiwarp-ring128k]: RdmaSocket and TcpStream; with "uiwarp", only
  # RdmaSocket over the userspace provider on the device's netdev (recorded as tool
  # "uiwarp"); "uiwarp-nocrc" the same without MPA CRC (RDMASOCK_UIWARP_CRC=0), the wire
  # mode siw uses between two siw peers (its 6.1 build never asks for CRC); "uiwarp-ring128k"
  # with CRC and 128 KiB rings, the size siw0's RdmaSocket gets (uiwarp's default is 1 MiB,
  # whose pages come in as data first flows, a window ahead; siw0's pinned rings were all
  # faulted in at registration): it tells ring effects from the wire engine's
  ours() {
    local dev=$1 ip=$2 kind out kinds="rdma tcp" provider= crc=1 tool rings=$ring chunks=65536
    # on siw0, the userspace provider's streaming workload too: 4 KiB and 1 MiB writes
    [ "$dev" = siw0 ] && chunks=$siw_chunks
    case ${3:-} in
      siw-crc) kinds=rdma ;;
      uiwarp) kinds=rdma provider=uiwarp ;;
      uiwarp-nocrc) kinds=rdma provider=uiwarp crc=0 ;;
      uiwarp-ring128k) kinds=rdma provider=uiwarp rings=131072 ;;
    esac
    for kind in $kinds; do
      out=$(RDMASOCK_PROVIDER=$provider RDMASOCK_UIWARP_CRC=$crc timeout 600 "$ours" "$kind" "$ip" --sizes "${sizes// /,}" --iters "$iters" \
        --megabytes "$megabytes" --chunks "$chunks" ${spin:+--spin "$spin"} ${rings:+--ring "$rings"} 2>&1) || { echo "bench: bench_socket $kind $ip ${3:-} failed:" >&2; echo "$out" >&2; return 1; }
      tool=RdmaSocket
      [ $kind = tcp ] && tool=TcpStream
      [ -n "$provider" ] && tool=${3}
      [ "${3:-}" = siw-crc ] && tool=siw0-crc
      echo "$out" | awk -v d="$dev" -v t="$tool" '$1 == "RESULT" && $2 == "lat" { print d, "lat", t, $4, $6 }
                                                 $1 == "RESULT" && $2 == "bw" { print d, "bw", t, $4, $5 }' \
        | while read -r line; do record $line; done
    done
  }

  # floor_run: bench_floor on rxe0, both ways (recorded as tools floor-raw, floor-socket)
  floor_run() {
    local out
    out=$(timeout 600 "$floor" --device rxe0 --sizes "${sizes// /,}" --iters "$iters" 2>&1) || { echo "bench: bench_floor failed:" >&2; echo "$out" >&2; return 1; }
    echo "$out" | awk '$1 == "RESULT" && $2 == "floor" { print "rxe0 lat floor-" $3, $4, $6 }' \
      | while read -r line; do record $line; done
  }

  # rstream DEVICE KIND SIZE COUNT ITERS IP
  rstream_run() {
    local dev=$1 kind=$2 size=$3 count=$4 n=$5 ip=$6 out line
    port=$((port + 1))
    local flags=(-S "$size" -C "$count" -I "$n" -p "$port")
    out=$(server_client rstream rstream -b "$ip" "${flags[@]}" -- rstream -s "$ip" "${flags[@]}") || return 1
    # name size transfers iterations bytes seconds Gb/sec usec/xfer
    line=$(echo "$out" | awk 'NF >= 8 && $(NF) ~ /^[0-9.]+$/ && $(NF-1) ~ /^[0-9.]+$/ { l = $0 } END { print l }')
    [ -n "$line" ] || { echo "bench: no result line from rstream:" >&2; echo "$out" >&2; return 1; }
    if [ "$kind" = lat ]; then
      record "$dev" lat rstream "$size" "$(echo "$line" | awk '{ print $NF }')"
    else
      record "$dev" bw rstream "$size" "$(echo "$line" | awk '{ printf "%.2f", $(NF-1) * 1e9 / 8 / 1048576 }')"
    fi
  }

  # siw_load MODULE: siw0 again, on eth1, from MODULE (siw.ko or siw-crc.ko)
  siw_load() {
    rdma link delete siw0 || { echo "bench: rdma link delete siw0 failed" >&2; return 1; }
    local i
    for i in $(seq 40); do rmmod siw 2> /dev/null && break; sleep 0.25; done
    if lsmod | grep -q '^siw '; then echo "bench: rmmod siw failed (still in use)" >&2; return 1; fi
    insmod "$1" || { echo "bench: insmod $1 failed" >&2; return 1; }
    rdma link add siw0 type siw netdev eth1 || { echo "bench: rdma link add siw0 failed" >&2; return 1; }
    for i in $(seq 100); do
      grep -q ACTIVE /sys/class/infiniband/siw0/ports/1/state 2> /dev/null && return 0
      sleep 0.1
    done
    echo "bench: siw0 from $1 did not come up" >&2
    return 1
  }
  # crc_on_the_wire: one short RdmaSocket connection on siw0, captured on lo (the VM's
  # own address): its MPA request and reply must both carry the CRC flag.
  crc_on_the_wire() {
    local pcap flags good i T="tshark --disable-protocol rpcordma"
    pcap=$(mktemp --suffix .pcap)
    dumpcap -q -i lo -f "tcp" -w "$pcap" > /dev/null 2>&1 &
    local dpid=$!
    # dumpcap writes the file's header once it captures
    for i in $(seq 100); do [ -s "$pcap" ] && break; sleep 0.1; done
    timeout 60 "$ours" rdma "$siw_ip" --sizes 64 --iters 10 --megabytes 1 > /dev/null 2>&1
    sleep 0.5
    kill -INT $dpid 2> /dev/null
    wait $dpid 2> /dev/null || true
    flags=$($T -r "$pcap" -Y "iwarp_mpa.req || iwarp_mpa.rep" -T fields -e iwarp_mpa.crc_flag 2> /dev/null | tr '\n' ' ')
    good=$($T -r "$pcap" -V 2> /dev/null | grep -c "Good CRC32")
    rm -f "$pcap"
    log "siw-crc.ko: the CRC flag of each MPA request and reply captured: $flags; FPDUs with a good CRC: $good"
    # every request and reply (at least one of each) has it set, and the FPDUs carry CRCs
    echo "$flags" | awk '{ for (i = 1; i <= NF; i++) if ($i != "1" && $i != "True") bad = 1 }
                         END { exit (NF >= 2 && !bad) ? 0 : 1 }' && [ "$good" -gt 0 ] && return 0
    echo "bench: siw-crc.ko's connection did not use MPA CRC: flags $flags, $good good CRCs" >&2
    return 1
  }
  siw_crc_ko=$VM_SIW_DIR/siw-crc.ko
  [ -f "$siw_crc_ko" ] || { echo "bench: $siw_crc_ko missing (tests/vm/build-siw.sh --crc-required)"; exit 1; }

  status=0
  for rep in $(seq "$reps"); do
  echo "bench: rxe0 ($rxe_ip), round $rep of $reps" >&2
  ours rxe0 "$rxe_ip" || status=1
  floor_run || status=1
  for size in $sizes; do
    perftest rxe0 lat ib_send_lat "$size" "$iters" 5 "$rxe_ip" || status=1
    perftest rxe0 lat ib_write_lat "$size" "$iters" 5 "$rxe_ip" || status=1
    rstream_run rxe0 lat "$size" 1 "$iters" "$rxe_ip" || status=1
  done
  perftest rxe0 bw ib_write_bw 65536 "$bw_iters" 4 "$rxe_ip" || status=1
  rstream_run rxe0 bw 65536 "$bw_iters" 1 "$rxe_ip" || status=1
  echo "bench: siw0 ($siw_ip), round $rep of $reps" >&2
  ours siw0 "$siw_ip" || status=1
  ours siw0 "$siw_ip" uiwarp || status=1
  ours siw0 "$siw_ip" uiwarp-nocrc || status=1
  ours siw0 "$siw_ip" uiwarp-ring128k || status=1
  for size in $sizes; do
    perftest siw0 lat ib_send_lat "$size" "$iters" 5 "$siw_ip" || status=1
  done
  perftest siw0 bw ib_write_bw 65536 "$bw_iters" 4 "$siw_ip" || status=1
  echo "bench: siw0 with MPA CRC (siw-crc.ko), round $rep of $reps" >&2
  if siw_load "$siw_crc_ko"; then
    if [ "$rep" = 1 ]; then crc_on_the_wire || status=1; fi
    ours siw0 "$siw_ip" siw-crc || status=1
  else
    status=1
  fi
  siw_load "$VM_SIW_DIR/siw.ko" || { status=1; echo "bench: siw0 is gone; stopping" >&2; break; }
  done

  # ----- the tables
  # value DEVICE KIND TOOL SIZE: the best round's (lowest latency, highest bandwidth)
  value() {
    awk -v d="$1" -v k="$2" -v t="$3" -v s="$4" '$1 == d && $2 == k && $3 == t && $4 == s {
        if (!n++ || (k == "lat" && $5 < best) || (k == "bw" && $5 > best)) best = $5 }
      END { if (n) print best }' "$results"
  }
  # round_ratio DEVICE KIND TOOL_A TOOL_B SIZE: the median over rounds of A / B within a
  # round (each round runs every tool back to back, so a slow spell of the VM hits both)
  round_ratio() {
    awk -v d="$1" -v k="$2" -v a="$3" -v b="$4" -v s="$5" '$1 == d && $2 == k && $4 == s {
        if ($3 == a) A[$6] = $5; if ($3 == b) B[$6] = $5 }
      END {
        for (r in A) if ((r in B) && B[r] > 0) v[++n] = A[r] / B[r]
        if (!n) { print "-"; exit }
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        printf "%.2f", (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }' "$results"
  }
  ratio() { # ratio A B: A / B, or "-" when either is missing
    if [ -n "$1" ] && [ -n "$2" ]; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; else echo -; fi
  }
  # kib BYTES: "4KiB", "64KiB", "1MiB"
  kib() { if [ $(($1 % 1048576)) = 0 ]; then echo "$(($1 / 1048576))MiB"; else echo "$(($1 / 1024))KiB"; fi; }
  # the bandwidth tool shown in a latency tool's column
  bw_tool() { case $1 in ib_send_lat) echo ib_write_bw ;; ib_write_lat) echo none ;; *) echo "$1" ;; esac; }
  table() {
    local dev=$1
    shift
    local others=("$@")
    echo
    echo "$dev, RdmaSocket spin ${spin:-default} ring ${ring:-default}, best of $reps round(s) of $iters round trips (one-way usec, median; rstream: average) and $megabytes MiB streams (MiB/s); ratio = RdmaSocket / other"
    printf '%-10s %10s' "workload" RdmaSocket
    for o in "${others[@]}"; do printf ' %13s' "$o"; done
    for o in "${others[@]}"; do printf ' %9s' "÷${o:0:8}"; done
    echo
    local size ours_v v
    for size in $sizes; do
      ours_v=$(value "$dev" lat RdmaSocket "$size")
      printf '%-10s %10s' "lat $size" "${ours_v:--}"
      for o in "${others[@]}"; do v=$(value "$dev" lat "$o" "$size"); printf ' %13s' "${v:--}"; done
      for o in "${others[@]}"; do printf ' %9s' "$(ratio "$ours_v" "$(value "$dev" lat "$o" "$size")")"; done
      echo
    done
    ours_v=$(value "$dev" bw RdmaSocket 65536)
    printf '%-10s %10s' "bw 64KiB" "${ours_v:--}"
    for o in "${others[@]}"; do v=$(value "$dev" bw "$(bw_tool "$o")" 65536); printf ' %13s' "${v:--}"; done
    for o in "${others[@]}"; do printf ' %9s' "$(ratio "$ours_v" "$(value "$dev" bw "$(bw_tool "$o")" 65536)")"; done
    echo
    [ "$reps" -gt 1 ] || return 0
    echo "the same ratios as the median over rounds of each round's ratio:"
    for size in $sizes; do
      printf '%-10s' "lat $size"
      for o in "${others[@]}"; do printf ' %9s' "$(round_ratio "$dev" lat RdmaSocket "$o" "$size")"; done
      echo
    done
    printf '%-10s' "bw 64KiB"
    for o in "${others[@]}"; do printf ' %9s' "$(round_ratio "$dev" bw RdmaSocket "$(bw_tool "$o")" 65536)"; done
    echo
  }
  # the floor under rxe0's latency: what a socket cannot beat, against the targets' peers
  floor_table() {
    local size row how
    echo
    echo "rxe0's floor (bench_floor, best of $reps round(s), one-way usec, median): floor-raw is a raw verbs ping-pong with RdmaSocket's wire operations, floor-socket the same plus the least a socket stream does (a lock a call, the copy out of the ring, the copy into it above 64 B); no socket is faster than floor-socket on this transport"
    printf '%-10s %10s %12s %10s %11s %9s %11s %11s %11s\n' workload floor-raw floor-socket RdmaSocket ib_send_lat rstream "sock÷ib_sl" "sock÷rstrm" "ours÷sock"
    for how in best median; do
      [ $how = median ] && { [ "$reps" -gt 1 ] || break; echo "the same ratios as the median over rounds of each round's ratio:"; }
      for size in $sizes; do
        row=()
        if [ $how = best ]; then
          for o in floor-raw floor-socket RdmaSocket ib_send_lat rstream; do row+=("$(value rxe0 lat $o "$size")"); done
          row+=("$(ratio "${row[1]}" "${row[3]}")" "$(ratio "${row[1]}" "${row[4]}")" "$(ratio "${row[2]}" "${row[1]}")")
        else
          row=("" "" "" "" "" "$(round_ratio rxe0 lat floor-socket ib_send_lat "$size")" \
            "$(round_ratio rxe0 lat floor-socket rstream "$size")" "$(round_ratio rxe0 lat RdmaSocket floor-socket "$size")")
        fi
        printf '%-10s %10s %12s %10s %11s %9s %11s %11s %11s\n' "lat $size" "${row[@]}"
      done
    done
    # bandwidth: ib_write_bw is the raw verbs ceiling of the same transport
    echo "bandwidth: rstream ÷ ib_write_bw = $(ratio "$(value rxe0 bw rstream 65536)" "$(value rxe0 bw ib_write_bw 65536)") (best rounds), $(round_ratio rxe0 bw rstream ib_write_bw 65536) (median of rounds); above 0.67, 1.5× rstream is more than ib_write_bw moves"
  }
  echo
  echo "bench: results (the ib_send_lat column's bandwidth row is ib_write_bw -R)"
  table rxe0 ib_send_lat ib_write_lat rstream TcpStream
  floor_table
  table siw0 ib_send_lat TcpStream
  # the userspace provider against the kernel's siw, same workload, same netdev
  echo
  echo "RdmaSocket over uiwarp (userspace iWARP on eth1) against RdmaSocket over siw0 (kernel), best of $reps; ratio = uiwarp / siw0 (latency: <= 1.00 means uiwarp is no slower; bandwidth: >= 1.00). Same wire, two ways: siw0 to siw0 runs without MPA CRC, as uiwarp-nocrc does (nocrc÷siw0); uiwarp asks for CRC by default, as siw0-crc (siw-crc.ko) does (÷siw0-crc). ÷siw0 crosses them (uiwarp with CRC, siw0 without); uiwarp-128k is uiwarp with siw0's ring size (128 KiB, not 1 MiB)"
  siw_row() { printf '%-10s %8s %12s %11s %8s %8s %9s %10s %10s %9s\n' "$@"; }
  siw_row workload uiwarp uiwarp-nocrc uiwarp-128k siw0 siw0-crc "nocrc÷siw0" "÷siw0-crc" ÷siw0 "128k÷siw0"
  # the rows: "KIND SIZE", latency per ping-pong size, then bandwidth per write size
  siw_rows=()
  for size in $sizes; do siw_rows+=("lat $size"); done
  for chunk in ${siw_chunks//,/ }; do siw_rows+=("bw $chunk"); done
  siw_label() { if [ "$1" = lat ]; then echo "lat $2"; else echo "bw $(kib "$2")"; fi; }
  # siw_ratios HOW KIND SIZE: the four ratio columns, one a line; HOW is "best" (the ratio
  # of each tool's best round) or "median" (the median of the per-round ratios)
  siw_ratios() {
    local how=$1 kind=$2 size=$3 pair a b
    for pair in "uiwarp-nocrc RdmaSocket" "uiwarp siw0-crc" "uiwarp RdmaSocket" "uiwarp-ring128k RdmaSocket"; do
      read -r a b <<< "$pair"
      if [ "$how" = best ]; then
        ratio "$(value siw0 "$kind" "$a" "$size")" "$(value siw0 "$kind" "$b" "$size")"
      else
        round_ratio siw0 "$kind" "$a" "$b" "$size"
      fi
      echo
    done
  }
  for row in "${siw_rows[@]}"; do
    read -r kind size <<< "$row"
    cells=()
    for tool in uiwarp uiwarp-nocrc uiwarp-ring128k RdmaSocket siw0-crc; do
      v=$(value siw0 "$kind" "$tool" "$size")
      cells+=("${v:--}")
    done
    mapfile -t ratios < <(siw_ratios best "$kind" "$size")
    siw_row "$(siw_label "$kind" "$size")" "${cells[@]}" "${ratios[@]}"
  done
  if [ "$reps" -gt 1 ]; then
    echo "the same ratios as the median over rounds of each round's ratio:"
    for row in "${siw_rows[@]}"; do
      read -r kind size <<< "$row"
      mapfile -t ratios < <(siw_ratios median "$kind" "$size")
      siw_row "$(siw_label "$kind" "$size")" "" "" "" "" "" "${ratios[@]}"
    done
  fi
  echo
  echo "raw results (device kind tool size value round):"
  cat "$results"
  exit $status
fi

# ------------------------------------------------------------------ on the host ----
iters=200 megabytes=16 sizes="64 4096 65536" reps=1 spin= ring= markdown=
command_line=$0
while [ $# -gt 0 ]; do
  [ "$1" = --markdown ] || command_line+=" $1${2:+ $2}"
  case $1 in
    --markdown) markdown=$(realpath -m "${2:?--markdown needs a file}"); shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --megabytes) megabytes=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --spin) spin=$2; shift 2 ;;
    --ring) ring=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
    *) echo "bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
cd "$ROOT"
echo "bench: building the release bench_socket and bench_floor examples" >&2
cargo build --release --example bench_socket --example bench_floor >&2
target_dir=$(cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
ours=$target_dir/release/examples/bench_socket
[ -x "$ours" ] || { echo "bench: $ours was not built" >&2; exit 1; }
"$HERE/build-siw.sh" --crc-required >&2
# shellcheck source=bench-markdown.sh
source "$HERE/bench-markdown.sh"
bench_markdown_run "$markdown" bench-socket "${command_line#"$ROOT"/}" "bench: results" "raw results" -- \
  "$HERE/run.sh" --both --timeout "${RDMASOCK_VM_TIMEOUT:-3000}" -- \
  bash "$HERE/bench-socket.sh" --guest "$ours" "$iters" "$megabytes" "$sizes" "$reps" "$spin" "$ring"
