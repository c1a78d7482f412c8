//! The connection manager's DISCONNECTED before the flushed receives, on a real socket: a
//! nonblocking read says `WouldBlock` (not end-of-stream) while the receives wait to be
//! flushed, and the socket's fd wakes a reader under poll(2) once they are, with the
//! reset the flush decided.
//!
//! The connection manager wraps the userspace one: the test says when its endpoint reports
//! DISCONNECTED, and holds back the queue pair's move to the error state (which flushes the
//! receives) until the test lets it go, as a device that posts the flushed completions late.

use super::{RdmaListener, RdmaSocket, SocketOptions};
use crate::cm::IncomingRequest;
use crate::cm::{
    CmEndpoint, CmListener, CmNotice, ConnectionManager, ConnectionParameters, Resolving,
};
use crate::verbs::{Context, DeviceInfo, ProviderRegistry, QueuePair};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use rdmasock_uiwarp::UiwarpCm;
use std::io::{self, ErrorKind, Read};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the test controls: a DISCONNECTED to report, and whether the endpoint's disconnect
/// (the queue pair's move to the error state) is held back.
#[derive(Debug, Default)]
struct Script {
    report_disconnected: AtomicBool,
    hold_disconnect: AtomicBool,
}

#[derive(Debug)]
struct ScriptedCm(Arc<Script>);

#[derive(Debug)]
struct ScriptedListener(Box<dyn CmListener>, Arc<Script>);

#[derive(Debug)]
struct ScriptedEndpoint(Box<dyn CmEndpoint>, Arc<Script>);

impl ConnectionManager for ScriptedCm {
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
        let inner = UiwarpCm.listen(addr, backlog)?;
        Ok(Box::new(ScriptedListener(inner, Arc::clone(&self.0))))
    }
}

impl CmListener for ScriptedListener {
    fn poll_request(&self) -> io::Result<Option<IncomingRequest>> {
        Ok(self.0.poll_request()?.map(|r| IncomingRequest {
            endpoint: Box::new(ScriptedEndpoint(r.endpoint, Arc::clone(&self.1))),
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

impl CmEndpoint for ScriptedEndpoint {
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
        if self.1.hold_disconnect.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.0.disconnect(qp)
    }
    fn poll_notice(&self) -> io::Result<Option<CmNotice>> {
        if self.1.report_disconnected.swap(false, Ordering::SeqCst) {
            return Ok(Some(CmNotice::Disconnected));
        }
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
        self.0.disconnect_waits_for_peer()
    }
    fn set_liveness_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.0.set_liveness_timeout(timeout)
    }
    fn end_reason(&self) -> Option<String> {
        self.0.end_reason()
    }
}

/// A connected pair whose accepted end (the first) has the scripted endpoint.
fn scripted_pair(script: &Arc<Script>, opts: &SocketOptions) -> (RdmaSocket, RdmaSocket) {
    let opts = opts.clone();
    let cm = ScriptedCm(Arc::clone(script));
    let l = RdmaListener::bind_via(&cm, "127.0.0.1:0", &opts).expect("bind");
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || l.accept().expect("accept").0);
    let c = RdmaSocket::connect_via(&UiwarpCm, addr, &opts).expect("connect");
    (t.join().expect("accept thread"), c)
}

/// Whether the socket's fd turns readable within `within`.
fn readable_within(s: &RdmaSocket, within: Duration) -> bool {
    let mut fds = [PollFd::new(s.as_fd(), PollFlags::POLLIN)];
    let millis = u16::try_from(within.as_millis()).unwrap_or(u16::MAX);
    nix::poll::poll(&mut fds, PollTimeout::from(millis)).expect("poll") == 1
}

#[test]
fn a_reader_waits_for_the_flush_and_its_fd_wakes_with_the_reset() {
    let script = Arc::new(Script::default());
    let (mut victim, peer) = scripted_pair(&script, &SocketOptions::default());
    victim.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(
        victim.read(&mut buf).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    // DISCONNECTED comes, and the receives are not flushed yet.
    script.hold_disconnect.store(true, Ordering::SeqCst);
    script.report_disconnected.store(true, Ordering::SeqCst);
    victim.shared.lock().pump().expect("pump");
    assert!(
        !script.report_disconnected.load(Ordering::SeqCst),
        "the notice was taken"
    );
    match victim.read(&mut buf) {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("a read before the flush must wait, not end: {other:?}"),
    }
    assert!(
        !readable_within(&victim, Duration::ZERO),
        "nothing to read yet"
    );
    // The queue pair moves to the error state: the flushed receives wake the reader.
    script.hold_disconnect.store(false, Ordering::SeqCst);
    {
        let g = victim.shared.lock();
        g.endpoint.disconnect(&g.res.qp).expect("disconnect");
    }
    assert!(
        readable_within(&victim, Duration::from_secs(10)),
        "the fd did not wake when the flush decided"
    );
    let e = victim
        .read(&mut buf)
        .expect_err("a reset, not end-of-stream");
    assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
    assert!(
        e.to_string()
            .contains("the connection broke without a DISCONNECT message from the peer"),
        "{e}"
    );
    drop(peer);
}

/// A device that never flushes: a blocking reader gets an error once the close timeout
/// passed, never end-of-stream.
#[test]
fn a_device_that_never_flushes_fails_the_reader_after_the_close_timeout() {
    let script = Arc::new(Script::default());
    let timeout = Duration::from_millis(300);
    let opts = SocketOptions::builder()
        .close_timeout(timeout)
        .build()
        .unwrap();
    let (mut victim, peer) = scripted_pair(&script, &opts);
    script.hold_disconnect.store(true, Ordering::SeqCst);
    script.report_disconnected.store(true, Ordering::SeqCst);
    victim.shared.lock().pump().expect("pump");
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let e = victim
        .read(&mut buf)
        .expect_err("an error, not end-of-stream");
    let took = started.elapsed();
    assert!(took >= timeout / 2, "it came after {took:?}");
    assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
    assert!(
        e.to_string().contains("did not flush the posted receives"),
        "{e}"
    );
    script.hold_disconnect.store(false, Ordering::SeqCst);
    drop(victim);
    drop(peer);
}

/// The same under tokio, where no readiness thread ticks a stream without keepalive: the
/// task's own timer brings the error once the close timeout passed.
#[cfg(feature = "tokio")]
#[test]
fn a_device_that_never_flushes_fails_a_tokio_reader_after_the_close_timeout() {
    use ::tokio::io::AsyncReadExt;
    let script = Arc::new(Script::default());
    let timeout = Duration::from_millis(300);
    let opts = SocketOptions::builder()
        .close_timeout(timeout)
        .build()
        .unwrap();
    let (victim, peer) = scripted_pair(&script, &opts);
    script.hold_disconnect.store(true, Ordering::SeqCst);
    script.report_disconnected.store(true, Ordering::SeqCst);
    victim.shared.lock().pump().expect("pump");
    let runtime = ::tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let e = runtime.block_on(async move {
        let mut stream = crate::tokio::RdmaStream::from_std(victim).expect("from_std");
        let mut buf = [0u8; 64];
        let read = ::tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buf));
        read.await
            .expect("the read ended within 20 s")
            .expect_err("an error, not end-of-stream")
    });
    assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
    assert!(
        e.to_string().contains("did not flush the posted receives"),
        "{e}"
    );
    script.hold_disconnect.store(false, Ordering::SeqCst);
    drop(peer);
}
