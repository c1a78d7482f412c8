//! rdmasock provider: rxe
#![deny(missing_docs)]

use rdmasock_verbs::provider::{ContextOps, Provider};
use rdmasock_verbs::{DeviceInfo, Result};
use std::sync::Arc;

/// The Soft-RoCE (rxe) provider. (Placeholder until the data path lands.)
#[derive(Debug, Default)]
pub struct RxeProvider;

impl RxeProvider {
    /// The provider.
    pub fn new() -> Self {
        RxeProvider
    }
}

impl Provider for RxeProvider {
    fn name(&self) -> &'static str {
        "rxe"
    }
    fn matches(&self, device: &DeviceInfo) -> bool {
        device.driver.as_deref() == Some("rxe")
    }
    fn open(&self, device: &DeviceInfo) -> Result<Arc<dyn ContextOps>> {
        Err(rdmasock_verbs::Error::Unsupported {
            device: device.name.clone(),
            operation: "the rxe data path (not built yet)".into(),
        })
    }
}
