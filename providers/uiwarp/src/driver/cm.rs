//! Connection setup, the userspace stand-in for rdma_cm: a listener on a TCP port, connect,
//! accept/reject with private data in the MPA frames, and disconnect. A queue pair reaches
//! RTS by itself when the MPA exchange (and in peer-to-peer mode the RTR) completes.

use super::endpoint::{Endpoint, Outcome};
use super::link::Link;
use super::pending::{close_or_watch, NoMemory, Pending};
use super::{engine, Engine, Target};
use crate::protocol::{Config, ConnectRequest, Connection, ProtocolError};
use mio::{Interest, Token};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use rdmasock_verbs::{QpState, QueuePair};
use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// The responder refused the connection (an MPA reply with the reject bit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// Who rejected it.
    pub peer: SocketAddr,
    /// The responder's private data (often a reason in text).
    pub private_data: Vec<u8>,
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} rejected the iWARP connection (MPA reject)",
            self.peer
        )
    }
}

impl std::error::Error for Rejected {}

pub(super) fn core_error(e: ProtocolError) -> io::Error {
    let kind = match e {
        ProtocolError::PrivateDataTooLong { .. } => io::ErrorKind::InvalidInput,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e)
}

/// The driver's side of a uiwarp QP: its connection notices and addresses.
pub fn endpoint(qp: &QueuePair) -> io::Result<Arc<Endpoint>> {
    endpoint_of(qp)
}

pub(super) fn endpoint_of(qp: &QueuePair) -> io::Result<Arc<Endpoint>> {
    qp.ops()
        .as_any()
        .downcast_ref::<Arc<Endpoint>>()
        .cloned()
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "QP {} is on {} (provider {}), not on the userspace iWARP device uiwarp0",
                    qp.qp_num(),
                    qp.context().device().name,
                    qp.context().provider_name()
                ),
            )
        })
}

/// Whether MPA CRC is requested: yes unless `RDMASOCK_UIWARP_CRC=0`. RFC 5044 uses CRC32c
/// when either side sets the C flag, so a peer that asks (siw with `mpa_crc_required`) gets
/// it either way; `RDMASOCK_UIWARP_CRC=0` only stops us from asking, which leaves the bytes to
/// TCP's checksum when the peer does not ask either (as siw by default).
fn crc_wanted() -> bool {
    std::env::var("RDMASOCK_UIWARP_CRC").map_or(true, |v| v != "0")
}

pub(super) fn config_for(socket: &std::net::TcpStream) -> Config {
    let mss = socket2::SockRef::from(socket).mss().unwrap_or(1460) as usize;
    Config {
        mulpdu: Config::mulpdu_for_mss(mss),
        crc: crc_wanted(),
        ..Config::default()
    }
}

/// Waits until the endpoint's setup has an outcome, or `deadline`.
fn wait_outcome(endpoint: &Endpoint, deadline: Option<Instant>) -> Outcome {
    let mut st = endpoint.lock();
    loop {
        if !matches!(st.outcome, Outcome::Connecting) {
            drop(st);
            return endpoint.take_outcome();
        }
        match deadline {
            None => st = endpoint.changed.wait(st).expect("uiwarp endpoint lock"),
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return Outcome::Connecting;
                }
                st = endpoint
                    .changed
                    .wait_timeout(st, d - now)
                    .expect("uiwarp endpoint lock")
                    .0;
            }
        }
    }
}

/// Whether the connection [`UiwarpRequest::start_accept`] began on `qp` is established:
/// `Ok(true)` once the initiator's ready-to-receive arrived (`qp` is then in RTS), `Ok(false)`
/// while it has not, an error when the connection failed. Does not block.
pub fn accepted(qp: &QueuePair) -> io::Result<bool> {
    let endpoint = endpoint_of(qp)?;
    match endpoint.take_outcome() {
        Outcome::Connecting => Ok(false),
        Outcome::Established(_) => {
            qp.assume_state(QpState::ReadyToSend);
            Ok(true)
        }
        failed => {
            let why = match failed {
                Outcome::Failed(why) => why,
                other => format!("{other:?}"),
            };
            Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("accepting the iWARP connection failed: {why}"),
            ))
        }
    }
}

pub(super) fn deadline_of(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

/// Disconnects `qp`: its outstanding requests are flushed, what was already handed to TCP is
/// delivered, then TCP is closed (the peer sees a disconnect). The QP is in ERR afterwards.
pub fn disconnect(qp: &QueuePair) -> io::Result<()> {
    let endpoint = endpoint_of(qp)?;
    let engine = engine()?;
    close_endpoint(&endpoint, engine);
    qp.assume_state(QpState::Error);
    Ok(())
}

/// Closes an endpoint's connection (idempotent).
pub(crate) fn close_endpoint(endpoint: &Endpoint, engine: &Engine) {
    let mut st = endpoint.lock();
    // Posts held for doorbell coalescing were handed over like any other: they are written
    // (or queued for TCP, as a post that found TCP full is) before the close flushes what the
    // core has not framed.
    endpoint.flush(&mut st, engine);
    if let Some(link) = st.link.as_mut() {
        link.conn.close();
    }
    st.qp_state = QpState::Error;
    endpoint.flush(&mut st, engine);
}

/// Accepted TCP connections whose MPA request has not come yet, at most, per listener: a
/// newer one closes the oldest. Each holds an fd and a little memory until its request comes
/// or [`Config::request_timeout`] ends it, so a flood of clients that connect and stay silent
/// must not take the process's fds; the newest are kept, since a client that is about to send
/// its request is more likely among them. Apart from the listen backlog, which bounds the
/// requests waiting for the application.
pub(crate) const HALF_OPEN_MOST: usize = 128;

/// How soon the listener tries `accept` again after it failed for want of fds or memory
/// (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`): the connections stay in the kernel's queue, and
/// under edge-triggered readiness no new edge would announce them.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// A listening TCP socket whose connections speak MPA.
#[derive(Debug)]
pub(crate) struct ListenerShared {
    socket: Mutex<mio::net::TcpListener>,
    token: Mutex<Option<Token>>,
    requests: Mutex<VecDeque<UiwarpRequest>>,
    /// Accepted connections whose MPA request has not come yet, oldest first (see
    /// [`HALF_OPEN_MOST`]).
    half_open: Mutex<VecDeque<Weak<Pending>>>,
    fd: EventFd,
    local: SocketAddr,
    backlog: usize,
}

/// Whether `accept` failed for want of a resource that may come back (fds, memory).
fn out_of_resources(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

impl ListenerShared {
    /// Accepts every waiting TCP connection; each waits for its MPA request.
    pub(crate) fn accept_all(self: &Arc<Self>, engine: &Engine) {
        loop {
            let accepted = self.socket.lock().expect("uiwarp listener lock").accept();
            let (stream, _) = match accepted {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if out_of_resources(&e) => {
                    // The connections wait in the kernel's queue: look again soon.
                    if let Some(token) = *self.token.lock().expect("uiwarp listener lock") {
                        engine.set_timer(token, Some(Instant::now() + ACCEPT_RETRY));
                    }
                    return;
                }
                Err(_) => return,
            };
            if self.requests.lock().expect("uiwarp requests").len() >= self.backlog {
                continue;
            }
            self.make_room_for_half_open(engine);
            let std_stream: std::net::TcpStream = stream.into();
            let _ = std_stream.set_nodelay(true);
            let config = config_for(&std_stream);
            let conn = Connection::responder(config, Instant::now());
            let pending = Arc::new(Pending {
                link: Mutex::new(None),
                listener: Arc::downgrade(self),
                offered: AtomicBool::new(false),
            });
            let token = engine.add(Target::Pending(pending.clone()));
            let mut link = Link::new(conn, mio::net::TcpStream::from_std(std_stream), token);
            if link.register(engine).is_err() {
                engine.remove(token);
                continue;
            }
            engine.set_timer(token, link.next_timer());
            *pending.link.lock().expect("uiwarp pending lock") = Some(link);
            self.half_open
                .lock()
                .expect("uiwarp half-open lock")
                .push_back(Arc::downgrade(&pending));
            pending.progress(engine);
        }
    }

    /// Forgets the half-open connections that sent their request or ended, then closes the
    /// oldest ones until there is room for one more (see [`HALF_OPEN_MOST`]).
    fn make_room_for_half_open(&self, engine: &Engine) {
        let mut evicted = Vec::new();
        {
            let mut half_open = self.half_open.lock().expect("uiwarp half-open lock");
            half_open.retain(|p| p.upgrade().is_some_and(|p| p.half_open()));
            while half_open.len() >= HALF_OPEN_MOST {
                evicted.extend(half_open.pop_front().and_then(|p| p.upgrade()));
            }
        }
        for p in evicted {
            p.evict(engine);
        }
    }

    /// Queues a request for the application.
    pub(crate) fn offer(
        &self,
        pending: Arc<Pending>,
        request: ConnectRequest,
        local: Option<SocketAddr>,
        peer: Option<SocketAddr>,
    ) {
        let mut q = self.requests.lock().expect("uiwarp requests");
        if q.is_empty() {
            let _ = self.fd.write(1);
        }
        q.push_back(UiwarpRequest {
            pending: Some(pending),
            request,
            local,
            peer,
        });
    }
}

/// Listens on a TCP port for iWARP connections (rdma_listen's userspace twin).
#[derive(Debug)]
pub struct UiwarpListener {
    shared: Arc<ListenerShared>,
}

impl UiwarpListener {
    /// Binds to `addr` (port 0 picks one) and listens with `backlog` (0: 128).
    pub fn bind(addr: SocketAddr, backlog: u32) -> io::Result<UiwarpListener> {
        let engine = engine()?;
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("creating the TCP socket to listen on {addr}: {e}"),
            )
        })?;
        socket.set_reuse_address(true)?;
        socket
            .bind(&addr.into())
            .map_err(|e| io::Error::new(e.kind(), format!("binding {addr} for uiwarp: {e}")))?;
        let backlog = if backlog == 0 { 128 } else { backlog };
        socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
        socket.set_nonblocking(true)?;
        let std_listener: std::net::TcpListener = socket.into();
        let local = std_listener.local_addr()?;
        let listener = mio::net::TcpListener::from_std(std_listener);
        let fd = EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(|e| {
            let e = io::Error::from(e);
            io::Error::new(
                e.kind(),
                format!("creating the eventfd of a uiwarp listener on {addr}: {e}"),
            )
        })?;
        let shared = Arc::new(ListenerShared {
            socket: Mutex::new(listener),
            token: Mutex::new(None),
            requests: Mutex::new(VecDeque::new()),
            half_open: Mutex::new(VecDeque::new()),
            fd,
            local,
            backlog: backlog as usize,
        });
        let token = engine.add(Target::Listener(shared.clone()));
        let registered = engine.register(
            &mut *shared.socket.lock().expect("uiwarp listener lock"),
            token,
            Interest::READABLE,
        );
        if let Err(e) = registered {
            engine.remove(token);
            return Err(e);
        }
        *shared.token.lock().expect("uiwarp listener lock") = Some(token);
        shared.accept_all(engine);
        Ok(UiwarpListener { shared })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local
    }

    /// The next connection request, without blocking.
    pub fn try_request(&self) -> Option<UiwarpRequest> {
        let mut q = self.shared.requests.lock().expect("uiwarp requests");
        let r = q.pop_front();
        if r.is_some() && q.is_empty() {
            let _ = self.shared.fd.read();
        }
        r
    }

    /// Waits up to `timeout` (`None`: forever) for a connection request.
    pub fn get_request(&self, timeout: Option<Duration>) -> io::Result<UiwarpRequest> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            if let Some(r) = self.try_request() {
                return Ok(r);
            }
            let wait = match deadline {
                None => PollTimeout::NONE,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!(
                                "no iWARP connection request on {} in time",
                                self.shared.local
                            ),
                        ));
                    }
                    PollTimeout::try_from(left.as_millis().clamp(1, i32::MAX as u128) as i32)
                        .unwrap_or(PollTimeout::MAX)
                }
            };
            let mut fds = [PollFd::new(self.shared.fd.as_fd(), PollFlags::POLLIN)];
            match nix::poll::poll(&mut fds, wait) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(io::Error::from(e)),
            }
        }
    }
}

impl AsFd for UiwarpListener {
    /// Readable while a connection request waits.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.shared.fd.as_fd()
    }
}

impl Drop for UiwarpListener {
    fn drop(&mut self) {
        if let Ok(engine) = engine() {
            engine.deregister(&mut *self.shared.socket.lock().expect("uiwarp listener lock"));
            if let Some(t) = self
                .shared
                .token
                .lock()
                .expect("uiwarp listener lock")
                .take()
            {
                engine.remove(t);
            }
        }
        self.shared
            .requests
            .lock()
            .expect("uiwarp requests")
            .clear();
    }
}

/// A connection request: the initiator's MPA request, waiting for accept or reject. Dropped
/// unanswered, it is rejected.
#[derive(Debug)]
pub struct UiwarpRequest {
    pending: Option<Arc<Pending>>,
    request: ConnectRequest,
    local: Option<SocketAddr>,
    peer: Option<SocketAddr>,
}

impl UiwarpRequest {
    /// The initiator's private data.
    pub fn private_data(&self) -> &[u8] {
        &self.request.private_data
    }

    /// The initiator's IRD and ORD, if it sent them.
    pub fn ird_ord(&self) -> (Option<u16>, Option<u16>) {
        (self.request.ird, self.request.ord)
    }

    /// Our address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local
    }

    /// The initiator's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// Accepts on `qp` (on uiwarp0, in RESET or INIT; receives posted before are kept),
    /// replying with `private_data`; returns once `qp` is in RTS (peer-to-peer mode: the
    /// initiator's RTR arrived) or fails after `timeout`.
    pub fn accept(self, qp: &QueuePair, private_data: &[u8], timeout: Duration) -> io::Result<()> {
        let deadline = deadline_of(timeout);
        self.start_accept(qp, private_data)?;
        let endpoint = endpoint_of(qp)?;
        match wait_outcome(&endpoint, deadline) {
            Outcome::Connecting => {
                close_endpoint(&endpoint, engine()?);
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("accepted iWARP connection: no ready-to-receive from the initiator within {timeout:?}"),
                ))
            }
            _ => accepted(qp).map(|_| ()),
        }
    }

    /// The first half of [`accept`](Self::accept), which returns at once: replies on `qp`
    /// with `private_data`. [`accepted`] then tells when `qp` reached RTS; the QP's
    /// [`Endpoint::notice_fd`] turns readable when that may have changed.
    pub fn start_accept(mut self, qp: &QueuePair, private_data: &[u8]) -> io::Result<()> {
        let endpoint = endpoint_of(qp)?;
        let engine = engine()?;
        let pending = self.pending.take().expect("a request is answered once");
        let gone = || {
            io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the initiator went away before the accept (TCP closed or the request timed out)",
            )
        };
        let mut link = pending
            .link
            .lock()
            .expect("uiwarp pending lock")
            .take()
            .ok_or_else(gone)?;
        let mut st = endpoint.lock();
        if st.link.is_some() || st.qp_state == QpState::Error {
            drop(st);
            *pending.link.lock().expect("uiwarp pending lock") = Some(link);
            pending.abandon(engine);
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "QP {} is already connected or in error: use a new QP",
                    endpoint.qpn
                ),
            ));
        }
        link.set_liveness_timeout(st.liveness_timeout);
        link.conn.set_queue_pair(
            endpoint.qpn,
            endpoint.caps.max_send_wr as usize,
            endpoint.caps.max_recv_wr as usize,
        );
        for r in std::mem::take(&mut st.early_recvs).into_works() {
            link.conn.post_recv(r).map_err(core_error)?;
        }
        link.conn
            .accept(private_data, Instant::now())
            .map_err(core_error)?;
        engine.replace(link.token, Target::Endpoint(endpoint.clone()));
        st.local = link.local;
        st.peer = link.peer;
        st.outcome = Outcome::Connecting;
        {
            let regions = endpoint.regions.read().expect("uiwarp regions lock");
            let memory = crate::memory::QpMemory {
                regions: &regions,
                inline: &st.inline,
            };
            // Bytes that arrived while the application decided.
            link.conn.handle_input(&[], &memory);
        }
        st.link = Some(link);
        endpoint.watch_socket(&st);
        endpoint.drive(&mut st, engine);
        Ok(())
    }

    /// Rejects the request with `private_data` (a short reason).
    pub fn reject(mut self, private_data: &[u8]) -> io::Result<()> {
        let engine = engine()?;
        let pending = self.pending.take().expect("a request is answered once");
        reject_pending(&pending, private_data, engine)
    }
}

fn reject_pending(pending: &Pending, private_data: &[u8], engine: &Engine) -> io::Result<()> {
    let mut guard = pending.link.lock().expect("uiwarp pending lock");
    let Some(link) = guard.as_mut() else {
        return Ok(());
    };
    link.conn.reject(private_data).map_err(core_error)?;
    link.flush(&NoMemory);
    close_or_watch(&mut guard, engine);
    Ok(())
}

impl Drop for UiwarpRequest {
    fn drop(&mut self) {
        if let Some(p) = self.pending.take() {
            if let Ok(engine) = engine() {
                let _ = reject_pending(&p, &[], engine);
            }
        }
    }
}
