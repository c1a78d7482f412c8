#!/bin/bash
# tests/miri.sh - the pure parts' tests under miri (Rust nightly's interpreter, which stops at
# undefined behaviour: out-of-bounds or uninitialised reads, invalid values, aliasing and
# data-race violations):
#
#   rdmasock         the stream engine (src/protocol) and its simulations (tests/stream_sim*)
#   rdmasock-uiwarp  the userspace provider's wire and protocol cores (src/wire, src/protocol,
#                    and the sans-IO connection setup tests/handshake.rs)
#   rdmasock-verbs   the parsers (sysfs, netlink, kernel responses), the ABI structs' byte views
#                    and the scatter/gather copy
#   rdmasock-cm      rdma_cm event decoding, the ABI structs (the event union) and sockaddrs
#
# What miri cannot run, and why, is in docs/TESTING.md; such tests carry
# `#[cfg_attr(miri, ignore = "...")]`.  tests/run.sh --host runs this; tests/setup.sh installs
# miri.  About 5 minutes on 2 cores once built.  Exits non-zero if any run failed.  Arguments
# go to every test binary (e.g. `-Z unstable-options --report-time`).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

status=0
extra=("$@")
# miri PACKAGE_AND_TARGETS... -- TEST_FILTERS...
miri() {
  echo "=== miri: cargo +nightly miri test $*"
  cargo +nightly miri test "$@" "${extra[@]}" || status=1
}
miri -p rdmasock --lib -- protocol::
miri -p rdmasock --test stream_sim --test stream_sim_receives --test stream_sim_close --
miri -p rdmasock-uiwarp --lib -- wire:: protocol::
miri -p rdmasock-uiwarp --test handshake --
miri -p rdmasock-verbs --lib -- device::netlink device::sysfs device::fuzzing kernel::convert \
  sys::abi sys::extended sys::ioctl sys::pod sys::sge types:: wc:: qp_attr::
miri -p rdmasock-cm --lib -- event:: error:: sys::layout_tests sys::sockaddr
exit $status
