//! The uverbs ioctl entry point (`RDMA_VERBS_IOCTL`) and its header structs
//! (`rdma_user_ioctl_cmds.h`, docs/kernel-abi.md#uverbs-ioctl).
//!
//! This library drives the kernel through the legacy write ABI, which every 5.4+ kernel has;
//! the ioctl encoding is kept here, computed with nix's macro, for the methods that exist
//! only as ioctls.

use super::pod::impl_pod;

/// `RDMA_IOCTL_MAGIC`.
pub(crate) const RDMA_IOCTL_MAGIC: u8 = 0x1b;

/// `RDMA_VERBS_IOCTL = _IOWR(RDMA_IOCTL_MAGIC, 1, struct ib_uverbs_ioctl_hdr)`.
#[cfg(test)]
pub(crate) const RDMA_VERBS_IOCTL: nix::sys::ioctl::ioctl_num_type =
    nix::request_code_readwrite!(RDMA_IOCTL_MAGIC, 1, size_of::<IoctlHeader>());

/// `struct ib_uverbs_ioctl_hdr` (24 bytes), followed by `num_attrs` [`IoctlAttr`]s.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct IoctlHeader {
    pub length: u16,
    pub object_id: u16,
    pub method_id: u16,
    pub num_attrs: u16,
    pub reserved1: u64,
    pub driver_id: u32,
    pub reserved2: u32,
}

/// `struct ib_uverbs_attr` (16 bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct IoctlAttr {
    pub attr_id: u16,
    pub len: u16,
    pub flags: u16,
    /// `attr_data` (enum element id or reserved).
    pub attr_data: u16,
    /// Inline value, user pointer, handle or fd.
    pub data: u64,
}

impl_pod!(IoctlHeader, IoctlAttr);

nix::ioctl_readwrite!(
    /// `ioctl(fd, RDMA_VERBS_IOCTL, hdr)`: runs the method the header names; `hdr` points
    /// at the header followed by its `num_attrs` attributes, `length` bytes in all.
    rdma_verbs_ioctl,
    RDMA_IOCTL_MAGIC,
    1,
    IoctlHeader
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::pod::assert_layout;

    #[test]
    fn request_code() {
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        assert_eq!(RDMA_VERBS_IOCTL, 0xC018_1B01);
    }

    #[test]
    fn layouts() {
        assert_layout!(IoctlHeader, size 24, {
            length @ 0, object_id @ 2, method_id @ 4, num_attrs @ 6, reserved1 @ 8,
            driver_id @ 16, reserved2 @ 20,
        });
        assert_layout!(IoctlAttr, size 16, { attr_id @ 0, len @ 2, flags @ 4, attr_data @ 6, data @ 8 });
    }
}
