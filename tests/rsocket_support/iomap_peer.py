#!/usr/bin/python3
"""A peer that calls rsocket's API (librdmacm.so.1 through ctypes) for tests/vm_iomap.rs.

    iomap_peer.py server|client IP PORT WINDOW

Asks for an iomap table of 2 entries (rsetsockopt SOL_RDMA RDMA_IOMAPSIZE), connects (or
listens and accepts), then:
 1. riomap()s a WINDOW-byte buffer at offset 0x1000 and rsend()s b"R";
 2. rrecv()s b"W" (the rdmasock side iowrote into the window before it) and checks that the
    window holds byte i = (13 i + 5) % 251 everywhere;
 3. rrecv()s b"M" (the rdmasock side mapped a WINDOW-byte window at 0x2000 before it),
    riowrite()s byte i = (7 i + 3) % 251 into all of it, and rsend()s b"D";
 4. rrecv()s b"E" and checks its window again (the rdmasock side's refused writes changed
    nothing), riounmap()s, shuts down and closes.
Prints "iomap_peer: ok" and exits 0, or says what failed and exits 1.
"""
import ctypes
import socket
import struct
import sys

AF_INET = 2
SOCK_STREAM = 1
SOL_RDMA = 0x10000
RDMA_IOMAPSIZE = 3
PROT_WRITE = 2
SHUT_RDWR = 2

lib = ctypes.CDLL("librdmacm.so.1", use_errno=True)
c_int, c_void_p, c_size_t = ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t
for name, res, args in [
    ("rsocket", c_int, [c_int, c_int, c_int]),
    ("rbind", c_int, [c_int, c_void_p, ctypes.c_uint32]),
    ("rlisten", c_int, [c_int, c_int]),
    ("raccept", c_int, [c_int, c_void_p, c_void_p]),
    ("rconnect", c_int, [c_int, c_void_p, ctypes.c_uint32]),
    ("rsetsockopt", c_int, [c_int, c_int, c_int, c_void_p, ctypes.c_uint32]),
    ("rsend", ctypes.c_ssize_t, [c_int, c_void_p, c_size_t, c_int]),
    ("rrecv", ctypes.c_ssize_t, [c_int, c_void_p, c_size_t, c_int]),
    ("riomap", ctypes.c_int64, [c_int, c_void_p, c_size_t, c_int, c_int, ctypes.c_int64]),
    ("riowrite", c_size_t, [c_int, c_void_p, c_size_t, ctypes.c_int64, c_int]),
    ("riounmap", c_int, [c_int, c_void_p, c_size_t]),
    ("rshutdown", c_int, [c_int, c_int]),
    ("rclose", c_int, [c_int]),
]:
    f = getattr(lib, name)
    f.restype, f.argtypes = res, args


def fail(what):
    print(f"iomap_peer: {what}: errno {ctypes.get_errno()}", flush=True)
    sys.exit(1)


def check(ret, what):
    if ret < 0:
        fail(what)
    return ret


def sockaddr(ip, port):
    raw = struct.pack("=HH4s8x", AF_INET, socket.htons(port), socket.inet_aton(ip))
    return ctypes.create_string_buffer(raw, len(raw)), len(raw)


def send(fd, data):
    buf = ctypes.create_string_buffer(data, len(data))
    done = 0
    while done < len(data):
        done += check(lib.rsend(fd, ctypes.byref(buf, done), len(data) - done, 0), "rsend")


def recv(fd, n):
    buf = ctypes.create_string_buffer(n)
    done = 0
    while done < n:
        got = check(lib.rrecv(fd, ctypes.byref(buf, done), n - done, 0), "rrecv")
        if got == 0:
            fail("end of stream")
        done += got
    return buf.raw


def main():
    role, ip, port, window = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    entries = ctypes.c_int(2)
    fd = check(lib.rsocket(AF_INET, SOCK_STREAM, 0), "rsocket")
    check(lib.rsetsockopt(fd, SOL_RDMA, RDMA_IOMAPSIZE, ctypes.byref(entries), 4),
          "rsetsockopt RDMA_IOMAPSIZE")
    addr, addr_len = sockaddr(ip, port)
    if role == "server":
        check(lib.rbind(fd, addr, addr_len), "rbind")
        check(lib.rlisten(fd, 1), "rlisten")
        print("iomap_peer: listening", flush=True)
        listener, fd = fd, check(lib.raccept(fd, None, None), "raccept")
    else:
        check(lib.rconnect(fd, addr, addr_len), "rconnect")
        listener = None
    mine = ctypes.create_string_buffer(window)
    offset = lib.riomap(fd, mine, window, PROT_WRITE, 0, 0x1000)
    if offset != 0x1000:
        fail(f"riomap returned {offset:#x}")
    send(fd, b"R")
    expected = bytes((13 * i + 5) % 251 for i in range(window))
    if recv(fd, 1) != b"W":
        fail("expected W")
    if ctypes.string_at(mine, window) != expected:
        fail("the window does not hold what rdmasock iowrote")
    if recv(fd, 1) != b"M":
        fail("expected M")
    theirs = bytes((7 * i + 3) % 251 for i in range(window))
    src = ctypes.create_string_buffer(theirs, window)
    done = 0
    while done < window:
        n = lib.riowrite(fd, ctypes.byref(src, done), window - done, 0x2000 + done, 0)
        if n == ctypes.c_size_t(-1).value or n == 0:
            fail(f"riowrite at {done}")
        done += n
    send(fd, b"D")
    if recv(fd, 1) != b"E":
        fail("expected E")
    if ctypes.string_at(mine, window) != expected:
        fail("the window changed after rdmasock's refused iowrites")
    check(lib.riounmap(fd, mine, window), "riounmap")
    lib.rshutdown(fd, SHUT_RDWR)
    lib.rclose(fd)
    if listener is not None:
        lib.rclose(listener)
    print("iomap_peer: ok", flush=True)


main()
