//! [`RdmaListener`]: accepts RDMA stream connections, like [`std::net::TcpListener`].
#![forbid(unsafe_code)]

use super::answering::{register, Registration, KERNEL_QUEUE};
use super::conn::InitQpFailed;
use super::handshake::{accept_failure, rsocket_parameters, Backlog, Handshake, FIRST_FRAME_WAIT};
use super::options::SocketOptions;
use super::rdma_socket::{prepare, RdmaSocket};
use super::shared::Shared;
use crate::cm::{CmListener, ConnectionManager, IncomingRequest};
use crate::protocol::Hello;
use nix::sys::epoll::Epoll;
use std::fmt;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Listens for RDMA stream connections (rsocket peers and rdmasock alike). Clones
/// ([`try_clone`](Self::try_clone)) share the listening id and its nonblocking mode, so
/// several threads can accept from one port; the last one dropped stops listening.
///
/// On the kernel's siw (soft-iWARP) of Linux 6.1, a TCP client that connects to the port
/// and closes at once (a port scanner, a TCP health check) can kill the kernel's listener:
/// later clients are refused and `accept` waits for ever, since the connection manager
/// reports nothing (a siw bug; rdma-core's listeners die the same way). Keep such clients
/// off siw ports, or listen on the userspace provider, which is not affected.
pub struct RdmaListener {
    /// The listener's place under the answering thread, shared by clones.
    answering: Arc<Registration>,
    pub(crate) cm: Arc<dyn CmListener>,
    opts: SocketOptions,
    nonblocking: Arc<AtomicBool>,
    /// Answered requests whose handshake still runs; shared by clones.
    backlog: Arc<Mutex<Backlog>>,
    /// The last handshake that failed (see [`take_error`](Self::take_error)); shared by
    /// clones, and apart from the backlog, which `accept` holds while it advances handshakes.
    failed: Arc<Mutex<Option<io::Error>>>,
    /// The handed-out fd (the backlog's own epoll), shared by clones.
    pub(crate) fd: Arc<Epoll>,
}

impl fmt::Debug for RdmaListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RdmaListener")
            .field("local", &self.cm.local_addr().ok())
            .finish()
    }
}

impl Drop for RdmaListener {
    /// In a child made by `fork` the listener and the handshakes in its backlog are the
    /// parent's: dropping them there leaves them alone (see `RdmaSocket`'s drop).
    fn drop(&mut self) {
        if crate::verbs::in_forked_child() {
            std::mem::forget((
                Arc::clone(&self.cm),
                Arc::clone(&self.backlog),
                Arc::clone(&self.answering),
            ));
        } else if Arc::strong_count(&self.answering) == 1 {
            // The last handle: its handshakes and kept devices go now, outside the lock.
            let held = self.backlog().let_go();
            drop(held);
        }
    }
}

impl RdmaListener {
    /// Binds to `addr` (the first resolved address that works; port 0 picks one) and listens,
    /// with the default options. An address on no RDMA device is refused with the list of
    /// devices.
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<RdmaListener> {
        Self::bind_with(addr, &SocketOptions::default())
    }

    /// Binds with `opts`, which every accepted connection uses.
    pub fn bind_with(addr: impl ToSocketAddrs, opts: &SocketOptions) -> io::Result<RdmaListener> {
        Self::bind_via(crate::registry::connection_manager(), addr, opts)
    }

    /// Binds through the connection manager `cm`.
    pub fn bind_via(
        cm: &dyn ConnectionManager,
        addr: impl ToSocketAddrs,
        opts: &SocketOptions,
    ) -> io::Result<RdmaListener> {
        crate::verbs::fork::note_owner();
        let mut last = None;
        for a in addr.to_socket_addrs()? {
            match cm.listen(a, opts.backlog.max(KERNEL_QUEUE)) {
                Ok(l) => {
                    let cm: Arc<dyn CmListener> = Arc::from(l);
                    let backlog = Backlog::new(cm.event_fd())?;
                    let fd = backlog.own();
                    let backlog = Arc::new(Mutex::new(backlog));
                    let failed = Arc::default();
                    let answering = Arc::new(register(&cm, &backlog, opts, &failed)?);
                    return Ok(RdmaListener {
                        answering,
                        cm,
                        opts: opts.clone(),
                        nonblocking: Arc::new(AtomicBool::new(false)),
                        fd,
                        backlog,
                        failed,
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the address resolved to no socket address",
            )
        }))
    }

    /// The last handshake that failed after [`accept`](Self::accept) took its request (the
    /// client went away or stalled before the connection was established), once; `None`
    /// when there was none since the last call. `accept` itself goes on to the next request,
    /// as a TCP listener never shows such a connection.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        Ok(self.failed.lock().unwrap_or_else(|p| p.into_inner()).take())
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.cm.local_addr()
    }

    /// Another handle to this listener, like `TcpListener::try_clone`: each request is
    /// accepted by exactly one of the handles that call `accept`.
    pub fn try_clone(&self) -> io::Result<RdmaListener> {
        Ok(RdmaListener {
            answering: Arc::clone(&self.answering),
            cm: Arc::clone(&self.cm),
            opts: self.opts.clone(),
            nonblocking: Arc::clone(&self.nonblocking),
            backlog: Arc::clone(&self.backlog),
            failed: Arc::clone(&self.failed),
            fd: Arc::clone(&self.fd),
        })
    }

    /// Moves the listener (and its clones) into or out of nonblocking mode: `accept` then
    /// returns `WouldBlock` when no connection is ready.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.nonblocking.store(nonblocking, Ordering::Relaxed);
        Ok(())
    }

    /// Accepts the next connection whose handshake has finished. Every request that waits is
    /// answered at once, and its connection returned when the handshake's last step comes (a
    /// round trip later), so a slow or stalled client holds up no other. A request whose hello
    /// is unusable (another protocol or version, malformed private data) is rejected with the
    /// reason as text and skipped; one whose client goes away or stalls before the handshake
    /// ends is dropped (within the connect timeout) and skipped too (see
    /// [`take_error`](Self::take_error)). Requests are answered as they come whether or not
    /// anyone calls `accept` (by the process's `rdmasock-listen` thread), up to the listen
    /// backlog's worth of connections under way or waiting for `accept`; a request beyond
    /// them is rejected at once, the client's connect failing with `ConnectionRefused` and
    /// "the listener's backlog (N) is full of connections waiting for accept".
    pub fn accept(&self) -> io::Result<(RdmaSocket, SocketAddr)> {
        let first_frame_bound = FIRST_FRAME_WAIT.min(self.opts.connect_timeout);
        // Handshakes under way at once, at most: each holds a queue pair and its rings, so a
        // flood of stalling clients must not take more than the listen backlog. Requests
        // beyond it wait in the connection manager's queue until the answering thread
        // rejects them (or this loop answers them, once there is room).
        let most = self.opts.backlog as usize;
        let mut backlog = self.backlog();
        loop {
            if let Some(e) = backlog.take_notice() {
                return Err(e);
            }
            while backlog.len() < most {
                let Some(request) = self.cm.poll_request()? else {
                    break;
                };
                if let Some(h) = answer(&self.opts, &self.failed, request)? {
                    backlog.push(h)?;
                }
            }
            if let Some(h) = backlog.take_ready(first_frame_bound, &self.failed)? {
                backlog.own_listen(self.cm.event_fd(), most)?;
                drop(backlog);
                return finish(h);
            }
            if self.nonblocking.load(Ordering::Relaxed) {
                backlog.own_listen(self.cm.event_fd(), most)?;
                backlog.arm_timer()?;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            // A full backlog takes no request: wait for its handshakes only. The wait holds
            // no lock: a clone's nonblocking accept goes on meanwhile.
            let listener_fd = (backlog.len() < most).then(|| self.cm.event_fd());
            let waiting = backlog.wait_set(listener_fd)?;
            drop(backlog);
            waiting.wait()?;
            backlog = self.backlog();
        }
    }

    /// An iterator over accepted connections (never `None`), like `TcpListener::incoming`.
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming { listener: self }
    }

    pub(crate) fn backlog(&self) -> MutexGuard<'_, Backlog> {
        self.backlog.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Sets up one request's connection (with the listener's `opts`) and accepts it; `None` when
/// it was rejected or its client is gone (kept in `failed` for `take_error`).
pub(crate) fn answer(
    opts: &SocketOptions,
    failed: &Mutex<Option<io::Error>>,
    request: IncomingRequest,
) -> io::Result<Option<Handshake>> {
    let IncomingRequest {
        endpoint,
        private_data,
    } = request;
    let hello = match Hello::parse(&private_data) {
        Ok(h) => h,
        Err(e) => {
            let reason = reject_reason(
                &format!("rdmasock: {e}"),
                crate::cm::id::IB_REJECT_PRIVATE_DATA_MAX,
            );
            let _ = endpoint.reject(reason.as_bytes());
            return Ok(None);
        }
    };
    let peer = endpoint.peer_addr();
    let mut conn = match prepare(endpoint, opts) {
        Ok(conn) => conn,
        // The request is no longer valid (its client gave up): skip it.
        Err(e) if e.get_ref().is_some_and(|inner| inner.is::<InitQpFailed>()) => {
            record_failure(failed, peer, e);
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    // The peer may write as soon as it has our reply: connected before accepting.
    conn.connected(&hello)?;
    let data = conn.hello_bytes();
    if let Err(e) = conn
        .endpoint
        .start_accept(&conn.res.qp, &rsocket_parameters(&data))
    {
        // The client went away before the answer (uiwarp: its TCP connection closed).
        record_failure(failed, peer, e);
        return Ok(None);
    }
    Ok(Some(Handshake::new(conn, peer, opts.connect_timeout)))
}

/// Keeps `e`, about the request from `peer`, for [`RdmaListener::take_error`].
fn record_failure(failed: &Mutex<Option<io::Error>>, peer: Option<SocketAddr>, e: io::Error) {
    let e = accept_failure(peer, e.kind(), e);
    *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
}

/// The socket of an established connection.
fn finish(h: Handshake) -> io::Result<(RdmaSocket, SocketAddr)> {
    let (mut conn, peer) = h.finish();
    conn.pump()?;
    let socket = RdmaSocket {
        shared: Arc::new(Shared::new(conn)?),
    };
    let peer = match peer {
        Some(p) => p,
        None => socket.peer_addr()?,
    };
    Ok((socket, peer))
}

/// `text` cut to `max` bytes for a reject's private data: at a word boundary, with "…" in
/// place of what is left out (IB's REJECT carries only 148 bytes).
fn reject_reason(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    const MORE: &str = "…";
    let mut end = max - MORE.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text[..end].rfind(' ').unwrap_or(end);
    format!(
        "{}{MORE}",
        text[..cut].trim_end_matches([' ', ',', ':', '('])
    )
}

/// The iterator of [`RdmaListener::incoming`].
#[derive(Debug)]
pub struct Incoming<'a> {
    listener: &'a RdmaListener,
}

impl Iterator for Incoming<'_> {
    type Item = io::Result<RdmaSocket>;
    fn next(&mut self) -> Option<io::Result<RdmaSocket>> {
        Some(self.listener.accept().map(|(s, _)| s))
    }
}

#[cfg(test)]
mod tests {
    use super::reject_reason;

    #[test]
    fn a_reject_reason_is_cut_at_a_word_within_the_limit() {
        assert_eq!(reject_reason("rdmasock: short", 148), "rdmasock: short");
        let long = "rdmasock: connection private data is 18 bytes, shorter than the 40-byte \
                    rsocket hello: the peer is not an rsocket/rdmasock stream endpoint (reject \
                    the connection)";
        let cut = reject_reason(long, 148);
        assert!(cut.len() <= 148, "{} bytes", cut.len());
        assert!(cut.ends_with("endpoint…"), "{cut}");
        // A limit inside a multi-byte character, and text without spaces.
        assert_eq!(reject_reason("ééééé", 6), "é…");
        assert_eq!(reject_reason("abcdefgh", 6), "abc…");
    }

    /// Like `TcpStream` and `TcpListener`, both move to and are shared between threads.
    #[test]
    fn sockets_and_listeners_are_send_and_sync() {
        fn send_and_sync<T: Send + Sync>() {}
        send_and_sync::<super::RdmaListener>();
        send_and_sync::<crate::RdmaSocket>();
    }
}
