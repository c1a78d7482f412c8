//! An accepted TCP connection that no queue pair owns yet ([`Pending`]): the engine drives
//! its MPA exchange until the listener offers the request to the application.
#![forbid(unsafe_code)]

use super::cm::ListenerShared;
use super::link::Link;
use super::Engine;
use crate::protocol::{ConnectRequest, Event, MemoryTable, RegionView};
use rdmasock_verbs::{LocalKey, RemoteKey};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

/// A table with no regions: the handshake touches no memory.
pub(crate) struct NoMemory;

impl MemoryTable for NoMemory {
    fn local(&self, _: LocalKey) -> Option<RegionView<'_>> {
        None
    }
    fn remote(&self, _: RemoteKey) -> Option<RegionView<'_>> {
        None
    }
}

/// An accepted TCP connection before a queue pair adopts it.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) link: Mutex<Option<Link>>,
    pub(crate) listener: Weak<ListenerShared>,
    /// Its MPA request came and was offered to the listener.
    pub(crate) offered: AtomicBool,
}

impl Pending {
    pub(crate) fn progress(self: &Arc<Self>, engine: &Engine) {
        let mut guard = self.link.lock().expect("uiwarp pending lock");
        let Some(link) = guard.as_mut() else {
            return;
        };
        link.progress(&NoMemory, false);
        let mut request: Option<ConnectRequest> = None;
        while let Some(ev) = link.conn.poll_event() {
            if let Event::ConnectRequest(r) = ev {
                request = Some(r);
            }
        }
        let (local, peer) = (link.local, link.peer);
        close_or_watch(&mut guard, engine);
        drop(guard);
        if let Some(r) = request {
            self.offered.store(true, Ordering::Relaxed);
            match self.listener.upgrade() {
                Some(l) => l.offer(self.clone(), r, local, peer),
                None => self.abandon(engine),
            }
        }
    }

    /// Whether the connection is still open and its MPA request has not come.
    pub(crate) fn half_open(&self) -> bool {
        !self.offered.load(Ordering::Relaxed)
            && self.link.lock().expect("uiwarp pending lock").is_some()
    }

    /// Closes a connection whose MPA request has not come, to make room for a newer one
    /// (unless the request came meanwhile).
    pub(crate) fn evict(&self, engine: &Engine) {
        let mut guard = self.link.lock().expect("uiwarp pending lock");
        if self.offered.load(Ordering::Relaxed) {
            return;
        }
        if let Some(link) = guard.take() {
            link.close(engine);
        }
    }

    /// After a panic while driving this connection: closes its socket without another call
    /// into its protocol state.
    pub(crate) fn drop_after_panic(&self, engine: &Engine) {
        self.link.clear_poison();
        let link = self.link.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(link) = link {
            link.close(engine);
        }
    }

    /// Closes the connection (no queue pair will take it).
    pub(crate) fn abandon(&self, engine: &Engine) {
        let mut guard = self.link.lock().expect("uiwarp pending lock");
        if let Some(mut link) = guard.take() {
            link.conn.close();
            link.flush(&NoMemory);
            link.close(engine);
        }
    }
}

/// After progress on a pending connection's link: closes it once it is finished, else has
/// the engine watch it (a reply TCP did not take at once goes out when there is room).
pub(crate) fn close_or_watch(slot: &mut Option<Link>, engine: &Engine) {
    let Some(link) = slot.as_mut() else {
        return;
    };
    if link.finished(Instant::now()) {
        let link = slot.take().expect("link exists");
        link.close(engine);
    } else {
        link.sync_interest(engine);
        engine.set_timer(link.token, link.next_timer());
    }
}
