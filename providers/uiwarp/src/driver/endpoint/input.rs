//! Who reads a queue pair's TCP socket: the engine thread, an application thread that spins
//! on the connection, or a sleeper that watches the socket beside its completion channel
//! (the input watch); how input passes between them, and the engine's backstop.

use super::*;

/// Backstops in a row that must find no application read before the engine takes back the
/// input of a socket whose input a sleeper watches (see [`Endpoint::watch_input`]). Such a
/// sleeper's task is woken by each arrival itself; one that has not read for a backstop is
/// mostly waiting for its peer, or for a worker on a busy runtime, and will read. Taking
/// the input back at the first quiet backstop cost, with 64 tokio streams on two cores, an
/// `epoll_ctl` each way, an engine wake-up at the next arrival and often a raise of the
/// channel that the task then reads, thousands of times a second on a loaded host: most
/// of the process's context switches and `epoll_ctl` calls, and 1–5% of its CPU per
/// request. A task that really stopped reading gets its bytes moved by the engine within
/// this many backstops (about 3 to 7 ms), as a spinner that stopped does within its spin
/// window and a backstop.
const WATCHED_QUIET_LOOKS: u32 = 3;

impl Endpoint {
    /// Notes a readable edge (the engine's poll saw new bytes or the end of the stream).
    pub(crate) fn note_input(&self) {
        self.input_hint.store(true, Ordering::SeqCst);
    }

    /// Whether the socket may hold unread bytes (see [`Endpoint::note_input`]).
    pub(crate) fn may_have_input(&self) -> bool {
        self.input_hint.load(Ordering::SeqCst)
    }

    /// Whether a thread that found a completion queue empty should read the socket. Yes when
    /// bytes arrived since the last read. When the thread is `spinning` (it polled the queue
    /// empty again and again), only if the socket is readable: waiting for the engine to
    /// see the edge would add a thread hop to every message, and a zero-timeout poll(2) does
    /// not take the socket's lock, which a read that finds nothing would, against the peer
    /// delivering into it. A lone empty poll (the data path's, between sends) costs no
    /// system call.
    pub(crate) fn poll_should_read(&self, spinning: bool) -> Option<ReadWhen> {
        if spinning {
            self.polled_at.store(clock(), Ordering::Relaxed);
        }
        if self.may_have_input() {
            Some(ReadWhen::Now)
        } else if spinning {
            Some(ReadWhen::IfReadable)
        } else {
            None
        }
    }

    /// Whether a thread is spinning on this QP's completion queues right now: it will read
    /// the socket itself (see [`Endpoint::poll_should_read`]).
    pub(crate) fn spun_on(&self) -> bool {
        let last = self.polled_at.load(Ordering::Relaxed);
        last != 0 && clock().saturating_sub(last) < SPIN_WINDOW.as_nanos() as u64
    }

    /// For the engine's backstop: whether to leave the socket to application threads a
    /// while longer. Yes while they read it themselves (one spins on its queue, or one read
    /// it since the last backstop); and, where a sleeper holds the input watch (a tokio
    /// stream, whose reactor wakes its task on each arrival), for the first
    /// [`WATCHED_QUIET_LOOKS`] `- 1` backstops in a row that find no read.
    pub(crate) fn read_by_application(&self) -> bool {
        let reads = self.app_reads.load(Ordering::Relaxed);
        let seen = self.app_reads_seen.swap(reads, Ordering::Relaxed);
        if reads != seen || self.spun_on() {
            self.quiet_looks.store(0, Ordering::Relaxed);
            return true;
        }
        if self.input_watched()
            && self.quiet_looks.fetch_add(1, Ordering::Relaxed) + 1 < WATCHED_QUIET_LOOKS
        {
            return true;
        }
        self.quiet_looks.store(0, Ordering::Relaxed);
        false
    }

    /// Whether a thread may sleep on a completion channel of this QP: one of its completion
    /// queues is armed and has a channel, which the engine raises when bytes arrive for a
    /// sleeper that does not watch the socket itself (see [`watch_input`](Self::watch_input)).
    /// One look when both queues are one CQ (the socket's).
    pub(crate) fn attended(&self) -> bool {
        st_attended(&self.recv_cq)
            || (!Arc::ptr_eq(&self.send_cq, &self.recv_cq) && st_attended(&self.send_cq))
    }

    /// On the engine thread, when an input edge finds a queue of this QP armed with a
    /// channel: raises the channels, whose woken thread reads the socket itself (the
    /// backstop reads it if none does), and writes what waits for room if `writable`.
    pub(crate) fn raise_input(&self, engine: &Engine, writable: bool) {
        for cq in [&self.send_cq, &self.recv_cq] {
            if let Some(ch) = uiwarp_cq(cq).channel() {
                ch.raise_input();
            }
        }
        if writable {
            let mut st = self.lock();
            self.flush(&mut st, engine);
        }
    }

    /// On the engine thread, when an input edge finds a thread spinning on this QP (and no
    /// queue of it armed): stops watching the socket for input (the backstop, or the next
    /// arming of a queue with a channel, takes it back), and writes what waits for room if
    /// `writable`. Waits for the lock: the thread holding it reads, which takes moments,
    /// and an edge missed here would come again with the next arrival.
    pub(crate) fn leave_input(&self, engine: &Engine, writable: bool) {
        let mut st = self.lock();
        if let Some(link) = st.link.as_mut() {
            link.set_engine_reads(engine, false);
            self.input_left.store(true, Ordering::SeqCst);
            // A queue armed meanwhile may have found nothing to take back (the arming sets
            // the flag under the queue's lock before it looks; this looks under that lock
            // after setting it): a sleeper's wake-up needs the engine's input edges.
            if self.attended() && self.input_left.swap(false, Ordering::SeqCst) {
                link.set_engine_reads(engine, true);
            }
        }
        if writable {
            self.flush(&mut st, engine);
        }
    }

    /// On the engine thread, when a backstop finds that no application thread read the
    /// socket since the last one and none spins: watches the socket for input again if it
    /// had stopped, and moves what came meanwhile (or what a woken thread did not take).
    pub(crate) fn backstop(&self, engine: &Engine) {
        let mut st = self.lock();
        let Some(link) = st.link.as_mut() else {
            return;
        };
        let was_left = !link.engine_reads();
        link.set_engine_reads(engine, true);
        self.input_left.store(false, Ordering::Release);
        if was_left || self.may_have_input() {
            self.drive_engine(&mut st, engine);
        }
    }

    /// For a thread about to arm a queue of this QP and sleep on its channel, polling the
    /// socket itself and reading it once woken: the engine stops watching the socket for
    /// input, as for a spinner (one change of its registration, none while it has left input
    /// already), and arming a queue does not take it back while a watcher lives (see
    /// [`take_input_back`](Self::take_input_back)). The watcher leaving changes nothing: the
    /// next sleeper or spinner reads, another thread's arming takes the socket back, and the
    /// backstop does once no application thread reads it. `None` when there is no socket.
    pub(crate) fn watch_input(&self) -> Option<Arc<TcpStream>> {
        let engine = crate::driver::engine().ok()?;
        let mut st = self.lock();
        let link = st.link.as_mut()?;
        let socket = link.socket()?;
        self.input_watchers.fetch_add(1, Ordering::SeqCst);
        if link.engine_reads() {
            link.set_engine_reads(engine, false);
            self.input_left.store(true, Ordering::SeqCst);
            engine.set_backstop_from_outside(link.token);
        }
        Some(socket)
    }

    /// The sleeper [`watch_input`](Self::watch_input) served is awake and has read.
    /// Counted under the lock that [`leave_input_to_watcher`](Self::leave_input_to_watcher)
    /// checks under.
    pub(crate) fn unwatch_input(&self) {
        let _st = self.lock();
        self.input_watchers.fetch_sub(1, Ordering::SeqCst);
    }

    /// On the engine thread, when an input edge finds a sleeping thread polling this QP's
    /// socket (the engine took input back meanwhile, by a backstop or another thread's
    /// arming): stops watching for input again, and writes what waits for room if
    /// `writable`. `false`: the watcher left before the lock was taken, and the engine
    /// moves the input itself.
    pub(crate) fn leave_input_to_watcher(&self, engine: &Engine, writable: bool) -> bool {
        let mut st = self.lock();
        if !self.input_watched() {
            return false;
        }
        if let Some(link) = st.link.as_mut() {
            link.set_engine_reads(engine, false);
            self.input_left.store(true, Ordering::SeqCst);
        }
        if writable {
            self.flush(&mut st, engine);
        }
        true
    }

    /// Whether a sleeping thread polls this QP's socket itself (see
    /// [`watch_input`](Self::watch_input)).
    pub(crate) fn input_watched(&self) -> bool {
        self.input_watchers.load(Ordering::SeqCst) > 0
    }

    /// When one of this QP's queues is armed with a channel (a thread may sleep on it, and
    /// only the engine's input edges raise it): the engine watches the socket for input again
    /// if it had left it to a spinner or a sleeper that watched the socket, unless a sleeper
    /// watches it now (see [`watch_input`](Self::watch_input)). Turning input back on
    /// reports bytes already waiting (epoll checks readiness). Two loads when the engine
    /// reads already.
    pub(crate) fn take_input_back(&self) {
        if self.input_watched() || !self.input_left.swap(false, Ordering::SeqCst) {
            return;
        }
        let Ok(engine) = crate::driver::engine() else {
            return;
        };
        let mut st = self.lock();
        if let Some(link) = st.link.as_mut() {
            link.set_engine_reads(engine, true);
        }
    }

    /// Progress from an application thread that found its completion queue empty (and
    /// [`Endpoint::poll_should_read`] said to read); skipped when another thread is at it
    /// (the engine moves everything else: writable edges, timers).
    pub(crate) fn try_progress(&self, when: ReadWhen) {
        let Ok(mut st) = self.state.try_lock() else {
            return;
        };
        let Some(link) = st.link.as_ref() else {
            return;
        };
        let spinning = when == ReadWhen::IfReadable;
        if spinning && !link.readable_now() {
            return;
        }
        if let Ok(engine) = crate::driver::engine() {
            self.app_reads.fetch_add(1, Ordering::Relaxed);
            // A spinner polls again at once: it may stop at a short read, and its next
            // poll(2) sees what is left (a FIN behind the bytes included).
            self.drive_reads(&mut st, engine, spinning);
        }
    }

    /// Progress for a thread woken on a completion channel: waits for the lock (the engine
    /// thread holds it only briefly), then reads; `until_short`: only until a read that does
    /// not fill the buffer (for a watcher of the input with edge-triggered readiness).
    pub(crate) fn progress_waiting(&self, until_short: bool) {
        let mut st = self.lock();
        if st.link.is_none() {
            return;
        }
        if let Ok(engine) = crate::driver::engine() {
            self.app_reads.fetch_add(1, Ordering::Relaxed);
            self.drive_reads(&mut st, engine, until_short);
        }
    }
}
