//! RdmaSocket / RdmaListener against the kernel's rxe0 in the VM (`tests/vm/run.sh`, which
//! runs these with `--ignored --test-threads=1`); each test panics when rxe0 or the VM's
//! address is missing.

use rdmasock::{RdmaListener, RdmaSocket, SocketOptions};
use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

/// The VM's rxe0 address; panics (loudly) outside the VM or without rxe0.
fn vm_ip() -> IpAddr {
    assert!(
        std::path::Path::new("/sys/class/infiniband/rxe0").exists(),
        "rxe0 is missing: these tests run in the VM (tests/vm/run.sh), which creates it"
    );
    let ip = std::env::var("RDMA_VM_IP")
        .expect("RDMA_VM_IP is unset: these tests run in the VM (tests/vm/run.sh)");
    ip.parse().expect("RDMA_VM_IP is an IP address")
}

fn listener() -> (RdmaListener, SocketAddr) {
    let l = RdmaListener::bind(SocketAddr::new(vm_ip(), 0)).expect("bind on rxe0's address");
    let addr = l.local_addr().expect("listener address");
    assert_ne!(addr.port(), 0, "an ephemeral port was chosen");
    (l, addr)
}

/// A deterministic xorshift generator (no dependencies).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn connect_accept_echo() {
    let (l, addr) = listener();
    let server = thread::spawn(move || {
        let (mut s, peer) = l.accept().expect("accept");
        assert_eq!(peer.ip(), addr.ip());
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).expect("server read");
            if n == 0 {
                break;
            }
            s.write_all(&buf[..n]).expect("server write");
        }
    });
    let mut c = RdmaSocket::connect(addr).expect("connect");
    assert_eq!(c.peer_addr().unwrap(), addr);
    assert_eq!(c.local_addr().unwrap().ip(), addr.ip());
    assert!(c.peer_is_rdmasock());
    for msg in [&b"hello"[..], &[7u8; 3000][..], &[1u8; 70_000][..]] {
        c.write_all(msg).expect("write");
        let mut back = vec![0u8; msg.len()];
        c.read_exact(&mut back).expect("read back");
        assert_eq!(back, msg);
    }
    c.shutdown(Shutdown::Write).expect("shutdown write");
    let mut rest = Vec::new();
    c.read_to_end(&mut rest)
        .expect("EOF after the server closes");
    assert!(rest.is_empty());
    server.join().expect("server thread");
}
