//! Everything `unsafe` of the verbs layer: the kernel's `#[repr(C)]` structs, the write and
//! ioctl command ABI, mmap, and raw memory.

pub mod abi;
pub mod abi_qp;
pub mod auxv;
pub mod extended;
pub mod ioctl;
pub mod memory;
pub mod mmap;
pub mod pod;
pub mod sge;
pub mod uverbs;
