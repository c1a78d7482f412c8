//! Which provider drives which device, and which connection manager serves an address
//! ([`connection_manager`]).
//!
//! The order, per device: the provider `RDMASOCK_PROVIDER` names for it, if any; else the
//! pure-Rust provider of its driver (rxe, siw); else the bridge to the system's libibverbs
//! (rdma-core), when it loads; else an error naming the driver and what to install.
//!
//! `RDMASOCK_PROVIDER` is a comma-separated list of `KIND` (every device) or `DEVICE:KIND`
//! entries, KIND being `rxe`, `siw`, `uiwarp` or `ibverbs` (`rxe0:ibverbs,siw0:siw`, or just
//! `ibverbs`); a device entry wins over a bare one. Forcing `rxe`/`siw` on a device of another
//! driver is an error; `uiwarp` selects the userspace provider, which
//! [`connection_manager`] honours when it picks a connection manager
//! ([`ProviderChoice::forces_userspace`]), and leaves kernel devices to the order above.
#![forbid(unsafe_code)]

mod managers;

pub use managers::{connection_manager, connection_manager_for};

use crate::verbs::provider::{ContextOps, Provider};
use crate::verbs::{Context, DeviceInfo, DeviceList, Error, ProviderRegistry, Result};
use rdmasock_ibverbs::IbverbsProvider;
use rdmasock_rxe::RxeProvider;
use rdmasock_siw::SiwProvider;
use std::fmt;
use std::sync::Arc;

/// The environment variable that chooses providers.
pub const PROVIDER_ENV: &str = "RDMASOCK_PROVIDER";

/// A provider a user can ask for by name.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// The pure-Rust Soft-RoCE provider.
    Rxe,
    /// The pure-Rust soft-iWARP provider.
    Siw,
    /// The userspace iWARP provider (no kernel device).
    Uiwarp,
    /// The bridge to rdma-core's libibverbs.
    Ibverbs,
}

impl ProviderKind {
    /// Parses `rxe`, `siw`, `uiwarp` or `ibverbs`.
    pub fn from_name(name: &str) -> Option<ProviderKind> {
        Some(match name {
            "rxe" => ProviderKind::Rxe,
            "siw" => ProviderKind::Siw,
            "uiwarp" => ProviderKind::Uiwarp,
            "ibverbs" => ProviderKind::Ibverbs,
            _ => return None,
        })
    }

    /// The name (also the provider's [`Provider::name`]).
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::Rxe => "rxe",
            ProviderKind::Siw => "siw",
            ProviderKind::Uiwarp => "uiwarp",
            ProviderKind::Ibverbs => "ibverbs",
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What `RDMASOCK_PROVIDER` asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProviderChoice {
    every_device: Option<ProviderKind>,
    per_device: Vec<(String, ProviderKind)>,
}

impl ProviderChoice {
    /// Reads `RDMASOCK_PROVIDER` (unset or empty: no choice).
    pub fn from_env() -> std::result::Result<ProviderChoice, String> {
        match std::env::var(PROVIDER_ENV) {
            Ok(text) => ProviderChoice::parse(&text),
            Err(std::env::VarError::NotPresent) => Ok(ProviderChoice::default()),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(format!("{PROVIDER_ENV} is not valid UTF-8"))
            }
        }
    }

    /// Parses the variable's text; the error says what is wrong and what is accepted.
    pub fn parse(text: &str) -> std::result::Result<ProviderChoice, String> {
        let mut choice = ProviderChoice::default();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (device, kind) = match entry.rsplit_once(':') {
                Some((d, k)) => (Some(d.trim()), k.trim()),
                None => (None, entry),
            };
            let kind = ProviderKind::from_name(kind).ok_or_else(|| {
                format!(
                    "{PROVIDER_ENV}={text}: unknown provider `{kind}`; use rxe, siw, uiwarp or \
                     ibverbs, for every device (`ibverbs`) or per device (`rxe0:ibverbs`)"
                )
            })?;
            match device {
                Some("") => {
                    return Err(format!(
                        "{PROVIDER_ENV}={text}: `{entry}` names no device before the `:`"
                    ))
                }
                Some(d) => choice.per_device.push((d.to_string(), kind)),
                None => choice.every_device = Some(kind),
            }
        }
        Ok(choice)
    }

    /// Whether nothing is asked for.
    pub fn is_empty(&self) -> bool {
        self.every_device.is_none() && self.per_device.is_empty()
    }

    /// The provider asked for on `device`, if any.
    pub fn for_device(&self, device: &str) -> Option<ProviderKind> {
        self.per_device
            .iter()
            .rev()
            .find(|(d, _)| d == device)
            .map(|(_, k)| *k)
            .or(self.every_device)
    }

    /// Whether the userspace provider is asked for every device ([`connection_manager`] then
    /// gives the userspace connection manager).
    pub fn forces_userspace(&self) -> bool {
        self.every_device == Some(ProviderKind::Uiwarp)
    }
}

/// The provider the user named, for the devices they named it for.
#[derive(Debug)]
struct Forced {
    choice: ProviderChoice,
}

impl Forced {
    fn kernel_only(kind: ProviderKind, inner: &dyn Provider, device: &DeviceInfo) -> Result<()> {
        if inner.matches(device) {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "{PROVIDER_ENV} asks for the {kind} provider on device `{}`, whose driver is `{}`: \
             {kind} drives only {kind} devices (use `{}:ibverbs` for the rdma-core bridge, or \
             unset {PROVIDER_ENV})",
            device.name,
            device.driver.as_deref().unwrap_or("unknown"),
            device.name,
        )))
    }
}

impl Provider for Forced {
    fn name(&self) -> &'static str {
        "forced"
    }

    fn matches(&self, device: &DeviceInfo) -> bool {
        // uiwarp has no kernel device: kernel devices keep their usual provider.
        matches!(
            self.choice.for_device(&device.name),
            Some(ProviderKind::Rxe | ProviderKind::Siw | ProviderKind::Ibverbs)
        )
    }

    fn open(&self, device: &DeviceInfo) -> Result<Arc<dyn ContextOps>> {
        match self.choice.for_device(&device.name) {
            Some(ProviderKind::Ibverbs) => IbverbsProvider::forced().open(device),
            Some(kind @ ProviderKind::Rxe) => {
                let p = RxeProvider::new();
                Forced::kernel_only(kind, &p, device)?;
                p.open(device)
            }
            Some(kind @ ProviderKind::Siw) => {
                let p = SiwProvider::new();
                Forced::kernel_only(kind, &p, device)?;
                p.open(device)
            }
            _ => Err(Error::InvalidArgument(format!(
                "{PROVIDER_ENV} names no kernel provider for `{}`",
                device.name
            ))),
        }
    }
}

/// A malformed `RDMASOCK_PROVIDER`: every open fails with the reason.
#[derive(Debug)]
struct Misconfigured {
    message: String,
}

impl Provider for Misconfigured {
    fn name(&self) -> &'static str {
        "misconfigured"
    }
    fn matches(&self, _: &DeviceInfo) -> bool {
        true
    }
    fn open(&self, _: &DeviceInfo) -> Result<Arc<dyn ContextOps>> {
        Err(Error::InvalidArgument(self.message.clone()))
    }
}

/// The providers for `choice`, in the order they are tried: the forced ones, the pure-Rust
/// kernel providers (rxe, then siw), then the rdma-core bridge for any other kernel device.
pub fn registry_for(choice: &ProviderChoice) -> ProviderRegistry {
    let mut r = ProviderRegistry::new();
    if !choice.is_empty() {
        r.register(Arc::new(Forced {
            choice: choice.clone(),
        }));
    }
    r.register(Arc::new(RxeProvider::new()));
    r.register(Arc::new(SiwProvider::new()));
    r.register(Arc::new(rdmasock_uiwarp::UiwarpProvider::new()));
    r.register(Arc::new(IbverbsProvider::fallback()));
    r
}

/// The devices of this machine: the kernel's (see [`DeviceList::discover`]) and, last, the
/// userspace iWARP device `uiwarp0`, which is always there.
pub fn device_list() -> Result<DeviceList> {
    let mut list = match DeviceList::discover() {
        Ok(l) => l,
        Err(Error::NoDevice) => DeviceList::default(),
        Err(e) => return Err(e),
    };
    list.devices.push(rdmasock_uiwarp::device_info());
    Ok(list)
}

/// The devices tools list (`devices`, `devinfo`): the kernel's, and `uiwarp0` when no kernel
/// device exists or `RDMASOCK_PROVIDER=uiwarp` (so listings match rdma-core's where the kernel
/// has devices). [`Error::NoDevice`] only when the list is empty.
pub fn listed_devices() -> Result<DeviceList> {
    let userspace = ProviderChoice::from_env().is_ok_and(|c| c.forces_userspace());
    let mut list = match DeviceList::discover() {
        Ok(l) => l,
        Err(Error::NoDevice) => DeviceList::default(),
        Err(e) => return Err(e),
    };
    if list.devices.is_empty() || userspace {
        list.devices.push(rdmasock_uiwarp::device_info());
    }
    Ok(list)
}

/// The providers this build has, chosen by `RDMASOCK_PROVIDER` (see the module docs).
pub fn default_registry() -> ProviderRegistry {
    match ProviderChoice::from_env() {
        Ok(choice) => registry_for(&choice),
        Err(message) => {
            let mut r = ProviderRegistry::new();
            r.register(Arc::new(Misconfigured { message }));
            r
        }
    }
}

/// Opens the device named `name`, or the first device when `name` is `None`, with the
/// default providers.
pub fn open_device(name: Option<&str>) -> Result<Context> {
    let list = device_list()?;
    let device = list.pick(name)?;
    Context::open(device, &default_registry())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::{NodeType, Transport};
    use std::path::PathBuf;

    fn device(name: &str, driver: &str) -> DeviceInfo {
        DeviceInfo {
            name: name.into(),
            node_guid: 0,
            node_type: NodeType::Ca,
            transport: Transport::InfiniBand,
            driver: Some(driver.into()),
            driver_id: None,
            uverbs_path: Some(PathBuf::from("/dev/infiniband/uverbs-test")),
            uverbs_sysfs: None,
            uverbs_abi: None,
            sysfs: None,
            parent_netdev: None,
            fw_ver: String::new(),
            ports: Vec::new(),
        }
    }

    #[test]
    fn parses_bare_and_per_device_entries() {
        let c = ProviderChoice::parse("ibverbs").unwrap();
        assert_eq!(c.for_device("rxe0"), Some(ProviderKind::Ibverbs));
        let c = ProviderChoice::parse("rxe0:ibverbs, siw").unwrap();
        assert_eq!(c.for_device("rxe0"), Some(ProviderKind::Ibverbs));
        assert_eq!(c.for_device("siw0"), Some(ProviderKind::Siw));
        assert!(ProviderChoice::parse("").unwrap().is_empty());
        assert!(ProviderChoice::parse("uiwarp").unwrap().forces_userspace());
        let e = ProviderChoice::parse("rxe0:mlx5").unwrap_err();
        assert!(
            e.contains("unknown provider `mlx5`") && e.contains("ibverbs"),
            "{e}"
        );
        assert!(ProviderChoice::parse(":ibverbs").is_err());
    }

    #[test]
    fn pure_rust_first_then_the_bridge() {
        let r = registry_for(&ProviderChoice::default());
        assert_eq!(r.find(&device("rxe0", "rxe")).unwrap().name(), "rxe");
        assert_eq!(r.find(&device("siw0", "siw")).unwrap().name(), "siw");
        assert_eq!(r.find(&device("mlx5_0", "mlx5")).unwrap().name(), "ibverbs");
    }

    #[test]
    fn forcing_picks_the_bridge_only_where_asked() {
        let r = registry_for(&ProviderChoice::parse("rxe0:ibverbs").unwrap());
        assert_eq!(r.find(&device("rxe0", "rxe")).unwrap().name(), "forced");
        assert_eq!(r.find(&device("rxe1", "rxe")).unwrap().name(), "rxe");
        let r = registry_for(&ProviderChoice::parse("uiwarp").unwrap());
        assert_eq!(r.find(&device("rxe0", "rxe")).unwrap().name(), "rxe");
    }

    #[test]
    fn forcing_a_pure_rust_provider_on_another_driver_is_refused() {
        let r = registry_for(&ProviderChoice::parse("rxe").unwrap());
        let d = device("mlx5_0", "mlx5");
        let err = r.find(&d).unwrap().open(&d).unwrap_err().to_string();
        assert!(
            err.contains("rxe drives only rxe devices") && err.contains("mlx5_0:ibverbs"),
            "{err}"
        );
    }
}
