//! One device context and one protection domain per device per process, shared by every
//! connection on that device: a connection no longer opens the device (on a kernel device an
//! open of its uverbs node, a context and an fd) nor allocates a protection domain of its own.
//!
//! The process keeps only weak references: the context and domain live while a connection
//! (or a connect in progress) holds them, or a listener that answered connections on the
//! device (so that a server's next connection, and the process's clients on that device,
//! find it open), and the last of those to go closes the device; the kernel's removal of a
//! device therefore still completes once the sockets and listeners on it are dropped (as it
//! waits for a listener's connection-manager id anyway). A device reported removed is never handed
//! out again, so that a device re-added under the same name is opened afresh.
//!
//! Sharing the domain is safe for the peer's view: every region a peer may write (the receive
//! ring, the target list) is still registered per connection, with its own remote key, and a
//! queue pair's writes are checked against the key the peer was given, whichever domain holds
//! the other connections' regions. Memory no peer may touch (the send areas) comes from the
//! domain's pool of shared local-only registrations (`pool`).
#![forbid(unsafe_code)]

use super::pool::{LocalPool, LocalSlice};
use super::srq::SrqPool;
use crate::cm::CmEndpoint;
use crate::verbs::{Context, DeviceInfo, HugePages, ProtectionDomain};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// An open device and its protection domain, shared by the connections on it, with the
/// domain's pool of local-only memory and the shared receive queues its connections post on
/// (see `srq`). Field order is drop order: the queues, the pool (whose chunks the last slices
/// took with them) and the domain before the context.
#[derive(Debug)]
pub(crate) struct OpenDevice {
    srqs: SrqPool,
    pool: LocalPool,
    pd: ProtectionDomain,
    context: Context,
    /// Set when a connection on the device learnt of its removal: no new connection gets it.
    removed: AtomicBool,
}

impl OpenDevice {
    /// The device's context.
    pub(crate) fn context(&self) -> &Context {
        &self.context
    }

    /// The protection domain every connection on the device uses.
    pub(crate) fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The shared receive queues of the connections on the device.
    pub(crate) fn srqs(&self) -> &SrqPool {
        &self.srqs
    }

    /// A slice of `len` bytes of local-only registered memory from the domain's pool (see
    /// `pool`), on huge pages as `huge` asks.
    pub(crate) fn carve_local(&self, len: usize, huge: HugePages) -> io::Result<LocalSlice> {
        self.pool.carve(&self.pd, len, huge)
    }

    /// The device was removed: later connections open it again (a device of that name that
    /// appears later is another device) instead of sharing this one.
    pub(crate) fn mark_removed(&self) {
        self.removed.store(true, Ordering::Release);
    }

    /// Whether the device was removed (see [`mark_removed`](Self::mark_removed)).
    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }
}

/// What tells two open devices apart: a device removed and re-added comes back with a new
/// uverbs node (a userspace device has none), and the provider that opens a device follows
/// `RDMASOCK_PROVIDER` as it is when the connection is made.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DeviceKey {
    name: String,
    node_guid: u64,
    driver: Option<String>,
    uverbs_path: Option<PathBuf>,
    provider_choice: Option<String>,
}

impl DeviceKey {
    fn of(device: &DeviceInfo) -> DeviceKey {
        DeviceKey {
            name: device.name.clone(),
            node_guid: device.node_guid,
            driver: device.driver.clone(),
            uverbs_path: device.uverbs_path.clone(),
            provider_choice: std::env::var(crate::PROVIDER_ENV).ok(),
        }
    }
}

/// The devices open in a process, by key; entries whose device is gone are dropped as new
/// devices are added.
#[derive(Debug, Default)]
pub(crate) struct DeviceTable {
    open: Mutex<Vec<(DeviceKey, Weak<OpenDevice>)>>,
}

/// The process's table.
static DEVICES: DeviceTable = DeviceTable {
    open: Mutex::new(Vec::new()),
};

/// The shared device under `endpoint`: the one a live connection already holds, or the
/// device opened (and a protection domain allocated) the way the endpoint opens it.
pub(crate) fn for_endpoint(endpoint: &dyn CmEndpoint) -> io::Result<Arc<OpenDevice>> {
    let device = endpoint.device()?;
    DEVICES.get_or_open(&device, || {
        endpoint.open_context(&crate::default_registry())
    })
}

/// How many device contexts the connections of this process hold open: one per device in
/// use, however many connections use it.
pub fn open_device_contexts() -> usize {
    DEVICES.live()
}

impl DeviceTable {
    /// The live, not removed, device for `device`, or a new one from `open`. The table's
    /// lock is held over the open, so that connections made at once on a new device share
    /// one context instead of each opening one.
    fn get_or_open(
        &self,
        device: &DeviceInfo,
        open: impl FnOnce() -> io::Result<Context>,
    ) -> io::Result<Arc<OpenDevice>> {
        let key = DeviceKey::of(device);
        let mut open_devices = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let found = open_devices
            .iter()
            .filter(|(k, _)| *k == key)
            .filter_map(|(_, weak)| weak.upgrade())
            .find(|d| !d.is_removed());
        if let Some(shared) = found {
            return Ok(shared);
        }
        let context = open()?;
        let pd = context.alloc_pd()?;
        let shared = Arc::new(OpenDevice {
            srqs: SrqPool::default(),
            pool: LocalPool::default(),
            pd,
            context,
            removed: AtomicBool::new(false),
        });
        open_devices.retain(|(_, weak)| weak.upgrade().is_some_and(|d| !d.is_removed()));
        open_devices.push((key, Arc::downgrade(&shared)));
        Ok(shared)
    }

    /// How many devices are open and not removed.
    fn live(&self) -> usize {
        let open_devices = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open_devices
            .iter()
            .filter_map(|(_, weak)| weak.upgrade())
            .filter(|d| !d.is_removed())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::{DeviceTable, OpenDevice};
    use crate::verbs::provider::Provider;
    use crate::verbs::Context;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A table of its own and a uiwarp context opener that counts its opens.
    fn open_counted(table: &DeviceTable, opens: &AtomicUsize) -> Arc<OpenDevice> {
        let device = rdmasock_uiwarp::device_info();
        table
            .get_or_open(&device, || {
                opens.fetch_add(1, Ordering::SeqCst);
                let ops = rdmasock_uiwarp::UiwarpProvider::new().open(&device)?;
                Ok(Context::from_ops(ops))
            })
            .expect("uiwarp opens")
    }

    #[test]
    fn connections_on_one_device_share_one_context_and_domain() {
        let (table, opens) = (DeviceTable::default(), AtomicUsize::new(0));
        let held: Vec<_> = (0..16).map(|_| open_counted(&table, &opens)).collect();
        assert_eq!(opens.load(Ordering::SeqCst), 1);
        assert_eq!(table.live(), 1);
        assert!(held.iter().all(|d| Arc::ptr_eq(d, &held[0])));
    }

    #[test]
    fn the_last_holder_closes_the_device_and_the_next_opens_it_again() {
        let (table, opens) = (DeviceTable::default(), AtomicUsize::new(0));
        let first = open_counted(&table, &opens);
        let second = open_counted(&table, &opens);
        let weak = Arc::downgrade(&first);
        drop(first);
        assert_eq!(table.live(), 1, "one holder is left");
        drop(second);
        assert!(weak.upgrade().is_none(), "the last holder closed it");
        assert_eq!(table.live(), 0);
        let _again = open_counted(&table, &opens);
        assert_eq!(opens.load(Ordering::SeqCst), 2);
        assert_eq!(
            table.open.lock().unwrap().len(),
            1,
            "the dead entry is gone"
        );
    }

    #[test]
    fn a_removed_device_is_not_handed_out_again() {
        let (table, opens) = (DeviceTable::default(), AtomicUsize::new(0));
        let old = open_counted(&table, &opens);
        old.mark_removed();
        let new = open_counted(&table, &opens);
        assert!(!Arc::ptr_eq(&old, &new));
        assert_eq!(opens.load(Ordering::SeqCst), 2);
        assert_eq!(table.live(), 1, "only the new device counts");
    }

    #[test]
    fn a_failed_open_leaves_nothing_behind() {
        let table = DeviceTable::default();
        let device = rdmasock_uiwarp::device_info();
        let e = table
            .get_or_open(&device, || Err(std::io::Error::other("no such device")))
            .expect_err("the open fails");
        assert_eq!(e.to_string(), "no such device");
        assert_eq!(table.live(), 0);
    }
}
