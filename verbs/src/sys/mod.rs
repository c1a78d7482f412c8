//! Everything `unsafe` of the verbs layer: the kernel's `#[repr(C)]` structs, the write and
//! ioctl command ABI, mmap, and raw memory.

pub(crate) mod abi;
pub(crate) mod abi_qp;
pub(crate) mod abi_srq;
pub(crate) mod auxv;
pub(crate) mod extended;
pub(crate) mod ioctl;
pub(crate) mod memory;
pub(crate) mod mmap;
pub(crate) mod pod;
pub(crate) mod send;
pub(crate) mod sge;
pub(crate) mod tcp;
pub(crate) mod uverbs;
