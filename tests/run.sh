#!/bin/bash
# tests/run.sh - rdmasock's one test command: the host suite, then the VM suite.
#
#   tests/run.sh             cargo test --workspace --no-fail-fast, then the VM suite
#                            (tests/vm/run.sh --both: rxe0 and siw0 in a qemu VM), then
#                            tests/vm/two-hosts.sh (two such VMs wired together)
#   tests/run.sh --host      the host suite only (for quick iterations; CI runs both)
#   tests/run.sh --vm        the VM suite only
#   tests/run.sh --release   build and test the release profile
#
# First tests/setup.sh installs what is missing (Debian packages, siw.ko; a no-op once done).
# Both parts always run; the exit status is non-zero if either failed.  The last line
# is "N passed, N failed" for the VM tests.  See docs/TESTING.md.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2

run_host=1 run_vm=1 flags=()
# the optional tokio adapter (rdmasock::tokio, tests/tokio_uiwarp.rs) is built, linted and
# tested with the rest; tests/vm/run.sh builds the VM tests with it too
features=(--features rdmasock/tokio)
for arg in "$@"; do
  case $arg in
    --host) run_vm=0 ;;
    --vm) run_host=0 ;;
    --release) flags+=(--release) ;;
    -h|--help) sed -n '2,/^set -uo/{/^set -uo/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
    *) echo "tests/run.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

host_status=skipped vm_status=skipped vm_line=
# CI=true (a throw-away clone on a small disk): each build directory that one step alone uses
# is removed once that step is done (together they hold ~3 GB)
tidy() { if [ "${CI:-}" = true ]; then rm -rf "$@"; fi; }
tests/setup.sh || { echo "tests/run.sh: setup failed"; echo "0 passed, 1 failed"; exit 1; }
started=$SECONDS
if [ $run_host = 1 ]; then
  echo "=== host suite: cargo test --workspace --no-fail-fast ${features[*]} ${flags[*]}"
  if cargo test --workspace --no-fail-fast "${features[@]}" "${flags[@]}"; then host_status=ok; else host_status=FAILED; fi
  echo "=== host suite: cargo fmt --check, clippy -D warnings, rustdoc -D warnings"
  cargo fmt --all -- --check || host_status=FAILED
  cargo clippy --workspace --all-targets "${features[@]}" "${flags[@]}" -- -D warnings || host_status=FAILED
  RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps "${features[@]}" "${flags[@]}" || host_status=FAILED
  # host tests that need a tool .ci/run installs (tshark): run, never skipped
  echo "=== host suite: tests that need tshark"
  if ! cargo test -p rdmasock-uiwarp --test tshark "${flags[@]}" -- --ignored; then host_status=FAILED; fi
  # cargo fuzz, each target for 20 s (nightly; tests/setup.sh installs it): a crash fails
  # the fuzz entry points exist only under cfg(fuzzing): their seeded smoke tests build that
  # way, in a target directory of their own (the flag changes every crate's build)
  echo "=== host suite: the fuzz entry points on seeded input (--cfg fuzzing)"
  for t in "rdmasock stream_fuzz_smoke" "rdmasock-uiwarp fuzz_smoke"; do
    read -r package test <<< "$t"
    if ! RUSTFLAGS="--cfg fuzzing" cargo test --target-dir target/cfg-fuzzing -p "$package" --test "$test" "${flags[@]}"; then
      host_status=FAILED
    fi
  done
  tidy target/cfg-fuzzing
  echo "=== host suite: fuzz targets (fuzz/smoke.sh 20)"
  fuzz/smoke.sh 20 || host_status=FAILED
  tidy fuzz/target
  # miri (nightly; tests/setup.sh installs it) on the pure parts: undefined behaviour fails
  echo "=== host suite: the pure parts' tests under miri (tests/miri.sh)"
  tests/miri.sh || host_status=FAILED
  tidy target/miri
  # host tests that need release speed (ignored in a debug build, which cannot show the fault)
  echo "=== host suite: tests that need a release build"
  if ! cargo test --release -p rdmasock --test uiwarp_socket a_stream_does_not_nap_through_its_run; then
    host_status=FAILED
  fi
  [ ${#flags[@]} -eq 0 ] && tidy target/release
fi
host_seconds=$((SECONDS - started))

if [ $run_vm = 1 ]; then
  echo "=== VM suite: tests/vm/run.sh --both ${flags[*]}"
  output=$(mktemp)
  trap 'rm -f "$output"' EXIT
  tests/vm/run.sh --both "${flags[@]}" 2>&1 | tee "$output"
  vm_rc=${PIPESTATUS[0]}
  vm_line=$(tr -d '\r' < "$output" | sed -n 's/^vm: \([0-9]* passed, [0-9]* failed\)$/\1/p' | tail -1)
  case $vm_rc in
    0) vm_status=ok ;;
    124) vm_status="FAILED (timed out)" ;;
    125) vm_status="FAILED (VM setup)" ;;
    *) vm_status="FAILED (exit $vm_rc)" ;;
  esac
  # no summary from the suite (the VM never got that far): count the run as one failure
  if [ -z "$vm_line" ]; then vm_line="0 passed, 1 failed"
  elif [ "$vm_rc" -ne 0 ] && [[ $vm_line == *" 0 failed" ]]; then vm_line="${vm_line% 0 failed} 1 failed"; fi
  echo "=== VM suite across two hosts: tests/vm/two-hosts.sh (two wired VMs)"
  tests/vm/two-hosts.sh 2>&1 | tee "$output"
  two_rc=${PIPESTATUS[0]}
  two_line=$(tr -d '\r' < "$output" | sed -n 's/^two-hosts: \([0-9]* passed, [0-9]* failed\)$/\1/p' | tail -1)
  if [ -z "$two_line" ]; then two_line="0 passed, 1 failed"
  elif [ "$two_rc" -ne 0 ] && [[ $two_line == *" 0 failed" ]]; then two_line="${two_line% 0 failed} 1 failed"; fi
  if [ "$two_rc" -ne 0 ] && [ "$vm_status" = ok ]; then vm_status="FAILED (two hosts, exit $two_rc)"; fi
  # one line for both: the sums
  read -r p1 _ f1 _ <<< "${vm_line//,/}"
  read -r p2 _ f2 _ <<< "${two_line//,/}"
  vm_line="$((p1 + p2)) passed, $((f1 + f2)) failed"
fi

echo
echo "=== host suite: $host_status (${host_seconds}s); VM suite: $vm_status ($((SECONDS - started - host_seconds))s)"
[ -n "$vm_line" ] && echo "$vm_line"
[ "$host_status" != FAILED ] && [[ $vm_status != FAILED* ]]
