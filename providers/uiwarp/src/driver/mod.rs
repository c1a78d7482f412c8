//! The I/O driver: nonblocking TCP sockets (socket2, TCP_NODELAY) and one progress thread per
//! process, the "NIC", that moves data whether or not the application calls in.
//!
//! The engine thread waits in [`mio::Poll`] on every socket (edge-triggered; see below for
//! when) and on the connections' timers. On readiness it locks the connection, reads what
//! TCP has, feeds the sans-IO core, writes what the core gives, and hands completions to the
//! completion queues, whose channels (eventfds) then wake the application. Application threads
//! do the same work inline where that saves a wake-up: `post_send` transmits at once when the
//! socket takes it; polling an empty completion queue reads its queue pairs' sockets once the
//! engine has seen bytes arrive (a hint per endpoint, so an idle poll costs no syscall), and
//! on every poll while a thread spins (polls the queue empty again and again) and poll(2)
//! finds the socket readable. While a thread spins, the engine stops watching the socket for
//! input altogether: no wake-up of its own per arrival. A 1 ms backstop takes the socket
//! back once no application thread has read it since the last look, in case nobody takes
//! the bytes; arming a queue that has a completion channel takes it back at once (unless a
//! sleeper watches the socket). A thread that sleeps on a channel serving one queue pair
//! polls the socket beside the channel's eventfd (its input watch, taken before it arms):
//! the engine leaves input to it as to a spinner, and it reads the bytes itself once woken
//! (a tokio stream holds such a watch for its life, its reactor watching the socket); the
//! backstop takes such a socket back only after a few looks in a row found no read.
//! A thread that waits on the eventfd alone (the socket layer's readiness thread) is
//! woken by the engine, which raises the channel on each arrival while a queue is armed;
//! that thread reads the bytes itself (the backstop reads them if none does). The engine
//! watches for room to write only while bytes wait for it. Whoever finds a socket would
//! block leaves the rest to the next edge, which the engine gets.
#![forbid(unsafe_code)]

mod cm;
pub(crate) mod completion;
mod dial;
mod doorbell;
mod endpoint;
mod link;
mod liveness;
mod notice;
pub mod pcap;
mod pending;
mod timers;

pub(crate) use cm::close_endpoint;
pub use cm::{accepted, disconnect, endpoint, Rejected, UiwarpListener, UiwarpRequest};
pub use completion::{UiwarpChannel, UiwarpCq};
pub use dial::{connect, Dial};
pub(crate) use endpoint::endpoint_idle;
pub use endpoint::Notice;
pub use endpoint::{engine_events_total, Endpoint, MAX_LIVENESS_TIMEOUT};
pub use link::empty_reads_total;

use mio::{Events, Interest, Poll, Registry, Token, Waker};
use pending::Pending;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::ThreadId;
use std::time::{Duration, Instant};
use timers::Timers;

const WAKER: Token = Token(0);
/// Timer keys with this bit are the engine's backstops for deferred input (see
/// [`Engine::set_backstop`]); tokens never reach it.
const BACKSTOP_BIT: usize = 1 << (usize::BITS - 1);
/// Timer keys with this bit are doorbell backstops (see [`doorbell`]).
const HOLD_BIT: usize = 1 << (usize::BITS - 2);
/// How long input left to an application thread may wait before the engine reads it.
const BACKSTOP: Duration = Duration::from_millis(1);

/// What a token stands for.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    /// A queue pair's connection.
    Endpoint(Arc<Endpoint>),
    /// An accepted TCP connection waiting for its MPA request or the application's answer.
    Pending(Arc<Pending>),
    /// A listening socket.
    Listener(Arc<cm::ListenerShared>),
    /// The active side's TCP connect of a queue pair's connection, while it runs.
    Dialing(Arc<Endpoint>),
}

#[derive(Debug, Default)]
struct Targets {
    map: TokenMap<Target>,
    next: usize,
}

/// A map keyed by the engine's tokens.
type TokenMap<V> = HashMap<usize, V, BuildHasherDefault<TokenHasher>>;

/// Hashes a token with one multiplication (as FxHash does) instead of SipHash: the engine
/// hands the tokens out itself, so no peer chooses the keys that SipHash guards against,
/// and its look-ups of targets and timers cost ~800 instructions a round trip with 64
/// connections under SipHash.
#[derive(Debug, Default, Clone, Copy)]
struct TokenHasher(u64);

impl Hasher for TokenHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// The per-process progress engine.
#[derive(Debug)]
pub(crate) struct Engine {
    registry: Registry,
    waker: Waker,
    targets: Mutex<Targets>,
    timers: Mutex<Timers>,
    /// Connections whose read budget ran out with bytes perhaps left: the engine reads them
    /// again after the events at hand (see [`Engine::resume`]).
    resume: Mutex<Vec<Token>>,
    thread: OnceLock<ThreadId>,
}

static ENGINE: OnceLock<io::Result<Arc<Engine>>> = OnceLock::new();

/// The engine, started on first use. A borrow of the static, not a clone of its `Arc`: every
/// post and poll asks for it, and a reference count bumped by threads on different cores is a
/// cache line they fight over (it cost ~8% of a 4 KiB stream's writer).
pub(crate) fn engine() -> io::Result<&'static Engine> {
    match ENGINE.get_or_init(start) {
        Ok(e) => Ok(e),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("the uiwarp progress engine could not start: {e}"),
        )),
    }
}

fn start() -> io::Result<Arc<Engine>> {
    choose_crc_method();
    let poll = Poll::new()?;
    let engine = Arc::new(Engine {
        registry: poll.registry().try_clone()?,
        waker: Waker::new(poll.registry(), WAKER)?,
        targets: Mutex::new(Targets {
            map: TokenMap::default(),
            next: 1,
        }),
        timers: Mutex::new(Timers::new()),
        resume: Mutex::new(Vec::new()),
        thread: OnceLock::new(),
    });
    let e = engine.clone();
    let handle = std::thread::Builder::new()
        .name("uiwarp-engine".into())
        .spawn(move || e.run(poll))?;
    let _ = engine.thread.set(handle.thread().id());
    Ok(engine)
}

impl Engine {
    /// Adds a target; returns its token.
    pub(crate) fn add(&self, target: Target) -> Token {
        let mut t = self.targets.lock().expect("engine targets");
        let token = t.next;
        t.next += 1;
        t.map.insert(token, target);
        Token(token)
    }

    /// Points `token` at another target (a pending connection adopted by a queue pair).
    pub(crate) fn replace(&self, token: Token, target: Target) {
        self.targets
            .lock()
            .expect("engine targets")
            .map
            .insert(token.0, target);
    }

    /// Forgets a token and its timer.
    pub(crate) fn remove(&self, token: Token) {
        self.targets
            .lock()
            .expect("engine targets")
            .map
            .remove(&token.0);
        let mut timers = self.timers.lock().expect("engine timers");
        for key in [token.0, token.0 | BACKSTOP_BIT, token.0 | HOLD_BIT] {
            timers.set(key, None);
        }
    }

    pub(crate) fn register(
        &self,
        source: &mut impl mio::event::Source,
        token: Token,
        interest: Interest,
    ) -> io::Result<()> {
        self.registry.register(source, token, interest)
    }

    pub(crate) fn reregister(
        &self,
        source: &mut impl mio::event::Source,
        token: Token,
        interest: Interest,
    ) -> io::Result<()> {
        self.registry.reregister(source, token, interest)
    }

    pub(crate) fn deregister(&self, source: &mut impl mio::event::Source) {
        let _ = self.registry.deregister(source);
    }

    /// Sets (or clears) when `token`'s target wants `on_timer`.
    pub(crate) fn set_timer(&self, token: Token, at: Option<Instant>) {
        let before = self.timers.lock().expect("engine timers").set(token.0, at);
        let on_engine = self.thread.get() == Some(&std::thread::current().id());
        if at.is_some() && at != before && !on_engine {
            // The engine computes its poll timeout before it sleeps: wake it to recompute.
            let _ = self.waker.wake();
        }
    }

    /// Arms the engine's own look at `token`'s endpoint [`BACKSTOP`] from now, rounded up to
    /// the timers' tick so that the backstops of many connections come due together (kept
    /// apart from the connection's timers), unless one is armed.
    fn set_backstop(&self, token: Token) {
        self.timers.lock().expect("engine timers").arm_backstop(
            token.0 | BACKSTOP_BIT,
            Instant::now(),
            BACKSTOP,
        );
    }

    /// [`set_backstop`](Self::set_backstop) from an application thread: wakes the engine to
    /// take the new timer into its poll timeout when there was none.
    pub(crate) fn set_backstop_from_outside(&self, token: Token) {
        let armed = self.timers.lock().expect("engine timers").arm_backstop(
            token.0 | BACKSTOP_BIT,
            Instant::now(),
            BACKSTOP,
        );
        if armed {
            let _ = self.waker.wake();
        }
    }

    /// Has the engine read `token`'s endpoint again once it has handled the events at hand
    /// (its read budget ran out; no new edge would announce the bytes left).
    /// Once per turn: a connection whose event and whose resume both ran out its budget in
    /// one turn is listed once, not once more per turn.
    pub(crate) fn resume(&self, token: Token) {
        let mut resume = self.resume.lock().expect("engine resume");
        if !resume.contains(&token) {
            resume.push(token);
        }
    }

    fn target(&self, token: Token) -> Option<Target> {
        self.targets
            .lock()
            .expect("engine targets")
            .map
            .get(&token.0)
            .cloned()
    }

    /// Runs `work` for `target`; a panic in it (a bug) ends that connection only: it is
    /// failed without another call into its protocol state, its socket closed and its target
    /// removed, and the engine goes on with the others (a panic here would otherwise stop
    /// progress for every connection in the process).
    fn guarded(&self, token: Token, target: &Option<Target>, work: impl FnOnce()) {
        let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) else {
            return;
        };
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_string());
        eprintln!(
            "uiwarp: bug: the progress engine panicked on one connection ({what}); that \
             connection is failed, the others go on. Please report this."
        );
        match target {
            Some(Target::Endpoint(e)) => e.fail_after_panic(self, &what),
            Some(Target::Pending(p)) => p.drop_after_panic(self),
            Some(Target::Listener(_)) | Some(Target::Dialing(_)) | None => {}
        }
        self.remove(token);
    }

    fn run(self: Arc<Self>, mut poll: Poll) {
        let mut events = Events::with_capacity(256);
        let mut due: Vec<usize> = Vec::new();
        loop {
            let timeout = self
                .timers
                .lock()
                .expect("engine timers")
                .earliest()
                .map(|t| t.saturating_duration_since(Instant::now()));
            // Round up so that a timer is not polled a hair early, over and over.
            let mut timeout = timeout.map(|t| t + Duration::from_micros(100));
            if !self.resume.lock().expect("engine resume").is_empty() {
                // Connections to read again: only look for events meanwhile.
                timeout = Some(Duration::ZERO);
            }
            if let Err(e) = poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    // Nothing else can move the connections: report once and keep trying.
                    eprintln!("uiwarp: the progress engine's poll failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
            // Those left from the last turn, after this turn's events (those that run out
            // now wait for the next turn: one budget per connection per turn).
            let resume = std::mem::take(&mut *self.resume.lock().expect("engine resume"));
            for ev in events.iter() {
                if ev.token() == WAKER {
                    continue;
                }
                let target = self.target(ev.token());
                self.guarded(ev.token(), &target, || match &target {
                    Some(Target::Endpoint(e)) => {
                        e.note_engine_event();
                        let input = ev.is_readable() || ev.is_read_closed() || ev.is_error();
                        if input {
                            e.note_input();
                        }
                        if input
                            && e.input_watched()
                            && e.leave_input_to_watcher(&self, ev.is_writable())
                        {
                            // A thread sleeping on a channel of this QP polls the socket
                            // itself and woke too: it reads the bytes, and this thread stops
                            // watching for input again. The backstop takes the socket back
                            // once no application thread reads it.
                            self.set_backstop(ev.token());
                        } else if input && e.attended() {
                            // A thread may sleep on a channel of this QP: it reads the bytes
                            // itself once the channel wakes it, without the hand-off through
                            // this thread (it waits on the channel's eventfd alone, so the
                            // edge is raised there). The backstop reads them if no
                            // application thread does; write what waits for room.
                            self.set_backstop(ev.token());
                            e.raise_input(&self, ev.is_writable());
                        } else if input && e.spun_on() {
                            // An application thread spins on this QP's completion queue: it
                            // reads the bytes itself, and this thread stops watching for
                            // input meanwhile (no wake-up per arrival). The backstop takes
                            // the socket back once no application thread reads it (arming a
                            // queue with a channel, before a sleep, at once); write what
                            // waits for room.
                            self.set_backstop(ev.token());
                            e.leave_input(&self, ev.is_writable());
                        } else {
                            e.progress(&self)
                        }
                    }
                    Some(Target::Pending(p)) => p.progress(&self),
                    Some(Target::Listener(l)) => l.accept_all(&self),
                    Some(Target::Dialing(e)) => e.dial_ended(),
                    None => {}
                });
            }
            for token in resume {
                let target = self.target(token);
                self.guarded(token, &target, || {
                    if let Some(Target::Endpoint(e)) = &target {
                        e.progress(&self);
                    }
                });
            }
            let now = Instant::now();
            // Taken out all at once, before any runs: a timer that one sets again, however
            // soon, waits for the next turn (the events first).
            {
                let mut timers = self.timers.lock().expect("engine timers");
                while let Some(key) = timers.pop_due(now) {
                    due.push(key);
                }
            }
            for key in due.drain(..) {
                let backstop = key & BACKSTOP_BIT != 0;
                let hold = key & HOLD_BIT != 0;
                let token = Token(key & !(BACKSTOP_BIT | HOLD_BIT));
                let target = self.target(token);
                self.guarded(token, &target, || match &target {
                    Some(Target::Endpoint(e)) if backstop && e.read_by_application() => {
                        // Application threads still read this socket: keep out a while
                        // longer.
                        self.set_backstop(token);
                    }
                    Some(Target::Endpoint(e)) if backstop => e.backstop(&self),
                    Some(Target::Endpoint(e)) if hold => e.hold_timer(),
                    Some(Target::Endpoint(e)) => e.progress(&self),
                    Some(Target::Pending(p)) => p.progress(&self),
                    // A retry after `accept` ran out of fds or memory.
                    Some(Target::Listener(l)) => l.accept_all(&self),
                    _ => {}
                });
            }
        }
    }
}

/// Sets the CRC32c method (see [`crate::wire::crc32c`]): the one `RDMASOCK_UIWARP_CRC_METHOD`
/// names (`instruction` or `table`), else the faster of the two on this CPU, timed on 4 KiB
/// (the best of 5 rounds of 8 each: about 40 µs on hardware, 2 ms under QEMU's TCG).
fn choose_crc_method() {
    use crate::wire::crc32c::{append_with, set_method, Method};
    match std::env::var("RDMASOCK_UIWARP_CRC_METHOD").as_deref() {
        Ok("instruction") => return set_method(Method::Instruction),
        Ok("table") => return set_method(Method::Table),
        Ok(other) => eprintln!(
            "uiwarp: RDMASOCK_UIWARP_CRC_METHOD={other:?} is neither \"instruction\" nor \"table\"; \
             choosing the faster by timing both"
        ),
        Err(_) => {}
    }
    let data = vec![0x5au8; 4096];
    let best = |m: Method| {
        (0..5)
            .map(|_| {
                let t = Instant::now();
                let mut crc = 0;
                for _ in 0..8 {
                    crc = append_with(m, crc, std::hint::black_box(&data));
                }
                std::hint::black_box(crc);
                t.elapsed()
            })
            .min()
            .unwrap_or_default()
    };
    let instruction = best(Method::Instruction);
    let table = best(Method::Table);
    set_method(if table < instruction {
        Method::Table
    } else {
        Method::Instruction
    });
}
