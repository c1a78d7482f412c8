//! The connection-manager layer's error type. Every message names the address or id it is
//! about and says what to do.
#![forbid(unsafe_code)]

use crate::event::RejectReason;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// The result type of the connection-manager layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the connection-manager layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `/dev/infiniband/rdma_cm` does not exist.
    #[error("{} does not exist: {}", path.display(), not_loaded_advice(*kernel_has_rdma))]
    NotLoaded {
        /// The device node looked for.
        path: PathBuf,
        /// Whether the kernel has RDMA loaded at all (`ib_core`, or a device in sysfs): then
        /// only rdma_ucm is missing.
        kernel_has_rdma: bool,
    },

    /// The kernel speaks an rdma_cm ABI this crate does not.
    #[error("{} says rdma_cm ABI version {found}; this library speaks version 4 only", path.display())]
    AbiVersion {
        /// The sysfs file read.
        path: PathBuf,
        /// What it said.
        found: u32,
    },

    /// An error of the verbs layer (opening the device node, device discovery, modifying a
    /// queue pair).
    #[error(transparent)]
    Verbs(#[from] rdmasock_verbs::Error),

    /// An rdma_cm command failed synchronously.
    #[error("{command} for {target} failed: {source}{hint}", hint = command_hint(command, source))]
    Command {
        /// The command (`BIND`, `LISTEN`, ...).
        command: &'static str,
        /// The address or id it was about.
        target: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// The address is on no RDMA device (the kernel answered ENODEV / EADDRNOTAVAIL).
    #[error(
        "{addr} is on no RDMA device ({operation}: {source}){netdev}. RDMA devices here: \
         {devices}. {advice}",
        netdev = netdev.as_ref().map(|n| format!("; {addr} is on netdev {n}, which has none")).unwrap_or_default()
    )]
    NoRdmaDevice {
        /// The address.
        addr: IpAddr,
        /// What found out (`ADDR_ERROR`, `RESOLVE_ROUTE`, `BIND`, ...).
        operation: &'static str,
        /// The kernel's error.
        #[source]
        source: io::Error,
        /// The local netdev that has the address, when it is local.
        netdev: Option<String>,
        /// The RDMA devices with their netdevs and addresses.
        devices: String,
        /// What to do.
        advice: String,
    },

    /// The id is bound to a device that device discovery did not find.
    #[error(
        "the rdma_cm id for {target} is on a device with node GUID {guid:016x}, which is not \
         among the RDMA devices found ({devices}): is its uverbs module (ib_uverbs) loaded?"
    )]
    UnknownDevice {
        /// The address.
        target: String,
        /// The node GUID (big-endian value, as `ibv_devices` prints it).
        guid: u64,
        /// The devices found.
        devices: String,
    },

    /// Address resolution failed (ADDR_ERROR) for a reason other than "no RDMA device".
    #[error("resolving the address {addr} failed: {source}{hint}", hint = resolve_hint(source))]
    AddressResolution {
        /// The address.
        addr: SocketAddr,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },

    /// Route resolution failed (ROUTE_ERROR).
    #[error("resolving the route to {addr} failed: {source}{hint}", hint = resolve_hint(source))]
    RouteResolution {
        /// The address.
        addr: SocketAddr,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },

    /// Nobody listens at the address (REJECTED with "invalid service ID" on IB/RoCE,
    /// ECONNREFUSED on iWARP).
    #[error(
        "connection to {addr} refused: nothing listens on port {port} there (REJECTED: \
         {reason}). Start the server first, or check the port", port = addr.port()
    )]
    ConnectionRefused {
        /// The address.
        addr: SocketAddr,
        /// The reject reason as reported.
        reason: RejectReason,
    },

    /// The peer's application rejected the connection (REJECTED for another reason).
    #[error(
        "connection to {addr} rejected by the peer (REJECTED: {reason}); {}",
        describe_private_data(private_data)
    )]
    Rejected {
        /// The address.
        addr: SocketAddr,
        /// The reject reason.
        reason: RejectReason,
        /// The REJ private data (IB: 148 bytes, zero padded).
        private_data: Vec<u8>,
    },

    /// The connection request or reply got no answer (UNREACHABLE).
    #[error(
        "{addr} unreachable: the connection request got no answer (UNREACHABLE: {source}). \
         Is the peer up, its RDMA device active, and RoCE (UDP 4791) or iWARP traffic allowed \
         between us? On iWARP a TCP service that is not an RDMA listener and stays silent \
         looks the same: check the port"
    )]
    Unreachable {
        /// The address.
        addr: SocketAddr,
        /// The kernel's status.
        #[source]
        source: io::Error,
    },

    /// Connection establishment failed (CONNECT_ERROR): on iWARP the peer's answer to the
    /// MPA request was not an MPA reply (a service that is not an RDMA listener).
    #[error(
        "connecting to {addr} failed (CONNECT_ERROR: {source}): the peer answered, but not \
         as an RDMA listener would (on iWARP its answer was no MPA reply). Check that an RDMA \
         listener serves that port"
    )]
    ConnectError {
        /// The address.
        addr: SocketAddr,
        /// The kernel's status.
        #[source]
        source: io::Error,
    },

    /// No event came within the time given.
    #[error("{operation} for {target} timed out after {} ms", timeout.as_millis())]
    TimedOut {
        /// What was waited for.
        operation: &'static str,
        /// The address or id.
        target: String,
        /// How long.
        timeout: Duration,
    },

    /// Another event came than the one waited for.
    #[error("waiting for {expected} on {target}, got {got}")]
    UnexpectedEvent {
        /// The event waited for.
        expected: &'static str,
        /// The address or id.
        target: String,
        /// The event that came (with its status).
        got: String,
    },

    /// The device of the id went away (DEVICE_REMOVAL).
    #[error(
        "the RDMA device of {target} was removed: destroy its QPs, CQs and MRs, then create a \
         new id and reconnect"
    )]
    DeviceRemoved {
        /// The address or id.
        target: String,
    },

    /// Private data longer than the transport carries.
    #[error(
        "{operation} carries at most {max} bytes of private data on this transport, got {len}"
    )]
    PrivateDataTooLong {
        /// CONNECT, ACCEPT or REJECT.
        operation: &'static str,
        /// The length given.
        len: usize,
        /// The limit.
        max: usize,
    },

    /// A caller argument is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// Another I/O error, with what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// What to do when the rdma_cm node is missing.
fn not_loaded_advice(kernel_has_rdma: bool) -> &'static str {
    if kernel_has_rdma {
        "rdma_ucm not loaded: modprobe rdma_ucm (as root; rdma-core's udev rules load it at boot)"
    } else {
        "this kernel has no RDMA loaded (no ib_core module, no device in /sys/class/infiniband). \
         Where the kernel ships it: modprobe rdma_ucm, and create a soft device \
         (`modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0`, or siw). Without \
         kernel RDMA, RdmaSocket and RdmaListener use the userspace iWARP provider instead"
    }
}

fn command_hint(command: &str, e: &io::Error) -> &'static str {
    match (command, e.raw_os_error()) {
        ("CONNECT", Some(libc::EADDRINUSE | libc::EADDRNOTAVAIL)) => {
            " (on iWARP the source port rdma_cm picked is held in TCP's table, by a TCP \
             socket or a TIME_WAIT: connect again, from a port TCP has free; RdmaSocket \
             does)"
        }
        (_, Some(libc::EADDRINUSE)) => {
            " (another id is bound to that address and port: pick another port, or set \
             reuse_addr on both)"
        }
        ("BIND", Some(libc::EACCES)) => {
            " (ports below 1024 need CAP_NET_BIND_SERVICE; use a port >= 1024)"
        }
        (_, Some(libc::EACCES)) => {
            " (the rdma_cm fd was opened under other credentials: open it in this process)"
        }
        (_, Some(libc::EINVAL)) => {
            " (the id is in the wrong state for this, or not yet bound to a device: resolve \
             the address (or bind to a specific one) first)"
        }
        (_, Some(libc::ENXIO)) => " (the device of the id is being removed)",
        (_, Some(libc::ENOMEM)) => " (out of memory, or the listen backlog is exhausted)",
        _ => "",
    }
}

fn resolve_hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::ETIMEDOUT) => {
            " (no ARP/neighbour answer in time: is the peer up and on a subnet we reach?)"
        }
        Some(libc::ENETUNREACH) | Some(libc::EHOSTUNREACH) => {
            " (no route: check `ip route get <addr>`)"
        }
        _ => "",
    }
}

impl Error {
    /// Wraps a failed command.
    pub(crate) fn command(command: &'static str, target: impl Into<String>, e: io::Error) -> Error {
        Error::Command {
            command,
            target: target.into(),
            source: e,
        }
    }
    /// Wraps another OS error.
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match &e {
            Error::NotLoaded { .. } | Error::UnknownDevice { .. } => io::ErrorKind::NotFound,
            Error::AbiVersion { .. } => io::ErrorKind::Unsupported,
            Error::Verbs(_) => {
                return match e {
                    Error::Verbs(v) => v.into(),
                    _ => unreachable!("matched Verbs above"),
                }
            }
            Error::NoRdmaDevice { .. } => io::ErrorKind::AddrNotAvailable,
            Error::ConnectionRefused { .. } | Error::Rejected { .. } => {
                io::ErrorKind::ConnectionRefused
            }
            Error::Unreachable { .. } | Error::TimedOut { .. } => io::ErrorKind::TimedOut,
            // As the userspace provider says when its peer does not speak MPA.
            Error::ConnectError { .. } => io::ErrorKind::ConnectionAborted,
            Error::DeviceRemoved { .. } => io::ErrorKind::NotConnected,
            Error::PrivateDataTooLong { .. } | Error::InvalidArgument(_) => {
                io::ErrorKind::InvalidInput
            }
            Error::Command { source, .. }
            | Error::AddressResolution { source, .. }
            | Error::RouteResolution { source, .. }
            | Error::Io { source, .. } => source.kind(),
            Error::UnexpectedEvent { .. } => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}

/// What a rejection's private data says: its text when it is printable (the zero padding
/// IB adds cut off; at most 120 characters), else its size.
fn describe_private_data(data: &[u8]) -> String {
    let end = data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let data = &data[..end];
    match std::str::from_utf8(data) {
        Ok("") => "it sent no private data".to_string(),
        Ok(text) if !text.chars().any(|c| c.is_control() && c != '\n') => {
            let cut: String = text.chars().take(120).collect();
            let more = if cut.len() < text.len() { "…" } else { "" };
            format!("it said {cut:?}{more}")
        }
        _ => format!("it sent {} bytes of private data", data.len()),
    }
}

#[cfg(test)]
mod private_data_tests {
    use super::describe_private_data;

    #[test]
    fn private_data_is_quoted_when_printable() {
        let mut padded = b"busy, try later".to_vec();
        padded.resize(148, 0);
        assert_eq!(
            describe_private_data(&padded),
            "it said \"busy, try later\""
        );
        assert_eq!(describe_private_data(&[0; 148]), "it sent no private data");
        assert_eq!(
            describe_private_data(&[1, 2, 0xff, 0]),
            "it sent 3 bytes of private data"
        );
        let long = "x".repeat(200);
        let said = describe_private_data(long.as_bytes());
        assert!(said.ends_with("\"…") && said.len() < 140, "{said}");
    }
}
