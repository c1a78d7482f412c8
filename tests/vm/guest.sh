#!/bin/bash
# guest.sh - PID 1 of the VM after switch_root (stage 2), running on the host's root
# filesystem with the host's bash, kmod, iproute2 and rdma-core.  tests/vm/run.sh copies
# it into the control share (/run/vmctl) together with:
#   env.sh  VM_CWD, VM_DEVICES ("rxe" or "rxe siw"), VM_SIW_DIR and the passed-through env
#   cmd.sh  the command to run
# It sets up the network and the soft-RDMA devices, runs the command with stdout+stderr
# on ttyS0 (run.sh's stdout), writes the exit status to /run/vmctl/rc and powers off.
# Its own log goes to /dev/console (ttyS1), which run.sh keeps and prints on failure.
exec </dev/null >/dev/console 2>&1
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
. /run/vmctl/env.sh
[ -d "$HOME/.cargo/bin" ] && PATH=$HOME/.cargo/bin:$PATH

log() { local up _; read -r up _ < /proc/uptime; echo "[guest ${up}s] $*"; }
finish() {   # finish RC: report RC to the host and power off
  echo "$1" > /run/vmctl/rc
  sync
  echo o > /proc/sysrq-trigger
  sleep 60
}
setup_failed() { log "SETUP FAILED: $*"; finish 125; }

wait_for() {   # wait_for PATH: up to 5 s for PATH to appear
  for _ in $(seq 50); do [ -e "$1" ] && return 0; sleep 0.1; done
  return 1
}

ulimit -l unlimited
ulimit -n 65536
log "stage 2 started"
ip link set lo up
modprobe virtio_net || setup_failed "modprobe virtio_net"
N=${VM_HOST:-2}   # this guest's number on its subnets (run.sh --host)
RDMA_VM_RXE_IP=10.99.0.$N RDMA_VM_SIW_IP= RDMA_VM_RXE_IP6=fd99::$N RDMA_VM_SIW_IP6=
wait_for /sys/class/net/eth0 || setup_failed "no eth0"
ip addr add "$RDMA_VM_RXE_IP/24" dev eth0 && ip link set eth0 up || setup_failed "eth0 address"
# An IPv6 address too (nodad: usable at once), for the IPv6 tests. Kept when a test takes
# the link down and up (tests/vm_bridge.rs does; by default the kernel drops IPv6 addresses
# on link down; "all" covers every NIC).
echo 1 > /proc/sys/net/ipv6/conf/all/keep_addr_on_down || setup_failed "keep_addr_on_down"
ip -6 addr add "$RDMA_VM_RXE_IP6/64" dev eth0 nodad || setup_failed "eth0 IPv6 address"

modprobe ib_uverbs && modprobe rdma_ucm && modprobe rdma_rxe || setup_failed "modprobe ib_uverbs rdma_ucm rdma_rxe"
rdma link add rxe0 type rxe netdev eth0 || setup_failed "rdma link add rxe0"
log "rxe0 on eth0 ($RDMA_VM_RXE_IP)"

if [[ " $VM_DEVICES " == *" siw "* ]]; then
  # rdma_cm maps an IP address to one device, so siw0 gets its own NIC and address.
  RDMA_VM_SIW_IP=10.99.1.$N RDMA_VM_SIW_IP6=fd99:1::$N
  wait_for /sys/class/net/eth1 || setup_failed "no eth1 for siw0"
  ip addr add "$RDMA_VM_SIW_IP/24" dev eth1 && ip link set eth1 up || setup_failed "eth1 address"
  ip -6 addr add "$RDMA_VM_SIW_IP6/64" dev eth1 nodad || setup_failed "eth1 IPv6 address"
  if ! modprobe siw 2>/dev/null; then   # Debian's kernel has no siw: use tests/vm/build-siw.sh's
    for dep in $(modinfo -F depends "$VM_SIW_DIR/siw.ko" | tr , ' '); do modprobe "$dep"; done
    insmod "$VM_SIW_DIR/siw.ko" || setup_failed "insmod $VM_SIW_DIR/siw.ko"
  fi
  rdma link add siw0 type siw netdev eth1 || setup_failed "rdma link add siw0"
  log "siw0 on eth1 ($RDMA_VM_SIW_IP)"
fi
chmod 666 /dev/infiniband/* || setup_failed "no /dev/infiniband"
rdma link show

# For the tests: which devices exist and which address reaches each through rdma_cm.
export RDMA_VM=1 RDMA_VM_IP=$RDMA_VM_RXE_IP RDMA_VM_NETDEV=eth0 RDMA_VM_RXE_IP RDMA_VM_SIW_IP
export RDMA_VM_RXE_IP6 RDMA_VM_SIW_IP6
if [ -n "${VM_PEER:-}" ]; then   # the other VM on the wire (run.sh --wire, --peer)
  export RDMA_VM_PEER_RXE_IP=10.99.0.$VM_PEER RDMA_VM_PEER_RXE_IP6=fd99::$VM_PEER
  if [ -n "$RDMA_VM_SIW_IP" ]; then
    export RDMA_VM_PEER_SIW_IP=10.99.1.$VM_PEER RDMA_VM_PEER_SIW_IP6=fd99:1::$VM_PEER
  fi
fi
RDMA_VM_DEVICES=$(ls /sys/class/infiniband | tr '\n' ' ')
export RDMA_VM_DEVICES=${RDMA_VM_DEVICES% }

cd "$VM_CWD" || setup_failed "cannot cd to $VM_CWD"
stty -F /dev/ttyS0 -opost -echo 2>/dev/null
log "running the command"
# Through a pipe rather than the tty, as in CI.  The copier ignores SIGTERM so that it
# outlives the clean-up below and drains what the command wrote.
bash /run/vmctl/cmd.sh </dev/null > >(trap '' TERM; exec cat > /dev/ttyS0) 2>&1
rc=$?
copier=$!
log "command exited with status $rc"
# Whatever the command left behind (a background server...) must not keep the VM up.
kill -TERM -1 2>/dev/null
for _ in $(seq 50); do kill -0 "$copier" 2>/dev/null || break; sleep 0.1; done
kill -KILL -1 2>/dev/null
finish "$rc"
