//! [`BridgeContext`]: a device opened through libibverbs, and its protection domains,
//! memory regions and completion channels.
#![forbid(unsafe_code)]

use crate::convert::{device_attributes_ex, port_attributes, WcFlagsEncoding};
use crate::cq::{BridgeChannel, BridgeCq};
use crate::error::{load_error, not_listed, verb_error, Selection};
use crate::qp::BridgeQp;
use crate::sys::{self, RawContext, RawMr, RawPd};
use rdmasock_verbs::objects::{AsyncEvent, AsyncEventKind};
use rdmasock_verbs::provider::{ChannelOps, ContextOps, CqOps, MrOps, PdOps, QpOps};
use rdmasock_verbs::qp_attr::QpInitAttributes;
use rdmasock_verbs::{
    AccessFlags, DeviceAttributes, DeviceInfo, Error, Gid, LocalKey, PortAttributes,
    RegisteredMemory, RemoteKey, Result,
};
use std::any::Any;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A device opened through libibverbs: the bridge's [`ContextOps`]. Cheap to clone.
#[derive(Clone, Debug)]
pub struct BridgeContext {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    device: DeviceInfo,
    raw: Arc<RawContext>,
    next_cookie: AtomicU64,
    wc_flags: WcFlagsEncoding,
}

impl BridgeContext {
    /// Loads libibverbs (once per process) and opens `device` by name, or by node GUID when
    /// libibverbs names it differently.
    pub fn open(device: &DeviceInfo, selection: Selection) -> Result<BridgeContext> {
        let lib = sys::library().map_err(|e| load_error(device, selection, &e))?;
        let opened = RawContext::open(lib, &device.name, device.node_guid)
            .map_err(|e| verb_error("ibv_open_device", &device.name, e))?;
        let raw = match opened {
            Some(raw) => raw,
            None => {
                let listed = sys::list_devices(lib)
                    .map(|l| l.into_iter().map(|(n, _)| n).collect::<Vec<_>>())
                    .unwrap_or_default();
                return Err(not_listed(device, selection, &lib.path, &listed));
            }
        };
        Ok(BridgeContext {
            inner: Arc::new(Inner {
                device: device.clone(),
                raw: Arc::new(raw),
                next_cookie: AtomicU64::new(1),
                wc_flags: WcFlagsEncoding::for_driver(device.driver.as_deref()),
            }),
        })
    }

    /// The path of the libibverbs in use.
    pub fn library_path(&self) -> &'static str {
        &self.inner.raw.library().path
    }

    /// `ibv_query_gid`: the GID at `index` of `port`.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        let index = i32::try_from(index)
            .map_err(|_| Error::InvalidArgument(format!("GID index {index} is out of range")))?;
        self.inner
            .raw
            .query_gid(port, index)
            .map(|g| Gid(g.raw))
            .map_err(|e| self.error("ibv_query_gid", e))
    }

    pub(crate) fn raw(&self) -> &Arc<RawContext> {
        &self.inner.raw
    }

    /// How this device's rdma-core provider encodes `wc_flags`.
    pub(crate) fn wc_flags_encoding(&self) -> WcFlagsEncoding {
        self.inner.wc_flags
    }

    pub(crate) fn name(&self) -> &str {
        &self.inner.device.name
    }

    /// A fresh cookie for a CQ or QP (never 0).
    pub(crate) fn next_cookie(&self) -> u64 {
        self.inner.next_cookie.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn error(&self, verb: &'static str, e: std::io::Error) -> Error {
        verb_error(verb, &self.inner.device.name, e)
    }
}

impl ContextOps for BridgeContext {
    fn num_comp_vectors(&self) -> Option<u32> {
        u32::try_from(self.inner.raw.num_comp_vectors()).ok()
    }
    fn device(&self) -> &DeviceInfo {
        &self.inner.device
    }

    fn provider_name(&self) -> &'static str {
        "ibverbs"
    }

    /// Assumed of every iWARP device behind rdma-core (siw, and RNICs whose completion means
    /// the bytes went to their TCP): nothing says otherwise.
    fn unsignaled_sends_borrow_memory(&self) -> bool {
        self.inner.device.transport == rdmasock_verbs::Transport::Iwarp
    }

    fn query_device(&self) -> Result<DeviceAttributes> {
        let a = self
            .inner
            .raw
            .query_device_ex()
            .map_err(|e| self.error("ibv_query_device_ex", e))?;
        Ok(device_attributes_ex(&a))
    }

    fn query_port(&self, port: u8) -> Result<PortAttributes> {
        let a = self
            .inner
            .raw
            .query_port(port)
            .map_err(|e| self.error("ibv_query_port", e))?;
        Ok(port_attributes(&a))
    }

    fn alloc_pd(&self) -> Result<Arc<dyn PdOps>> {
        let raw = RawPd::alloc(&self.inner.raw).map_err(|e| self.error("ibv_alloc_pd", e))?;
        Ok(Arc::new(BridgePd {
            raw: Arc::new(raw),
            context: self.clone(),
        }))
    }

    fn create_comp_channel(&self) -> Result<Arc<dyn ChannelOps>> {
        Ok(Arc::new(BridgeChannel::create(self)?))
    }

    fn create_cq(
        &self,
        depth: u32,
        channel: Option<Arc<dyn ChannelOps>>,
        comp_vector: u32,
    ) -> Result<Arc<dyn CqOps>> {
        let vectors = self.inner.raw.num_comp_vectors().max(1) as u32;
        if comp_vector >= vectors {
            return Err(Error::InvalidArgument(format!(
                "completion vector {comp_vector} does not exist: {} has {vectors}",
                self.name()
            )));
        }
        Ok(Arc::new(BridgeCq::create(
            self,
            depth,
            channel,
            comp_vector,
        )?))
    }

    fn async_fd(&self) -> BorrowedFd<'_> {
        self.inner.raw.async_fd()
    }

    fn read_async_event(&self) -> Result<Option<AsyncEvent>> {
        let event = self.inner.raw.get_async_event().map_err(|e| {
            Error::io(
                format!("reading async events of {} through libibverbs", self.name()),
                e,
            )
        })?;
        Ok(event.map(|(kind, element)| AsyncEvent {
            kind: AsyncEventKind::from_raw(kind.max(0) as u32),
            element,
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A protection domain.
#[derive(Debug)]
pub struct BridgePd {
    raw: Arc<RawPd>,
    context: BridgeContext,
}

impl BridgePd {
    pub(crate) fn raw(&self) -> &Arc<RawPd> {
        &self.raw
    }
    pub(crate) fn context(&self) -> &BridgeContext {
        &self.context
    }
}

impl PdOps for BridgePd {
    fn reg_mr(&self, memory: Arc<RegisteredMemory>, access: AccessFlags) -> Result<Box<dyn MrOps>> {
        let raw = RawMr::register(&self.raw, memory, access.bits())
            .map_err(|e| self.context.error("REG_MR", e))?;
        let (lkey, rkey) = raw.keys();
        Ok(Box::new(BridgeMr {
            _raw: raw,
            lkey: LocalKey(lkey),
            rkey: RemoteKey(rkey),
        }))
    }

    fn create_qp(
        &self,
        init: &QpInitAttributes,
        send_cq: Arc<dyn CqOps>,
        recv_cq: Arc<dyn CqOps>,
    ) -> Result<Box<dyn QpOps>> {
        Ok(Box::new(BridgeQp::create(self, init, send_cq, recv_cq)?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A registered memory region.
#[derive(Debug)]
pub struct BridgeMr {
    _raw: RawMr,
    lkey: LocalKey,
    rkey: RemoteKey,
}

impl MrOps for BridgeMr {
    fn lkey(&self) -> LocalKey {
        self.lkey
    }
    fn rkey(&self) -> RemoteKey {
        self.rkey
    }
}
