//! The process's rdma_cm event channel for kernel connections: every connection's id lives on
//! one [`EventChannel`] (one `/dev/infiniband/rdma_cm` fd for the whole process), and the
//! thread `rdmasock-cm` reads it and hands each event to its connection's [`Inbox`], whose
//! eventfd is the connection's event fd.
//!
//! An id comes here once it has a connection's endpoint ([`adopt`]): after its resolution on
//! a channel of its own (active side), or straight from its listener's channel (passive side).
//! Its inbox is entered under the id's number before MIGRATE_ID, so that no event of it can
//! come before there is a place for it; the kernel moves the id's queued events along without
//! waking a reader of the new channel, so the adopting thread reads the channel once itself.
//!
//! The thread is started by the first adoption and runs as long as the process; it reads
//! only the channel of its own process: a child made by `fork` (which shares the parent's open
//! channel) gets a channel and a thread of its own on its first adoption, and the parent's
//! connections it inherited hear nothing there. An event whose id is gone (its endpoint was
//! dropped while the event was on its way) is dropped.
#![forbid(unsafe_code)]

use crate::event::CmEvent;
use crate::{CmId, EventChannel};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The events of one connection's id, and the eventfd that is readable while there are any
/// (or while a waker raised it: [`Inbox::wake`]).
#[derive(Debug)]
pub(crate) struct Inbox {
    state: Mutex<InboxState>,
    signal: EventFd,
}

#[derive(Debug, Default)]
struct InboxState {
    events: VecDeque<CmEvent>,
    /// Raised by [`Inbox::wake`], until [`Inbox::take_wake`].
    woken: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inbox {
    fn new() -> io::Result<Inbox> {
        let signal =
            EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC).map_err(|e| {
                io::Error::other(format!(
                    "creating a connection's rdma_cm event fd (an eventfd): {e} (raise the \
                     process's fd limit, RLIMIT_NOFILE)"
                ))
            })?;
        Ok(Inbox {
            state: Mutex::default(),
            signal,
        })
    }

    /// The fd: readable while an event waits or a wake is raised. Every change of that
    /// happens under the inbox's lock, so the fd's count is zero exactly when neither holds.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.signal.as_fd()
    }

    fn deliver(&self, event: CmEvent) {
        let mut state = lock(&self.state);
        state.events.push_back(event);
        let _ = self.signal.write(1);
    }

    /// The next event, without blocking.
    pub(crate) fn next(&self) -> Option<CmEvent> {
        let mut state = lock(&self.state);
        let event = state.events.pop_front();
        self.lower_if_idle(&state);
        event
    }

    /// Makes the fd readable until [`take_wake`](Self::take_wake), for a sleeper that waits
    /// on it (the socket's waker).
    pub(crate) fn wake(&self) {
        let mut state = lock(&self.state);
        state.woken = true;
        let _ = self.signal.write(1);
    }

    /// Takes back a [`wake`](Self::wake) (the fd stays readable while events wait).
    pub(crate) fn take_wake(&self) {
        let mut state = lock(&self.state);
        state.woken = false;
        self.lower_if_idle(&state);
    }

    fn lower_if_idle(&self, state: &InboxState) {
        if state.events.is_empty() && !state.woken {
            // Zero already reads as EAGAIN: nothing to lower then.
            let _ = self.signal.read();
        }
    }
}

/// The process's channel and where its events go.
#[derive(Debug)]
struct ProcessChannel {
    channel: EventChannel,
    /// Inboxes by id number, held weakly: an endpoint's drop takes its inbox away.
    inboxes: Mutex<HashMap<u64, Weak<Inbox>>>,
    /// Held while the channel is read and its events handed out, so that two readers (the
    /// thread and an adopting caller) cannot hand one id's events out of order.
    reading: Mutex<()>,
}

/// The process's channel, and the process it belongs to (a child made by `fork` opens its own).
static PROCESS_CHANNEL: Mutex<Option<(u32, Arc<ProcessChannel>)>> = Mutex::new(None);

/// This process's channel and its thread, started on first use.
fn process_channel() -> io::Result<Arc<ProcessChannel>> {
    let mut slot = lock(&PROCESS_CHANNEL);
    let pid = std::process::id();
    if let Some((owner, p)) = slot.as_ref() {
        if *owner == pid {
            return Ok(Arc::clone(p));
        }
    }
    let p = Arc::new(ProcessChannel {
        channel: EventChannel::open()?,
        inboxes: Mutex::default(),
        reading: Mutex::new(()),
    });
    let run = Arc::clone(&p);
    std::thread::Builder::new()
        .name("rdmasock-cm".into())
        .spawn(move || run.run())
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "starting rdmasock's rdma_cm event thread: {e} (raise the process's \
                     thread limit, RLIMIT_NPROC)"
                ),
            )
        })?;
    *slot = Some((pid, Arc::clone(&p)));
    Ok(p)
}

/// An id's place on the process's channel: its inbox, entered under its number until this is
/// dropped (with the id's endpoint).
#[derive(Debug)]
pub(crate) struct Adoption {
    inbox: Arc<Inbox>,
    process: Arc<ProcessChannel>,
    uid: u64,
}

impl Adoption {
    /// Where the id's events arrive.
    pub(crate) fn inbox(&self) -> &Inbox {
        &self.inbox
    }
}

impl Drop for Adoption {
    fn drop(&mut self) {
        lock(&self.process.inboxes).remove(&self.uid);
    }
}

/// Moves `id` onto the process's channel; its events (those the kernel queued already
/// included) arrive in the adoption's inbox from now on.
pub(crate) fn adopt(id: &mut CmId) -> io::Result<Adoption> {
    let process = process_channel()?;
    let inbox = Arc::new(Inbox::new()?);
    let uid = id.token().0;
    lock(&process.inboxes).insert(uid, Arc::downgrade(&inbox));
    if let Err(e) = id.migrate(&process.channel) {
        lock(&process.inboxes).remove(&uid);
        return Err(e.into());
    }
    process.hand_out();
    Ok(Adoption {
        inbox,
        process,
        uid,
    })
}

impl ProcessChannel {
    fn run(&self) {
        loop {
            let mut fds = [PollFd::new(self.channel.as_fd(), PollFlags::POLLIN)];
            match nix::poll::poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(nix::errno::Errno::EINTR | nix::errno::Errno::ENOMEM) => {}
                // The fd is the process's own and stays open: no other error can come.
                Err(_) => return,
            }
            self.hand_out();
        }
    }

    /// Reads every event the channel holds and hands each to its id's inbox.
    fn hand_out(&self) {
        let _reading = lock(&self.reading);
        // An error of GET_EVENT is left to the next readiness.
        while let Ok(Some(event)) = self.channel.try_get_event() {
            // None: the endpoint is gone, and its id destroyed or about to be.
            let inbox = lock(&self.inboxes).get(&event.id.0).and_then(Weak::upgrade);
            if let Some(inbox) = inbox {
                inbox.deliver(event.event);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(inbox: &Inbox) -> bool {
        let mut fds = [PollFd::new(inbox.fd(), PollFlags::POLLIN)];
        nix::poll::poll(&mut fds, PollTimeout::ZERO).expect("poll") == 1
    }

    #[test]
    fn the_fd_is_readable_exactly_while_events_wait() {
        let inbox = Inbox::new().unwrap();
        assert!(!readable(&inbox));
        inbox.deliver(CmEvent::TimewaitExit);
        inbox.deliver(CmEvent::DeviceRemoval);
        assert!(readable(&inbox));
        assert!(matches!(inbox.next(), Some(CmEvent::TimewaitExit)));
        assert!(readable(&inbox), "one event still waits");
        assert!(matches!(inbox.next(), Some(CmEvent::DeviceRemoval)));
        assert!(!readable(&inbox));
        assert!(inbox.next().is_none());
        assert!(!readable(&inbox));
    }

    #[test]
    fn a_wake_holds_until_taken_back_and_never_hides_an_event() {
        let inbox = Inbox::new().unwrap();
        inbox.wake();
        assert!(readable(&inbox));
        assert!(inbox.next().is_none());
        assert!(
            readable(&inbox),
            "an empty poll does not take the wake back"
        );
        inbox.deliver(CmEvent::DeviceRemoval);
        inbox.take_wake();
        assert!(readable(&inbox), "the event still waits");
        assert!(matches!(inbox.next(), Some(CmEvent::DeviceRemoval)));
        assert!(!readable(&inbox));
        inbox.wake();
        inbox.take_wake();
        assert!(!readable(&inbox));
    }
}
