//! [`RdmaListener`]: accepts RDMA stream connections, like [`std::net::TcpListener`].
#![forbid(unsafe_code)]

use super::cm::{CmListener, ConnectionManager, IncomingRequest};
use super::conn::Connection;
use super::options::SocketOptions;
use super::shared::Shared;
use super::stream::{prepare, RdmaSocket};
use super::uiwarp::AutoCm;
use crate::stream::Hello;
use crate::verbs::Transport;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use std::fmt;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long an iWARP accept waits for the initiator's first frame before it lets its own
/// queued frames go (see [`await_first_frame`]).
const FIRST_FRAME_WAIT: Duration = Duration::from_secs(2);

/// Listens for RDMA stream connections (rsocket peers and rdmasock alike). Clones
/// ([`try_clone`](Self::try_clone)) share the listening id and its nonblocking mode, so
/// several threads can accept from one port; the last one dropped stops listening.
pub struct RdmaListener {
    pub(crate) cm: Arc<dyn CmListener>,
    opts: SocketOptions,
    nonblocking: Arc<AtomicBool>,
    /// The last handshake that failed after the request was taken (see
    /// [`take_error`](Self::take_error)); shared by clones.
    failed: Arc<Mutex<Option<io::Error>>>,
}

impl fmt::Debug for RdmaListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RdmaListener")
            .field("local", &self.cm.local_addr().ok())
            .finish()
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
        Self::bind_via(&AutoCm, addr, opts)
    }

    /// Binds through the connection manager `cm`.
    pub fn bind_via(
        cm: &dyn ConnectionManager,
        addr: impl ToSocketAddrs,
        opts: &SocketOptions,
    ) -> io::Result<RdmaListener> {
        let mut last = None;
        for a in addr.to_socket_addrs()? {
            match cm.listen(a, opts.backlog) {
                Ok(l) => {
                    return Ok(RdmaListener {
                        cm: Arc::from(l),
                        opts: opts.clone(),
                        nonblocking: Arc::new(AtomicBool::new(false)),
                        failed: Arc::new(Mutex::new(None)),
                    })
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
        Ok(self.failed.lock().expect("listener error lock").take())
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.cm.local_addr()
    }

    /// Another handle to this listener, like `TcpListener::try_clone`: each request is
    /// accepted by exactly one of the handles that call `accept`.
    pub fn try_clone(&self) -> io::Result<RdmaListener> {
        Ok(RdmaListener {
            cm: Arc::clone(&self.cm),
            opts: self.opts.clone(),
            nonblocking: Arc::clone(&self.nonblocking),
            failed: Arc::clone(&self.failed),
        })
    }

    /// Moves the listener (and its clones) into or out of nonblocking mode: `accept` then
    /// returns `WouldBlock` when no request waits. A request that waits is answered before
    /// `accept` returns, unlike a TCP listener's (whose kernel finished the handshake
    /// already): `accept` waits for the handshake's last step (rdma_cm's ESTABLISHED, and on
    /// iWARP the peer's first frame), a round trip, or at most the connect timeout.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.nonblocking.store(nonblocking, Ordering::Relaxed);
        Ok(())
    }

    /// Accepts the next connection. A request whose hello is unusable (another protocol or
    /// version, malformed private data) is rejected with the reason as text and skipped; one
    /// whose client goes away or stalls before the handshake ends is skipped too (see
    /// [`take_error`](Self::take_error)).
    pub fn accept(&self) -> io::Result<(RdmaSocket, SocketAddr)> {
        loop {
            let Some(request) = self.cm.poll_request()? else {
                if self.nonblocking.load(Ordering::Relaxed) {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                self.wait()?;
                continue;
            };
            if let Some(accepted) = self.answer(request)? {
                return Ok(accepted);
            }
        }
    }

    /// An iterator over accepted connections (never `None`), like `TcpListener::incoming`.
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming { listener: self }
    }

    fn wait(&self) -> io::Result<()> {
        let mut fds = [PollFd::new(self.cm.event_fd(), PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
            Err(e) => Err(io::Error::other(format!(
                "poll on the listener's rdma_cm fd: {e}"
            ))),
        }
    }

    /// Sets up and accepts one request; `None` when it was rejected.
    fn answer(&self, request: IncomingRequest) -> io::Result<Option<(RdmaSocket, SocketAddr)>> {
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
        let mut conn = prepare(endpoint, &self.opts)?;
        // The peer may write as soon as it has our reply: connected before accepting.
        conn.connected(&hello)?;
        let data = conn.hello_bytes();
        if let Err(e) = conn
            .endpoint
            .accept(&conn.res.qp, &data, self.opts.connect_timeout)
        {
            let from = peer.map_or_else(|| "a client".to_string(), |p| p.to_string());
            let e = io::Error::new(e.kind(), format!("accepting {from}: {e}"));
            *self.failed.lock().expect("listener error lock") = Some(e);
            return Ok(None);
        }
        if conn.res.qp.context().device().transport == Transport::Iwarp {
            await_first_frame(&mut conn, FIRST_FRAME_WAIT.min(self.opts.connect_timeout))?;
        }
        conn.pump()?;
        let socket = RdmaSocket {
            shared: Arc::new(Shared::new(conn)?),
        };
        let peer = match peer {
            Some(p) => p,
            None => socket.peer_addr()?,
        };
        Ok(Some((socket, peer)))
    }
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

/// iWARP responder: waits until the initiator's first frame has arrived (a completion on
/// the queue), without posting the credits our stream has queued, or until `bound` passes.
///
/// MPA (RFC 5044) lets the responder transmit only after the initiator's first FPDU, unless
/// both negotiated peer-to-peer RTR (RFC 6581), which siw as initiator never asks for. The responder's ESTABLISHED comes as soon as its MPA reply is sent; a frame of
/// ours that reaches the initiator before its kernel worker has read that reply is read
/// together with the reply's private data, and siw then fails the connect (CONNECT_ERROR,
/// EINVAL) and drops the TCP connection. rdmasock initiators send their credits as soon as
/// they are connected; the bound lets a silent initiator's connection go on (the initiator
/// has long read the reply by then), at the cost of a slower accept. The bound also ends
/// the wait when siw left our initiator's frames unread (see
/// `CmEndpoint::nudge_after_first_receive`).
fn await_first_frame(conn: &mut Connection, bound: Duration) -> io::Result<()> {
    let end = Instant::now() + bound;
    loop {
        if conn.drain_cq()? {
            return Ok(());
        }
        let channel = &conn.res.cq_channel;
        let mut events = 0;
        while channel.try_get_event()?.is_some() {
            events += 1;
        }
        if events > 0 {
            conn.res.cq.ack_events(events);
        }
        conn.res.cq.req_notify(false)?;
        // A completion that came before the arming raises no event: poll once more.
        if conn.drain_cq()? {
            return Ok(());
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        let ms = i32::try_from(left.as_millis().saturating_add(1)).unwrap_or(i32::MAX);
        let mut fds = [PollFd::new(conn.res.cq_channel.as_fd(), PollFlags::POLLIN)];
        match nix::poll::poll(
            &mut fds,
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                return Err(io::Error::other(format!(
                    "poll on the accepted connection's completion channel: {e}"
                )))
            }
        }
    }
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
