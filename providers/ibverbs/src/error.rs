//! The bridge's errors: every one names the device and says what to do.
#![forbid(unsafe_code)]

use crate::sys::LoadError;
use rdmasock_verbs::{DeviceInfo, Error};
use std::io;

/// Why the bridge was chosen, for messages.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// The device's driver has no pure-Rust provider.
    Fallback,
    /// `RDMASOCK_PROVIDER` asked for the bridge.
    Forced,
}

fn driver(device: &DeviceInfo) -> &str {
    device.driver.as_deref().unwrap_or("unknown")
}

fn why(device: &DeviceInfo, selection: Selection) -> String {
    match selection {
        Selection::Fallback => format!(
            "device `{}` uses driver `{}`, which has no pure-Rust rdmasock provider, so it needs \
             the rdma-core bridge",
            device.name,
            driver(device)
        ),
        Selection::Forced => format!(
            "RDMASOCK_PROVIDER asks for the rdma-core bridge on device `{}` (driver `{}`)",
            device.name,
            driver(device)
        ),
    }
}

/// libibverbs could not be loaded or is too old.
pub(crate) fn load_error(device: &DeviceInfo, selection: Selection, e: &LoadError) -> Error {
    let kind = match e {
        LoadError::Missing { .. } => io::ErrorKind::NotFound,
        LoadError::TooOld { .. } => io::ErrorKind::Unsupported,
    };
    Error::io(why(device, selection), io::Error::new(kind, e.to_string()))
}

/// libibverbs does not list the device: its provider library did not load.
pub(crate) fn not_listed(
    device: &DeviceInfo,
    selection: Selection,
    library: &str,
    listed: &[String],
) -> Error {
    let dir = std::path::Path::new(library)
        .parent()
        .map(|d| format!("{}/libibverbs/", d.display()))
        .unwrap_or_else(|| "libibverbs/".into());
    let listed = if listed.is_empty() {
        "none".to_string()
    } else {
        listed.join(", ")
    };
    Error::io(
        why(device, selection),
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{library} does not list `{}` (it lists: {listed}): the rdma-core provider \
                 library for driver `{}` is missing or failed to load. Install it (Debian/Ubuntu: \
                 `apt install ibverbs-providers`; Fedora/RHEL: `dnf install libibverbs`; vendor \
                 drivers install lib{}-rdmav*.so into {dir}), then check with `ibv_devices`",
                device.name,
                driver(device),
                driver(device),
            ),
        ),
    )
}

/// A verb failed: an errno as a kernel-style error, an ABI mismatch as what it is.
pub(crate) fn verb_error(verb: &'static str, device: &str, e: io::Error) -> Error {
    if e.kind() == io::ErrorKind::InvalidData {
        Error::io(format!("{verb} on {device} through libibverbs"), e)
    } else {
        Error::kernel(verb, device, e)
    }
}
