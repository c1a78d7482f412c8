//! # rdmasock-uiwarp
//!
//! A userspace iWARP provider: MPA/DDP/RDMAP over an ordinary TCP connection, wire-compatible
//! with the kernel's `siw` and with iWARP NICs.
//!
//! This crate is built in floors; each module imports only the ones above it in this list
//! (`wire` lowest):
//! * [`wire`]: zero-copy views of the wire formats (MPA request/reply and FPDU, DDP headers,
//!   RDMAP READ request and TERMINATE) and CRC32c.
//! * [`protocol`]: a sans-IO protocol engine: a [`protocol::Connection`] takes bytes in, gives
//!   bytes out, and reports events and work completions, with no sockets and no clock. It
//!   carries the verbs semantics (memory regions reached through a
//!   [`protocol::MemoryTable`], send and receive queues, IRD/ORD, QP states, flush on error).
//! * `memory`: the memory state the driver and the provider share: a protection domain's
//!   regions and a queue pair's inline payloads, as the protocol engine reaches them.
//! * [`driver`]: the I/O driver: nonblocking TCP sockets and a progress thread per process,
//!   connection setup ([`connect`], [`UiwarpListener`]), the completion queues and channels
//!   it fills, and an optional pcap capture.
//! * [`provider`]: the verbs provider ([`UiwarpProvider`]) for the userspace device `uiwarp0`:
//!   contexts, protection domains, memory regions and queue pairs, over the driver (the
//!   provider imports the driver, never the reverse).
//! * [`manager`]: the connection manager ([`UiwarpCm`]), rdmasock-cm's interface over
//!   [`connect`] and [`UiwarpListener`].
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod driver;
// The fuzz targets' entry points: built only for `cargo fuzz` (which sets `--cfg fuzzing`)
// and for the seeded smoke test that `tests/run.sh` builds the same way.
#[cfg(fuzzing)]
pub mod fuzzing;
pub mod manager;
pub(crate) mod memory;
pub mod protocol;
pub mod provider;
pub mod wire;

pub use driver::{
    accepted, connect, disconnect, Dial, Notice, Rejected, UiwarpListener, UiwarpRequest,
};
pub use manager::UiwarpCm;
pub use provider::{device_info, UiwarpProvider, DEVICE_NAME, DRIVER_NAME};
