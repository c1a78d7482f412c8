#!/bin/bash
# bench-markdown.sh - the --markdown FILE option of the VM benchmark scripts: each writes
# its own section of FILE (docs/BENCHMARKS.md), between the lines
#   <!-- NAME:begin -->   and   <!-- NAME:end -->
# and leaves the rest of the file as it is (a missing section is appended, a missing file
# created). The section holds the date, the machine (CPU model, host or VM, the VM's
# RDMASOCK_VM_CPU setting and kernel) and the script's latest tables with their ratios.
#
# Sourced by bench-socket.sh, bench-rc-pingpong.sh and bench-bridge.sh; run directly it
# writes one section from a report read on stdin (for checking the writer):
#   tests/vm/bench-markdown.sh FILE NAME COMMAND_LINE < REPORT

# bench_markdown_machine [KERNEL]: one line saying where the benchmark ran.
bench_markdown_machine() {
  local cpu cores
  cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2> /dev/null)
  cores=$(nproc 2> /dev/null || echo "?")
  echo "${cpu:-an unknown CPU}, $cores cores; in a qemu VM under TCG (\`RDMASOCK_VM_CPU=${RDMASOCK_VM_CPU:-max}\`${1:+, guest kernel $1})"
}

# bench_markdown_write FILE NAME COMMAND_LINE MACHINE REPORT: replaces NAME's section of
# FILE with the report (a file) in a text block, under the date, the command and MACHINE.
bench_markdown_write() {
  local file=$1 name=$2 command=$3 machine=$4 report=$5 section tmp
  section=$(mktemp)
  {
    echo "<!-- $name:begin -->"
    echo "Latest run: $(date -u '+%Y-%m-%d %H:%M UTC'), \`$command\`, on $machine."
    echo
    echo '```text'
    cat "$report"
    echo '```'
    echo "<!-- $name:end -->"
  } > "$section"
  tmp=$(mktemp)
  if [ -f "$file" ] && grep -qxF "<!-- $name:begin -->" "$file" && grep -qxF "<!-- $name:end -->" "$file"; then
    awk -v begin="<!-- $name:begin -->" -v end="<!-- $name:end -->" -v section="$section" '
      $0 == begin { while ((getline line < section) > 0) print line; skip = 1; next }
      $0 == end { skip = 0; next }
      !skip { print }' "$file" > "$tmp"
  else
    { [ -f "$file" ] && cat "$file" && echo; cat "$section"; } > "$tmp"
  fi
  cat "$tmp" > "$file"
  rm -f "$tmp" "$section"
}

# bench_markdown_run FILE NAME COMMAND_LINE START END -- VM_COMMAND...: runs VM_COMMAND
# (tests/vm/run.sh with the guest part); without FILE it is just run. With FILE its output
# still passes through, and the lines from the first that starts with START up to the
# first after it that starts with END (or to the end; END may be empty) become NAME's
# section of FILE. Returns VM_COMMAND's exit status.
bench_markdown_run() {
  local file=$1 name=$2 command=$3 start=$4 end=$5 log report status kernel note=
  shift 6
  if [ -z "$file" ]; then
    "$@"
    return
  fi
  log=$(mktemp) report=$(mktemp)
  "$@" 2>&1 | tee "$log" && status=0 || status=${PIPESTATUS[0]}
  awk -v s="$start" -v e="$end" '
    !on && index($0, s) == 1 { on = 1 }
    on && e != "" && index($0, e) == 1 { exit }
    on { print }' "$log" > "$report"
  kernel=$(sed -n 's/^vm: exit status .*(kernel \([^,]*\),.*/\1/p' "$log" | tail -1)
  if [ ! -s "$report" ]; then
    echo "bench: no tables in the output; $file left as it was" >&2
  else
    [ "$status" = 0 ] || note=" (some runs failed: exit status $status; see the run's output)"
    bench_markdown_write "$file" "$name" "$command" "$(bench_markdown_machine "$kernel")$note" "$report"
    echo "bench: wrote the $name section of $file" >&2
  fi
  rm -f "$log" "$report"
  return "$status"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  [ $# = 3 ] || { echo "usage: $0 FILE NAME COMMAND_LINE < REPORT" >&2; exit 2; }
  report=$(mktemp)
  cat > "$report"
  bench_markdown_write "$1" "$2" "$3" "$(bench_markdown_machine)" "$report"
  rm -f "$report"
fi
