//! Device discovery from sysfs (and netlink for the driver id): what `ibv_devices` lists.
//!
//! Owned by the discovery work: see `discover` below.
#![forbid(unsafe_code)]

use crate::types::{Gid, PortState};
use std::path::PathBuf;

/// The node type (`/sys/class/infiniband/<dev>/node_type`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum NodeType {
    /// 1: channel adapter (InfiniBand and RoCE devices, rxe).
    Ca,
    /// 2: switch.
    Switch,
    /// 3: router.
    Router,
    /// 4: RDMA NIC (iWARP, siw).
    Rnic,
    /// 5: usNIC.
    Usnic,
    /// 6: usNIC UDP.
    UsnicUdp,
    /// 7 or anything else.
    Unspecified,
}

/// The transport (`ibv_devinfo`'s `transport:` line).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// InfiniBand transport (native IB and RoCE).
    InfiniBand,
    /// iWARP.
    Iwarp,
    /// usNIC.
    Usnic,
    /// Unknown.
    Unknown,
}

impl Transport {
    /// The text `ibv_devinfo` prints (`InfiniBand (0)`, `iWARP (1)`).
    pub fn devinfo_text(self) -> &'static str {
        match self {
            Transport::InfiniBand => "InfiniBand (0)",
            Transport::Iwarp => "iWARP (1)",
            Transport::Usnic => "usNIC (2)",
            Transport::Unknown => "invalid transport (-1)",
        }
    }
}

/// The kind of a GID table entry.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum GidType {
    /// InfiniBand or RoCE v1 (`IB/RoCE v1`).
    IbRoceV1,
    /// RoCE v2 (`RoCE v2`).
    RoceV2,
}

/// One populated GID table slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// Slot index.
    pub index: u32,
    /// The GID.
    pub gid: Gid,
    /// Its type.
    pub gid_type: GidType,
    /// The netdev it belongs to (RoCE).
    pub netdev: Option<String>,
}

/// One port of a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// 1-based port number.
    pub number: u8,
    /// Logical state.
    pub state: PortState,
    /// Physical state text (`5: LinkUp`).
    pub phys_state: String,
    /// `InfiniBand` or `Ethernet`.
    pub link_layer: String,
    /// The rate text (`100 Gb/sec (4X EDR)`).
    pub rate: String,
    /// Populated GID table slots.
    pub gids: Vec<GidEntry>,
}

/// One RDMA device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device name (`rxe0`).
    pub name: String,
    /// Node GUID as the big-endian value (`0x5054_00ff_fe12_3456`).
    pub node_guid: u64,
    /// Node type.
    pub node_type: NodeType,
    /// Transport.
    pub transport: Transport,
    /// Driver name (`rxe`, `siw`, `mlx5`, `uiwarp`), when known.
    pub driver: Option<String>,
    /// The kernel's `rdma_driver_id`, when known (from netlink).
    pub driver_id: Option<u32>,
    /// The uverbs character device (`/dev/infiniband/uverbs0`); `None` for userspace devices.
    pub uverbs_path: Option<PathBuf>,
    /// The uverbs sysfs node (`/sys/class/infiniband_verbs/uverbs0`).
    pub uverbs_sysfs: Option<PathBuf>,
    /// The device's per-driver uverbs ABI version.
    pub uverbs_abi: Option<u32>,
    /// The device's sysfs directory (`/sys/class/infiniband/rxe0`).
    pub sysfs: Option<PathBuf>,
    /// The netdev a soft device is bound to (rxe's `parent`).
    pub parent_netdev: Option<String>,
    /// Firmware version text.
    pub fw_ver: String,
    /// Ports.
    pub ports: Vec<PortInfo>,
}

impl DeviceInfo {
    /// The GUID in rdma-core's `ibv_devices` form: 16 hex digits.
    pub fn guid_hex(&self) -> String {
        format!("{:016x}", self.node_guid)
    }
}

/// The devices of this machine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceList {
    /// The devices, sorted by name.
    pub devices: Vec<DeviceInfo>,
}

impl DeviceList {
    /// Discovers the devices from sysfs. (Placeholder until discovery lands: finds none.)
    pub fn discover() -> crate::Result<DeviceList> {
        Err(crate::Error::NoDevice)
    }

    /// The device named `name`, or the first one when `name` is `None`.
    pub fn pick(&self, name: Option<&str>) -> crate::Result<&DeviceInfo> {
        match name {
            None => self.devices.first().ok_or(crate::Error::NoDevice),
            Some(n) => self
                .devices
                .iter()
                .find(|d| d.name == n)
                .ok_or_else(|| crate::Error::DeviceNotFound {
                    name: n.to_string(),
                    available: if self.devices.is_empty() {
                        "none".into()
                    } else {
                        self.devices
                            .iter()
                            .map(|d| d.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    },
                }),
        }
    }
}
