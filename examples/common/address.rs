//! Which address an example uses on this machine: an RDMA device's IPv4 address, or
//! loopback, where the userspace iWARP provider serves RdmaSocket when the kernel has none.

use rdmasock::verbs::{DeviceInfo, DeviceList};
use rdmasock::{ProviderChoice, ProviderKind, PROVIDER_ENV};
use std::net::{IpAddr, Ipv4Addr};

/// The IPv4 address of `device` (or of the first device with one), from its RoCE GIDs. With
/// no kernel RDMA device (or `-d uiwarp0`), loopback: the userspace iWARP provider serves it
/// (the socket layer says so on stderr).
pub(crate) fn device_address(device: Option<&str>) -> Result<IpAddr, String> {
    address_of(device, |_| true)
}

/// The address of the first device the provider that `RDMASOCK_PROVIDER` forces can drive
/// (`rxe` or `siw`: a device of that driver; `uiwarp`: loopback); without a forced kernel
/// provider, [`device_address`]`(None)`. An error names the provider and the devices there
/// when none of them is of its kind.
pub(crate) fn served_address() -> Result<IpAddr, String> {
    let choice = ProviderChoice::from_env()?;
    if choice.forces_userspace() {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    let drives = |d: &DeviceInfo| match choice.for_device(&d.name) {
        Some(kind @ (ProviderKind::Rxe | ProviderKind::Siw)) => {
            d.driver.as_deref() == Some(kind.name())
        }
        _ => true,
    };
    let list = devices()?;
    // Device names are never empty: what the choice says for "" is what it says for every
    // device.
    let forced_everywhere = choice.for_device("");
    if list.devices.is_empty() {
        if let Some(kind @ (ProviderKind::Rxe | ProviderKind::Siw)) = forced_everywhere {
            return Err(format!(
                "{PROVIDER_ENV}={kind} forces the {kind} provider, but this machine has no \
                 RDMA device (create one with `rdma link add {kind}0 type {kind} netdev \
                 DEV`, or unset {PROVIDER_ENV} to use the userspace provider)"
            ));
        }
    }
    if !list.devices.is_empty() && !list.devices.iter().any(drives) {
        let here: Vec<String> = list
            .devices
            .iter()
            .map(|d| {
                format!(
                    "{} ({})",
                    d.name,
                    d.driver.as_deref().unwrap_or("unknown driver")
                )
            })
            .collect();
        return Err(format!(
            "{PROVIDER_ENV} forces a provider that drives none of the RDMA devices here: {}",
            here.join(", ")
        ));
    }
    address_of(None, drives)
}

/// The kernel's RDMA devices (none: an empty list).
fn devices() -> Result<DeviceList, String> {
    match DeviceList::discover() {
        Ok(list) => Ok(list),
        Err(rdmasock::verbs::Error::NoDevice) => Ok(DeviceList::default()),
        Err(e) => Err(e.to_string()),
    }
}

/// [`device_address`], among the devices `usable` accepts.
fn address_of(
    device: Option<&str>,
    usable: impl Fn(&DeviceInfo) -> bool,
) -> Result<IpAddr, String> {
    if device == Some("uiwarp0") {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    let list = devices()?;
    for d in &list.devices {
        if device.is_some_and(|name| name != d.name) || !usable(d) {
            continue;
        }
        for port in &d.ports {
            for g in &port.gids {
                let b = g.gid.0;
                if b[..10].iter().all(|&x| x == 0) && b[10] == 0xff && b[11] == 0xff {
                    return Ok(IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15])));
                }
            }
        }
        // iWARP devices (siw) have MAC-based GIDs: take their netdev's IPv4 address.
        let netdevs: Vec<&str> = d
            .parent_netdev
            .iter()
            .chain(
                d.ports
                    .iter()
                    .flat_map(|p| p.gids.iter().filter_map(|g| g.netdev.as_ref())),
            )
            .map(String::as_str)
            .collect();
        if let Some(ip) = netdev_ipv4(&netdevs) {
            return Ok(IpAddr::V4(ip));
        }
    }
    match device {
        Some(name) if list.devices.iter().any(|d| d.name == name) => {
            Err(format!("device {name} has no IPv4 address"))
        }
        Some(name) => {
            let mut here: Vec<&str> = list.devices.iter().map(|d| d.name.as_str()).collect();
            here.push("uiwarp0 (the userspace provider)");
            Err(format!(
                "no RDMA device {name}; devices here: {}",
                here.join(", ")
            ))
        }
        None if list.devices.is_empty() => Ok(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        None => Err("no RDMA device with an IPv4 address".into()),
    }
}

/// The first IPv4 address of any of `netdevs`.
fn netdev_ipv4(netdevs: &[&str]) -> Option<Ipv4Addr> {
    nix::ifaddrs::getifaddrs().ok()?.find_map(|ifa| {
        if !netdevs.contains(&ifa.interface_name.as_str()) {
            return None;
        }
        ifa.address?.as_sockaddr_in().map(|sin| sin.ip())
    })
}
