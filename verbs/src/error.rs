//! The verbs layer's error type. Every message says what failed and what to do.
#![forbid(unsafe_code)]

use crate::types::QpNumber;
use crate::wc::WcStatus;
use std::io;
use std::path::PathBuf;

/// The result type of the verbs layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the verbs layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No RDMA device exists on this machine.
    #[error(
        "no RDMA device found (/sys/class/infiniband is empty or missing). To create a soft one: \
         `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0` (Soft-RoCE) or \
         `modprobe siw && rdma link add siw0 type siw netdev eth0` (soft-iWARP); where the kernel \
         has neither, use the userspace iWARP provider: RdmaSocket and RdmaListener pick it by \
         themselves, and its device uiwarp0 is in rdmasock::device_list()"
    )]
    NoDevice,

    /// The named device does not exist.
    #[error("RDMA device `{name}` not found; devices here: {available}")]
    DeviceNotFound {
        /// The name asked for.
        name: String,
        /// The devices that do exist, comma separated (or "none").
        available: String,
    },

    /// The uverbs (or rdma_cm) character device could not be opened for lack of permission.
    #[error(
        "permission denied opening {path} (mode {mode:o}, owner uid {owner_uid} gid {owner_gid}; \
         you are uid {uid}). Fix: run as a member of the device's group, or `chmod 666 {path}` \
         (rdma-core's udev rules do this: install rdma-core)"
    )]
    PermissionDenied {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// Its owner.
        owner_uid: u32,
        /// Its group.
        owner_gid: u32,
        /// Who we are.
        uid: u32,
    },

    /// RLIMIT_MEMLOCK is too small to pin the memory a registration asked for.
    #[error(
        "cannot register {requested} bytes: RLIMIT_MEMLOCK is {limit} (locked-memory limit too small). \
         Fix: `ulimit -l unlimited` (or raise `memlock` in /etc/security/limits.conf, or \
         LimitMEMLOCK=infinity for a systemd service)"
    )]
    MemlockLimit {
        /// The bytes asked for.
        requested: usize,
        /// The soft limit in force, as text ("65536 bytes" or "unlimited").
        limit: String,
    },

    /// Memory was required on 2 MiB huge pages ([`HugePages::Require`](crate::HugePages)) and
    /// the hugetlb pool could not give them.
    #[error(
        "cannot map {requested} bytes on 2 MiB huge pages ({pages} pages; the pool has {free} free \
         of {total}): {source}. Fix: reserve huge pages (`echo N > /proc/sys/vm/nr_hugepages` as \
         root, `hugeadm --pool-pages-min 2MB:N`, or `hugepages=N` on the kernel command line), \
         allow the locked memory where it is registered on a kernel device (`ulimit -l`), or \
         ask for HugePages::Prefer to fall back to base pages"
    )]
    HugePages {
        /// The bytes asked for.
        requested: usize,
        /// The 2 MiB pages they take.
        pages: usize,
        /// Free pages in the 2 MiB pool (/sys/kernel/mm/hugepages/hugepages-2048kB), as text
        /// ("?" where it could not be read).
        free: String,
        /// Pages reserved in the pool, as text.
        total: String,
        /// What `mmap` said.
        source: io::Error,
    },

    /// A queue pair transition lacks attributes the state machine requires.
    #[error("QP {qp_num} transition {from}->{to} is missing required attributes: {missing}")]
    MissingAttributes {
        /// The QP.
        qp_num: QpNumber,
        /// Start state.
        from: &'static str,
        /// Target state.
        to: &'static str,
        /// The attributes, comma separated.
        missing: String,
    },

    /// A work request completed with an error status.
    #[error("work request {wr_id:#x} on QP {qp_num} failed: {status} (status {code}, vendor error {vendor_err:#x}){hint}",
        code = status.to_raw(),
        hint = status.hint().map(|h| format!(": {h}")).unwrap_or_default())]
    WorkCompletion {
        /// The status.
        status: WcStatus,
        /// The provider's own error detail.
        vendor_err: u32,
        /// The failing work request.
        wr_id: u64,
        /// Its queue pair.
        qp_num: QpNumber,
    },

    /// The device's driver has no provider in this build.
    #[error(
        "device `{device}` uses driver `{driver}`, which has no rdmasock provider (pure-Rust providers: {known})"
    )]
    NoProvider {
        /// The device.
        device: String,
        /// Its driver.
        driver: String,
        /// The providers this build has.
        known: String,
    },

    /// The device cannot do the operation asked for.
    #[error("device `{device}` does not support {operation}")]
    Unsupported {
        /// The device.
        device: String,
        /// What was asked.
        operation: String,
    },

    /// A work queue has no room for the request.
    #[error("{queue} of QP {qp_num} is full ({depth} entries outstanding): poll completions before posting more")]
    QueueFull {
        /// "send queue" or "receive queue".
        queue: &'static str,
        /// The QP.
        qp_num: QpNumber,
        /// Its depth.
        depth: u32,
    },

    /// A caller argument is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A kernel command failed.
    #[error("{operation} failed on {device}: {source}{hint}", hint = kernel_hint(source))]
    Kernel {
        /// The command ("CREATE_QP", "REG_MR", ...).
        operation: &'static str,
        /// The device.
        device: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },

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

fn kernel_hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EIO) => " (the device was removed or its driver unloaded)",
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => {
            " (the kernel or driver does not support it)"
        }
        Some(libc::EBUSY) => " (the object is still in use: destroy its QPs/MRs first)",
        Some(libc::EACCES) | Some(libc::EPERM) => " (permission denied)",
        _ => "",
    }
}

impl Error {
    /// Wraps an OS error from a kernel command.
    pub fn kernel(operation: &'static str, device: &str, source: io::Error) -> Error {
        Error::Kernel {
            operation,
            device: device.to_string(),
            source,
        }
    }
    /// Wraps another OS error.
    pub fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match &e {
            Error::NoDevice | Error::DeviceNotFound { .. } => io::ErrorKind::NotFound,
            Error::PermissionDenied { .. } => io::ErrorKind::PermissionDenied,
            Error::MemlockLimit { .. } | Error::HugePages { .. } => io::ErrorKind::OutOfMemory,
            Error::InvalidArgument(_) | Error::MissingAttributes { .. } => {
                io::ErrorKind::InvalidInput
            }
            Error::Unsupported { .. } | Error::NoProvider { .. } => io::ErrorKind::Unsupported,
            Error::QueueFull { .. } => io::ErrorKind::WouldBlock,
            Error::Kernel { source, .. } | Error::Io { source, .. } => source.kind(),
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}
