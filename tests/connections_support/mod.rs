//! What the many-connection tests share (tests/uiwarp_connections.rs on the host,
//! tests/vm_connections.rs in the VM): the peer process's mio echo loop, hash-checked
//! messages, and the wait for every connection's fds and threads to be released.
#![allow(dead_code)]

use mio::{Events, Interest, Poll, Token};
use rdmasock::{RdmaListener, RdmaSocket};
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::ToSocketAddrs;
use std::time::{Duration, Instant};

/// The peer: one mio thread accepting and echoing every connection, until stdin closes.
pub(crate) fn serve(bind: impl ToSocketAddrs) {
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(0);
    });
    let mut listener = RdmaListener::bind(bind).expect("bind");
    listener.set_nonblocking(true).unwrap();
    println!("listening {}", listener.local_addr().unwrap());
    let mut poll = Poll::new().unwrap();
    poll.registry()
        .register(&mut listener, Token(0), Interest::READABLE)
        .unwrap();
    let mut clients: HashMap<Token, (RdmaSocket, Vec<u8>)> = HashMap::new();
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 65536];
    let mut next = 1;
    loop {
        poll.poll(&mut events, None).unwrap();
        for ev in events.iter() {
            if ev.token() == Token(0) {
                loop {
                    match listener.accept() {
                        Ok((mut s, _)) => {
                            s.set_nonblocking(true).unwrap();
                            let t = Token(next);
                            next += 1;
                            let both = Interest::READABLE | Interest::WRITABLE;
                            poll.registry().register(&mut s, t, both).unwrap();
                            clients.insert(t, (s, Vec::new()));
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => panic!("the peer's accept: {e}"),
                    }
                }
                continue;
            }
            let Some((s, pending)) = clients.get_mut(&ev.token()) else {
                continue;
            };
            let closed = pump(s, pending, &mut buf);
            if closed {
                let (mut s, _) = clients.remove(&ev.token()).expect("present");
                poll.registry().deregister(&mut s).unwrap();
            }
        }
    }
}

/// Moves what `s` has to read back into it (through `pending`) until it would block; true
/// once the connection has ended.
pub(crate) fn pump(s: &mut RdmaSocket, pending: &mut Vec<u8>, buf: &mut [u8]) -> bool {
    loop {
        let mut moved = false;
        match s.read(buf) {
            Ok(0) => return true,
            Ok(n) => {
                pending.extend_from_slice(&buf[..n]);
                moved = true;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => return true,
        }
        if !pending.is_empty() {
            match s.write(pending) {
                Ok(n) => {
                    pending.drain(..n);
                    moved = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => return true,
            }
        }
        if !moved {
            return false;
        }
    }
}

pub(crate) fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).expect(dir).count()
}

/// A 64-byte message for connection `i`, round `k`.
pub(crate) fn message(i: usize, k: usize) -> Vec<u8> {
    (0..64u64)
        .map(|b| (b.wrapping_mul(0x9e37_79b9) ^ (i as u64 * 131 + k as u64)) as u8)
        .collect()
}

pub(crate) fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Echoes one message on `c` (connection `i`, round `k`), checked by its hash.
pub(crate) fn echo(c: &mut RdmaSocket, i: usize, k: usize) {
    let m = message(i, k);
    let mut back = [0u8; 64];
    c.write_all(&m)
        .unwrap_or_else(|e| panic!("connection {i}: write: {e}"));
    c.read_exact(&mut back)
        .unwrap_or_else(|e| panic!("connection {i}: read: {e}"));
    assert_eq!(hash(&back), hash(&m), "connection {i}, message {k}");
}

/// Echoes `rounds` messages on every connection.
pub(crate) fn echo_all(conns: &mut [RdmaSocket], rounds: usize) {
    for k in 0..rounds {
        for (i, c) in conns.iter_mut().enumerate() {
            echo(c, i, k);
        }
    }
}

/// Waits (bounded) until every connection is gone, with every registration the census
/// counts (the connections' own and the chunks of the send-area pool), and the fds and
/// threads are back to `fds` and `threads`: a close finishes on the socket's driver after
/// the drop.
pub(crate) fn assert_all_released(fds: usize, threads: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = (
            rdmasock::census(),
            count("/proc/self/fd"),
            count("/proc/self/task"),
        );
        if now.0 == rdmasock::Census::default() && now.1 <= fds && now.2 <= threads {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "after closing: {:?}, {} fds (before: {fds}), {} threads (before: {threads})",
            now.0,
            now.1,
            now.2
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
