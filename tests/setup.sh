#!/bin/bash
# tests/setup.sh - installs what the test suites need on Debian 12, once; later runs find it all
# in place and return at once. Called by tests/run.sh (the README's test command) and so by CI.
#
#   apt packages: qemu, Debian's kernel (the VM boots it), busybox, rdma-core's tools and
#                 libraries (interop peers), perftest, tshark, gcc/make and the kernel source
#                 for siw.ko (Debian's kernels lack CONFIG_RDMA_SIW)
#   siw.ko:       built by tests/vm/build-siw.sh into the VM cache
#   cargo fuzz:   Rust nightly (rustup) and cargo-fuzz (cargo install), for fuzz/smoke.sh
#   miri:         nightly's miri and rust-src components (rustup), for tests/miri.sh
#
# Needs root (apt-get) only when something is missing; otherwise it says what is.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export DEBIAN_FRONTEND=noninteractive

packages=(qemu-system-x86 linux-image-amd64 busybox-static kmod iproute2 cpio xz-utils
  rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest gcc make
  libibverbs-dev libibverbs1 python3 tshark librdmacm1 gdb)
# libibverbs-dev: verbs.h for tests/abi_ibverbs.rs only (nothing links to libibverbs)
# libibverbs1 + python3: tests/status_text.rs compares our texts with ibv_*_str via ctypes
# tshark: the uiwarp capture test decodes our frames with Wireshark's iWARP dissectors
# gdb: a VM test that finds an rdma-core tool stuck prints its threads' backtraces
# librdmacm1 (librspreload.so) + rdmacm-utils (rstream): tests/vm_rsocket.rs's rsocket peers

command -v cargo >/dev/null || { echo "setup: cargo is missing: install Rust (rustup)" >&2; exit 1; }

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "setup: missing Debian packages: $*; run as root: apt-get install --no-install-recommends $*" >&2
    exit 1
  fi
  apt-get install -y -q --no-install-recommends "$@"
}

if [ ${#missing[@]} -gt 0 ]; then
  echo "=== setup: installing ${missing[*]}"
  [ "$(id -u)" = 0 ] && apt-get update -q
  apt_install "${missing[@]}"
fi

# cargo fuzz (a nightly toolchain and the cargo-fuzz subcommand): tests/run.sh runs each fuzz
# target briefly (fuzz/smoke.sh)
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "=== setup: installing Rust nightly (cargo fuzz needs it)"
  rustup toolchain install nightly --profile minimal \
    || { echo "setup: could not install Rust nightly (rustup toolchain install nightly --profile minimal), which the fuzz smoke run needs" >&2; exit 1; }
fi
# miri (nightly's interpreter that reports undefined behaviour): tests/run.sh runs the pure
# parts' tests under it (tests/miri.sh)
if ! cargo +nightly miri --version >/dev/null 2>&1; then
  echo "=== setup: installing miri (rustup component add --toolchain nightly miri rust-src)"
  rustup component add --toolchain nightly miri rust-src \
    || { echo "setup: could not add miri to Rust nightly (rustup component add --toolchain nightly miri rust-src), which the miri run needs" >&2; exit 1; }
fi
cargo +nightly miri setup >/dev/null \
  || { echo "setup: cargo +nightly miri setup failed (it builds miri's standard library once)" >&2; exit 1; }
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "=== setup: installing cargo-fuzz (cargo install --locked cargo-fuzz)"
  cargo install --locked cargo-fuzz
fi

. tests/vm/common.sh
kernel=$(vm_pick_kernel)
[ -n "$kernel" ] || { echo "setup: no /boot/vmlinuz-* with modules (linux-image-amd64)" >&2; exit 1; }
kver=${kernel##*/vmlinuz-}
if [ ! -f "$(vm_siw_dir "$kver")/siw.ko" ]; then
  srcver=$(echo "$kver" | sed -E 's/^([0-9]+\.[0-9]+).*/\1/')
  pkgver=$(dpkg-query -W -f '${Version}' "linux-image-$kver")
  if ! dpkg-query -W -f '${Status}' "linux-headers-$kver" "linux-source-$srcver" 2>/dev/null \
      | grep -c "install ok installed" | grep -q 2; then
    [ "$(id -u)" = 0 ] && apt-get update -q
    apt_install "linux-headers-$kver" "linux-source-$srcver=$pkgver" \
      || apt_install "linux-headers-$kver" "linux-source-$srcver"
  fi
  echo "=== setup: building siw.ko for $kver"
  tests/vm/build-siw.sh "$kver"
fi
