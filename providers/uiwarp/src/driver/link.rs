//! One TCP connection and the sans-IO connection on it: reading into the core, writing what it
//! gives, and the close sequence.

use super::doorbell::Held;
use super::liveness::Liveness;
use super::pcap::Flow;
use super::Engine;
use crate::protocol::{Connection, InlineSend, MemoryTable, TxQueue};
use mio::net::TcpStream;
use mio::unix::SourceFd;
use mio::{Interest, Token};
use rdmasock_verbs::{send_pieces, tcp_progress, SendPiece};
use std::cell::RefCell;
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes read from TCP per call, at most: a thread's buffer starts at [`FIRST_READ_CHUNK`]
/// and doubles each time a read fills it.
const READ_CHUNK: usize = 256 * 1024;
/// A thread's first read buffer: a thread that reads little never zeroes (and faults in)
/// 256 KiB.
const FIRST_READ_CHUNK: usize = 16 * 1024;
thread_local! {
    /// The buffer TCP is read into, one per thread that reads (the engine's, an application
    /// thread polling its connection): bytes are framed out of it at once, so connections
    /// need none of their own, and an idle one holds no read buffer.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}
/// Reads of queue pairs' sockets that found nothing, in this process (see
/// [`empty_reads_total`]).
static EMPTY_READS: AtomicU64 = AtomicU64::new(0);

/// How many reads of queue pairs' sockets found nothing to read (`WouldBlock`) in this
/// process, all connections and threads together: each is a system call that moved no byte.
pub fn empty_reads_total() -> u64 {
    EMPTY_READS.load(Ordering::Relaxed)
}

/// Bytes asked of `poll_transmit` at a time: enough for a stream's 1 MiB write and the
/// write behind it, so that each goes to TCP in one `sendmsg` (on loopback, where an FPDU
/// carries up to 64 KiB, a 1 MiB message is 16 FPDUs, about 65 slices). The payloads of
/// registered memory are not copied, so the queue holds only their headers and CRCs.
const TRANSMIT_CHUNK: usize = 2 * 1024 * 1024;
/// Slices per sendmsg, at most: a 1 MiB message's frames on loopback and more (the
/// kernel's limit is 1,024).
const WRITE_SLICES: usize = 256;
/// Slices of a middling queue (a few 64 KiB FPDUs, each a header, a payload and a CRC).
const SOME_SLICES: usize = 64;
/// The slices of a short queue (up to two messages' frames, the common case).
const FEW_SLICES: usize = 8;
/// Bytes the progress engine reads from one connection per turn, at most: then it turns to
/// the others' events and comes back (see `Engine::resume`), so a peer that floods frames
/// as fast as TCP takes them cannot starve the rest of the process's connections.
pub(crate) const ENGINE_READ_BUDGET: usize = READ_CHUNK;
/// How long a closed connection may take to flush and see the peer's FIN.
const LINGER: Duration = Duration::from_secs(5);

/// A connection on its socket.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) conn: Connection,
    /// Shared with a thread that sleeps on a completion channel and polls the socket (see
    /// [`Link::socket`]): the socket stays open until that poll returns.
    socket: Arc<TcpStream>,
    pub(crate) token: Token,
    /// What the core gave and TCP has not taken yet.
    out: TxQueue,
    /// The peer's FIN (or an error) was seen.
    read_done: bool,
    write_shut: bool,
    /// Set when the connection went to the error state: the socket is closed by then.
    linger_until: Option<Instant>,
    /// The first socket error, for messages.
    pub(crate) io_error: Option<io::Error>,
    pub(crate) local: Option<SocketAddr>,
    pub(crate) peer: Option<SocketAddr>,
    flow: Option<Flow>,
    /// The timer last given to the engine.
    timer: Option<Instant>,
    /// The engine's poll watches the socket for input (it stops while an application thread
    /// spins on the socket; see [`Link::set_engine_reads`]).
    engine_reads: bool,
    /// What the engine's poll watches now (`None`: not registered).
    interest: Option<Interest>,
    /// Posts held back from TCP (see [`super::doorbell`]).
    pub(crate) held: Held,
    /// A read budget ran out with bytes perhaps left in the socket (see
    /// [`Link::progress_within`]).
    input_left: bool,
    /// How long the peer may leave what was sent unacknowledged (see [`Liveness`]).
    liveness: Option<Liveness>,
    /// Writes to TCP that took bytes, for the tests.
    #[cfg(test)]
    writes: u64,
}

impl Link {
    pub(crate) fn new(conn: Connection, socket: TcpStream, token: Token) -> Link {
        let local = socket.local_addr().ok();
        let peer = socket.peer_addr().ok();
        let flow = match (local, peer) {
            (Some(l), Some(p)) => Flow::open(l, p),
            _ => None,
        };
        Link {
            conn,
            socket: Arc::new(socket),
            token,
            out: TxQueue::new(),
            read_done: false,
            write_shut: false,
            linger_until: None,
            io_error: None,
            local,
            peer,
            flow,
            timer: None,
            engine_reads: true,
            interest: None,
            held: Held::default(),
            input_left: false,
            liveness: None,
            #[cfg(test)]
            writes: 0,
        }
    }

    /// Puts the socket in the engine's poll: input, and room to write while bytes wait.
    pub(crate) fn register(&mut self, engine: &Engine) -> io::Result<()> {
        self.apply_interest(engine)
    }

    /// Whether the engine's poll watches the socket for input (see
    /// [`Link::set_engine_reads`]).
    pub(crate) fn engine_reads(&self) -> bool {
        self.engine_reads
    }

    /// Makes the engine's poll watch the socket for input or not. An application thread
    /// that spins on the socket reads the bytes itself; the engine's wake-up on every arrival
    /// would only take a core from it. Turning input back on reports bytes already waiting
    /// (epoll checks readiness).
    pub(crate) fn set_engine_reads(&mut self, engine: &Engine, on: bool) {
        self.engine_reads = on;
        self.sync_interest(engine);
    }

    /// What the engine's poll should watch: input unless a spinner reads it, and room to
    /// write only while bytes wait for it. Watching for room all the time would wake the
    /// engine at every ACK that frees send buffer (TCP reports room at each), twice per
    /// message of a ping-pong; `None`: nothing.
    fn wanted(&self) -> Option<Interest> {
        let writes = !self.out.is_empty() && !self.write_shut && self.io_error.is_none();
        match (self.engine_reads, writes) {
            (true, true) => Some(Interest::READABLE.add(Interest::WRITABLE)),
            (true, false) => Some(Interest::READABLE),
            (false, true) => Some(Interest::WRITABLE),
            (false, false) => None,
        }
    }

    /// Brings the engine's registration in line with [`Link::wanted`] (after a write that
    /// left bytes waiting or one that sent the last of them, and when input changes hands).
    /// A registration that adds room to write reports it at once if there is room (epoll
    /// checks readiness), so bytes left by a short write are never stranded.
    pub(crate) fn sync_interest(&mut self, engine: &Engine) {
        // A failed change keeps the old registration, and the next sync tries again.
        let _ = self.apply_interest(engine);
    }

    fn apply_interest(&mut self, engine: &Engine) -> io::Result<()> {
        let wanted = self.wanted();
        if wanted == self.interest {
            return Ok(());
        }
        match (self.interest, wanted) {
            (_, None) => engine.deregister(&mut SourceFd(&self.socket.as_raw_fd())),
            (None, Some(i)) => {
                engine.register(&mut SourceFd(&self.socket.as_raw_fd()), self.token, i)?
            }
            (Some(_), Some(i)) => {
                engine.reregister(&mut SourceFd(&self.socket.as_raw_fd()), self.token, i)?
            }
        }
        self.interest = wanted;
        Ok(())
    }

    pub(crate) fn socket_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.socket.as_fd()
    }

    /// The socket, for a thread that polls it while it sleeps on a completion channel
    /// (`None` once its end was read: it would stay readable).
    pub(crate) fn socket(&self) -> Option<Arc<TcpStream>> {
        (!self.read_done).then(|| Arc::clone(&self.socket))
    }

    /// Whether the socket has bytes or an end to read, by a zero-timeout poll(2) (which,
    /// unlike a read, leaves the socket's lock alone).
    pub(crate) fn readable_now(&self) -> bool {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        if self.read_done {
            return false;
        }
        let mut fds = [PollFd::new(self.socket_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(n) => n > 0,
            // Let the read find out what is wrong.
            Err(_) => true,
        }
    }

    /// Tells the engine when to look at this link again, if that changed.
    pub(crate) fn update_timer(&mut self, engine: &Engine) {
        let t = self.next_timer();
        if t != self.timer {
            self.timer = t;
            engine.set_timer(self.token, t);
        }
    }

    /// Reads what TCP has into the core and writes what the core has; returns whether
    /// anything moved. `until_short`: stop reading after a read that did not fill the
    /// buffer (for a caller that polls the socket again at once; see `read_input`).
    pub(crate) fn progress(&mut self, memory: &dyn MemoryTable, until_short: bool) -> bool {
        self.progress_reading(memory, until_short, usize::MAX)
    }

    /// [`Link::progress`] that reads at most about `budget` bytes (a read more), for the
    /// engine thread; returns whether bytes may be left in the socket, which no new edge
    /// will announce: the caller must come back.
    pub(crate) fn progress_within(&mut self, memory: &dyn MemoryTable, budget: usize) -> bool {
        self.progress_reading(memory, false, budget);
        std::mem::take(&mut self.input_left)
    }

    fn progress_reading(
        &mut self,
        memory: &dyn MemoryTable,
        until_short: bool,
        budget: usize,
    ) -> bool {
        if let Some(t) = self.conn.poll_timeout() {
            let now = Instant::now();
            if now >= t {
                self.conn.handle_timeout(now);
            }
        }
        self.check_liveness();
        let read = self.read_input(memory, until_short, budget);
        let wrote = self.flush(memory);
        read || wrote
    }

    fn read_input(&mut self, memory: &dyn MemoryTable, until_short: bool, budget: usize) -> bool {
        // The thread's buffer, taken for the call (a nested call would find none and make
        // its own).
        let mut scratch = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
        let moved = self.read_input_into(&mut scratch, memory, until_short, budget);
        SCRATCH.with(|s| *s.borrow_mut() = scratch);
        moved
    }

    fn read_input_into(
        &mut self,
        scratch: &mut Vec<u8>,
        memory: &dyn MemoryTable,
        until_short: bool,
        budget: usize,
    ) -> bool {
        if self.read_done {
            return false;
        }
        let mut taken = 0usize;
        if scratch.is_empty() {
            scratch.resize(FIRST_READ_CHUNK, 0);
        }
        let mut moved = false;
        loop {
            match (&*self.socket).read(scratch) {
                Ok(0) => {
                    self.read_done = true;
                    self.conn.handle_peer_closed(false);
                    return true;
                }
                Ok(n) => {
                    moved = true;
                    if let Some(f) = &mut self.flow {
                        f.inbound(&scratch[..n]);
                    }
                    self.conn.handle_input(&scratch[..n], memory);
                    let full = n == scratch.len();
                    if full && n < READ_CHUNK {
                        // TCP had more than the buffer holds: a stream, read bigger.
                        scratch.resize(2 * n, 0);
                    }
                    // Answers (READ responses, a TERMINATE) go out as they arise.
                    self.flush(memory);
                    // Read on after a short read too: the peer's FIN behind the bytes shows
                    // only as the next read's 0, and no new edge announces it (stopping here
                    // left closed connections to the linger timer). Unless the caller
                    // polls again at once, which sees it (one read that would block saved).
                    if until_short && !full {
                        return true;
                    }
                    taken += n;
                    if taken >= budget {
                        self.input_left = true;
                        return true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    EMPTY_READS.fetch_add(1, Ordering::Relaxed);
                    return moved;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.fail(e);
                    return true;
                }
            }
        }
    }

    /// Writes pending bytes and whatever the core has ready, until TCP would block: one
    /// writev per batch, payloads straight from their registered memory.
    pub(crate) fn flush(&mut self, memory: &dyn MemoryTable) -> bool {
        let mut moved = false;
        loop {
            if self.out.is_empty() {
                // (`wants_transmit` is the cheap look: most flushes find nothing to frame.)
                if self.write_shut || self.io_error.is_some() || !self.conn.wants_transmit() {
                    break;
                }
                if self
                    .conn
                    .poll_transmit_queue(memory, &mut self.out, TRANSMIT_CHUNK)
                    == 0
                {
                    break;
                }
                if let Some(f) = &mut self.flow {
                    let mut bytes = Vec::with_capacity(self.out.len());
                    self.out.copy_to(&mut bytes);
                    f.outbound(&bytes);
                }
            }
            // A message's frames are a few pieces: a short array spares initialising 64.
            let pieces = self.out.piece_count();
            let written = if pieces <= FEW_SLICES {
                write_pieces::<FEW_SLICES>(&self.socket, &mut self.out)
            } else if pieces <= SOME_SLICES {
                write_pieces::<SOME_SLICES>(&self.socket, &mut self.out)
            } else {
                write_pieces::<WRITE_SLICES>(&self.socket, &mut self.out)
            };
            match written {
                Ok(n) => {
                    self.out.advance(n, &mut self.conn);
                    moved = true;
                    #[cfg(test)]
                    {
                        self.writes += 1;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.fail_writing(e, memory);
                    break;
                }
            }
        }
        self.held.rung(moved);
        if self.conn.should_close() && self.out.is_empty() && !self.write_shut {
            self.write_shut = true;
            let _ = self.socket.shutdown(Shutdown::Write);
        }
        if self.conn.should_close() && self.linger_until.is_none() {
            self.linger_until = Some(Instant::now() + LINGER);
        }
        moved
    }

    /// Frames `chain` at once into the transmit queue (the lean path, see
    /// [`Connection::post_inline_chain`]) when nothing waits for TCP's room and the
    /// connection is not failing or closing; returns whether it did. The next
    /// [`Link::flush`] writes it.
    pub(crate) fn post_inline_chain(&mut self, chain: &[InlineSend<'_>]) -> bool {
        let framed = self.out.is_empty()
            && self.io_error.is_none()
            && !self.write_shut
            && !self.conn.should_close()
            && self.conn.post_inline_chain(chain, &mut self.out);
        if framed {
            if let Some(f) = &mut self.flow {
                let mut bytes = Vec::with_capacity(self.out.len());
                self.out.copy_to(&mut bytes);
                f.outbound(&bytes);
            }
        }
        framed
    }

    /// Whether a post may be held back from TCP: nothing waits for TCP's room, and the
    /// connection is not failing or closing.
    pub(crate) fn can_hold(&self) -> bool {
        self.out.is_empty()
            && self.io_error.is_none()
            && !self.write_shut
            && !self.conn.should_close()
    }

    /// Bytes framed and not yet taken by TCP.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.out.len()
    }

    /// Ends a post's lends after [`Link::flush`]: frames what the core still has (all of
    /// it, so no request names lent bytes it has not read), and copies the lent bytes TCP has
    /// not taken into the queue's own memory. Returns how many bytes it copied.
    pub(crate) fn keep_lent(
        &mut self,
        memory: &dyn MemoryTable,
        lent: &[std::sync::Arc<rdmasock_verbs::RegisteredMemory>],
    ) -> usize {
        let before = self.out.len();
        if self
            .conn
            .poll_transmit_queue(memory, &mut self.out, usize::MAX)
            > 0
        {
            if let Some(f) = &mut self.flow {
                let mut bytes = Vec::with_capacity(self.out.len());
                self.out.copy_to(&mut bytes);
                f.outbound(&bytes[before..]);
            }
        }
        lent.iter().map(|m| self.out.detach(m)).sum()
    }

    /// Fails the connection for a write error, after reading what TCP still holds: a peer
    /// that sent its last messages (a DISCONNECT) and closed resets a later write (EPIPE,
    /// ECONNRESET), while those messages still wait in the socket, readable before the
    /// error. They reach the core first, and their receives complete.
    fn fail_writing(&mut self, e: io::Error, memory: &dyn MemoryTable) {
        self.out.clear();
        if self.io_error.is_none() {
            self.io_error = Some(e);
        }
        // With the error recorded, the reads' own flushes write nothing.
        self.read_input(memory, false, usize::MAX);
        self.read_done = true;
        self.conn.handle_peer_closed(true);
    }

    fn fail(&mut self, e: io::Error) {
        self.read_done = true;
        self.out.clear();
        self.conn.handle_peer_closed(true);
        if self.io_error.is_none() {
            self.io_error = Some(e);
        }
    }

    /// Whether the socket can be closed: the connection is over, and either both directions
    /// are finished or the linger time ran out.
    pub(crate) fn finished(&self, now: Instant) -> bool {
        if !self.conn.should_close() {
            return false;
        }
        let drained = self.out.is_empty();
        (drained && self.write_shut && self.read_done)
            || self.io_error.is_some()
            || self.linger_until.is_some_and(|t| now >= t)
    }

    /// When the engine must look at this link again without readiness.
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        let check = match self.io_error {
            None => self.liveness.map(|l| l.next_check()),
            Some(_) => None,
        };
        [self.conn.poll_timeout(), self.linger_until, check]
            .into_iter()
            .flatten()
            .min()
    }

    /// Bounds how long the peer may leave what was sent unacknowledged (`None`: TCP's own
    /// retransmission limit, about 15 minutes); see [`Liveness`].
    pub(crate) fn set_liveness_timeout(&mut self, timeout: Option<Duration>) {
        self.liveness = timeout.map(|t| Liveness::new(t, Instant::now()));
    }

    /// The liveness timeout (see [`Link::set_liveness_timeout`]).
    pub(crate) fn liveness_timeout(&self) -> Option<Duration> {
        self.liveness.map(|l| l.timeout())
    }

    /// When a liveness check is due, fails the connection if the peer stopped
    /// acknowledging, with `ETIMEDOUT`, as TCP says it when it gives up.
    fn check_liveness(&mut self) {
        let Some(liveness) = self.liveness.as_mut() else {
            return;
        };
        let now = Instant::now();
        if now < liveness.next_check() || self.io_error.is_some() {
            return;
        }
        let Ok(progress) = tcp_progress(self.socket.as_fd()) else {
            // The socket failed: its next read or write says how.
            return;
        };
        if liveness.lost(&progress, now) {
            self.fail(io::Error::from_raw_os_error(libc::ETIMEDOUT));
        }
    }

    /// Deregisters and closes the socket.
    pub(crate) fn close(self, engine: &Engine) {
        if self.interest.is_some() {
            engine.deregister(&mut SourceFd(&self.socket.as_raw_fd()));
        }
        engine.remove(self.token);
    }
}

/// One gathering write of up to `N` of `out`'s pieces: sendmsg(2) with `MSG_NOSIGNAL`, as
/// `std`'s `TcpStream::write` sends. A writev(2) (what `write_vectored` makes) to a socket
/// whose connection is shut down or reset raises SIGPIPE besides failing with EPIPE, and a
/// library must not kill a host process that left SIGPIPE at its default (a C program, a
/// command-line tool that resets it for `| head`). Pieces of registered memory are read by
/// the kernel in place ([`rdmasock_verbs::send_pieces`]).
fn write_pieces<const N: usize>(socket: &TcpStream, out: &mut TxQueue) -> io::Result<usize> {
    let mut pieces = [SendPiece::Bytes(&[]); N];
    let n = out.pieces(&mut pieces);
    send_pieces::<N>(socket.as_fd(), &pieces[..n], libc::MSG_NOSIGNAL)
}

#[cfg(test)]
mod tests;
