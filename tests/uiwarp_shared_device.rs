//! The process's connections on one device share one device context and protection domain
//! (`rdmasock::socket::open_device_contexts`), on this host's userspace provider (loopback):
//! many connections, made one after another and at once, hold one context; each carries its
//! own bytes; the last close frees the context, and the next connection opens it again. One
//! test in its own binary: no other test's connections share the count.

use rdmasock::socket::open_device_contexts;
use rdmasock::{RdmaListener, RdmaSocket};
use std::io::{Read, Write};
use std::thread;

const CONNECTIONS: usize = 24;

/// `count` connected pairs (client, server) to `listener`, made by `count` threads at once.
fn pairs_at_once(listener: &RdmaListener, count: usize) -> Vec<(RdmaSocket, RdmaSocket)> {
    let addr = listener.local_addr().unwrap();
    let clients: Vec<_> = (0..count)
        .map(|_| thread::spawn(move || RdmaSocket::connect(addr).expect("connect")))
        .collect();
    let servers: Vec<RdmaSocket> = (0..count)
        .map(|_| listener.accept().expect("accept").0)
        .collect();
    let clients: Vec<RdmaSocket> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    clients.into_iter().zip(servers).collect()
}

/// Each client sends its own number; each server answers with what it got: every pair is
/// matched by the bytes, whatever order the accepts took.
fn echo_each(pairs: &mut [(RdmaSocket, RdmaSocket)]) {
    for (i, (c, _)) in pairs.iter_mut().enumerate() {
        c.write_all(&(i as u32).to_le_bytes()).unwrap();
    }
    for (_, s) in pairs.iter_mut() {
        let mut b = [0u8; 4];
        s.read_exact(&mut b).unwrap();
        s.write_all(&b).unwrap();
    }
    for (i, (c, _)) in pairs.iter_mut().enumerate() {
        let mut b = [0u8; 4];
        c.read_exact(&mut b).unwrap();
        assert_eq!(u32::from_le_bytes(b), i as u32, "connection {i}'s echo");
    }
}

#[test]
fn connections_share_one_context_the_listener_keeps_and_the_last_close_frees() {
    let listener = RdmaListener::bind("127.0.0.1:0").expect("bind on loopback");
    assert_eq!(open_device_contexts(), 0, "no connection yet");
    let mut pairs = pairs_at_once(&listener, CONNECTIONS);
    assert_eq!(
        open_device_contexts(),
        1,
        "{} connections made at once share one context",
        2 * CONNECTIONS
    );
    for _ in 0..4 {
        pairs.extend(pairs_at_once(&listener, 1));
        assert_eq!(
            open_device_contexts(),
            1,
            "one more connection shares it too"
        );
    }
    echo_each(&mut pairs);
    // Closing all but one pair keeps the context for that one.
    let last = pairs.pop().unwrap();
    drop(pairs);
    assert_eq!(open_device_contexts(), 1, "the last pair still holds it");
    let mut last = vec![last];
    echo_each(&mut last);
    drop(last);
    assert_eq!(
        open_device_contexts(),
        1,
        "the listener keeps the context of the connections it answered"
    );

    let mut again = pairs_at_once(&listener, 2);
    assert_eq!(
        open_device_contexts(),
        1,
        "the next connections find it open"
    );
    echo_each(&mut again);
    drop(again);
    drop(listener);
    assert_eq!(
        open_device_contexts(),
        0,
        "the last close, after the listener's, freed the context"
    );

    // Without a listener, the last connection's close frees it.
    let listener = RdmaListener::bind("127.0.0.1:0").expect("bind on loopback");
    let pair = pairs_at_once(&listener, 1);
    drop(listener);
    assert_eq!(open_device_contexts(), 1, "the pair holds it");
    drop(pair);
    assert_eq!(open_device_contexts(), 0, "the last close freed it");
}
