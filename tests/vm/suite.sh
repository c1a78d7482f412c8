#!/bin/bash
# suite.sh - the VM test suite; runs INSIDE the VM (tests/vm/run.sh starts it):
#
#   suite.sh --devices "rxe0 siw0" --bin-dir TARGET/debug [--] TEST_BINARY...
#
# 1. Checks that every device named by --devices exists and its port 1 is ACTIVE, and
#    that /dev/infiniband/uverbs* and rdma_cm exist.  A missing device fails the suite
#    loudly: no test may pass because the hardware it needs is absent.
# 2. Runs each test binary (the root crate's tests/vm_*.rs) with --ignored --test-threads=1 (tests named known_bug_* are skipped: each is a reproduced bug, named in the issue notes)
#    in the project root, RDMASOCK_VM_TEST_TIMEOUT seconds at most each (default 600).
#    Then runs vm_verbs, vm_tools, vm_socket, vm_socket_tcp, vm_rsocket and vm_tokio again with
#    RDMASOCK_PROVIDER=ibverbs (the rdma-core bridge; their siw0 tests skipped: see below;
#    RDMASOCK_VM_BRIDGE_SUITES changes the list), reported as NAME[ibverbs].
# 3. Runs each executable tests/vm/interop/*.sh (rdma-core tools against our examples),
#    with RDMASOCK_BIN_DIR and RDMASOCK_EXAMPLES_DIR set; each counts as one test.
# 4. Prints a summary and, last, the line "vm: N passed, N failed"; exits 1 on any failure.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

devices=rxe0
bin_dir=
while [ $# -gt 0 ]; do
  case $1 in
    --devices) devices=$2; shift 2 ;;
    --bin-dir) bin_dir=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
per_test_timeout=${RDMASOCK_VM_TEST_TIMEOUT:-600}
export RDMASOCK_BIN_DIR=$bin_dir RDMASOCK_EXAMPLES_DIR=$bin_dir/examples
export RUST_BACKTRACE=${RUST_BACKTRACE:-1}

passed=0
failed=0
summary=()
finish() {
  echo
  echo "===== VM suite summary ====="
  printf '%s\n' "${summary[@]}"
  echo "vm: $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
}
loud_failure() {
  echo
  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
  echo "!!! VM SUITE FAILED: $*"
  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
  failed=$((failed + 1))
  summary+=("FAILED  setup: $*")
  finish
}

# ------------------------------------------------------------------ devices ----
[ "${RDMA_VM:-}" = 1 ] || loud_failure "not inside the VM (RDMA_VM is unset): run tests/vm/run.sh"
for dev in $devices; do
  [ -d "/sys/class/infiniband/$dev" ] \
    || loud_failure "RDMA device $dev is missing (have: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' '))"
  state=
  for _ in $(seq 100); do   # the port turns ACTIVE once its netdev is up: wait up to 10 s
    state=$(cat "/sys/class/infiniband/$dev/ports/1/state" 2>/dev/null)
    [[ $state == *ACTIVE* ]] && break
    sleep 0.1
  done
  [[ $state == *ACTIVE* ]] || loud_failure "port 1 of $dev is '$state', not ACTIVE"
done
ls /dev/infiniband/uverbs* >/dev/null 2>&1 || loud_failure "no /dev/infiniband/uverbs*"
[ -c /dev/infiniband/rdma_cm ] || loud_failure "no /dev/infiniband/rdma_cm"
echo "vm suite: devices $devices are ACTIVE; RDMA_VM_DEVICES='${RDMA_VM_DEVICES:-}'"

interop=()
for s in "$HERE"/interop/*.sh; do [ -x "$s" ] && interop+=("$s"); done
[ $# -gt 0 ] || [ ${#interop[@]} -gt 0 ] || loud_failure "no VM tests found (no tests/vm_*.rs binaries, no tests/vm/interop/*.sh)"

# ------------------------------------------------------------- test binaries ----
log=$(mktemp)
cd "$ROOT" || exit 2
# kernel_log NAME: after NAME failed, the kernel's last messages (a WARN, an rxe or siw
# error), which is often why: a failure seen once can then be read from its own log.
kernel_log() {
  echo "----- last kernel messages after $1 failed (dmesg) -----"
  dmesg 2>/dev/null | tail -n 40
  echo "-----"
}

# run_binary LABEL BINARY [VAR=VALUE...] [-- TEST_ARG...]: runs one test binary (with the
# environment additions and libtest arguments given) and adds its counts to the summary
# under LABEL.
run_binary() {
  local name=$1 bin=$2 start rc p f status note
  shift 2
  local vars=() args=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  args=("$@")
  echo
  echo "===== $name ====="
  start=$SECONDS
  env "${vars[@]}" timeout -k 10 "$per_test_timeout" "$bin" --ignored --test-threads=1 \
    --skip known_bug_ "${args[@]}" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  read -r p f < <(awk '/^test result:/ {
      for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i }
    } END { print p + 0, f + 0 }' "$log")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1   # crashed, timed out or failed outside a test: count it once
    [ "$rc" -eq 124 ] && echo "!!! $name timed out after ${per_test_timeout}s"
  fi
  passed=$((passed + p)); failed=$((failed + f))
  status=ok note=
  [ "$rc" -ne 0 ] || [ "$f" -ne 0 ] && status=FAILED
  [ "$status" = FAILED ] && kernel_log "$name"
  if [ $((p + f)) -eq 0 ]; then   # a VM test binary whose tests are not #[ignore]d, or none
    status=FAILED note=" - ran no test"; failed=$((failed + 1))
  fi
  summary+=("$(printf '%-7s %-28s %3d passed, %d failed, %ds (exit %d)%s' \
    "$status" "$name" "$p" "$f" $((SECONDS - start)) "$rc" "$note")")
}

for bin in "$@"; do
  name=$(basename "$bin"); name=${name%-*}   # vm_verbs-0123456789abcdef -> vm_verbs
  run_binary "$name" "$bin"
done

# ------------------------------------------------- again on the rdma-core bridge ----
# The verbs conformance, tool, RdmaSocket and rsocket-interop suites once more with
# RDMASOCK_PROVIDER=ibverbs: every device driven through rdma-core's libibverbs (its own rxe
# provider underneath) instead of the pure-Rust providers. vm_verbs and vm_tools assert
# Context::provider_name() is "ibverbs" then (and "rxe" in the run above); RdmaSocket has no
# such accessor, but a forced bridge fails rather than fall back, and vm_bridge (run above,
# unforced) proves both ways which provider RdmaSocket traffic takes.
# The bridge runs cover rxe0: tests named *siw* are skipped there; the pure-Rust run above
# covers siw0.
# The connect/close cycle test runs RDMASOCK_VM_BRIDGE_CYCLES (default 100) cycles there, not
# 1000: under TCG a cycle through libibverbs takes about 1.3 s (0.5 s pure-Rust; see
# examples/connect_cycles), and the leak checks (fds, MRs exact) need no more.
# RDMASOCK_VM_BRIDGE_SUITES overrides the list ("" skips this).
bridge_suites=${RDMASOCK_VM_BRIDGE_SUITES-vm_verbs vm_tools vm_socket vm_socket_tcp vm_rsocket vm_tokio}
bridge_cycles=${RDMASOCK_VM_BRIDGE_CYCLES:-100}
for bin in "$@"; do
  name=$(basename "$bin"); name=${name%-*}
  for suite in $bridge_suites; do
    [ "$name" = "$suite" ] \
      && run_binary "${name}[ibverbs]" "$bin" RDMASOCK_PROVIDER=ibverbs \
        RDMASOCK_CYCLES="$bridge_cycles" -- --skip siw
  done
done

# ------------------------------------------------------------ interop scripts ----
for s in "${interop[@]}"; do
  name=interop/$(basename "$s")
  echo
  echo "===== $name ====="
  start=$SECONDS
  timeout -k 10 "$per_test_timeout" "$s"
  rc=$?
  if [ $rc -eq 0 ]; then passed=$((passed + 1)); status=ok
  else failed=$((failed + 1)); status=FAILED; kernel_log "$name"; fi
  summary+=("$(printf '%-7s %-28s %ds (exit %d)' "$status" "$name" $((SECONDS - start)) "$rc")")
done
rm -f "$log"
finish
