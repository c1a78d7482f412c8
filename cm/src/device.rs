//! From a cm id to its verbs device (node GUID, docs/kernel-abi.md#rdma_cm-device-identity), and
//! the "address on no RDMA device" diagnosis: which devices exist, on which netdevs, with which
//! addresses.
#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use rdmasock_verbs::{DeviceInfo, DeviceList, Gid};
use std::collections::BTreeSet;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;

/// The devices found by the last discovery, shared by the whole process: a discovery reads
/// sysfs (every GID of every port) and asks netlink, which costs about a second per connection
/// under emulation, while devices come and go rarely.
static DISCOVERED: Mutex<Option<DeviceList>> = Mutex::new(None);

/// The device with node GUID `guid`, from the process's cached discovery when it still
/// describes the device (see [`still_present`]); otherwise from a fresh discovery, which then
/// replaces the cache. Several soft devices on netdevs sharing a MAC share a GUID; then the
/// one whose GID table holds the local address wins, always from a fresh discovery (their
/// GID tables follow the netdevs' addresses).
pub(crate) fn find_by_guid(
    guid: u64,
    local: Option<SocketAddr>,
    target: &str,
) -> Result<DeviceInfo> {
    if let Some(device) = cached_by_guid(guid) {
        return Ok(device);
    }
    let list = DeviceList::discover()?;
    let found = pick_by_guid(&list, guid, local, target);
    *DISCOVERED.lock().unwrap_or_else(|p| p.into_inner()) = Some(list);
    found
}

/// The single cached device with node GUID `guid`, when sysfs still shows it as cached.
fn cached_by_guid(guid: u64) -> Option<DeviceInfo> {
    let cache = DISCOVERED.lock().unwrap_or_else(|p| p.into_inner());
    let mut matching = cache
        .as_ref()?
        .devices
        .iter()
        .filter(|d| d.node_guid == guid);
    let device = matching.next()?;
    if matching.next().is_some() || !still_present(device) {
        return None;
    }
    Some(device.clone())
}

/// Whether `device`'s sysfs directory still carries its GUID and its uverbs node still
/// belongs to it: a device removed and re-added (same GUID, new uverbs minor) fails this.
fn still_present(device: &DeviceInfo) -> bool {
    let read = |dir: &Option<std::path::PathBuf>, file: &str| {
        dir.as_ref()
            .and_then(|d| std::fs::read_to_string(d.join(file)).ok())
            .map(|t| t.trim().to_string())
    };
    read(&device.sysfs, "node_guid").as_deref() == Some(device.guid_grouped().as_str())
        && (device.uverbs_sysfs.is_none()
            || read(&device.uverbs_sysfs, "ibdev").as_deref() == Some(device.name.as_str()))
}

/// The device with node GUID `guid` in `list` (see [`find_by_guid`]).
fn pick_by_guid(
    list: &DeviceList,
    guid: u64,
    local: Option<SocketAddr>,
    target: &str,
) -> Result<DeviceInfo> {
    let matching: Vec<&DeviceInfo> = list
        .devices
        .iter()
        .filter(|d| d.node_guid == guid)
        .collect();
    let chosen = match matching.as_slice() {
        [] => None,
        [one] => Some(*one),
        several => {
            let gid = local.map(|a| ip_gid(a.ip()));
            several
                .iter()
                .find(|d| {
                    gid.is_some_and(|g| d.ports.iter().any(|p| p.gids.iter().any(|e| e.gid == g)))
                })
                .or(several.first())
                .copied()
        }
    };
    chosen.cloned().ok_or_else(|| Error::UnknownDevice {
        target: target.to_string(),
        guid,
        devices: describe(list),
    })
}

/// The RoCE v2 GID of an IP address (IPv4-mapped for IPv4).
fn ip_gid(ip: IpAddr) -> Gid {
    let v6: Ipv6Addr = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    Gid::from(v6)
}

/// The netdevs of a device: its parent (soft devices) and those its GIDs name.
fn netdevs(d: &DeviceInfo) -> BTreeSet<String> {
    let mut set: BTreeSet<String> = d.parent_netdev.iter().cloned().collect();
    for port in &d.ports {
        set.extend(port.gids.iter().filter_map(|g| g.netdev.clone()));
    }
    set
}

/// `rxe0 (netdev eth0: 10.99.0.2, fe80::…); siw0 (…)`, or `none`.
pub(crate) fn describe(list: &DeviceList) -> String {
    if list.devices.is_empty() {
        return "none".to_string();
    }
    let addrs = interface_addresses();
    list.devices
        .iter()
        .map(|d| {
            let nets: Vec<String> = netdevs(d)
                .into_iter()
                .map(|n| {
                    let ips: Vec<String> = addrs
                        .iter()
                        .filter(|(name, _)| *name == n)
                        .map(|(_, ip)| ip.to_string())
                        .collect();
                    if ips.is_empty() {
                        format!("netdev {n}: no address")
                    } else {
                        format!("netdev {n}: {}", ips.join(", "))
                    }
                })
                .collect();
            if nets.is_empty() {
                format!("{} (no netdev)", d.name)
            } else {
                format!("{} ({})", d.name, nets.join("; "))
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The devices of this machine described, or why discovery failed.
pub(crate) fn describe_devices() -> String {
    match DeviceList::discover() {
        Ok(list) => describe(&list),
        Err(e) => format!("none found ({e})"),
    }
}

/// (interface, address) for every IP address of this machine.
fn interface_addresses() -> Vec<(String, IpAddr)> {
    let Ok(iter) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    iter.filter_map(|ifa| {
        let a = ifa.address?;
        let ip = if let Some(v4) = a.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = a.as_sockaddr_in6() {
            IpAddr::V6(v6.ip())
        } else {
            return None;
        };
        Some((ifa.interface_name, ip))
    })
    .collect()
}

/// Whether an errno means "this address has no RDMA device behind it".
pub(crate) fn is_no_device(errno: Option<i32>) -> bool {
    matches!(errno, Some(libc::ENODEV) | Some(libc::EADDRNOTAVAIL))
}

/// The error for a failed BIND.
pub(crate) fn bind_error(addr: SocketAddr, e: io::Error) -> Error {
    if is_no_device(e.raw_os_error()) {
        no_rdma_device(addr.ip(), "BIND", e)
    } else {
        Error::command("BIND", addr.to_string(), e)
    }
}

/// The error for a failed RESOLVE_ADDR/RESOLVE_ROUTE write.
pub(crate) fn resolve_error(dst: SocketAddr, operation: &'static str, e: io::Error) -> Error {
    if is_no_device(e.raw_os_error()) {
        no_rdma_device(dst.ip(), operation, e)
    } else {
        Error::command(operation, dst.to_string(), e)
    }
}

/// [`Error::NoRdmaDevice`] with the device listing, the netdev holding the address (when it
/// is local) and advice.
pub(crate) fn no_rdma_device(addr: IpAddr, operation: &'static str, source: io::Error) -> Error {
    let netdev = interface_addresses()
        .into_iter()
        .find(|(_, ip)| *ip == addr)
        .map(|(name, _)| name);
    let advice = if addr.is_loopback() {
        "rdma_cm cannot connect over the loopback address, not even with a soft device on lo: \
         use the address of a netdev listed above"
            .to_string()
    } else {
        let on = netdev.as_deref().unwrap_or("<netdev>");
        format!(
            "Use an address of one of their netdevs, or put a soft device on the netdev \
             that reaches {addr} (`rdma link add rxe_{on} type rxe netdev {on}`)"
        )
    };
    Error::NoRdmaDevice {
        addr,
        operation,
        source,
        netdev,
        devices: describe_devices(),
        advice,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmasock_verbs::{NodeType, Transport};

    fn device(name: &str, guid: u64, netdev: &str) -> DeviceInfo {
        DeviceInfo {
            name: name.into(),
            node_guid: guid,
            node_type: NodeType::Ca,
            transport: Transport::InfiniBand,
            driver: Some("rxe".into()),
            driver_id: None,
            uverbs_path: None,
            uverbs_sysfs: None,
            uverbs_abi: None,
            sysfs: None,
            parent_netdev: Some(netdev.into()),
            fw_ver: String::new(),
            ports: Vec::new(),
        }
    }

    #[test]
    fn describe_names_devices_and_netdevs() {
        let list = DeviceList {
            devices: vec![device("rxe0", 1, "lo"), device("siw0", 2, "nosuchnetdev0")],
        };
        let text = describe(&list);
        assert!(text.starts_with("rxe0 (netdev lo: "), "{text}");
        assert!(text.contains("127.0.0.1"), "{text}");
        assert!(
            text.contains("siw0 (netdev nosuchnetdev0: no address)"),
            "{text}"
        );
        assert_eq!(describe(&DeviceList::default()), "none");
    }

    #[test]
    fn no_device_error_names_address_netdev_and_devices() {
        let e = no_rdma_device(
            "127.0.0.1".parse().unwrap(),
            "RESOLVE_ROUTE",
            io::Error::from_raw_os_error(libc::ENODEV),
        );
        let text = e.to_string();
        assert!(
            text.starts_with("127.0.0.1 is on no RDMA device (RESOLVE_ROUTE: "),
            "{text}"
        );
        assert!(
            text.contains("127.0.0.1 is on netdev lo, which has none"),
            "{text}"
        );
        assert!(text.contains("RDMA devices here: "), "{text}");
        assert!(text.contains("loopback"), "{text}");
        let e = no_rdma_device(
            "192.0.2.1".parse().unwrap(),
            "ADDR_ERROR",
            io::Error::from_raw_os_error(libc::ENODEV),
        );
        let text = e.to_string();
        assert!(
            text.contains("rdma link add rxe_<netdev> type rxe netdev <netdev>"),
            "{text}"
        );
        assert!(is_no_device(Some(libc::ENODEV)));
        assert!(!is_no_device(Some(libc::ETIMEDOUT)));
    }

    #[test]
    fn cached_device_is_checked_against_sysfs() {
        let root = std::env::temp_dir().join(format!("rdmasock-cm-cache-{}", std::process::id()));
        let (dev_dir, uverbs_dir) = (root.join("rxe0"), root.join("uverbs0"));
        std::fs::create_dir_all(&dev_dir).unwrap();
        std::fs::create_dir_all(&uverbs_dir).unwrap();
        std::fs::write(dev_dir.join("node_guid"), "5054:00ff:fe12:3456\n").unwrap();
        std::fs::write(uverbs_dir.join("ibdev"), "rxe0\n").unwrap();
        let mut d = device("rxe0", 0x5054_00ff_fe12_3456, "eth0");
        d.sysfs = Some(dev_dir.clone());
        d.uverbs_sysfs = Some(uverbs_dir.clone());
        assert!(still_present(&d));
        // The uverbs node now belongs to another device (rxe0 was removed and re-added).
        std::fs::write(uverbs_dir.join("ibdev"), "siw0\n").unwrap();
        assert!(!still_present(&d));
        std::fs::write(uverbs_dir.join("ibdev"), "rxe0\n").unwrap();
        std::fs::write(dev_dir.join("node_guid"), "5054:00ff:fe12:9999\n").unwrap();
        assert!(!still_present(&d));
        std::fs::remove_dir_all(&dev_dir).unwrap();
        assert!(!still_present(&d));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn ipv4_gid_is_mapped() {
        let g = ip_gid("10.99.0.2".parse().unwrap());
        assert_eq!(g.to_string(), "::ffff:10.99.0.2");
    }
}
