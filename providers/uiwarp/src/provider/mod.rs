//! The verbs face of the userspace iWARP engine: a device `uiwarp0` (transport iWARP, node type
//! RNIC, driver `uiwarp`, no uverbs character device) whose context, protection domains,
//! memory regions, completion channels and queues and queue pairs live in this process.
//!
//! Queue pairs reach RTS only through connection setup ([`crate::driver::connect`],
//! [`crate::driver::UiwarpListener`]), as on every iWARP device.

pub(crate) mod qp;

pub use crate::driver::{UiwarpChannel, UiwarpCq};
pub use qp::UiwarpQp;

use crate::memory::RegionSet;
use nix::sys::eventfd::{EfdFlags, EventFd};
use rdmasock_verbs::objects::AsyncEvent;
use rdmasock_verbs::provider::{ChannelOps, ContextOps, CqOps, MrOps, PdOps, Provider, QpOps};
use rdmasock_verbs::qp_attr::QpInitAttributes;
use rdmasock_verbs::{
    AccessFlags, DeviceAttributes, DeviceInfo, Error, LocalKey, NodeType, PortAttributes, PortInfo,
    PortState, RegisteredMemory, RemoteKey, Result, Transport,
};
use std::any::Any;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, OnceLock, RwLock};

/// The device's name.
pub const DEVICE_NAME: &str = "uiwarp0";
/// The driver name in [`DeviceInfo::driver`].
pub const DRIVER_NAME: &str = "uiwarp";
/// The node GUID: "uiwarp" in ASCII with the locally administered bit.
const NODE_GUID: u64 = 0x0275_6977_6172_7000;

/// The userspace device as device lists show it.
pub fn device_info() -> DeviceInfo {
    DeviceInfo {
        name: DEVICE_NAME.to_string(),
        node_guid: NODE_GUID,
        node_type: NodeType::Rnic,
        transport: Transport::Iwarp,
        driver: Some(DRIVER_NAME.to_string()),
        driver_id: None,
        uverbs_path: None,
        uverbs_sysfs: None,
        uverbs_abi: None,
        sysfs: None,
        parent_netdev: None,
        fw_ver: "0.0.0".to_string(),
        ports: vec![PortInfo {
            number: 1,
            state: PortState::Active,
            phys_state: "5: LinkUp".to_string(),
            link_layer: "Ethernet".to_string(),
            rate: "10 Gb/sec (1X QDR)".to_string(),
            gids: Vec::new().into(),
        }],
    }
}

/// The userspace iWARP provider: drives the device of [`device_info`].
#[derive(Debug, Default)]
pub struct UiwarpProvider;

impl UiwarpProvider {
    /// The provider.
    pub fn new() -> Self {
        UiwarpProvider
    }
}

impl Provider for UiwarpProvider {
    fn name(&self) -> &'static str {
        DRIVER_NAME
    }
    fn matches(&self, device: &DeviceInfo) -> bool {
        device.driver.as_deref() == Some(DRIVER_NAME)
    }
    fn open(&self, device: &DeviceInfo) -> Result<Arc<dyn ContextOps>> {
        Ok(Arc::new(UiwarpContext::open(device.clone())?))
    }
}

/// An open uiwarp device.
#[derive(Debug)]
pub struct UiwarpContext {
    device: DeviceInfo,
    /// Never readable: the engine raises no async events (errors arrive as completions and
    /// connection notices). One for the process, shared by every context (each connection
    /// opens its own context, and an fd each would count against the fd limit for nothing).
    async_fd: &'static EventFd,
}

impl UiwarpContext {
    fn open(device: DeviceInfo) -> Result<UiwarpContext> {
        static ASYNC_FD: OnceLock<EventFd> = OnceLock::new();
        let async_fd = match ASYNC_FD.get() {
            Some(fd) => fd,
            None => {
                let fd = EventFd::from_value_and_flags(
                    0,
                    EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC,
                )
                .map_err(|e| Error::io("creating uiwarp's async event fd", e.into()))?;
                ASYNC_FD.get_or_init(|| fd)
            }
        };
        Ok(UiwarpContext { device, async_fd })
    }
}

/// The limits the engine enforces (siw's where they matter: one READ sink entry, no atomics).
fn attributes() -> DeviceAttributes {
    DeviceAttributes {
        fw_ver: "0.0.0".into(),
        node_guid: NODE_GUID,
        sys_image_guid: NODE_GUID,
        max_mr_size: u64::MAX,
        page_size_cap: 0x1000,
        vendor_id: 0x626d74,
        vendor_part_id: 2,
        max_qp: 102_400,
        max_qp_wr: qp::MAX_QUEUE_DEPTH,
        device_cap_flags: 0,
        max_sge: qp::MAX_SGE,
        max_sge_rd: 1,
        max_cq: 102_400,
        max_cqe: 3_276_800,
        max_mr: 1_024_000,
        max_pd: 102_400,
        max_qp_rd_atom: u32::from(crate::protocol::MAX_READ_DEPTH),
        max_qp_init_rd_atom: u32::from(crate::protocol::MAX_READ_DEPTH),
        max_res_rd_atom: 13_107_200,
        phys_port_cnt: 1,
        ..DeviceAttributes::default()
    }
}

impl ContextOps for UiwarpContext {
    fn device(&self) -> &DeviceInfo {
        &self.device
    }
    fn lends_inline(&self) -> bool {
        true
    }
    fn provider_name(&self) -> &'static str {
        DRIVER_NAME
    }
    fn query_device(&self) -> Result<DeviceAttributes> {
        Ok(attributes())
    }
    fn query_port(&self, port: u8) -> Result<PortAttributes> {
        if port != 1 {
            return Err(Error::InvalidArgument(format!(
                "{DEVICE_NAME} has one port (1), not {port}"
            )));
        }
        Ok(PortAttributes {
            state: PortState::Active,
            max_mtu_raw: 3,
            active_mtu_raw: 3,
            gid_tbl_len: 1,
            port_cap_flags: 0,
            max_msg_sz: u32::MAX,
            bad_pkey_cntr: 0,
            qkey_viol_cntr: 0,
            pkey_tbl_len: 1,
            lid: 0,
            sm_lid: 0,
            lmc: 0,
            max_vl_num: 1,
            sm_sl: 0,
            subnet_timeout: 0,
            init_type_reply: 0,
            active_width: 1,
            active_speed: 4,
            phys_state: 5,
            link_layer: 2,
            flags: 0,
            port_cap_flags2: 0,
            active_speed_ex: 0,
        })
    }
    fn alloc_pd(&self) -> Result<Arc<dyn PdOps>> {
        Ok(Arc::new(UiwarpPd {
            regions: Arc::new(RwLock::new(RegionSet::default())),
        }))
    }
    fn create_comp_channel(&self) -> Result<Arc<dyn ChannelOps>> {
        Ok(Arc::new(UiwarpChannel::new()?))
    }
    fn create_cq(
        &self,
        depth: u32,
        channel: Option<Arc<dyn ChannelOps>>,
        _comp_vector: u32,
    ) -> Result<Arc<dyn CqOps>> {
        if let Some(c) = &channel {
            if !c.as_any().is::<UiwarpChannel>() {
                return Err(Error::InvalidArgument(format!(
                    "the completion channel is not from {DEVICE_NAME}: create it on the same context"
                )));
            }
        }
        Ok(Arc::new(UiwarpCq::new(depth, channel)))
    }
    fn async_fd(&self) -> BorrowedFd<'_> {
        self.async_fd.as_fd()
    }
    fn read_async_event(&self) -> Result<Option<AsyncEvent>> {
        Ok(None)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A protection domain: its memory regions.
#[derive(Debug)]
pub struct UiwarpPd {
    regions: Arc<RwLock<RegionSet>>,
}

impl PdOps for UiwarpPd {
    fn reg_mr(&self, memory: Arc<RegisteredMemory>, access: AccessFlags) -> Result<Box<dyn MrOps>> {
        let key = self
            .regions
            .write()
            .expect("uiwarp regions lock")
            .register(memory, access)
            .ok_or_else(|| {
                Error::io(
                    "registering memory on uiwarp0",
                    std::io::Error::new(
                        std::io::ErrorKind::OutOfMemory,
                        "every STag of uiwarp0 names a live region (8388607 of them): \
                         deregister regions before registering more",
                    ),
                )
            })?;
        Ok(Box::new(UiwarpMr {
            key,
            regions: self.regions.clone(),
        }))
    }

    fn create_qp(
        &self,
        init: &QpInitAttributes,
        send_cq: Arc<dyn CqOps>,
        recv_cq: Arc<dyn CqOps>,
    ) -> Result<Box<dyn QpOps>> {
        Ok(Box::new(UiwarpQp::create(
            init,
            self.regions.clone(),
            send_cq,
            recv_cq,
        )?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A memory region; dropping it deregisters.
#[derive(Debug)]
pub struct UiwarpMr {
    key: u32,
    regions: Arc<RwLock<RegionSet>>,
}

impl MrOps for UiwarpMr {
    fn lkey(&self) -> LocalKey {
        LocalKey(self.key)
    }
    fn rkey(&self) -> RemoteKey {
        RemoteKey(self.key)
    }
}

impl Drop for UiwarpMr {
    fn drop(&mut self) {
        if let Ok(mut r) = self.regions.write() {
            r.deregister(self.key);
        }
    }
}
