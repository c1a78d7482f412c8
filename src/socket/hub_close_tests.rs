//! The readiness hub never runs a socket's blocking close: when the application drops a
//! registered socket's last handle while the hub holds it (for an event or its keepalive
//! sweep), the close (which waits up to the close timeout for a peer that does not answer)
//! goes elsewhere, and the other registered sockets' events stay on time.
//!
//! The victim's close must really wait: its connection manager wraps the userspace one and
//! says that a close waits for the peer's (as kernel iWARP's does), and its peer never calls
//! in again, so it never answers.

use super::{RdmaListener, RdmaSocket, SocketOptions};
use crate::cm::IncomingRequest;
use crate::cm::{
    CmEndpoint, CmListener, CmNotice, ConnectionManager, ConnectionParameters, Resolving,
};
use crate::verbs::{Context, DeviceInfo, ProviderRegistry, QueuePair};
use mio::{Events, Interest, Poll, Token};
use rdmasock_uiwarp::UiwarpCm;
use std::io::{self, ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The userspace connection manager, whose accepted endpoints wait for the peer's close.
#[derive(Debug)]
struct WaitingCm;

#[derive(Debug)]
struct WaitingListener(Box<dyn CmListener>);

#[derive(Debug)]
struct WaitingEndpoint(Box<dyn CmEndpoint>);

impl ConnectionManager for WaitingCm {
    fn resolve(&self, dst: SocketAddr, timeout: Duration) -> io::Result<Box<dyn CmEndpoint>> {
        UiwarpCm.resolve(dst, timeout)
    }
    fn resolve_from_free_port(
        &self,
        dst: SocketAddr,
        timeout: Duration,
    ) -> io::Result<Box<dyn CmEndpoint>> {
        UiwarpCm.resolve_from_free_port(dst, timeout)
    }
    fn start_resolve(
        &self,
        dst: SocketAddr,
        from_free_port: bool,
        timeout: Duration,
    ) -> io::Result<Box<dyn Resolving>> {
        UiwarpCm.start_resolve(dst, from_free_port, timeout)
    }
    fn listen(&self, addr: SocketAddr, backlog: u32) -> io::Result<Box<dyn CmListener>> {
        Ok(Box::new(WaitingListener(UiwarpCm.listen(addr, backlog)?)))
    }
}

impl CmListener for WaitingListener {
    fn poll_request(&self) -> io::Result<Option<IncomingRequest>> {
        Ok(self.0.poll_request()?.map(|r| IncomingRequest {
            endpoint: Box::new(WaitingEndpoint(r.endpoint)),
            private_data: r.private_data,
        }))
    }
    fn event_fd(&self) -> BorrowedFd<'_> {
        self.0.event_fd()
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

impl CmEndpoint for WaitingEndpoint {
    fn device(&self) -> io::Result<DeviceInfo> {
        self.0.device()
    }
    fn open_context(&self, registry: &ProviderRegistry) -> io::Result<Context> {
        self.0.open_context(registry)
    }
    fn init_qp(&self, qp: &QueuePair) -> io::Result<()> {
        self.0.init_qp(qp)
    }
    fn connect(
        &self,
        qp: &QueuePair,
        parameters: &ConnectionParameters,
        timeout: Duration,
    ) -> io::Result<Vec<u8>> {
        self.0.connect(qp, parameters, timeout)
    }
    fn start_connect(
        &self,
        qp: &QueuePair,
        parameters: &ConnectionParameters,
        timeout: Duration,
    ) -> io::Result<()> {
        self.0.start_connect(qp, parameters, timeout)
    }
    fn poll_connect(&self, qp: &QueuePair) -> io::Result<Option<Vec<u8>>> {
        self.0.poll_connect(qp)
    }
    fn connect_timed_out(&self, qp: &QueuePair) -> io::Error {
        self.0.connect_timed_out(qp)
    }
    fn connect_fd(&self) -> BorrowedFd<'_> {
        self.0.connect_fd()
    }
    fn start_accept(&self, qp: &QueuePair, parameters: &ConnectionParameters) -> io::Result<()> {
        self.0.start_accept(qp, parameters)
    }
    fn poll_accept(&self, qp: &QueuePair) -> io::Result<bool> {
        self.0.poll_accept(qp)
    }
    fn reject(&self, private_data: &[u8]) -> io::Result<()> {
        self.0.reject(private_data)
    }
    fn disconnect(&self, qp: &QueuePair) -> io::Result<()> {
        self.0.disconnect(qp)
    }
    fn poll_notice(&self) -> io::Result<Option<CmNotice>> {
        self.0.poll_notice()
    }
    fn event_fd(&self) -> BorrowedFd<'_> {
        self.0.event_fd()
    }
    fn local_addr(&self) -> Option<SocketAddr> {
        self.0.local_addr()
    }
    fn peer_addr(&self) -> Option<SocketAddr> {
        self.0.peer_addr()
    }
    fn nudge_after_first_receive(&self) -> bool {
        self.0.nudge_after_first_receive()
    }
    fn disconnect_waits_for_peer(&self) -> bool {
        true
    }
    fn set_liveness_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.0.set_liveness_timeout(timeout)
    }
    fn end_reason(&self) -> Option<String> {
        self.0.end_reason()
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
    let (victim, silent_peer) = pair_via(&WaitingCm, &opts);
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
    let (mut victim, silent_peer) = pair_via(&WaitingCm, &slow_close);
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
