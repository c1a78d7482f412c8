//! [`Connecting`]: a connect that never blocks, moved on step by step by its owner (an event
//! loop, a future): the connection manager's resolution, the socket's resources, the
//! connection manager's connect carrying our hello, the peer's hello, and the retries from a
//! free port (see [`PORT_RETRIES`]), each step waiting on one epoll fd that watches what the
//! current step waits for.
#![forbid(unsafe_code)]

use super::conn::Connection;
use super::handshake::rsocket_parameters;
use super::options::SocketOptions;
use super::rdma_socket::{explain_reject, port_taken, prepare, RdmaSocket, PORT_RETRIES};
use super::shared::Shared;
use crate::cm::{ConnectionManager, Resolving};
use crate::protocol::Hello;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::time::Instant;

/// A connect in progress, made by [`RdmaSocket::connect_start`] (or
/// [`connect_start_via`](RdmaSocket::connect_start_via)): each
/// [`poll_connect`](Self::poll_connect) moves it on as far as it can without blocking. Between
/// calls, wait until its fd ([`AsFd`], [`AsRawFd`]) is readable or
/// [`deadline`](Self::deadline) passes, whichever comes first; the fd is level-triggered:
/// readable while `poll_connect` may make progress (poll(2), epoll in either mode, mio, tokio's
/// `AsyncFd` all work; it is the same fd for the connect's whole life).
///
/// Dropping it at any stage releases at once everything it holds (the connection manager's
/// id, the queue pair, the memory regions, the fds) without blocking: no disconnect
/// handshake is waited for; a peer that accepted meanwhile sees the connection fail.
pub struct Connecting {
    peer: SocketAddr,
    deadline: Instant,
    opts: SocketOptions,
    /// Retries from a free port left (see [`PORT_RETRIES`]).
    retries_left: usize,
    stage: Stage,
    /// Watches the current stage's fd; this is the fd handed out.
    watcher: Epoll,
}

/// Where a [`Connecting`] stands. (One per connect in flight, moved only between steps: the
/// handshake's connection is kept inline.)
#[allow(clippy::large_enum_variant)]
enum Stage {
    /// The connection manager resolves the address and the route.
    Resolving(Box<dyn Resolving>),
    /// The connection manager's connect runs, carrying our hello; the resolution is kept for
    /// a retry from a free port.
    Handshake {
        conn: Box<Connection>,
        resolution: Box<dyn Resolving>,
    },
    /// `poll_connect` returned the socket or an error.
    Over,
}

/// What one step found.
enum Step {
    /// Go on at once: the stage changed.
    Again,
    /// Wait for the fd.
    Wait,
    Connected(RdmaSocket),
}

impl fmt::Debug for Connecting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stage = match self.stage {
            Stage::Resolving(_) => "resolving",
            Stage::Handshake { .. } => "handshake",
            Stage::Over => "over",
        };
        f.debug_struct("Connecting")
            .field("peer", &self.peer)
            .field("stage", &stage)
            .field("deadline", &self.deadline)
            .finish()
    }
}

impl Connecting {
    /// Starts the resolution of `addr` with `cm`; the connect timeout counts from now.
    pub(crate) fn start(
        cm: &dyn ConnectionManager,
        addr: SocketAddr,
        opts: &SocketOptions,
    ) -> io::Result<Connecting> {
        let deadline = Instant::now() + opts.connect_timeout;
        let watcher = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        let resolution = cm.start_resolve(addr, false, opts.connect_timeout)?;
        let mut c = Connecting {
            peer: addr,
            deadline,
            opts: opts.clone(),
            retries_left: PORT_RETRIES,
            stage: Stage::Resolving(resolution),
            watcher,
        };
        c.watch()?;
        Ok(c)
    }

    /// Moves the connect on as far as it can without blocking.
    ///
    /// `Ok(None)`: not yet; wait until the fd is readable or [`deadline`](Self::deadline)
    /// passes, then call again. `Ok(Some(socket))`: connected (a blocking socket, as
    /// [`RdmaSocket::connect_with`] returns it). An error: the connect failed, with the same
    /// errors as `connect_with` for one address (refused, unreachable, no RDMA device on that
    /// address, a rejection with its reason, an unusable hello), and `TimedOut` from the
    /// deadline on unless the connection is made by then.
    ///
    /// After it returned a socket or an error, the connect is over: everything it held is
    /// released (or in the socket), the fd stays unreadable, and further calls fail with
    /// `NotConnected`.
    pub fn poll_connect(&mut self) -> io::Result<Option<RdmaSocket>> {
        let result = match self.advance() {
            Ok(None) if Instant::now() >= self.deadline => {
                let e = self.timed_out();
                self.stage = Stage::Over;
                Err(e)
            }
            Ok(None) => match self.watch() {
                Ok(()) => Ok(None),
                Err(e) => {
                    self.stage = Stage::Over;
                    Err(e)
                }
            },
            done => {
                self.stage = Stage::Over;
                done
            }
        };
        result.map_err(super::census::at_limit)
    }

    /// When the connect timeout ([`SocketOptions`]' `connect_timeout`, counted from
    /// `connect_start`) ends: a [`poll_connect`](Self::poll_connect) from then on fails with
    /// `TimedOut` unless it finds the connection made.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The address being connected to.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Steps until one has to wait; a failure whose source port TCP holds starts over from a
    /// free port while retries and time are left (as `connect_with` does).
    fn advance(&mut self) -> io::Result<Option<RdmaSocket>> {
        loop {
            match self.step() {
                Ok(Step::Again) => {}
                Ok(Step::Wait) => return Ok(None),
                Ok(Step::Connected(s)) => return Ok(Some(s)),
                Err(e)
                    if port_taken(&e)
                        && self.retries_left > 0
                        && Instant::now() < self.deadline =>
                {
                    self.retries_left -= 1;
                    let resolution = match std::mem::replace(&mut self.stage, Stage::Over) {
                        Stage::Resolving(r) => r,
                        Stage::Handshake { conn, resolution } => {
                            // The failed attempt's resources go before the next one's.
                            drop(conn);
                            resolution
                        }
                        Stage::Over => return Err(e),
                    };
                    let left = self.deadline.saturating_duration_since(Instant::now());
                    self.stage = Stage::Resolving(resolution.retry_from_free_port(left)?);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One step of the current stage.
    fn step(&mut self) -> io::Result<Step> {
        match &mut self.stage {
            Stage::Resolving(resolution) => {
                let Some(endpoint) = resolution.poll()? else {
                    return Ok(Step::Wait);
                };
                let conn = prepare(endpoint, &self.opts)?;
                let left = self.deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(self.resolution_timed_out());
                }
                conn.endpoint
                    .start_connect(&conn.res.qp, &rsocket_parameters(&conn.hello_bytes()), left)
                    .map_err(explain_reject)?;
                let Stage::Resolving(resolution) = std::mem::replace(&mut self.stage, Stage::Over)
                else {
                    unreachable!("matched above");
                };
                self.stage = Stage::Handshake {
                    conn: Box::new(conn),
                    resolution,
                };
                Ok(Step::Again)
            }
            Stage::Handshake { conn, .. } => {
                let Some(peer_data) = conn
                    .endpoint
                    .poll_connect(&conn.res.qp)
                    .map_err(explain_reject)?
                else {
                    return Ok(Step::Wait);
                };
                // The fd lives on in the socket: it no longer wakes this connect's waiters.
                let _ = self.watcher.delete(conn.endpoint.connect_fd());
                let Stage::Handshake { conn, .. } = std::mem::replace(&mut self.stage, Stage::Over)
                else {
                    unreachable!("matched above");
                };
                finish(*conn, self.peer, &peer_data).map(Step::Connected)
            }
            Stage::Over => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                format!(
                    "the connect to {} is over already (poll_connect returned its outcome)",
                    self.peer
                ),
            )),
        }
    }

    /// The error once the deadline passed, in the words of the stage that ran out.
    fn timed_out(&self) -> io::Error {
        match &self.stage {
            Stage::Handshake { conn, .. } => conn.endpoint.connect_timed_out(&conn.res.qp),
            Stage::Resolving(_) | Stage::Over => self.resolution_timed_out(),
        }
    }

    fn resolution_timed_out(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "connecting to {}: resolving its address and route took the whole connect \
                 timeout ({:?})",
                self.peer, self.opts.connect_timeout
            ),
        )
    }

    /// Puts the current stage's fd in the watcher. A stage's fd may be a new file with the
    /// number of one closed since (closing removed it from the watcher): it is taken out and
    /// put in again rather than compared by number.
    fn watch(&mut self) -> io::Result<()> {
        let fd = match &self.stage {
            Stage::Resolving(r) => r.event_fd(),
            Stage::Handshake { conn, .. } => conn.endpoint.connect_fd(),
            Stage::Over => return Ok(()),
        };
        let _ = self.watcher.delete(fd);
        self.watcher
            .add(fd, EpollEvent::new(EpollFlags::EPOLLIN, 0))
            .map_err(|e| io::Error::other(format!("watching the connect's fd: {e}")))
    }
}

/// The connection manager's connect is done and `peer_data` is the peer's hello: the stream is
/// connected.
fn finish(mut conn: Connection, dst: SocketAddr, peer_data: &[u8]) -> io::Result<RdmaSocket> {
    let hello = match Hello::parse(peer_data) {
        Ok(h) => h,
        Err(e) => {
            let _ = conn.endpoint.disconnect(&conn.res.qp);
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{dst} answered with an unusable hello: {e}"),
            ));
        }
    };
    conn.connected(&hello)?;
    conn.pump()?;
    Ok(RdmaSocket {
        shared: Arc::new(Shared::new(conn)?),
    })
}

impl AsFd for Connecting {
    /// An epoll fd, level-triggered: readable while [`poll_connect`](Connecting::poll_connect)
    /// may make progress; the same fd from `connect_start` to the drop.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.watcher.0.as_fd()
    }
}

impl AsRawFd for Connecting {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}
