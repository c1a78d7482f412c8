#!/bin/sh
# init.sh - /init of the VM's initramfs (busybox sh).  Stage 1 of the boot:
# load the virtio/9p/overlay modules, mount the host's root filesystem (9p, read-only)
# under a tmpfs overlay, mount the read-write shares listed by tests/vm/run.sh, and
# switch_root into the host root, running /run/vmctl/guest.sh (stage 2) as PID 1.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
fail() { echo "init: $*"; poweroff -f; }

for m in $(cat /modules.list); do insmod "/lib/modules/$m" || echo "init: insmod $m failed"; done

opts=trans=virtio,version=9p2000.L,msize=512000
mkdir -p /lower /upper /newroot
mount -t 9p -o "$opts,ro,cache=loose" hostroot /lower || fail "cannot mount the host root (9p)"
mount -t tmpfs -o mode=755 upper /upper
mkdir -p /upper/data /upper/work
mount -t overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work overlay /newroot \
  || fail "cannot mount the overlay root"

mount -t tmpfs -o mode=1777 tmp /newroot/tmp
mount -t tmpfs -o mode=1777 vartmp /newroot/var/tmp
mount -t tmpfs -o mode=755 run /newroot/run
mkdir -p /newroot/run/vmctl
mount -t 9p -o "$opts,cache=none" vmctl /newroot/run/vmctl || fail "cannot mount the control share"
# read-write shares: "TAG PATH" per line
while read -r tag path; do
  [ -n "$tag" ] || continue
  mkdir -p "/newroot$path"
  mount -t 9p -o "$opts,cache=mmap" "$tag" "/newroot$path" || fail "cannot mount $path read-write"
done < /newroot/run/vmctl/rw.list

mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
mount --move /dev /newroot/dev
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /newroot/dev/pts
mount -t tmpfs -o mode=1777 shm /newroot/dev/shm
ln -s /proc/self/fd /newroot/dev/fd
ln -s /proc/self/fd/0 /newroot/dev/stdin
ln -s /proc/self/fd/1 /newroot/dev/stdout
ln -s /proc/self/fd/2 /newroot/dev/stderr
hostname rdmasock-vm
exec switch_root /newroot /run/vmctl/guest.sh
