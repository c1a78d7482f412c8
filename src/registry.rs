//! Which provider drives which device.

use crate::verbs::{Context, DeviceList, ProviderRegistry, Result};
use std::sync::Arc;

/// The providers this build has, in the order they are tried: the pure-Rust kernel providers
/// first (rxe, then siw).
pub fn default_registry() -> ProviderRegistry {
    let mut r = ProviderRegistry::new();
    r.register(Arc::new(rdmasock_rxe::RxeProvider::new()));
    r.register(Arc::new(rdmasock_siw::SiwProvider::new()));
    r
}

/// Opens the device named `name`, or the first device when `name` is `None`, with the
/// default providers.
pub fn open_device(name: Option<&str>) -> Result<Context> {
    let list = DeviceList::discover()?;
    let device = list.pick(name)?;
    Context::open(device, &default_registry())
}
