#!/bin/bash
# fault-table.sh - the fault table: faults injected into live connections on each provider,
# the time to the first error a call returns, what that error says, and the bytes lost
# (bytes a flush or close that returned Ok vouched for, minus what the peer received intact).
#
#   tests/fault-table.sh [--markdown FILE]
#
# Runs, and gathers the rows their tests print ("fault-table-row KEY | ... |"):
#   1. the host's rows: cargo test --test uiwarp_faults (the userspace iWARP provider);
#   2. the VM's rows: tests/vm_faults.rs in tests/vm/run.sh --both
#      (rxe0 and siw0);
#   3. the kernel devices' wire cut across two VMs (tests/vm/two-hosts.sh): two_hosts.rs's
#      peer_vanishes_keepalive_fails_the_connection_across_hosts (rxe0) and
#      siw_wire_cut_is_not_detected_and_loses_nothing_once_mended (siw0), whose servers write
#      their rows into the target directory's tmp/.
# Rows no test measures (a fault that does not apply to a provider) are the script's own, with
# a footnote saying why. Prints the table; with --markdown FILE also writes it, with its
# footnotes, between the lines <!-- fault-table:begin --> and <!-- fault-table:end --> of FILE
# (README.md), leaving the rest of the file as it is. Exits 1 when a part failed (its rows
# are then missing or say so; FILE is left as it was).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2

markdown=
while [ $# -gt 0 ]; do
  case $1 in
    --markdown) markdown=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/{/^set -uo/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
    *) echo "tests/fault-table.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

log=$(mktemp) rows=$(mktemp) table=$(mktemp)
trap 'rm -f "$log" "$rows" "$table"' EXIT
status=0

echo "=== fault table: the host (uiwarp)" >&2
cargo test --features rdmasock/tokio --test uiwarp_faults -- --nocapture --test-threads=1 2>&1 \
  | tee -a "$log" || status=1

echo "=== fault table: the VM (rxe0, siw0)" >&2
bin=$(cargo test --features rdmasock/tokio --no-run --test vm_faults --message-format=json-render-diagnostics \
  | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
if [ -n "$bin" ]; then
  tests/vm/run.sh --both -- "$bin --ignored --test-threads=1 --nocapture" 2>&1 | tee -a "$log" || status=1
else
  echo "fault-table: tests/vm_faults.rs was not built" >&2; status=1
fi

echo "=== fault table: the wire cut across two VMs" >&2
# the server VM writes its row into the target directory's tmp/ (CARGO_TARGET_TMPDIR)
target_dir=$(cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
rm -f "$target_dir"/tmp/fault-table-*.row
tests/vm/two-hosts.sh peer_vanishes_keepalive_fails_the_connection_across_hosts \
  siw_wire_cut_is_not_detected_and_loses_nothing_once_mended 2>&1 | tee -a "$log" || status=1
cat "$target_dir"/tmp/fault-table-*.row >> "$log" 2>/dev/null

tr -d '\r' < "$log" | sed -n 's/.*fault-table-row \([0-9]*\) | /\1 | /p' > "$rows"
# The rows that no test measures, by key (provider: 1 uiwarp, 2 rxe, 3 siw; then the fault),
# after the measured ones: a measured row of the same key comes first and wins.
cat >> "$rows" <<'ROWS'
14 | uiwarp | device removal | n/a[^device] | | |
17 | uiwarp | memlock too small: `connect` | n/a[^pins] | | |
18 | uiwarp | memlock too small: `accept` | n/a[^pins] | | |
25 | rxe | flooding peer | n/a[^frames] | | |
35 | siw | flooding peer | n/a[^frames] | | |
ROWS
{
  echo "| provider | fault | time to detection | what the user sees | bytes lost |"
  echo "|---|---|---|---|---|"
  sort -s -n -k1,1 "$rows" | awk '$1 != previous { previous = $1; sub(/^[0-9]+ /, ""); print }'
} > "$table"
# Keys 11-18, 21-28 and 31-38 each have a row: a missing one is a test that did not print.
for key in 1 2 3; do
  for fault in 1 2 3 4 5 6 7 8; do
    grep -q "^$key$fault |" "$rows" || { echo "fault-table: no row $key$fault (see the output above)" >&2; status=1; }
  done
done
echo
cat "$table"

if [ -n "$markdown" ]; then
  if [ "$status" != 0 ]; then
    echo "fault-table: a part failed: $markdown left as it was" >&2
    exit 1
  fi
  section=$(mktemp) tmp=$(mktemp)
  {
    echo "<!-- fault-table:begin -->"
    cat "$table"
    cat <<'NOTES'

[^device]: The userspace provider has no device: its connections are TCP connections.
[^pins]: The userspace provider pins no memory: its buffers are ordinary memory.
[^frames]: The kernel builds a kernel device's frames; a flood of raw frames needs a packet
    generator on the wire, which this runner does not have.

Each stream fault comes once the peer has received every byte a flush vouched for;
keepalive is 500 ms. How each fault is made, how long each row waits, and why:
[docs/TESTING.md](docs/TESTING.md#the-fault-table). The userspace provider and the kernel's
siw complete a WRITE once their TCP socket took the bytes, so a flush (and a close) between
two rdmasock ends on them proves placement with a one-byte RDMA READ of the peer's target
list after the bytes, whose response comes only once the peer placed every byte before it:
a byte a flush vouched for is in the peer's memory.
<!-- fault-table:end -->
NOTES
  } > "$section"
  if [ -f "$markdown" ] && grep -qxF "<!-- fault-table:begin -->" "$markdown" \
     && grep -qxF "<!-- fault-table:end -->" "$markdown"; then
    awk -v section="$section" '
      $0 == "<!-- fault-table:begin -->" { while ((getline line < section) > 0) print line; skip = 1; next }
      $0 == "<!-- fault-table:end -->" { skip = 0; next }
      !skip { print }' "$markdown" > "$tmp"
  else
    { [ -f "$markdown" ] && cat "$markdown" && echo; cat "$section"; } > "$tmp"
  fi
  cat "$tmp" > "$markdown"
  rm -f "$tmp" "$section"
  echo "fault-table: wrote the table into $markdown" >&2
fi
exit "$status"
