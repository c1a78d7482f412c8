//! Everything `unsafe` of the connection-manager layer: the `#[repr(C)]` structs of the
//! `/dev/infiniband/rdma_cm` write ABI (`rdma_user_cm.h`; docs/kernel-abi.md#rdma_cm), and the one
//! place that hands the kernel a command with a response pointer in it ([`fd::CmFd`]).
//!
//! The contract this module gives the safe layers above:
//!
//! * [`fd::CmFd`] owns one open `rdma_cm` file (one event channel), always `O_NONBLOCK`;
//! * every command is a method taking plain values and returning plain values (`io::Result`
//!   with the errno intact); no pointer ever leaves this module;
//! * [`sockaddr`] converts `SocketAddr` to and from the kernel's address slots.
//!
//! INIT_QP_ATTR's answer (`ib_uverbs_qp_attr`) is the verbs layer's `QpAttrDesc`, turned into
//! `QpAttributes` by `rdmasock_verbs::kernel::attributes_from_cm`.
#![allow(unsafe_code)]

pub mod abi;
pub mod fd;
#[cfg(test)]
mod layout_tests;
pub mod sockaddr;

/// Plain old data: a `#[repr(C)]` kernel struct with no implicit padding, for which every byte
/// pattern (all zeroes in particular) is a valid value.
///
/// # Safety
/// Implement only for `#[repr(C)]` types made of integers and arrays of integers (or unions of
/// such types of the same size) whose layout has no padding bytes (the layout tests prove it
/// for every implementor here).
pub unsafe trait Pod: Copy + 'static {
    /// The all-zero value.
    fn zeroed() -> Self {
        // SAFETY: by the trait's contract every bit pattern, all zeroes included, is valid.
        unsafe { std::mem::zeroed() }
    }

    /// The bytes of the value.
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: `self` is a valid, initialised value of a padding-free type (trait contract),
        // so all `size_of::<Self>()` bytes behind it are initialised and live as long as `self`.
        unsafe {
            std::slice::from_raw_parts(
                (self as *const Self).cast::<u8>(),
                std::mem::size_of::<Self>(),
            )
        }
    }
}
