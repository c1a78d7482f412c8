//! Registered buffers: memory a connection's device sends from without a copy
//! ([`RegisteredBuf`]), and a bounded pool of them that keeps their registrations
//! ([`BufferPool`]). The socket calls that use them are
//! [`RdmaSocket::write_registered`](crate::RdmaSocket::write_registered) and
//! [`RdmaSocket::submit_registered`](crate::RdmaSocket::submit_registered); see
//! docs/SOCKET.md, "Registered buffers and zero-copy writes".
//!
//! The bytes are seen as Rust slices in one place, `sys`, which owns the memory and makes
//! every registration of it read-only for the device.
#![deny(unsafe_code)]

mod pool;
mod registered;
mod sys;

pub use pool::{BufferPool, PooledBuf};
pub use registered::RegisteredBuf;
