//! # rdmasock-uiwarp
//!
//! A userspace iWARP provider: MPA/DDP/RDMAP over an ordinary TCP connection, wire-compatible
//! with the kernel's `siw` and with iWARP NICs.
//!
//! This crate is built in two floors:
//! * [`wire`]: zero-copy views of the wire formats (MPA request/reply and FPDU, DDP headers,
//!   RDMAP READ request and TERMINATE) and CRC32c.
//! * [`core`]: a sans-IO protocol engine: a [`core::Connection`] takes bytes in, gives bytes
//!   out, and reports events and work completions, with no sockets and no clock. It carries
//!   the verbs semantics (memory regions reached through a [`core::MemoryTable`], send and
//!   receive queues, IRD/ORD, QP states, flush on error).
//!
//! The I/O driver (TCP sockets, a progress thread) that owns connections comes on top.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod core;
#[doc(hidden)]
pub mod fuzzing;
pub mod wire;
