//! # rdmasock
//!
//! RDMA with the face of a socket. This crate assembles the layers: the verbs objects
//! ([`verbs`]), the connection manager ([`cm`]) and the providers, and picks a provider for
//! each device; [`protocol`] is rsocket's stream protocol engine (sans-IO), and [`socket`]
//! drives it as [`RdmaSocket`] and [`RdmaListener`].
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub use rdmasock_cm as cm;
pub use rdmasock_verbs as verbs;

pub mod protocol;
mod registry;
pub mod socket;

pub use registry::{
    default_registry, device_list, listed_devices, open_device, registry_for, ProviderChoice,
    ProviderKind, PROVIDER_ENV,
};
pub use socket::{RdmaListener, RdmaSocket, SocketOptions};
