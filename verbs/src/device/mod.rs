//! Device discovery from sysfs (and netlink for the driver id): what `ibv_devices` lists.
//!
//! [`DeviceList::discover`] reads `/sys/class/infiniband` and `/sys/class/infiniband_verbs`
//! (`sysfs`) and asks NETLINK_RDMA for each device's driver id (`netlink`), falling back
//! to the sysfs heuristics of
//! docs/kernel-abi.md#driver-names-and-the-fallback when netlink is unavailable.
#![forbid(unsafe_code)]

// The `verbs_parsers` fuzz target's entry points: built only for `cargo fuzz` (which sets
// `--cfg fuzzing`) and for this crate's unit tests, which run them on seeded input.
#[cfg(any(fuzzing, test))]
pub mod fuzzing;
mod gid_table;
mod netlink;
mod sysfs;

pub use gid_table::GidTable;

pub(crate) use netlink::copy_on_fork;
pub use netlink::driver_name;

use crate::error::{Error, Result};
use crate::types::{Gid, PortState};
use std::path::{Path, PathBuf};

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
    /// Populated GID table slots, read on first use (see [`GidTable`]).
    pub gids: GidTable,
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

    /// The GUID in `ibv_devinfo`'s form: four groups of 4 hex digits (`5054:00ff:fe12:3456`).
    pub fn guid_grouped(&self) -> String {
        format_guid(self.node_guid)
    }

    /// Whether the transport is iWARP (such QPs connect only through the connection manager).
    pub fn is_iwarp(&self) -> bool {
        self.transport == Transport::Iwarp
    }

    /// A port by its 1-based number.
    pub fn port(&self, number: u8) -> Option<&PortInfo> {
        self.ports.iter().find(|p| p.number == number)
    }

    /// Reads GID table slot `index` of `port` from sysfs now (like rdma-core's
    /// `ibv_query_gid`): `Ok(None)` for an empty slot.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Option<GidEntry>> {
        let dir = self.sysfs.as_ref().ok_or_else(|| Error::Unsupported {
            device: self.name.clone(),
            operation: "reading the GID table from sysfs (it is not a kernel device)".into(),
        })?;
        let port_dir = dir.join("ports").join(port.to_string());
        if !port_dir.is_dir() {
            return Err(Error::InvalidArgument(format!(
                "device {} has no port {port} ({} does not exist)",
                self.name,
                port_dir.display()
            )));
        }
        Ok(sysfs::read_gid(&port_dir, index))
    }
}

/// A GUID as four groups of 4 hex digits, most significant first (`ibv_devinfo`'s form).
pub fn format_guid(guid: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (guid >> 48) & 0xffff,
        (guid >> 32) & 0xffff,
        (guid >> 16) & 0xffff,
        guid & 0xffff
    )
}

/// The devices of this machine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceList {
    /// The devices, sorted by name.
    pub devices: Vec<DeviceInfo>,
}

impl DeviceList {
    /// Discovers this machine's devices: sysfs under `/sys`, and the driver of each from
    /// netlink (NETLINK_RDMA), or from the sysfs heuristics when netlink fails.
    ///
    /// Only devices with a uverbs character device are listed (as rdma-core does).
    /// [`Error::NoDevice`] when there is none.
    pub fn discover() -> Result<DeviceList> {
        let from_netlink = netlink::query().ok();
        Self::discover_with(Path::new("/sys"), from_netlink.as_ref())
    }

    /// Discovers the devices of the sysfs tree at `root` (`/sys` on a real system), without
    /// netlink: the driver comes from the sysfs heuristics (rxe: CA + Ethernet + a `parent`
    /// file; siw: RNIC + uverbs ABI 1). For tests on a fake tree and for diagnostics.
    pub fn discover_in(root: &Path) -> Result<DeviceList> {
        Self::discover_with(root, None)
    }

    fn discover_with(
        root: &Path,
        from_netlink: Option<&std::collections::HashMap<String, netlink::NetlinkDevice>>,
    ) -> Result<DeviceList> {
        let uverbs = sysfs::uverbs_nodes(root);
        let mut devices: Vec<DeviceInfo> = sysfs::device_names(root)
            .iter()
            .filter_map(|name| sysfs::read_device(root, name, uverbs.get(name)))
            .collect();
        for d in &mut devices {
            let id = from_netlink
                .and_then(|m| m.get(&d.name))
                .and_then(|n| n.driver_id);
            if let Some(id) = id {
                d.driver_id = Some(id);
                if let Some(name) = driver_name(id) {
                    d.driver = Some(name.to_string());
                }
            }
        }
        if devices.is_empty() {
            // An empty list may only mean that the process could not open the directory (out
            // of fds, say): that is the error then, not a missing device.
            let class = root.join("class/infiniband");
            if let Err(e) = std::fs::read_dir(&class) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    return Err(Error::Io {
                        context: format!("listing the RDMA devices in {}", class.display()),
                        source: e,
                    });
                }
            }
            return Err(Error::NoDevice);
        }
        devices.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(DeviceList { devices })
    }

    /// The device named `name`, or the first one when `name` is `None`.
    pub fn pick(&self, name: Option<&str>) -> Result<&DeviceInfo> {
        match name {
            None => self.devices.first().ok_or(Error::NoDevice),
            Some(n) => {
                self.devices
                    .iter()
                    .find(|d| d.name == n)
                    .ok_or_else(|| Error::DeviceNotFound {
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
                    })
            }
        }
    }
}

#[cfg(test)]
mod tests;
