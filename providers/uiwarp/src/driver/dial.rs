//! The active side of connection setup, in steps that never block: a nonblocking TCP connect,
//! then the MPA request and reply, which the engine drives. [`connect`] is those steps with
//! poll(2) between them.

use super::cm::{close_endpoint, config_for, core_error, deadline_of, endpoint_of, Rejected};
use super::endpoint::Outcome;
use super::engine;
use super::link::Link;
use super::{Endpoint, Target};
use crate::protocol::Connection;
use mio::unix::SourceFd;
use mio::Interest;
use rdmasock_verbs::{QpState, QueuePair};
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A connect of a uiwarp queue pair in progress: [`Dial::start`] begins it, [`Dial::poll`]
/// moves it on. Between polls, wait until the queue pair's notice fd
/// ([`Endpoint::notice_fd`](super::Endpoint::notice_fd)) is readable: the engine raises it
/// when the TCP connect ends and when the MPA exchange does, so a connect holds no fd of its
/// own beyond the TCP socket. Dropped before it finished, it closes its TCP socket; a queue
/// pair whose MPA exchange runs is closed with the queue pair.
#[derive(Debug)]
pub struct Dial {
    dst: SocketAddr,
    private_data: Vec<u8>,
    timeout: Duration,
    endpoint: Arc<Endpoint>,
    /// The TCP socket while its connect runs; `None` once the MPA exchange runs.
    tcp: Option<Socket>,
}

fn tcp_failed(dst: SocketAddr, e: io::Error) -> io::Error {
    let hint = if e.kind() == io::ErrorKind::ConnectionRefused {
        ": nothing listens on that TCP port (start the server first)"
    } else {
        ""
    };
    io::Error::new(e.kind(), format!("TCP connect to {dst} failed: {e}{hint}"))
}

impl Dial {
    /// Starts connecting `qp` (on uiwarp0, in INIT or RESET) to the iWARP listener at `dst`
    /// with `private_data` in the MPA request: the TCP connect, without waiting for it.
    /// `timeout` is what the whole connect is given (for [`timed_out`](Self::timed_out)'s
    /// words); the caller enforces it. The engine watches the TCP socket until it connects.
    pub fn start(
        qp: &QueuePair,
        dst: SocketAddr,
        private_data: &[u8],
        timeout: Duration,
    ) -> io::Result<Dial> {
        let endpoint = endpoint_of(qp)?;
        {
            let st = endpoint.lock();
            if st.link.is_some() || st.qp_state == QpState::Error {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "QP {} is already connected or in error: use a new QP",
                        endpoint.qpn
                    ),
                ));
            }
        }
        let socket = Socket::new(Domain::for_address(dst), Type::STREAM, Some(Protocol::TCP))
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("creating the TCP socket of a connection to {dst}: {e}"),
                )
            })?;
        socket.set_cloexec(true)?;
        socket.set_nonblocking(true)?;
        match socket.connect(&dst.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(tcp_failed(dst, e)),
        }
        let engine = engine()?;
        {
            let mut st = endpoint.lock();
            let token = engine.add(Target::Dialing(endpoint.clone()));
            let fd = socket.as_raw_fd();
            if let Err(e) = engine.register(&mut SourceFd(&fd), token, Interest::WRITABLE) {
                engine.remove(token);
                return Err(e);
            }
            st.dialing = Some(token);
        }
        Ok(Dial {
            dst,
            private_data: private_data.to_vec(),
            timeout,
            endpoint,
            tcp: Some(socket),
        })
    }

    /// Moves the connect on without blocking: `Ok(Some(private_data))` with the peer's private
    /// data once `qp` is in RTS, `Ok(None)` while the connect runs, an error when it failed
    /// (TCP's, or a rejection with [`Rejected`] inside).
    pub fn poll(&mut self, qp: &QueuePair) -> io::Result<Option<Vec<u8>>> {
        let endpoint = endpoint_of(qp)?;
        if let Some(socket) = &self.tcp {
            if !tcp_done(socket)? {
                return Ok(None);
            }
            if let Some(e) = socket.take_error()? {
                return Err(tcp_failed(self.dst, e));
            }
            let socket = self.tcp.take().expect("checked above");
            endpoint.dial_over(engine()?, socket.as_fd());
            start_mpa(qp, socket.into(), &self.private_data)?;
        }
        match endpoint.take_outcome() {
            Outcome::Connecting => Ok(None),
            Outcome::Established(pd) => {
                qp.assume_state(QpState::ReadyToSend);
                Ok(Some(pd))
            }
            Outcome::Rejected(pd) => {
                close_endpoint(&endpoint, engine()?);
                Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    Rejected {
                        peer: self.dst,
                        private_data: pd,
                    },
                ))
            }
            Outcome::Failed(why) => Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("iWARP connection to {} failed: {why}", self.dst),
            )),
            Outcome::Idle => Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!(
                    "iWARP connection to {}: QP {} left the connection setup",
                    self.dst, endpoint.qpn
                ),
            )),
        }
    }

    /// The error of a connect whose time ran out (TCP's connect, or the MPA reply, did not
    /// come); closes the connection if it got as far as TCP.
    pub fn timed_out(&self, qp: &QueuePair) -> io::Error {
        if self.tcp.is_some() {
            return tcp_failed(
                self.dst,
                io::Error::new(io::ErrorKind::TimedOut, "connection timed out"),
            );
        }
        if let (Ok(endpoint), Ok(engine)) = (endpoint_of(qp), engine()) {
            close_endpoint(&endpoint, engine);
        }
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "iWARP connection to {}: no MPA reply within {:?}; the peer took the TCP \
                 connection but did not answer the MPA request (an overloaded listener, or a \
                 service there that is not an iWARP listener)",
                self.dst, self.timeout
            ),
        )
    }
}

impl Drop for Dial {
    fn drop(&mut self) {
        if let (Some(socket), Ok(engine)) = (&self.tcp, engine()) {
            self.endpoint.dial_over(engine, socket.as_fd());
        }
    }
}

/// Whether the TCP connect of `socket` is over (connected or failed).
fn tcp_done(socket: &Socket) -> io::Result<bool> {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(socket.as_fd(), PollFlags::POLLOUT)];
    match nix::poll::poll(&mut fds, PollTimeout::ZERO) {
        Ok(n) => Ok(n > 0),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(io::Error::from(e)),
    }
}

/// The MPA request on the connected `stream`, for `qp`: the engine takes the connection over.
fn start_mpa(qp: &QueuePair, stream: std::net::TcpStream, private_data: &[u8]) -> io::Result<()> {
    let endpoint = endpoint_of(qp)?;
    let engine = engine()?;
    stream.set_nodelay(true)?;
    stream.set_nonblocking(true)?;
    let mut config = config_for(&stream);
    config.qp_number = endpoint.qpn;
    config.max_send_requests = endpoint.caps.max_send_wr as usize;
    config.max_recv_requests = endpoint.caps.max_recv_wr as usize;
    let mut conn =
        Connection::initiator(config, private_data, Instant::now()).map_err(core_error)?;
    let mut st = endpoint.lock();
    for r in std::mem::take(&mut st.early_recvs).into_works() {
        conn.post_recv(r).map_err(core_error)?;
    }
    let token = engine.add(Target::Endpoint(endpoint.clone()));
    let mut link = Link::new(conn, mio::net::TcpStream::from_std(stream), token);
    link.set_liveness_timeout(st.liveness_timeout);
    link.register(engine)?;
    st.local = link.local;
    st.peer = link.peer;
    st.link = Some(link);
    st.outcome = Outcome::Connecting;
    endpoint.watch_socket(&st);
    endpoint.drive(&mut st, engine);
    Ok(())
}

/// Connects `qp` (on uiwarp0, in INIT or RESET) to the iWARP listener at `dst`: TCP connect,
/// MPA request with `private_data`, reply, RTR. Returns the peer's private data once `qp` is
/// in RTS. Receives posted before are kept. The steps of [`Dial`], waiting between them.
pub fn connect(
    qp: &QueuePair,
    dst: SocketAddr,
    private_data: &[u8],
    timeout: Duration,
) -> io::Result<Vec<u8>> {
    let deadline = deadline_of(timeout);
    let mut dial = Dial::start(qp, dst, private_data, timeout)?;
    let endpoint = endpoint_of(qp)?;
    loop {
        if let Some(pd) = dial.poll(qp)? {
            return Ok(pd);
        }
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            return Err(dial.timed_out(qp));
        }
        wait_readable(endpoint.notice_fd(), left)?;
    }
}

/// Waits until `fd` is readable or `timeout` (`None`: forever) passes.
fn wait_readable(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<()> {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    let ms = match timeout {
        None => PollTimeout::NONE,
        Some(t) => {
            PollTimeout::try_from(t.as_nanos().div_ceil(1_000_000)).unwrap_or(PollTimeout::MAX)
        }
    };
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    match nix::poll::poll(&mut fds, ms) {
        Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
        Err(e) => Err(io::Error::from(e)),
    }
}
