//! [`CmId`]: one rdma_cm identifier in the TCP port space (reliable connected), with the
//! non-blocking commands: bind, resolve, listen, connect, accept, reject, disconnect, queries
//! and options. Results of the network operations arrive as events on the id's
//! [`EventChannel`]; the blocking helpers in `blocking.rs` wait for them.
#![forbid(unsafe_code)]

use crate::channel::EventChannel;
use crate::error::{Error, Result};
use crate::event::{CmIdToken, ConnectionParameters, RejectReason};
use crate::sys::abi::port_space;
use crate::sys::fd::{CmFd, NO_IBDEV_INDEX};
use crate::sys::sockaddr;
use rdmasock_verbs::qp_attr::{QpAttrMask, QpAttributes};
use rdmasock_verbs::{DeviceInfo, Gid, QpState, Transport};
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Private data limits of IB/RoCE with IP addressing (docs/kernel-abi.md#rdma_cm-private-data).
pub const IB_CONNECT_PRIVATE_DATA_MAX: usize = 56;
/// ACCEPT (REP) limit on IB/RoCE.
pub const IB_ACCEPT_PRIVATE_DATA_MAX: usize = 196;
/// REJECT (REJ) limit on IB/RoCE.
pub const IB_REJECT_PRIVATE_DATA_MAX: usize = 148;
/// The ABI's limit (the length is a u8), which is what iWARP gets.
pub const ABI_PRIVATE_DATA_MAX: usize = 255;

/// What QUERY(ADDR) says about an id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressInfo {
    /// The bound (source) address, if any.
    pub local: Option<SocketAddr>,
    /// The destination (peer) address, if any.
    pub peer: Option<SocketAddr>,
    /// The node GUID of the device the id is bound to (big-endian value, as `ibv_devices`
    /// prints it); `None` while unbound.
    pub node_guid: Option<u64>,
    /// The device port (1-based); 0 while unbound.
    pub port_num: u8,
    /// The partition key.
    pub pkey: u16,
    /// The kernel's device index (kernels 5.8+).
    pub ibdev_index: Option<u32>,
}

/// What QUERY_ROUTE says about an id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteInfo {
    /// Source address.
    pub local: Option<SocketAddr>,
    /// Destination address.
    pub peer: Option<SocketAddr>,
    /// Device node GUID (big-endian value); `None` while unbound.
    pub node_guid: Option<u64>,
    /// Device port.
    pub port_num: u8,
    /// Number of valid path records (0 before ROUTE_RESOLVED).
    pub num_paths: u32,
    /// Source GID of the primary path (RoCE: the IP-mapped GID).
    pub sgid: Gid,
    /// Destination GID of the primary path.
    pub dgid: Gid,
}

#[derive(Debug, Default)]
struct Cache {
    local: Option<SocketAddr>,
    peer: Option<SocketAddr>,
    device: Option<DeviceInfo>,
}

/// An rdma_cm id in the TCP port space. Destroyed (DESTROY_ID) on drop; errors on drop are
/// ignored, so call [`CmId::destroy`] to see them.
#[derive(Debug)]
pub struct CmId {
    channel: EventChannel,
    kernel_id: u32,
    uid: u64,
    cache: Mutex<Cache>,
    alive: bool,
}

impl CmId {
    /// CREATE_ID on `channel`, port space TCP (reliable connected QPs).
    pub fn new(channel: &EventChannel) -> Result<CmId> {
        let (kernel_id, uid) = channel.create_id(port_space::TCP)?;
        Ok(CmId {
            channel: channel.clone(),
            kernel_id,
            uid,
            cache: Mutex::default(),
            alive: true,
        })
    }

    pub(crate) fn from_request(channel: EventChannel, kernel_id: u32, uid: u64) -> CmId {
        CmId {
            channel,
            kernel_id,
            uid,
            cache: Mutex::default(),
            alive: true,
        }
    }

    fn fd(&self) -> &CmFd {
        &self.channel.inner.fd
    }

    fn cache(&self) -> MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The channel the id's events arrive on.
    pub fn channel(&self) -> &EventChannel {
        &self.channel
    }

    /// The token events of this id carry.
    pub fn token(&self) -> CmIdToken {
        CmIdToken(self.uid)
    }

    /// The kernel's number for this id.
    pub fn kernel_id(&self) -> u32 {
        self.kernel_id
    }

    /// Events of this id taken from the kernel so far (for a listener, its CONNECT_REQUESTs).
    pub fn events_delivered(&self) -> u32 {
        self.channel.delivered(self.uid)
    }

    /// What messages call this id: its peer or local address, else its number.
    pub fn describe(&self) -> String {
        let (peer, local) = {
            let c = self.cache();
            (c.peer, c.local)
        };
        let (peer, local) = match (peer, local) {
            (None, None) => match self.query_addr() {
                Ok(a) => (a.peer, a.local),
                Err(_) => (None, None),
            },
            known => known,
        };
        match (peer, local) {
            (Some(p), _) => p.to_string(),
            (None, Some(l)) => format!("listener {l}"),
            (None, None) => format!("rdma_cm id {}", self.kernel_id),
        }
    }

    pub(crate) fn peer_hint(&self) -> Option<SocketAddr> {
        self.cache().peer
    }

    /// BIND to a local address (port 0: ephemeral). A specific address binds the id to that
    /// address's RDMA device; a wildcard listens on all of them.
    pub fn bind(&self, addr: SocketAddr) -> Result<()> {
        self.fd()
            .bind(self.kernel_id, &addr)
            .map_err(|e| crate::device::bind_error(addr, e))?;
        self.cache().local = Some(addr);
        Ok(())
    }

    /// RESOLVE_ADDR: starts resolving `dst` (and `src`, if given) to a device; ADDR_RESOLVED
    /// or ADDR_ERROR follows within `timeout`.
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        self.cache().peer = Some(dst);
        self.fd()
            .resolve_addr(self.kernel_id, src.as_ref(), &dst, ms)
            .map_err(|e| crate::device::resolve_error(dst, "RESOLVE_ADDR", e))
    }

    /// RESOLVE_ROUTE: ROUTE_RESOLVED or ROUTE_ERROR follows (at once on RoCE and iWARP).
    pub fn resolve_route(&self, timeout: Duration) -> Result<()> {
        let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        self.fd()
            .resolve_route(self.kernel_id, ms)
            .map_err(|e| match self.peer_hint() {
                Some(dst) => crate::device::resolve_error(dst, "RESOLVE_ROUTE", e),
                None => Error::command("RESOLVE_ROUTE", self.describe(), e),
            })
    }

    /// LISTEN with `backlog` pending requests (the kernel caps it at
    /// `net.rdma_ucm.max_backlog`, 1024 by default). Bind first.
    pub fn listen(&self, backlog: u32) -> Result<()> {
        self.fd()
            .listen(self.kernel_id, backlog)
            .map_err(|e| Error::command("LISTEN", self.describe(), e))
    }

    /// The transport of the id's device, when it is known (without a device: `None`).
    pub fn transport(&self) -> Option<Transport> {
        self.device().ok().map(|d| d.transport)
    }

    fn private_data_max(&self, ib_max: usize) -> usize {
        match self.transport() {
            Some(Transport::Iwarp) => ABI_PRIVATE_DATA_MAX,
            _ => ib_max,
        }
    }

    fn check_private_data(&self, operation: &'static str, len: usize, ib_max: usize) -> Result<()> {
        let max = self.private_data_max(ib_max);
        if len > max {
            return Err(Error::PrivateDataTooLong {
                operation,
                len,
                max,
            });
        }
        Ok(())
    }

    /// CONNECT with `param` (its `qp_num` is your QP's; private data ≤ 56 bytes on
    /// IB/RoCE). CONNECT_RESPONSE (IB/RoCE) or ESTABLISHED (iWARP), REJECTED, UNREACHABLE or
    /// CONNECT_ERROR follows. Resolve the route first.
    pub fn connect(&self, param: &ConnectionParameters) -> Result<()> {
        self.check_private_data(
            "CONNECT",
            param.private_data.len(),
            IB_CONNECT_PRIVATE_DATA_MAX,
        )?;
        self.fd()
            .connect(self.kernel_id, &param.to_raw(true))
            .map_err(|e| match (e.raw_os_error(), self.peer_hint()) {
                // iWARP: the kernel's TCP connect is refused in the call itself.
                (Some(libc::ECONNREFUSED), Some(addr)) => Error::ConnectionRefused {
                    addr,
                    reason: RejectReason::Errno(libc::ECONNREFUSED),
                },
                _ => Error::command("CONNECT", self.describe(), e),
            })
    }

    /// ACCEPT a connection request on its new id (private data ≤ 196 bytes on IB/RoCE).
    /// ESTABLISHED follows. Drive the QP first (see [`CmId::accept_qp`]).
    pub fn accept(&self, param: &ConnectionParameters) -> Result<()> {
        self.check_private_data(
            "ACCEPT",
            param.private_data.len(),
            IB_ACCEPT_PRIVATE_DATA_MAX,
        )?;
        self.fd()
            .accept(self.kernel_id, self.uid, &param.to_raw(true))
            .map_err(|e| Error::command("ACCEPT", self.describe(), e))
    }

    /// The active side's ACCEPT with `valid = 0` after CONNECT_RESPONSE: sends the RTU that
    /// completes the connection (IB/RoCE; `rdma_establish`).
    pub fn establish(&self) -> Result<()> {
        let param = ConnectionParameters::default().to_raw(false);
        self.fd()
            .accept(self.kernel_id, self.uid, &param)
            .map_err(|e| Error::command("ACCEPT (establish)", self.describe(), e))
    }

    /// REJECT a connection request with `private_data` (≤ 148 bytes on IB/RoCE); the peer
    /// sees REJECTED, consumer-defined reason. The id stays until dropped.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        self.check_private_data("REJECT", private_data.len(), IB_REJECT_PRIVATE_DATA_MAX)?;
        self.fd()
            .reject(self.kernel_id, 0, private_data)
            .map_err(|e| Error::command("REJECT", self.describe(), e))
    }

    /// DISCONNECT: sends DREQ (or DREP after the peer's DREQ); DISCONNECTED follows. Move
    /// your QP out of RTS first ([`CmId::disconnect_qp`] does both).
    pub fn disconnect(&self) -> Result<()> {
        self.fd()
            .disconnect(self.kernel_id)
            .map_err(|e| Error::command("DISCONNECT", self.describe(), e))
    }

    /// QUERY(ADDR): addresses and device.
    pub fn query_addr(&self) -> Result<AddressInfo> {
        let r = self.fd().query_addr(self.kernel_id).map_err(|e| {
            Error::command("QUERY(ADDR)", format!("rdma_cm id {}", self.kernel_id), e)
        })?;
        let info = AddressInfo {
            local: (r.src_size > 0)
                .then(|| sockaddr::from_storage(&r.src_addr))
                .flatten(),
            peer: (r.dst_size > 0)
                .then(|| sockaddr::from_storage(&r.dst_addr))
                .flatten(),
            node_guid: (r.node_guid != 0).then_some(u64::from_be(r.node_guid)),
            port_num: r.port_num,
            pkey: u16::from_be(r.pkey),
            ibdev_index: (r.ibdev_index != NO_IBDEV_INDEX).then_some(r.ibdev_index),
        };
        Ok(info)
    }

    /// QUERY_ROUTE: addresses, device, port, paths.
    pub fn query_route(&self) -> Result<RouteInfo> {
        let r = self
            .fd()
            .query_route(self.kernel_id)
            .map_err(|e| Error::command("QUERY_ROUTE", self.describe(), e))?;
        Ok(RouteInfo {
            local: sockaddr::from_in6(&r.src_addr),
            peer: sockaddr::from_in6(&r.dst_addr),
            node_guid: (r.node_guid != 0).then_some(u64::from_be(r.node_guid)),
            port_num: r.port_num,
            num_paths: r.num_paths,
            sgid: Gid(r.ib_route[0].sgid),
            dgid: Gid(r.ib_route[0].dgid),
        })
    }

    /// The local address (QUERY(ADDR)).
    pub fn local_addr(&self) -> Result<Option<SocketAddr>> {
        Ok(self.query_addr()?.local)
    }

    /// The peer address (QUERY(ADDR)).
    pub fn peer_addr(&self) -> Result<Option<SocketAddr>> {
        Ok(self.query_addr()?.peer)
    }

    /// The device port the id is bound to (1-based).
    pub fn port_num(&self) -> Result<u8> {
        Ok(self.query_addr()?.port_num)
    }

    /// The verbs device the id is bound to (matched by node GUID against
    /// `DeviceList::discover()`); cached after the first success.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] while the id is on no device (resolve or bind first),
    /// [`Error::UnknownDevice`] when discovery does not find the GUID.
    pub fn device(&self) -> Result<DeviceInfo> {
        if let Some(d) = &self.cache().device {
            return Ok(d.clone());
        }
        let info = self.query_addr()?;
        let Some(guid) = info.node_guid else {
            return Err(Error::InvalidArgument(format!(
                "{} is not bound to an RDMA device yet: resolve an address (or bind to a \
                 specific local address) first",
                self.describe()
            )));
        };
        let device = crate::device::find_by_guid(guid, info.local, &self.describe())?;
        self.cache().device = Some(device.clone());
        Ok(device)
    }

    /// INIT_QP_ATTR: the attributes and mask the CM wants for moving a QP to `state`
    /// (INIT, RTR or RTS), ready for `QueuePair::modify`.
    pub fn init_qp_attr(&self, state: QpState) -> Result<(QpAttributes, QpAttrMask)> {
        let raw = self
            .fd()
            .init_qp_attr(self.kernel_id, state as u32)
            .map_err(|e| Error::command("INIT_QP_ATTR", self.describe(), e))?;
        Ok(rdmasock_verbs::kernel::attributes_from_cm(&raw))
    }

    fn set_option(&self, name: u32, value: &[u8]) -> Result<()> {
        self.fd()
            .set_option(self.kernel_id, 0, name, value)
            .map_err(|e| Error::command("SET_OPTION", self.describe(), e))
    }

    /// REUSEADDR (before bind).
    pub fn set_reuse_addr(&self, on: bool) -> Result<()> {
        self.set_option(1, &i32::from(on).to_ne_bytes())
    }

    /// AFONLY: an IPv6 listener takes IPv6 only (before bind).
    pub fn set_afonly(&self, on: bool) -> Result<()> {
        self.set_option(2, &i32::from(on).to_ne_bytes())
    }

    /// TOS (before resolving).
    pub fn set_tos(&self, tos: u8) -> Result<()> {
        self.set_option(0, &[tos])
    }

    /// The IB local ACK timeout exponent (kernels 5.1+).
    pub fn set_ack_timeout(&self, timeout: u8) -> Result<()> {
        self.set_option(3, &[timeout])
    }

    /// DESTROY_ID now; returns the kernel's `events_reported`, which equals
    /// [`CmId::events_delivered`] (every event taken from the kernel was counted).
    pub fn destroy(mut self) -> Result<u32> {
        self.alive = false;
        let (reported, _delivered) = self.channel.destroy_id(self.uid)?;
        Ok(reported)
    }
}

impl CmId {
    /// MIGRATE_ID: moves this id, with its pending events, to `to` (`rdma_migrate_id`), e.g.
    /// a connection request's id off its listener's channel (`KernelCm` moves each
    /// connection's id onto the process's channel).
    pub fn migrate(&mut self, to: &EventChannel) -> Result<()> {
        self.channel.migrate_id(self.uid, to)?;
        self.channel = to.clone();
        Ok(())
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        if self.alive {
            // Errors ignored by policy: call `destroy` to see them.
            let _ = self.channel.destroy_id(self.uid);
        }
    }
}
