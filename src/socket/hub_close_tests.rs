//! The readiness hub never runs a socket's blocking close: when the application drops a
//! registered socket's last handle while the hub holds it (for an event or its keepalive
//! sweep), the close (which waits up to the close timeout for a peer that does not answer)
//! goes elsewhere, and the other registered sockets' events stay on time.
//!
//! The victim's close must really wait: its connection manager wraps the userspace one and
//! says that a close waits for the peer's (as kernel iWARP's does), and its peer never calls
//! in again, so it never answers.

use super::wrapped_cm::{EndpointHooks, WrappedCm};
use super::{RdmaListener, RdmaSocket, SocketOptions};
use crate::cm::{CmEndpoint, ConnectionManager};
use mio::{Events, Interest, Poll, Token};
use rdmasock_uiwarp::UiwarpCm;
use std::io::{ErrorKind, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Accepted endpoints that say a close waits for the peer's (as kernel iWARP's do).
#[derive(Debug)]
struct WaitsForPeer;

impl EndpointHooks for WaitsForPeer {
    fn disconnect_waits_for_peer(&self, _: &dyn CmEndpoint) -> bool {
        true
    }
}

/// A connected pair with `opts` on both ends, accepted through `cm`: (the accepted end, the
/// client).
fn pair_via(cm: &dyn ConnectionManager, opts: &SocketOptions) -> (RdmaSocket, RdmaSocket) {
    let l = RdmaListener::bind_via(cm, "127.0.0.1:0", opts).expect("bind");
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || l.accept().expect("accept").0);
    let c = RdmaSocket::connect_via(&UiwarpCm, addr, opts).expect("connect");
    (t.join().expect("accept thread"), c)
}

/// How long until a readable event of `token`, if one comes within `within`.
fn readable_within(poll: &mut Poll, token: Token, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut events = Events::with_capacity(16);
    while started.elapsed() < within {
        poll.poll(&mut events, Some(within - started.elapsed()))
            .unwrap();
        if events.iter().any(|e| e.token() == token && e.is_readable()) {
            return Some(started.elapsed());
        }
    }
    None
}

/// Without the hub, the victim's close waits for its silent peer: the case below means
/// something.
#[test]
fn the_victim_s_close_waits_for_its_silent_peer() {
    let opts = SocketOptions::builder()
        .close_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let (victim, silent_peer) = pair_via(&WrappedCm(Arc::new(WaitsForPeer)), &opts);
    let started = Instant::now();
    drop(victim);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(400),
        "the close took {took:?}"
    );
    drop(silent_peer);
}

#[test]
fn a_last_drop_while_the_hub_holds_the_socket_leaves_other_sockets_on_time() {
    let slow_close = SocketOptions::builder()
        .close_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let (mut victim, silent_peer) = pair_via(&WrappedCm(Arc::new(WaitsForPeer)), &slow_close);
    let (mut other, mut other_peer) = pair_via(&UiwarpCm, &SocketOptions::default());
    victim.set_nonblocking(true).unwrap();
    other.set_nonblocking(true).unwrap();
    let mut poll = Poll::new().unwrap();
    let (victim_token, other_token) = (Token(1), Token(2));
    poll.registry()
        .register(&mut victim, victim_token, Interest::READABLE)
        .unwrap();
    poll.registry()
        .register(&mut other, other_token, Interest::READABLE)
        .unwrap();
    // Both read dry, so that a read event must follow the next arrival.
    let mut buf = [0u8; 64];
    for s in [&mut victim, &mut other] {
        assert_eq!(s.read(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
    }
    let mut events = Events::with_capacity(16);
    poll.poll(&mut events, Some(Duration::ZERO)).unwrap();
    // The hub's keepalive sweep takes a handle on every registered socket, then each one's
    // lock in turn: holding the other socket's lock keeps the hub in the sweep, holding the
    // victim.
    let other_shared = Arc::clone(&other.shared);
    let guard = other_shared.lock();
    super::readiness::keepalive_changed();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Arc::strong_count(&victim.shared) < 2 {
        assert!(
            Instant::now() < deadline,
            "the hub did not take the victim up"
        );
        std::thread::yield_now();
    }
    // The application lets go of the victim while the hub holds it: the hub's handle is the
    // last, dropped when the sweep ends.
    drop(victim);
    drop(guard);
    drop(other_shared);
    // Another socket's event: on time, not after the victim's 5 s close.
    other_peer.write_all(b"y").unwrap();
    other_peer.flush().unwrap();
    let took = readable_within(&mut poll, other_token, Duration::from_secs(2));
    println!("the other socket's read event came after {took:?}");
    assert!(
        took.is_some(),
        "no read event for another socket within 2 s: the hub is stuck in a close"
    );
    assert_eq!(other.read(&mut buf).unwrap(), 1);
    drop(silent_peer);
}
