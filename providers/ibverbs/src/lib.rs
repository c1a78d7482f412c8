//! rdmasock provider: a bridge to rdma-core's libibverbs, loaded at run time.
//!
//! For devices whose data path is vendor-specific (mlx5, irdma, efa, bnxt_re, ...) and has no
//! pure-Rust provider, this provider loads `libibverbs.so.1` with `dlopen` the first time it
//! is used (nothing links to it at build time; machines without rdma-core are unaffected)
//! and drives the device through it: the device list (opened by name, else node GUID),
//! device/port/GID queries, PDs, MRs, completion channels, CQs and RC QPs, with
//! `post_send`/`post_recv`/`poll_cq`/`req_notify_cq` called through the context's ops table
//! as verbs.h's inline functions do. The connection manager stays ours: rdma_cm works on the
//! QP through the verbs layer's `modify`, whichever provider created it.
//!
//! The provider implements the same [`Provider`] trait family as the pure-Rust ones; the
//! root crate decides when it runs (`RDMASOCK_PROVIDER=ibverbs` forces it).
//!
//! All FFI is in the private `sys` module; every other module is `#![forbid(unsafe_code)]`.
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod context;
mod convert;
mod cq;
mod error;
mod qp;
mod sys;

/// Not part of the API: the libibverbs struct mirrors and the library loader, for this
/// crate's tests (layouts against `<infiniband/verbs.h>`, loading errors). It may change in
/// any release. The handles that call into libibverbs stay private.
#[doc(hidden)]
pub mod __private {
    pub use crate::sys::abi;
    pub use crate::sys::library::{library, load, Library, LoadError};
}

pub use context::{BridgeContext, BridgeMr, BridgePd};
pub use convert::{wc_flags_from_ibv, WcFlagsEncoding};
pub use cq::{BridgeChannel, BridgeCq};
pub use error::Selection;
pub use qp::BridgeQp;

use rdmasock_verbs::provider::{ContextOps, Provider};
use rdmasock_verbs::{DeviceInfo, Result};
use std::sync::Arc;

/// The rdma-core bridge.
#[derive(Debug, Clone, Copy)]
pub struct IbverbsProvider {
    selection: Selection,
}

impl IbverbsProvider {
    /// The bridge as the fallback for kernel devices no pure-Rust provider drives (it
    /// matches every device with a uverbs node; register it after those providers).
    pub fn fallback() -> Self {
        IbverbsProvider {
            selection: Selection::Fallback,
        }
    }

    /// The bridge asked for by the user: errors say so instead of blaming a missing
    /// pure-Rust provider.
    pub fn forced() -> Self {
        IbverbsProvider {
            selection: Selection::Forced,
        }
    }

    /// Whether libibverbs can be loaded here (it is loaded, once, to find out).
    pub fn available() -> bool {
        sys::library().is_ok()
    }
}

impl Provider for IbverbsProvider {
    fn name(&self) -> &'static str {
        "ibverbs"
    }

    fn matches(&self, device: &DeviceInfo) -> bool {
        device.uverbs_path.is_some()
    }

    fn open(&self, device: &DeviceInfo) -> Result<Arc<dyn ContextOps>> {
        Ok(Arc::new(BridgeContext::open(device, self.selection)?))
    }
}
