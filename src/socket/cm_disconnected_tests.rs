//! The connection manager's DISCONNECTED before the flushed receives, on a real socket: a
//! nonblocking read says `WouldBlock` (not end-of-stream) while the receives wait to be
//! flushed, and the socket's fd wakes a reader under poll(2) once they are, with the
//! reset the flush decided.
//!
//! The connection manager wraps the userspace one: the test says when its endpoint reports
//! DISCONNECTED, and holds back the queue pair's move to the error state (which flushes the
//! receives) until the test lets it go, as a device that posts the flushed completions late.

use super::wrapped_cm::{EndpointHooks, WrappedCm};
use super::{RdmaListener, RdmaSocket, SocketOptions};
use crate::cm::{CmEndpoint, CmNotice};
use crate::verbs::QueuePair;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use rdmasock_uiwarp::UiwarpCm;
use std::io::{self, ErrorKind, Read};
use std::os::fd::AsFd;
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

impl EndpointHooks for Script {
    fn disconnect(&self, inner: &dyn CmEndpoint, qp: &QueuePair) -> io::Result<()> {
        if self.hold_disconnect.load(Ordering::SeqCst) {
            return Ok(());
        }
        inner.disconnect(qp)
    }
    fn poll_notice(&self, inner: &dyn CmEndpoint) -> io::Result<Option<CmNotice>> {
        if self.report_disconnected.swap(false, Ordering::SeqCst) {
            return Ok(Some(CmNotice::Disconnected));
        }
        inner.poll_notice()
    }
}

/// A connected pair whose accepted end (the first) has the scripted endpoint.
fn scripted_pair(script: &Arc<Script>, opts: &SocketOptions) -> (RdmaSocket, RdmaSocket) {
    let opts = opts.clone();
    let cm = WrappedCm(Arc::clone(script));
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
