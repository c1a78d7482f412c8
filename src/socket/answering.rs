//! The process's answering thread, `rdmasock-listen`: it answers every listener's connection
//! requests as they come, whether or not anyone calls `accept`, up to the listener's backlog
//! (handshakes under way plus connections waiting for `accept`, as a TCP listener's accept
//! queue), and rejects each request beyond it at once, with the reason as the reject's
//! private data: a client of a full listener is refused in a round trip instead of waiting
//! out its connection manager's retries, and the kernel's own request queue (sized
//! [`KERNEL_QUEUE`]) never fills, so its overflow paths (a silent drop on InfiniBand, a
//! siw listener killed by clients that gave up before its accept work reached them) stay
//! out of reach.
//!
//! One epoll instance watches each listener's connection-manager fd; a listener is held
//! weakly, and the last of its clones to go takes it out ([`Registration`]). `accept` still
//! answers requests itself too (the thread may be behind, or absent in a child made by
//! `fork`, which gets a thread of its own when it binds).
#![forbid(unsafe_code)]

use super::handshake::Backlog;
use super::listener::answer;
use super::options::SocketOptions;
use crate::cm::{CmListener, IncomingRequest};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The backlog handed to the connection manager's listen: the kernel's queue of requests
/// that the answering thread has not taken yet (rdma_cm caps it at its `max_backlog`,
/// 1,024 by default; siw's TCP listen at `somaxconn`).
pub(crate) const KERNEL_QUEUE: u32 = 1024;

/// What the thread needs of one listener, held weakly.
struct Watched {
    cm: Weak<dyn CmListener>,
    backlog: Weak<Mutex<Backlog>>,
    opts: SocketOptions,
    failed: Weak<Mutex<Option<io::Error>>>,
}

/// The thread's state, shared with the listeners that register.
struct Answering {
    epoll: Epoll,
    listeners: Mutex<HashMap<u64, Watched>>,
    next_token: AtomicU64,
}

/// The process's answering thread, and the process it belongs to (a child made by `fork`
/// has no thread, and starts its own).
static ANSWERING: Mutex<Option<Running>> = Mutex::new(None);

/// The process id the thread runs in, and its state.
type Running = (u32, Arc<Answering>);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The running thread of this process, started on first use.
fn answering() -> io::Result<Arc<Answering>> {
    let mut slot = lock(&ANSWERING);
    let pid = std::process::id();
    if let Some((owner, a)) = slot.as_ref() {
        if *owner == pid {
            return Ok(Arc::clone(a));
        }
    }
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
        .map_err(|e| io::Error::other(format!("creating the listeners' answering epoll: {e}")))?;
    let a = Arc::new(Answering {
        epoll,
        listeners: Mutex::default(),
        next_token: AtomicU64::new(0),
    });
    let run = Arc::clone(&a);
    std::thread::Builder::new()
        .name("rdmasock-listen".into())
        .spawn(move || run.run())
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "starting rdmasock's answering thread for listeners: {e} (raise the \
                     process's thread limit, RLIMIT_NPROC)"
                ),
            )
        })?;
    *slot = Some((pid, Arc::clone(&a)));
    Ok(a)
}

/// A listener's place under the answering thread; dropping it (with the last clone of the
/// listener) takes the listener out.
pub(crate) struct Registration {
    answering: Arc<Answering>,
    token: u64,
    cm: Arc<dyn CmListener>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.answering.listeners).remove(&self.token);
        let _ = self.answering.epoll.delete(self.cm.event_fd());
    }
}

/// Puts a listener under the answering thread.
pub(crate) fn register(
    cm: &Arc<dyn CmListener>,
    backlog: &Arc<Mutex<Backlog>>,
    opts: &SocketOptions,
    failed: &Arc<Mutex<Option<io::Error>>>,
) -> io::Result<Registration> {
    let answering = answering()?;
    let token = answering.next_token.fetch_add(1, Ordering::Relaxed);
    lock(&answering.listeners).insert(
        token,
        Watched {
            cm: Arc::downgrade(cm),
            backlog: Arc::downgrade(backlog),
            opts: opts.clone(),
            failed: Arc::downgrade(failed),
        },
    );
    let registration = Registration {
        answering: Arc::clone(&answering),
        token,
        cm: Arc::clone(cm),
    };
    answering
        .epoll
        .add(cm.event_fd(), EpollEvent::new(EpollFlags::EPOLLIN, token))
        .map_err(|e| {
            io::Error::other(format!(
                "watching the listener in the answering thread's epoll: {e}"
            ))
        })?;
    Ok(registration)
}

impl Answering {
    fn run(&self) {
        let mut events = [EpollEvent::empty(); 32];
        loop {
            let n = match self.epoll.wait(&mut events, EpollTimeout::NONE) {
                Ok(n) => n,
                Err(nix::errno::Errno::EINTR) => continue,
                // Nothing to do about it here: `accept` goes on answering by itself.
                Err(_) => return,
            };
            for event in &events[..n] {
                self.serve(event.data());
            }
        }
    }

    /// Takes every request that waits on listener `token`: answered while its backlog has
    /// room, rejected beyond it.
    fn serve(&self, token: u64) {
        let (cm, backlog, opts, failed) = {
            let listeners = lock(&self.listeners);
            let Some(w) = listeners.get(&token) else {
                return;
            };
            (
                w.cm.upgrade(),
                w.backlog.upgrade(),
                w.opts.clone(),
                w.failed.upgrade(),
            )
        };
        let (Some(cm), Some(backlog), Some(failed)) = (cm, backlog, failed) else {
            return;
        };
        let most = opts.backlog as usize;
        loop {
            let request = match cm.poll_request() {
                Ok(Some(request)) => request,
                Ok(None) => break,
                Err(e) => {
                    // Left to `accept`, which reports it; the thread stops watching this
                    // listener, as the error may repeat.
                    let _ = self.epoll.delete(cm.event_fd());
                    let mut backlog = lock(&backlog);
                    backlog.defer_error(e);
                    settle(&mut backlog, cm.as_ref(), most);
                    break;
                }
            };
            // The answer (the connection's resources, the connection manager's accept) is
            // made outside the backlog's lock, on a place held for it: `accept` hands out
            // the connections that are ready meanwhile.
            if !lock(&backlog).reserve(most) {
                reject_full(request, most);
                continue;
            }
            let answered = answer(&opts, &failed, request);
            let mut backlog = lock(&backlog);
            backlog.release();
            match answered {
                Ok(Some(h)) => {
                    if let Err(e) = backlog.push(h) {
                        backlog.defer_error(e);
                    }
                }
                Ok(None) => continue,
                Err(e) => backlog.defer_error(e),
            }
            settle(&mut backlog, cm.as_ref(), most);
        }
    }
}

/// After a handshake was added or an error kept: wakes a blocking `accept` (whose wait began
/// before this handshake was there) and sets the timers to the new handshakes' bounds.
fn settle(backlog: &mut Backlog, cm: &dyn CmListener, most: usize) {
    backlog.notify();
    let _ = backlog.arm_timer();
    let _ = backlog.own_listen(cm.event_fd(), most);
}

/// Rejects a request that found the backlog full, saying so in the reject's private data.
fn reject_full(request: IncomingRequest, most: usize) {
    let reason = format!(
        "rdmasock: the listener's backlog ({most}) is full of connections waiting for \
         accept: try again later"
    );
    let _ = request.endpoint.reject(reason.as_bytes());
}
