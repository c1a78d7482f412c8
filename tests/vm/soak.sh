#!/bin/bash
# soak.sh - the soak across two hosts: tests/two_hosts_soak.rs in two wired VMs
# (tests/vm/two-hosts.sh --test two_hosts_soak). Per test, 1 GiB each way at once over one
# device, every byte checked against the sender's pseudo-random stream, the connection
# closed gracefully (its close's result checked) and made again every 64 MiB, the stream
# going on across the connections. Long: neither tests/vm/suite.sh, tests/run.sh nor
# .ci/run runs it.
#
#   tests/vm/soak.sh [--mib N] [--segment-mib N] [--timeout S] [--markdown FILE] [TEST...]
#
#   --mib N          MiB each way per test (default 1024; RDMASOCK_SOAK_MIB in the VMs)
#   --segment-mib N  MiB each way per connection (default 64; RDMASOCK_SOAK_SEGMENT_MIB)
#   --timeout S      each VM's limit for all its tests (default 3600)
#   --markdown FILE  write the table into FILE's section between the lines
#                    <!-- soak:begin --> and <!-- soak:end --> (docs/TESTING.md), replacing
#                    the section's old table; the rest of FILE stays as it is
#   TEST             the soak tests to run, as libtest filters (default: all): rxe0 and siw0
#                    over IPv4 (soak_rxe_ipv4, soak_siw_ipv4) and IPv6 (soak_rxe_ipv6,
#                    soak_siw_ipv6), the userspace provider's client against siw0's server
#                    (soak_uiwarp_client_to_siw_server)
#
# Prints both VMs' output, then the table: a row per test and side (server: host 2,
# client: host 3) with the MiB sent and received, MB/s each way (10^6 bytes a second over
# the whole soak, reconnects included), the connections, the reconnects, the time from a
# close's start to the next connection (mean / max, ms), the soak's seconds, and the
# guest's clock rate against the host's. The times are the host's: each side reads the
# host's clock at its soak's start and end from the times the host gives files it writes
# in a shared folder, and scales its own clock's readings to it (a guest's clock can run
# at the wrong rate when its TSC was calibrated at boot while the host was busy).
# Exit status: two-hosts.sh's (0: every test passed on both sides).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
usage() { echo "usage: $0 [--mib N] [--segment-mib N] [--timeout S] [--markdown FILE] [TEST...]" >&2; exit 2; }
mib=1024 segment=64 timeout_s=3600 markdown=
while [ $# -gt 0 ]; do
  case $1 in
    --mib) mib=${2:-}; shift 2 || usage ;;
    --segment-mib) segment=${2:-}; shift 2 || usage ;;
    --timeout) timeout_s=${2:-}; shift 2 || usage ;;
    --markdown) markdown=${2:-}; shift 2 || usage ;;
    -*) usage ;;
    *) break ;;
  esac
done
for n in "$mib" "$segment" "$timeout_s"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "soak: $n is not a positive whole number" >&2; usage; }
done
command_line="tests/vm/soak.sh${*:+ $*}"
[ "$mib" = 1024 ] && [ "$segment" = 64 ] || command_line="tests/vm/soak.sh --mib $mib --segment-mib $segment${*:+ $*}"
[ -z "$markdown" ] || markdown=$(realpath "$markdown")
cd "$ROOT"

# The VMs write their rows here: the project directory is shared with them read-write.
mkdir -p "$ROOT/target"
rows=$(mktemp -d "$ROOT/target/soak.XXXXXX")
log=$(mktemp)
trap 'rm -rf "$rows" "$log"' EXIT
export RDMASOCK_SOAK_MIB=$mib RDMASOCK_SOAK_SEGMENT_MIB=$segment RDMASOCK_SOAK_OUT=$rows
"$HERE/two-hosts.sh" --test two_hosts_soak --timeout "$timeout_s" "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

summary=$(tr -d '\r' < "$log" | sed -n 's/^two-hosts: \([0-9]* passed, [0-9]* failed\)$/\1/p' | tail -1)
kernel=$(tr -d '\r' < "$log" | sed -n 's/^vm: exit status .*(kernel \([^,]*\),.*/\1/p' | tail -1)
table=$(mktemp)
trap 'rm -rf "$rows" "$log" "$table"' EXIT
{
  echo "| test | side | MiB sent | MiB received | MB/s each way | connections | reconnects | ms per reconnect (mean / max) | seconds | guest clock ÷ host's |"
  echo "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"
  for f in "$rows"/*.row; do [ -e "$f" ] && cat "$f"; done
} > "$table"
echo
echo "soak: $mib MiB each way per test, a new connection every $segment MiB; ${summary:-no result} (exit status $status)"
cat "$table"

if [ -n "$markdown" ]; then
  if ! compgen -G "$rows/*.row" > /dev/null; then
    echo "soak: no rows; $markdown left as it was" >&2
  else
    cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2> /dev/null)
    section=$(mktemp) tmp=$(mktemp)
    {
      echo "<!-- soak:begin -->"
      echo "Latest result: \`$command_line\` on ${cpu:-an unknown CPU}, $(nproc) cores; two qemu VMs under TCG, one vCPU each${kernel:+, guest kernel $kernel}: ${summary:-no summary} (exit status $status)."
      echo
      cat "$table"
      echo "<!-- soak:end -->"
    } > "$section"
    if grep -qxF "<!-- soak:begin -->" "$markdown" && grep -qxF "<!-- soak:end -->" "$markdown"; then
      awk -v section="$section" '
        $0 == "<!-- soak:begin -->" { while ((getline line < section) > 0) print line; skip = 1; next }
        $0 == "<!-- soak:end -->" { skip = 0; next }
        !skip { print }' "$markdown" > "$tmp"
    else
      { cat "$markdown"; echo; cat "$section"; } > "$tmp"
    fi
    cat "$tmp" > "$markdown"
    rm -f "$section" "$tmp"
    echo "soak: wrote the soak section of $markdown" >&2
  fi
fi
exit "$status"
