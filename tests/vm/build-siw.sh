#!/bin/bash
# build-siw.sh [--crc-required] [KVER] - build the soft-iWARP driver siw.ko for the kernel
# the VM boots.
#
# Debian's kernels are built without CONFIG_RDMA_SIW, so we compile
# drivers/infiniband/sw/siw out of tree from Debian's linux-source package against the
# installed headers.  The module goes to $RDMASOCK_VM_CACHE/siw/<KVER>/siw.ko, where
# tests/vm/run.sh --both finds it.  It is unsigned; the guest kernel loads it (tainted).
#
# Needs (Debian 12):  apt-get install linux-headers-<KVER> linux-source-6.1 gcc make xz-utils
# Takes about 40 s on 2 cores, most of it unpacking the source tarball.
#
# --crc-required builds siw-crc.ko instead (same directory): the same driver with its
# compile-time `mpa_crc_required` set, so that siw asks for MPA's CRC32c on every connection
# (6.1's siw has no module parameter for it and never asks). Only the benchmarks use it
# (tests/vm/bench-socket.sh: the userspace provider, which asks for CRC by default, against
# siw on the same wire).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/common.sh"

name=siw
if [ "${1:-}" = --crc-required ]; then
  name=siw-crc
  shift
fi
if [ $# -ge 1 ]; then
  KVER=$1
else
  kernel=$(vm_pick_kernel)
  [ -n "$kernel" ] || { echo "build-siw: no kernel in /boot: apt-get install linux-image-amd64" >&2; exit 1; }
  KVER=${kernel##*/vmlinuz-}
fi
OUT=$(vm_siw_dir "$KVER")
if [ -s "$OUT/$name.ko" ]; then echo "build-siw: $OUT/$name.ko is already built"; exit 0; fi

SRCVER=$(echo "$KVER" | sed -E 's/^([0-9]+\.[0-9]+).*/\1/')   # 6.1.0-57-amd64 -> 6.1
TARBALL=/usr/src/linux-source-$SRCVER.tar.xz
missing=()
[ -d "/lib/modules/$KVER/build" ] || missing+=("linux-headers-$KVER")
[ -f "$TARBALL" ] || missing+=("linux-source-$SRCVER")
command -v gcc >/dev/null || missing+=(gcc)
command -v make >/dev/null || missing+=(make)
command -v xz >/dev/null || missing+=(xz-utils)
if [ ${#missing[@]} -gt 0 ]; then
  echo "build-siw: missing packages; install them with:" >&2
  echo "  apt-get install --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "build-siw: unpacking drivers/infiniband/sw/siw from $TARBALL"
tar -C "$work" -xJf "$TARBALL" "linux-source-$SRCVER/drivers/infiniband/sw/siw"
src=$work/linux-source-$SRCVER/drivers/infiniband/sw/siw
if [ $name = siw-crc ]; then
  sed -i 's/^const bool mpa_crc_required;/const bool mpa_crc_required = true;/' "$src/siw_main.c"
  grep -q '^const bool mpa_crc_required = true;' "$src/siw_main.c" \
    || { echo "build-siw: siw_main.c has no 'const bool mpa_crc_required;' to set" >&2; exit 1; }
fi
echo "build-siw: compiling against /lib/modules/$KVER/build"
make -s -C "/lib/modules/$KVER/build" M="$src" CONFIG_RDMA_SIW=m modules 2>&1 \
  | { grep -v 'Skipping BTF generation' || true; }
[ -f "$src/siw.ko" ] || { echo "build-siw: the build produced no siw.ko" >&2; exit 1; }
mkdir -p "$OUT"
strip --strip-debug -o "$OUT/$name.ko.tmp.$$" "$src/siw.ko"
mv "$OUT/$name.ko.tmp.$$" "$OUT/$name.ko"
modinfo -F vermagic "$OUT/$name.ko" | sed 's/^/build-siw: vermagic /'
echo "build-siw: wrote $OUT/$name.ko"
