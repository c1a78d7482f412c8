//! Everything `unsafe` of the verbs layer: the kernel's `#[repr(C)]` structs, the write and
//! ioctl command ABI, mmap, and raw memory.

pub mod memory;
