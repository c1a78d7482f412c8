//! The stream engine's errors.
#![forbid(unsafe_code)]

use super::config::ConfigError;
use super::hello::HelloError;
use std::io;

/// What a stream operation could not do, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// Nothing can be done now; wait for readiness and retry.
    #[error("the operation would block; wait for readiness and retry")]
    WouldBlock,
    /// The connection is not established yet.
    #[error("the stream is not connected yet; wait for the connection to be established")]
    NotConnected,
    /// Writing after this side shut down writing, or after the connection closed.
    #[error("the stream is closed for writing (shut down locally or disconnected by the peer)")]
    WriteClosed,
    /// The connection failed; the reason says how.
    #[error("the connection failed: {0}")]
    ConnectionReset(String),
    /// The peer broke the rsocket protocol.
    #[error("the peer violated the rsocket stream protocol: {0}; the connection is closed")]
    Protocol(String),
    /// The driver could not copy bytes between the application's buffer and the
    /// connection's registered memory; the stream is failed, since the bytes are lost.
    #[error(
        "copying stream bytes between the application's buffer and the connection's \
         registered memory failed: {0}; the connection is closed (a bug: please report it)"
    )]
    Copy(String),
    /// An iomap call was refused (an iowrite outside the peer's windows, no free slot in the
    /// peer's table, no table): nothing was sent, and the connection stays usable.
    #[error("{0}")]
    Iomap(String),
    /// The peer's hello was refused.
    #[error(transparent)]
    Hello(#[from] HelloError),
    /// The configuration was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl From<StreamError> for io::Error {
    fn from(e: StreamError) -> Self {
        let kind = match e {
            StreamError::WouldBlock => io::ErrorKind::WouldBlock,
            StreamError::NotConnected => io::ErrorKind::NotConnected,
            StreamError::WriteClosed => io::ErrorKind::BrokenPipe,
            StreamError::ConnectionReset(_) => io::ErrorKind::ConnectionReset,
            StreamError::Protocol(_) | StreamError::Hello(_) => io::ErrorKind::InvalidData,
            StreamError::Config(_) | StreamError::Iomap(_) => io::ErrorKind::InvalidInput,
            StreamError::Copy(_) => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}
