//! [`EventChannel`]: one open `/dev/infiniband/rdma_cm`, the ids created on it, and the FIFO
//! of their events.
//!
//! The fd is always non-blocking. [`EventChannel::try_get_event`] never blocks;
//! [`EventChannel::get_event`] waits with `poll(2)` and a timeout. The fd is pollable
//! ([`AsFd`], [`mio::event::Source`]): readable while the kernel holds events. Readiness is
//! level-triggered, and one readiness may cover many events: drain with `try_get_event` until
//! it returns `Ok(None)`. The blocking helpers of [`crate::CmId`] set aside events of other ids
//! of the channel; `try_get_event` hands those out first.
//!
//! Event accounting (docs/kernel-abi.md#rdma_cm-events): the kernel never waits for
//! acknowledgements, and events are handed out by value (a CONNECT_REQUEST owns its new
//! [`crate::CmId`]), so no event can refer to a destroyed id. The channel still counts the events
//! it took from the kernel per id, under the same lock as DESTROY_ID, so that
//! [`crate::CmId::destroy`] can return the kernel's `events_reported` and it equals
//! [`crate::CmId::events_delivered`].
#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use crate::event::{ChannelEvent, CmEvent, CmIdToken};
use crate::id::CmId;
use crate::sys::abi::ABI_VERSION;
use crate::sys::fd::CmFd;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The rdma_cm device node.
pub const RDMA_CM_PATH: &str = "/dev/infiniband/rdma_cm";
const ABI_VERSION_PATH: &str = "/sys/class/misc/rdma_cm/abi_version";

#[derive(Debug)]
struct IdRecord {
    kernel_id: u32,
    delivered: u32,
}

#[derive(Debug, Default)]
struct State {
    ids: HashMap<u64, IdRecord>,
    pending: VecDeque<ChannelEvent>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) fd: CmFd,
    state: Mutex<State>,
}

/// The next id number (the `uid` its events carry), counted per process rather than per
/// channel: an id keeps its number when it moves to another channel ([`CmId::migrate`]), so
/// no two ids of the process may share one.
static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// An rdma_cm event channel: a pollable fd that delivers the events of every [`CmId`] created
/// on it. Cheap to clone (clones share the fd); the fd closes when the last clone and the last
/// id on it are gone.
#[derive(Clone, Debug)]
pub struct EventChannel {
    pub(crate) inner: Arc<Inner>,
}

impl EventChannel {
    /// Opens `/dev/infiniband/rdma_cm`.
    ///
    /// # Errors
    /// [`Error::NotLoaded`] when the node does not exist (`modprobe rdma_ucm`), the verbs
    /// layer's `PermissionDenied` when it cannot be opened, [`Error::AbiVersion`] when the
    /// kernel speaks another ABI.
    pub fn open() -> Result<EventChannel> {
        Self::open_path(Path::new(RDMA_CM_PATH))
    }

    /// Opens the rdma_cm node at `path`.
    pub fn open_path(path: &Path) -> Result<EventChannel> {
        check_abi_version()?;
        let fd = CmFd::open(path).map_err(|e| open_error(path, e))?;
        Ok(EventChannel {
            inner: Arc::new(Inner {
                fd,
                state: Mutex::new(State::default()),
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next event of any id on this channel, without blocking: `Ok(None)` when there is
    /// none.
    pub fn try_get_event(&self) -> Result<Option<ChannelEvent>> {
        let mut state = self.state();
        if let Some(ev) = state.pending.pop_front() {
            return Ok(Some(ev));
        }
        self.fetch(&mut state)
    }

    /// GET_EVENT under the lock, with the per-id count.
    fn fetch(&self, state: &mut State) -> Result<Option<ChannelEvent>> {
        let raw = match self.inner.fd.get_event() {
            Ok(Some(raw)) => raw,
            Ok(None) => return Ok(None),
            Err(e) => return Err(Error::io("GET_EVENT on the rdma_cm channel", e)),
        };
        if let Some(rec) = state.ids.get_mut(&raw.uid) {
            rec.delivered += 1;
        }
        let event = CmEvent::decode(&raw, || {
            let uid = self.next_uid();
            state.ids.insert(
                uid,
                IdRecord {
                    kernel_id: raw.id,
                    delivered: 0,
                },
            );
            CmId::from_request(self.clone(), raw.id, uid)
        });
        Ok(Some(ChannelEvent {
            id: CmIdToken(raw.uid),
            event,
        }))
    }

    /// The next event of any id, waiting up to `timeout` (`None`: forever); `Ok(None)` when
    /// the time ran out.
    pub fn get_event(&self, timeout: Option<Duration>) -> Result<Option<ChannelEvent>> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            if let Some(ev) = self.try_get_event()? {
                return Ok(Some(ev));
            }
            if !self.wait_readable(deadline)? {
                return Ok(None);
            }
        }
    }

    /// The next event of the id `token`, setting aside events of other ids; `Ok(None)` on
    /// timeout.
    pub(crate) fn get_event_for(
        &self,
        token: CmIdToken,
        timeout: Duration,
    ) -> Result<Option<CmEvent>> {
        // A timeout too large for an Instant (Duration::MAX) means forever.
        let deadline = Instant::now().checked_add(timeout);
        loop {
            {
                let mut state = self.state();
                if let Some(pos) = state.pending.iter().position(|e| e.id == token) {
                    let ev = state.pending.remove(pos).expect("position is in range");
                    return Ok(Some(ev.event));
                }
                while let Some(ev) = self.fetch(&mut state)? {
                    if ev.id == token {
                        return Ok(Some(ev.event));
                    }
                    state.pending.push_back(ev);
                }
            }
            if !self.wait_readable(deadline)? {
                return Ok(None);
            }
        }
    }

    /// Waits until the fd is readable or `deadline` passes; `false` on timeout.
    fn wait_readable(&self, deadline: Option<Instant>) -> Result<bool> {
        loop {
            let timeout = match deadline {
                None => PollTimeout::NONE,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(false);
                    }
                    // Round up so that a sub-millisecond remainder still sleeps.
                    let ms = left.as_millis().saturating_add(1).min(i32::MAX as u128) as i32;
                    PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
                }
            };
            let mut fds = [PollFd::new(self.inner.fd.as_fd(), PollFlags::POLLIN)];
            match nix::poll::poll(&mut fds, timeout) {
                Ok(0) => continue, // re-check the deadline
                Ok(_) => return Ok(true),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    return Err(Error::io(
                        "poll on the rdma_cm channel",
                        io::Error::from_raw_os_error(e as i32),
                    ))
                }
            }
        }
    }

    pub(crate) fn next_uid(&self) -> u64 {
        NEXT_UID.fetch_add(1, Ordering::Relaxed)
    }

    /// CREATE_ID and registration; returns (kernel id, uid).
    pub(crate) fn create_id(&self, ps: u16) -> Result<(u32, u64)> {
        let uid = self.next_uid();
        let mut state = self.state();
        let kernel_id = self
            .inner
            .fd
            .create_id(uid, ps, 0)
            .map_err(|e| Error::command("CREATE_ID", "a new rdma_cm id", e))?;
        state.ids.insert(
            uid,
            IdRecord {
                kernel_id,
                delivered: 0,
            },
        );
        Ok((kernel_id, uid))
    }

    /// Events taken from the kernel for `uid` so far.
    pub(crate) fn delivered(&self, uid: u64) -> u32 {
        self.state().ids.get(&uid).map_or(0, |r| r.delivered)
    }

    /// DESTROY_ID; drops the set-aside events of the id (the kernel discards its queued ones);
    /// returns the kernel's `events_reported` and our count.
    pub(crate) fn destroy_id(&self, uid: u64) -> Result<(u32, u32)> {
        let (result, discarded) = {
            let mut state = self.state();
            let Some(rec) = state.ids.remove(&uid) else {
                return Err(Error::InvalidArgument(format!(
                    "rdma_cm id {uid} is not on this channel"
                )));
            };
            let result = self
                .inner
                .fd
                .destroy_id(rec.kernel_id)
                .map(|reported| (reported, rec.delivered));
            let token = CmIdToken(uid);
            let (discarded, kept) = std::mem::take(&mut state.pending)
                .into_iter()
                .partition::<VecDeque<_>, _>(|e| e.id == token);
            state.pending = kept;
            (result, discarded)
        };
        // Dropping a set-aside CONNECT_REQUEST destroys its id: outside the lock.
        drop(discarded);
        result.map_err(|e| Error::command("DESTROY_ID", format!("rdma_cm id {uid}"), e))
    }

    /// How many ids live on this channel.
    pub fn id_count(&self) -> usize {
        self.state().ids.len()
    }

    /// MIGRATE_ID of the id `uid` from this channel to `to`: the kernel moves the id and its
    /// queued events; its record, uid and set-aside events move along. The uid stays the
    /// same (uids are unique in the process).
    pub(crate) fn migrate_id(&self, uid: u64, to: &EventChannel) -> Result<()> {
        if Arc::ptr_eq(&self.inner, &to.inner) {
            return Ok(());
        }
        let (record, moved) = {
            let mut state = self.state();
            let Some(rec) = state.ids.get(&uid) else {
                return Err(Error::InvalidArgument(format!(
                    "rdma_cm id {uid} is not on this channel"
                )));
            };
            let kernel_id = rec.kernel_id;
            if to.state().ids.contains_key(&uid) {
                return Err(Error::InvalidArgument(format!(
                    "the target channel already has an id numbered {uid}"
                )));
            }
            to.inner
                .fd
                .migrate_id(kernel_id, self.inner.fd.as_fd())
                .map_err(|e| Error::command("MIGRATE_ID", format!("rdma_cm id {kernel_id}"), e))?;
            let rec = state.ids.remove(&uid).expect("checked above");
            let token = CmIdToken(uid);
            let (moved, kept) = std::mem::take(&mut state.pending)
                .into_iter()
                .partition::<VecDeque<_>, _>(|e| e.id == token);
            state.pending = kept;
            (rec, moved)
        };
        let mut target = to.state();
        target.ids.insert(uid, record);
        target.pending.extend(moved);
        Ok(())
    }
}

fn check_abi_version() -> Result<()> {
    // librdmacm assumes 4 when the file is missing.
    let Ok(text) = std::fs::read_to_string(ABI_VERSION_PATH) else {
        return Ok(());
    };
    match text.trim().parse::<u32>() {
        Ok(ABI_VERSION) => Ok(()),
        Ok(found) => Err(Error::AbiVersion {
            path: PathBuf::from(ABI_VERSION_PATH),
            found,
        }),
        Err(_) => Ok(()),
    }
}

/// Whether the kernel has RDMA loaded: its core module, or any device in sysfs.
fn kernel_has_rdma() -> bool {
    Path::new("/sys/module/ib_core").exists()
        || std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

fn open_error(path: &Path, e: io::Error) -> Error {
    match e.kind() {
        io::ErrorKind::NotFound => Error::NotLoaded {
            path: path.to_path_buf(),
            kernel_has_rdma: kernel_has_rdma(),
        },
        io::ErrorKind::PermissionDenied => match std::fs::metadata(path) {
            Ok(m) => Error::Verbs(rdmasock_verbs::Error::PermissionDenied {
                path: path.to_path_buf(),
                mode: m.mode() & 0o7777,
                owner_uid: m.uid(),
                owner_gid: m.gid(),
                uid: nix::unistd::getuid().as_raw(),
            }),
            Err(_) => Error::io(format!("opening {}", path.display()), e),
        },
        _ => Error::io(format!("opening {}", path.display()), e),
    }
}

impl AsFd for EventChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.fd.as_raw_fd()
    }
}

impl mio::event::Source for EventChannel {
    fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        mio::unix::SourceFd(&self.as_raw_fd()).register(registry, token, interests)
    }

    fn reregister(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        mio::unix::SourceFd(&self.as_raw_fd()).reregister(registry, token, interests)
    }

    fn deregister(&mut self, registry: &mio::Registry) -> io::Result<()> {
        mio::unix::SourceFd(&self.as_raw_fd()).deregister(registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_node_says_modprobe() {
        let e = EventChannel::open_path(Path::new("/nonexistent/rdma_cm")).unwrap_err();
        let text = e.to_string();
        // Which advice depends on this kernel: RDMA loaded (the VM) or not (the host).
        let advice = if kernel_has_rdma() {
            "rdma_ucm not loaded: modprobe rdma_ucm"
        } else {
            "this kernel has no RDMA loaded"
        };
        assert!(text.contains(advice), "{text}");
        assert!(text.contains("/nonexistent/rdma_cm"), "{text}");
    }

    #[test]
    fn a_kernel_without_rdma_is_told_apart_from_a_missing_module() {
        let error = |kernel_has_rdma| {
            Error::NotLoaded {
                path: PathBuf::from("/dev/infiniband/rdma_cm"),
                kernel_has_rdma,
            }
            .to_string()
        };
        let missing_module = error(true);
        assert!(
            missing_module.contains("modprobe rdma_ucm (as root"),
            "{missing_module}"
        );
        assert!(!missing_module.contains("userspace"), "{missing_module}");
        let no_rdma = error(false);
        assert!(
            no_rdma.contains("this kernel has no RDMA loaded"),
            "{no_rdma}"
        );
        assert!(no_rdma.contains("rdma link add rxe0"), "{no_rdma}");
        assert!(no_rdma.contains("userspace iWARP provider"), "{no_rdma}");
    }

    #[test]
    fn refused_open_says_permission_denied() {
        // The mapping of EACCES (root would open a 000 file, so feed the error directly).
        let dir = std::env::temp_dir().join(format!("cm-perm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let node = dir.join("rdma_cm");
        std::fs::write(&node, b"").unwrap();
        std::fs::set_permissions(&node, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let e = open_error(&node, io::Error::from_raw_os_error(libc::EACCES));
        std::fs::remove_dir_all(&dir).unwrap();
        let text = e.to_string();
        assert!(text.contains("permission denied opening"), "{text}");
        assert!(text.contains("mode 600"), "{text}");
        assert!(text.contains("chmod 666"), "{text}");
    }
}
