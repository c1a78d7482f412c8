# shellcheck shell=bash
# common.sh - settings shared by tests/vm/run.sh and tests/vm/build-siw.sh (sourced, not run).
#
#   RDMASOCK_VM_CACHE   where the extracted vmlinux, the initramfs and siw.ko are kept
#                       (default: ${XDG_CACHE_HOME:-$HOME/.cache}/rdmasock-vm)
#   RDMASOCK_VM_KERNEL  the kernel to boot (default: the newest /boot/vmlinuz-* that has
#                       a /lib/modules/<version> directory)

VM_CACHE=${RDMASOCK_VM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/rdmasock-vm}

# Prints the path of the kernel image to boot, or nothing.
vm_pick_kernel() {
  if [ -n "${RDMASOCK_VM_KERNEL:-}" ]; then echo "$RDMASOCK_VM_KERNEL"; return; fi
  local k
  for k in $(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -V -r); do
    if [ -d "/lib/modules/${k#/boot/vmlinuz-}" ]; then echo "$k"; return; fi
  done
}

# The directory where build-siw.sh puts siw.ko for kernel version $1.
vm_siw_dir() { echo "$VM_CACHE/siw/$1"; }
