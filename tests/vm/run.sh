#!/bin/bash
# run.sh - run rdmasock's VM tests, or any command, in a throw-away qemu VM that boots
# Debian's stock kernel with soft-RDMA devices (rxe0, and siw0 with --both).
#
#   tests/vm/run.sh [options]                     build the tests, run tests/vm/suite.sh in the VM
#   tests/vm/run.sh [options] -- 'shell command'  run one command in the VM
#   tests/vm/run.sh [options] -- PROGRAM ARG...
#
# Options:
#   --both       rxe0 on eth0 (10.99.0.2) and siw0 on eth1 (10.99.1.2); the suite's default.
#                siw.ko comes from tests/vm/build-siw.sh (run here when it is missing).
#   --rxe        rxe0 only; the default for a command
#   --release    suite: build and test the release profile (default: the dev profile,
#                which `cargo test` on the host has already built)
#   --timeout S  kill the VM after S seconds, exit 124 (default 2400, RDMASOCK_VM_TIMEOUT)
#   --mem SIZE   guest memory (default 2G);  --cpus N  guest vCPUs (default: nproc)
#   --host N     the guest's number on its subnets (default 2): eth0 10.99.0.N and fd99::N,
#                eth1 10.99.1.N and fd99:1::N, MACs ending in N
#   --wire listen|connect
#                wire eth0 and eth1 to another VM's, started with the other value, through
#                qemu socket netdevs on the host's 127.0.0.1:PORT and PORT+1 (PORT:
#                RDMASOCK_VM_WIRE_PORT, default 15790); start the listening one first
#                (tests/vm/two-hosts.sh does). Without it each NIC sits alone on a qemu hub.
#   --peer M     the other VM's --host number: the guest gets RDMA_VM_PEER_RXE_IP,
#                RDMA_VM_PEER_SIW_IP, RDMA_VM_PEER_RXE_IP6 and RDMA_VM_PEER_SIW_IP6
#   -v           print the guest's console log even when all went well
#
# The guest sees the host's root filesystem read-only (writes go to a tmpfs overlay and
# are lost) and the project directory, the cargo target directory and the current
# directory read-write, all at their host paths, so host-built binaries run unchanged.
# The command runs as root in the current directory with `ulimit -l unlimited`,
# /dev/infiniband/* mode 666, and RDMA_VM=1, RDMA_VM_DEVICES ("rxe0 siw0"),
# RDMA_VM_IP / RDMA_VM_RXE_IP (10.99.0.2) and RDMA_VM_SIW_IP (10.99.1.2) set, and the
# same NICs' IPv6 addresses in RDMA_VM_RXE_IP6 (fd99::2) and RDMA_VM_SIW_IP6 (fd99:1::2).
# Its stdout and stderr come out on this script's stdout.
#
# Exit status: the command's; 124 when it timed out; 125 when the VM or the RDMA setup
# failed, or the guest's kernel stopped scheduling (a soft lockup, a panic, an RCU stall
# reported twice: the VM is stopped at once); 126 when the guest's kernel said a NIC stopped completing transmits ("NETDEV
# WATCHDOG": qemu's network backend stalled, below anything the command does; the VM is
# stopped at once instead of waiting out the timeout). The guest's console log is printed
# in those three cases.
#
# The kernel is the newest /boot/vmlinuz-* with modules (RDMASOCK_VM_KERNEL overrides it).
# It runs under TCG: KVM on these (nested-virtualisation) hosts cannot run a stock kernel.
# RDMASOCK_VM_CPU sets QEMU's -cpu (default max); e.g. "max,-erms,-fsrm" makes the guest's
# kernel and glibc copy with wide moves instead of rep movsb, which TCG runs byte by byte.
# The first run extracts vmlinux for a fast PVH boot and builds a busybox initramfs, both
# kept in ${XDG_CACHE_HOME:-~/.cache}/rdmasock-vm (RDMASOCK_VM_CACHE).
# Needs: qemu-system-x86 linux-image-amd64 busybox-static kmod cpio xz-utils iproute2 rdma-core.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/common.sh"

die() { echo "vm: $*" >&2; exit 125; }

devices=
profile=dev
timeout_s=${RDMASOCK_VM_TIMEOUT:-2400}
mem=2G
cpus=$(nproc)
verbose=0
host_n=2
wire=
peer_n=
while [ $# -gt 0 ]; do
  case $1 in
    --both) devices="rxe siw"; shift ;;
    --rxe) devices=rxe; shift ;;
    --release) profile=release; shift ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --mem) mem=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --host) host_n=$2; shift 2 ;;
    --wire) wire=$2; shift 2 ;;
    --peer) peer_n=$2; shift 2 ;;
    -v) verbose=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
  esac
done

[[ $host_n =~ ^[0-9]+$ ]] && [ "$host_n" -ge 1 ] && [ "$host_n" -le 254 ] || die "--host $host_n: a number from 1 to 254"
[ -z "$peer_n" ] || { [[ $peer_n =~ ^[0-9]+$ ]] && [ "$peer_n" -ge 1 ] && [ "$peer_n" -le 254 ]; } \
  || die "--peer $peer_n: a number from 1 to 254"
case $wire in ''|listen|connect) ;; *) die "--wire $wire: listen or connect" ;; esac

# ------------------------------------------------------------------ host checks ----
command -v qemu-system-x86_64 >/dev/null || die "qemu missing: apt-get install qemu-system-x86"
[ -x /bin/busybox ] || die "busybox missing: apt-get install busybox-static"
command -v cpio >/dev/null && command -v modprobe >/dev/null || die "apt-get install cpio kmod"
KERNEL=$(vm_pick_kernel)
[ -n "$KERNEL" ] && [ -r "$KERNEL" ] || die "no kernel with modules in /boot: apt-get install linux-image-amd64"
KVER=${KERNEL##*/vmlinuz-}
[ -d "/lib/modules/$KVER" ] || die "/lib/modules/$KVER missing (the guest loads its modules from there)"

rw_paths=("$ROOT")
if [ $# -eq 0 ]; then
  # ---------------------------------------------------------- suite mode: build ----
  devices=${devices:-rxe siw}
  cd "$ROOT"
  flags=()
  [ $profile = release ] && flags=(--release)
  target_dir=$(cargo metadata --no-deps --format-version 1 | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
  [ -n "$target_dir" ] || die "cargo metadata gave no target directory"
  bin_dir=$target_dir/$([ $profile = release ] && echo release || echo debug)
  echo "vm: building the tests and examples ($profile profile)" >&2
  artifacts=$(mktemp)
  trap 'rm -f "$artifacts"' EXIT
  # with the tokio adapter (tests/vm_tokio.rs needs it), as tests/run.sh builds the host's
  flags+=(--features rdmasock/tokio)
  cargo test --workspace --no-run "${flags[@]}" --message-format=json-render-diagnostics > "$artifacts" \
    || die "cargo test --no-run failed"
  cargo build --workspace --examples "${flags[@]}" || die "cargo build --examples failed"
  # the test binaries of the root crate's tests/vm_*.rs
  mapfile -t tests < <(sed -n 's/.*"src_path":"\([^"]*\)".*"executable":"\([^"]*\)".*/\1 \2/p' "$artifacts" \
    | awk -v dir="$ROOT/tests/" 'index($1, dir) == 1 && substr($1, length(dir) + 1) ~ /^vm_[^\/]*\.rs$/ { print $2 }' \
    | sort -u)
  rm -f "$artifacts"
  echo "vm: ${#tests[@]} test binaries: ${tests[*]##*/}" >&2
  expect=rxe0
  [[ " $devices " == *" siw "* ]] && expect="rxe0 siw0"
  set -- "$HERE/suite.sh" --devices "$expect" --bin-dir "$bin_dir" -- "${tests[@]}"
  rw_paths+=("$target_dir")
fi
devices=${devices:-rxe}
if [ $# -eq 1 ]; then CMD=$1; else CMD=$(printf '%q ' "$@"); fi
rw_paths+=("$PWD")

SIW_DIR=$(vm_siw_dir "$KVER")
if [[ " $devices " == *" siw "* ]] && [ ! -s "$SIW_DIR/siw.ko" ] \
   && [ -z "$(find "/lib/modules/$KVER" -name 'siw.ko*' -print -quit)" ]; then
  echo "vm: $SIW_DIR/siw.ko is missing: running tests/vm/build-siw.sh" >&2
  "$HERE/build-siw.sh" "$KVER" >&2 || die "siw.ko could not be built (see above), so siw0 cannot be created"
fi
[[ " $devices " == *" siw "* ]] && [ -d "$SIW_DIR" ] && rw_paths+=("$SIW_DIR")   # the guest's /tmp is its own

# ------------------------------------------------------------ kernel: vmlinux ----
# Under TCG, unpacking the xz-compressed bzImage costs ~6 s per boot; Debian kernels
# have a PVH entry point, so qemu can boot the ELF vmlinux directly.  Extract it once.
mkdir -p "$VM_CACHE"
boot_image=$KERNEL
vmlinux=$VM_CACHE/vmlinux-$KVER
if [ ! -s "$vmlinux" ] && command -v xz >/dev/null; then
  offset=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$KERNEL" | head -1 | cut -d: -f1 || true)
  if [ -n "$offset" ]; then
    tail -c +$((offset + 1)) "$KERNEL" | xz -dc --single-stream > "$vmlinux.tmp.$$" 2>/dev/null || true
    if [ "$(head -c 4 "$vmlinux.tmp.$$" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
      mv "$vmlinux.tmp.$$" "$vmlinux"
    fi
    rm -f "$vmlinux.tmp.$$"
  fi
fi
[ -s "$vmlinux" ] && boot_image=$vmlinux

# ------------------------------------------------------------------ initramfs ----
MODULES="virtio_pci 9pnet_virtio 9p overlay"
ihash=$( (cat "$HERE/init.sh"; echo "$MODULES"; stat -c %Y "/lib/modules/$KVER/modules.dep" /bin/busybox) \
  | md5sum | cut -c1-12)
INITRD=$VM_CACHE/initramfs-$KVER-$ihash.cpio.gz
if [ ! -s "$INITRD" ]; then
  staging=$(mktemp -d)
  mkdir -p "$staging"/{bin,dev,proc,sys,lib/modules}
  cp /bin/busybox "$staging/bin/"
  for applet in sh mount insmod mkdir ln cat hostname switch_root poweroff; do
    ln -s busybox "$staging/bin/$applet"
  done
  : > "$staging/modules.list"
  for m in $MODULES; do   # each module after its dependencies, decompressed for busybox insmod
    for f in $(modprobe -S "$KVER" --show-depends "$m" | awk '$1 == "insmod" { print $2 }'); do
      name=$(basename "$f"); name=${name%.xz}; name=${name%.zst}; name=${name%.gz}
      grep -qx "$name" "$staging/modules.list" && continue
      case $f in
        *.xz) xz -dc "$f" ;; *.zst) zstd -qdc "$f" ;; *.gz) gzip -dc "$f" ;; *) cat "$f" ;;
      esac > "$staging/lib/modules/$name"
      echo "$name" >> "$staging/modules.list"
    done
  done
  cp "$HERE/init.sh" "$staging/init"
  chmod 755 "$staging/init"
  (cd "$staging" && find . | cpio -o -H newc --quiet | gzip -1) > "$INITRD.tmp.$$"
  mv "$INITRD.tmp.$$" "$INITRD"
  rm -rf "$staging"
fi

# --------------------------------------------------------------- control share ----
CTL=$(mktemp -d /tmp/rdmasock-vm.XXXXXX)
qemu_pid=
watcher=
cleanup() {
  [ -n "$qemu_pid" ] && kill "$qemu_pid" 2>/dev/null
  [ -n "$watcher" ] && kill "$watcher" 2>/dev/null
  rm -rf "$CTL"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cp "$HERE/guest.sh" "$CTL/guest.sh"
printf '%s\n' "$CMD" > "$CTL/cmd.sh"
{
  printf 'export VM_CWD=%q VM_DEVICES=%q VM_SIW_DIR=%q VM_HOST=%q VM_PEER=%q\n' \
    "$PWD" "$devices" "$SIW_DIR" "$host_n" "$peer_n"
  for v in RUST_BACKTRACE RUST_LOG RUST_TEST_THREADS RUST_MIN_STACK CARGO_TERM_COLOR NO_COLOR TERM \
           $(compgen -v RDMASOCK_ || true); do
    [ -n "${!v+x}" ] && printf 'export %s=%q\n' "$v" "${!v}"
  done
} > "$CTL/env.sh"

shares=()
: > "$CTL/rw.list"
i=0
mounted=" "
for p in "${rw_paths[@]}"; do
  p=$(realpath "$p")
  for m in $mounted; do   # skip a path already inside a share
    case $p/ in "$m"/*) continue 2 ;; esac
  done
  mounted="$mounted$p "
  echo "rw$i $p" >> "$CTL/rw.list"
  shares+=(-virtfs "local,path=$p,mount_tag=rw$i,security_model=none,multidevs=remap")
  i=$((i + 1))
done

# netdev N: NIC N's backend, alone on a qemu hub or wired to the other VM's NIC N.
netdev() {
  if [ -n "$wire" ]; then
    echo "socket,id=n$1,$wire=127.0.0.1:$((${RDMASOCK_VM_WIRE_PORT:-15790} + $1))"
  else
    echo "hubport,id=n$1,hubid=$1"
  fi
}
mac() { printf '52:54:00:12:%02x:%02x' "$1" "$host_n"; }
nics=(-netdev "$(netdev 0)" -device "virtio-net-pci,netdev=n0,mac=$(mac 0)")
if [[ " $devices " == *" siw "* ]]; then
  nics+=(-netdev "$(netdev 1)" -device "virtio-net-pci,netdev=n1,mac=$(mac 1)")
fi

# ----------------------------------------------------------------------- boot ----
# ttyS0 carries the command's output (our stdout); ttyS1 the kernel console and the
# guest's setup log (kept in console.log).  Each NIC sits alone on its own qemu hub, or
# (--wire) on a socket to the other VM's.
# Under TCG the guest's TSC is the host's own (qemu hands out the host's counter), so the
# guest is told its rate instead of timing it at boot: on a busy host that timing can be
# off several times over, and with tsc=reliable nothing corrects it, so every clock in the
# guest would run fast or slow. The rate is the one the host's kernel found (its log).
tsc_khz=""
if [[ "${RDMASOCK_VM_ACCEL:-tcg}" == tcg* ]]; then
  tsc_khz=$(dmesg 2>/dev/null | sed -n -e 's/.*tsc: Refined TSC clocksource calibration: \([0-9.]*\) MHz.*/\1/p' \
    -e 's/.*tsc: Detected \([0-9.]*\) MHz processor.*/\1/p' | tail -n 1 | awk '$1 > 0 { printf "%d", $1 * 1000 }')
fi
# A small pool of 2 MiB huge pages (32 MiB) for rings on huge pages (docs/MEMORY.md).
append="console=ttyS1 quiet loglevel=4 panic=-1 mitigations=off random.trust_cpu=on tsc=reliable hugepages=16"
[ -n "$tsc_khz" ] && append+=" tsc_early_khz=$tsc_khz"
# RDMASOCK_VM_APPEND adds kernel parameters (e.g. "loglevel=7" to see every kernel message
# in the console log).
[ -n "${RDMASOCK_VM_APPEND:-}" ] && append+=" $RDMASOCK_VM_APPEND"
t0=$(date +%s.%N)
timeout -k 10 "$timeout_s" qemu-system-x86_64 -nodefaults -no-reboot -display none -monitor none \
  -accel "${RDMASOCK_VM_ACCEL:-tcg,thread=multi,tb-size=512}" -cpu "${RDMASOCK_VM_CPU:-max}" -m "$mem" -smp "$cpus" \
  -kernel "$boot_image" -initrd "$INITRD" \
  -append "$append" \
  -chardev stdio,id=out,signal=off -serial chardev:out -serial "file:$CTL/console.log" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=$CTL,mount_tag=vmctl,security_model=none" \
  "${shares[@]}" "${nics[@]}" -device virtio-rng-pci \
  < /dev/null 2> "$CTL/qemu.err" &
qemu_pid=$!
# A NIC whose transmit queue stopped (qemu's socket netdev between two VMs can stall; the
# guest then logs the watchdog every 5 s until the timeout) ends the run. So does a guest
# kernel that stopped scheduling (a soft lockup, a panic, or an RCU stall reported twice:
# the kernel repeats it every minute while it lasts), which no command in it can survive;
# the console (loglevel=4: errors and worse) says where it stalled.
(
  while kill -0 "$qemu_pid" 2>/dev/null; do
    if grep -q 'NETDEV WATCHDOG' "$CTL/console.log" 2>/dev/null; then
      : > "$CTL/nic-stalled"
      kill "$qemu_pid" 2>/dev/null
      exit 0
    fi
    if grep -q -e 'soft lockup' -e 'Kernel panic' "$CTL/console.log" 2>/dev/null \
       || [ "$(cat "$CTL/console.log" 2>/dev/null | grep -c 'detected stalls on CPUs')" -ge 2 ]; then
      : > "$CTL/kernel-stalled"
      kill "$qemu_pid" 2>/dev/null
      exit 0
    fi
    sleep 1
  done
) &
watcher=$!
set +e
wait "$qemu_pid"
qemu_rc=$?
qemu_pid=
kill "$watcher" 2>/dev/null
wait "$watcher" 2>/dev/null
t1=$(date +%s.%N)

if [ -e "$CTL/nic-stalled" ]; then
  rc=126
  echo "vm: STOPPED: the guest's kernel reported a NIC whose transmit queue timed out" \
    "(NETDEV WATCHDOG): qemu's network backend stopped taking its frames, so this run" \
    "says nothing about the command; run it again" >&2
elif [ -e "$CTL/kernel-stalled" ]; then
  rc=125
  echo "vm: STOPPED: the guest's kernel stopped scheduling (a soft lockup, a panic or a" \
    "repeated RCU stall; its report is in the console log below): the command could not" \
    "go on; the kernel's stack there names the cause" >&2
elif [ -s "$CTL/rc" ]; then rc=$(cat "$CTL/rc")
elif [ $qemu_rc = 124 ] || [ $qemu_rc = 137 ]; then rc=124; echo "vm: TIMED OUT after ${timeout_s}s" >&2
else rc=125; echo "vm: the VM stopped without a result (qemu exit status $qemu_rc)" >&2; fi
if [ $verbose = 1 ] || [ "$rc" = 124 ] || [ "$rc" = 125 ] || [ "$rc" = 126 ]; then
  echo "----- guest console log -----" >&2
  cat "$CTL/console.log" >&2
  if grep -qv 'not connected to host network' "$CTL/qemu.err"; then
    echo "----- qemu stderr -----" >&2
    grep -v 'not connected to host network' "$CTL/qemu.err" >&2
  fi
fi
echo "vm: exit status $rc after $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')s" \
  "(kernel $KVER, devices: $devices)" >&2
exit "$rc"
