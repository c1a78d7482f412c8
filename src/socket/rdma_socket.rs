//! [`RdmaSocket`]: a connected RDMA byte stream with `TcpStream`'s API.
#![forbid(unsafe_code)]

use super::conn::{Connection, Resources};
use super::connecting::Connecting;
use super::options::SocketOptions;
use super::shared::{Direction, Shared};
use super::wait::WaitStats;
use crate::cm::{CmEndpoint, ConnectionManager};
use crate::protocol::StreamError;
use std::fmt;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A connected RDMA stream (rsocket's wire protocol over an RC queue pair), used like
/// [`std::net::TcpStream`]: `Read`/`Write` on the socket and on `&RdmaSocket`, half-close,
/// timeouts, nonblocking mode, [`mio`] readiness and a readiness fd for other event loops
/// ([`AsFd`](std::os::fd::AsFd): see the crate's documentation). Clones ([`try_clone`](Self::try_clone))
/// share the connection; the last one to drop closes it gracefully: end-of-stream after the
/// queued data, then the disconnect handshake, bounded by the options' close timeout.
///
/// Where it differs from `TcpStream`:
/// * dropping the last handle waits (up to the close timeout, 2 s by default) until the
///   peer has the queued bytes, where a TCP socket leaves that to the kernel, and gives up
///   telling whether it got there: [`close`](Self::close) closes the same way and returns
///   what went wrong (a failed connection, bytes lost, the timeout); on an iWARP
///   device (siw) until the peer has closed too, because there a completion means only that
///   the device's TCP took the bytes, and disconnecting earlier lets the peer's late
///   segments reset the TCP connection and lose what it still held (so a thread that
///   holds both ends there should [`shutdown`](Self::shutdown) both before it drops
///   either, or the first drop waits out the close timeout for a peer nobody drives);
/// * a blocking [`flush`](Write::flush) waits until every written byte is in the peer's
///   memory (on a nonblocking socket it returns at once, like `TcpStream`'s); on iWARP
///   (the userspace provider, the kernel's siw, and the two mixed) a one-byte RDMA READ of
///   the peer's target list after the bytes proves it, and against an rsocket peer on
///   iWARP `Ok` says only that the device's TCP took them;
/// * [`connect`](Self::connect) gives up after the options' connect timeout (10 s by
///   default), not the kernel's TCP retry limit;
/// * its fd (`AsFd`, `AsRawFd`) is a readiness fd, not the transport (the connection is a
///   queue pair): it is only waited on, readable while a call may go on (see the crate's
///   documentation), and `read(2)`/`write(2)` on it do not move stream bytes;
/// * `set_ttl`/`ttl` do not exist (rdma_cm chooses the route), and
///   [`set_nodelay`](Self::set_nodelay) matters only on the userspace provider, which
///   may hold a write for a few microseconds to send it with the next ones (never past a
///   read or a wait on the socket; see there).
pub struct RdmaSocket {
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for RdmaSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RdmaSocket")
            .field("local", &self.shared.endpoint().local_addr())
            .field("peer", &self.shared.endpoint().peer_addr())
            .finish()
    }
}

fn addrs(addr: impl ToSocketAddrs) -> io::Result<Vec<SocketAddr>> {
    let list: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
    if list.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the address resolved to no socket address",
        ));
    }
    Ok(list)
}

impl RdmaSocket {
    /// Connects to `addr` (each resolved address in turn, like `TcpStream::connect`) with the
    /// default options.
    pub fn connect(addr: impl ToSocketAddrs) -> io::Result<RdmaSocket> {
        Self::connect_with(addr, &SocketOptions::default())
    }

    /// Connects to `addr` within `timeout` (address and route resolution and the handshake
    /// together). A zero timeout is refused, like `TcpStream::connect_timeout`'s.
    pub fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> io::Result<RdmaSocket> {
        if timeout.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot connect with a zero timeout",
            ));
        }
        let opts = SocketOptions {
            connect_timeout: timeout,
            ..SocketOptions::default()
        };
        Self::connect_with(addr, &opts)
    }

    /// Connects to `addr` with `opts`.
    pub fn connect_with(addr: impl ToSocketAddrs, opts: &SocketOptions) -> io::Result<RdmaSocket> {
        Self::connect_via(crate::registry::connection_manager(), addr, opts)
    }

    /// Connects through the connection manager `cm`.
    pub fn connect_via(
        cm: &dyn ConnectionManager,
        addr: impl ToSocketAddrs,
        opts: &SocketOptions,
    ) -> io::Result<RdmaSocket> {
        let mut last = None;
        for dst in addrs(addr)? {
            match connect_one(cm, dst, opts) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("the loop tries at least one address"))
    }

    /// Starts connecting to `addr` with `opts` without blocking (through the connection
    /// manager the registry picks, as [`connect_with`](Self::connect_with)); the returned
    /// [`Connecting`] finishes it. One address only: trying each of several is the caller's.
    pub fn connect_start(addr: SocketAddr, opts: &SocketOptions) -> io::Result<Connecting> {
        Self::connect_start_via(crate::registry::connection_manager(), addr, opts)
    }

    /// [`connect_start`](Self::connect_start) through the connection manager `cm`.
    pub fn connect_start_via(
        cm: &dyn ConnectionManager,
        addr: SocketAddr,
        opts: &SocketOptions,
    ) -> io::Result<Connecting> {
        crate::verbs::fork::note_owner();
        Connecting::start(cm, addr, opts).map_err(super::census::at_limit)
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.shared
            .endpoint()
            .peer_addr()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "no peer address"))
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.shared
            .endpoint()
            .local_addr()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "no local address"))
    }

    /// Shuts down reading, writing or both. `Write` sends end-of-stream after the data
    /// already written (the peer's reads return 0 once they have read it); reading goes on.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        let mut g = self.shared.lock();
        g.engine.shutdown(how);
        let r = g.pump();
        drop(g);
        self.shared.notify();
        r.map(|_| ())
    }

    /// Closes the connection gracefully, as dropping the last handle does (end-of-stream
    /// after the queued data, then the disconnect handshake, bounded by the options' close
    /// timeout), and says how it went, which a drop cannot: `Ok` once the close finished
    /// with every written byte in the peer's memory; an error when the connection had
    /// failed, bytes written may not have arrived, or the close timed out (the connection
    /// is then torn down without the handshake). The connection closes for the clones too:
    /// their reads see end-of-stream or the error, their writes fail.
    pub fn close(self) -> io::Result<()> {
        self.shared.close()
    }

    /// Moves the socket into or out of nonblocking mode (shared with clones).
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.shared.lock().nonblocking = nonblocking;
        Ok(())
    }

    /// Sets the read timeout (`None`: block forever). A zero duration is refused, like
    /// `TcpStream`'s.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        check_timeout(timeout)?;
        self.shared.lock().read_timeout = timeout;
        Ok(())
    }

    /// Sets the write timeout (`None`: block forever), which also bounds a blocking
    /// [`flush`](Write::flush). A zero duration is refused, like `TcpStream`'s.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        check_timeout(timeout)?;
        self.shared.lock().write_timeout = timeout;
        Ok(())
    }

    /// The read timeout.
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.shared.lock().read_timeout)
    }

    /// The write timeout.
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.shared.lock().write_timeout)
    }

    /// Sets the keepalive interval (`None`: off): a zero-length RDMA WRITE goes out every
    /// `interval` while a blocking call waits, and all the time while the socket is registered
    /// with mio, so a vanished peer fails the connection: reads and writes then return a
    /// `ConnectionReset` error saying why. How soon depends on the transport's retries:
    /// - rxe (RoCE): when the WRITE's retries run out (the queue pair's retry count and
    ///   timeout; about 16 s after a cut with the defaults): "transport retry counter
    ///   exceeded";
    /// - the userspace iWARP provider: the WRITE completes once TCP takes it, so the provider
    ///   also watches its TCP connection: when sent segments stay unacknowledged for three
    ///   intervals (at least 2 s, at most 10 minutes), the connection is lost within about
    ///   an interval plus that: "the peer stopped acknowledging" (a stopped peer whose kernel
    ///   still answers, its window full, is not lost);
    /// - the kernel's siw: its TCP socket is the kernel's, so only TCP's own retransmission
    ///   limit ends the connection (about 15 minutes by default, `net.ipv4.tcp_retries2`).
    ///
    /// An interval under 1 ms is refused (as by [`SocketOptionsBuilder::keepalive`]).
    ///
    /// [`SocketOptionsBuilder::keepalive`]: super::SocketOptionsBuilder::keepalive
    pub fn set_keepalive(&self, interval: Option<Duration>) -> io::Result<()> {
        super::options::check_keepalive(interval)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        self.shared
            .endpoint()
            .set_liveness_timeout(super::options::liveness_timeout(interval))?;
        self.shared.lock().opts.keepalive = interval;
        super::readiness::keepalive_changed();
        Ok(())
    }

    /// The keepalive interval.
    pub fn keepalive(&self) -> io::Result<Option<Duration>> {
        Ok(self.shared.lock().opts.keepalive)
    }

    /// Reads without removing the bytes from the stream.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.shared
            .run(Direction::Read, |c| read_or_eof(c, buf, true))
    }

    /// Another handle to the same connection (like `TcpStream::try_clone`).
    pub fn try_clone(&self) -> io::Result<RdmaSocket> {
        Ok(RdmaSocket {
            shared: self.shared.clone(),
        })
    }

    /// Always `None`: the socket has no pending error apart from what calls return.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        Ok(None)
    }

    /// Like TCP_NODELAY: `true` makes every write go to the transport before the call
    /// returns. Every write is posted at once either way; the option matters where the
    /// provider coalesces (the userspace one, which by default may hold a post made within
    /// a few microseconds of its last transmission and send it with the next ones, at the
    /// latest when a thread reads or waits on this socket, or about a millisecond later:
    /// one system call for several small writes). Kernel devices hand every post to the
    /// device at once, and there it changes nothing. Off by default, as on `TcpStream`
    /// (whose Nagle algorithm can hold a write much longer).
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        let mut c = self.shared.lock();
        c.res.qp.set_send_coalescing(!nodelay);
        c.nodelay = nodelay;
        Ok(())
    }

    /// The value [`set_nodelay`](Self::set_nodelay) set (false by default).
    pub fn nodelay(&self) -> io::Result<bool> {
        Ok(self.shared.lock().nodelay)
    }

    /// What this connection's blocking calls did when they had to wait: how many waits,
    /// naps, naps that overslept and sleeps on the completion channel. For tuning the
    /// progress mode (see [`SocketOptionsBuilder::adaptive`](super::SocketOptionsBuilder::adaptive)).
    pub fn wait_stats(&self) -> WaitStats {
        self.shared.lock().wait.stats
    }

    /// Whether the peer announced itself as rdmasock (otherwise it is plain rsocket).
    pub fn peer_is_rdmasock(&self) -> bool {
        self.shared.lock().engine.peer_is_rdmasock()
    }

    fn read_inner(&self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.shared
            .run(Direction::Read, |c| read_or_eof(c, buf, false))
    }

    fn write_inner(&self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.shared.run(Direction::Write, |c| c.write(buf))
    }

    fn read_vectored_inner(&self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        if bufs.iter().all(|b| b.is_empty()) {
            return Ok(0);
        }
        self.shared
            .run(Direction::Read, |c| or_eof(c.read_vectored(bufs)))
    }

    fn write_vectored_inner(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if bufs.iter().all(|b| b.is_empty()) {
            return Ok(0);
        }
        self.shared
            .run(Direction::Write, |c| c.write_vectored(bufs))
    }

    /// Waits until every byte written was placed in the peer's memory. On a nonblocking
    /// socket it does not wait, like `TcpStream`'s flush: what was written is posted already
    /// and moves without the application; this only makes sure a completion will retire it.
    fn flush_inner(&self) -> io::Result<()> {
        let (timeout, nonblocking) = {
            let g = self.shared.lock();
            (g.write_timeout, g.nonblocking)
        };
        if nonblocking {
            return self
                .shared
                .run(Direction::Other(None), |c| match c.engine.flush() {
                    Err(StreamError::WouldBlock) => Ok(()),
                    done => done,
                });
        }
        self.shared
            .run(Direction::Other(timeout), |c| c.engine.flush())
    }
}

/// A read that ends with 0 once the stream is closed for reading, whatever the reason.
fn read_or_eof(c: &mut Connection, buf: &mut [u8], peek: bool) -> Result<usize, StreamError> {
    or_eof(c.read(buf, peek))
}

/// A read's result, with "not connected" (closed for reading) as end-of-stream.
fn or_eof(read: Result<usize, StreamError>) -> Result<usize, StreamError> {
    match read {
        Err(StreamError::NotConnected) => Ok(0),
        r => r,
    }
}

fn check_timeout(t: Option<Duration>) -> io::Result<()> {
    if t == Some(Duration::ZERO) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a zero duration is not a valid timeout",
        ));
    }
    Ok(())
}

/// Resources for `endpoint` and a connection ready to exchange hellos.
pub(crate) fn prepare(
    endpoint: Box<dyn CmEndpoint>,
    opts: &SocketOptions,
) -> io::Result<Connection> {
    let mut opts = opts.clone();
    let res = Resources::create(endpoint.as_ref(), &mut opts)?;
    Connection::new(res, Arc::from(endpoint), opts)
}

/// A connect to one address: [`Connecting`]'s steps, with poll(2) on its fd between them.
fn connect_one(
    cm: &dyn ConnectionManager,
    dst: SocketAddr,
    opts: &SocketOptions,
) -> io::Result<RdmaSocket> {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let mut connecting = RdmaSocket::connect_start_via(cm, dst, opts)?;
    loop {
        if let Some(socket) = connecting.poll_connect()? {
            return Ok(socket);
        }
        // Rounded up, so that the wait does not end just before the deadline.
        let left = connecting
            .deadline()
            .saturating_duration_since(Instant::now())
            .as_nanos()
            .div_ceil(1_000_000);
        let mut fds = [PollFd::new(connecting.as_fd(), PollFlags::POLLIN)];
        match nix::poll::poll(
            &mut fds,
            PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(io::Error::other(format!("poll on the connect's fd: {e}"))),
        }
    }
}

/// How many times a connect whose source port TCP holds is tried again (see
/// [`ConnectionManager::resolve_from_free_port`]).
pub(crate) const PORT_RETRIES: usize = 3;

/// Whether a connect failed because its source port is taken in TCP's table.
pub(crate) fn port_taken(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::AddrInUse | io::ErrorKind::AddrNotAvailable
    )
}

/// A rejection whose private data is a reason in text (an rdmasock listener refusing our
/// hello, say) gets that text in its message.
pub(crate) fn explain_reject(e: io::Error) -> io::Error {
    let reason = match e
        .get_ref()
        .and_then(|r| r.downcast_ref::<crate::cm::Error>())
    {
        Some(crate::cm::Error::Rejected { private_data, .. }) => {
            let text: String = String::from_utf8_lossy(private_data)
                .trim_end_matches('\0')
                .to_string();
            let printable = !text.is_empty() && text.chars().all(|c| !c.is_control());
            printable.then_some(text)
        }
        _ => None,
    };
    match reason {
        Some(text) => io::Error::new(e.kind(), format!("{e}: \"{text}\"")),
        None => e,
    }
}

impl Drop for RdmaSocket {
    /// In a child made by `fork` the connection is the parent's (it shares the parent's
    /// device, connection-manager and transport files): dropping its handles there leaves the
    /// connection alone (nothing sent, nothing destroyed; the memory is the child's to lose).
    /// The parent's last handle closes it as usual.
    fn drop(&mut self) {
        if crate::verbs::in_forked_child() {
            std::mem::forget(Arc::clone(&self.shared));
        }
    }
}

impl Read for RdmaSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_inner(buf)
    }
    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        self.read_vectored_inner(bufs)
    }
}

impl Read for &RdmaSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_inner(buf)
    }
    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        self.read_vectored_inner(bufs)
    }
}

impl Write for RdmaSocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_inner(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.write_vectored_inner(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.flush_inner()
    }
}

impl Write for &RdmaSocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_inner(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.write_vectored_inner(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.flush_inner()
    }
}
