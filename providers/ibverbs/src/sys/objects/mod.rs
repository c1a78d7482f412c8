//! Owning handles to libibverbs objects. Each method is one verb; errors are the errno
//! libibverbs reports. Layout assumptions are checked where a returned object points back
//! at its parent (an "ABI mismatch" error instead of undefined behaviour later).
//!
//! One file per kind of object: `context` (the device), `pd` (protection domains and
//! memory regions), `cq` (completion channels and queues), `qp` (queue pairs). This file
//! holds the device list and the helpers they share.

mod context;
mod cq;
mod pd;
mod qp;

pub(crate) use context::RawContext;
pub(crate) use cq::{RawChannel, RawCq};
pub(crate) use pd::{RawMr, RawPd};
pub(crate) use qp::RawQp;

use super::abi::*;
use super::library::Library;
use std::ffi::{c_int, CStr};
use std::io;
use std::os::fd::RawFd;

fn errno() -> io::Error {
    io::Error::last_os_error()
}

/// A verb's return value: 0 is success, anything else an errno (some providers return it
/// negated).
fn check(rc: c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc.abs()))
    }
}

fn abi_mismatch(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "ABI mismatch: {what}; this libibverbs does not lay out its structs as rdma-core's \
             stable ABI (verbs.h, libibverbs.so.1) does"
        ),
    )
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd libibverbs owns and keeps open while its object lives; only
    // the O_NONBLOCK status flag changes (what rdma-core documents for polling these fds).
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(errno());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(errno());
    }
    Ok(())
}

/// The devices libibverbs lists (those whose provider library it could load): name and
/// node GUID (the big-endian value, as sysfs prints it).
pub(crate) fn list_devices(lib: &'static Library) -> io::Result<Vec<(String, u64)>> {
    with_device_list(lib, |list| Ok(list.iter().map(|d| d.0.clone()).collect()))
}

/// Runs `f` over `(name, guid)` and the device pointers, freeing the list afterwards.
fn with_device_list<T>(
    lib: &'static Library,
    f: impl FnOnce(&[((String, u64), *mut IbvDevice)]) -> io::Result<T>,
) -> io::Result<T> {
    let mut n: c_int = 0;
    // SAFETY: ibv_get_device_list writes the count and returns a NULL-terminated array (or
    // NULL with errno set).
    let list = unsafe { (lib.get_device_list)(&mut n) };
    if list.is_null() {
        // ENOSYS: the kernel has no uverbs support at all, so there is no device to list.
        let e = errno();
        return match e.raw_os_error() {
            Some(libc::ENOSYS) => f(&[]),
            _ => Err(e),
        };
    }
    let mut devices = Vec::with_capacity(n.max(0) as usize);
    for i in 0..n.max(0) as usize {
        // SAFETY: the array has `n` valid entries before its NULL terminator.
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: dev is a device of the live list; the name is a NUL-terminated string
        // inside it (copied at once), the GUID a plain value.
        let (name, guid) = unsafe {
            let name = (lib.get_device_name)(dev);
            let name = if name.is_null() {
                String::new()
            } else {
                CStr::from_ptr(name).to_string_lossy().into_owned()
            };
            (name, u64::from_be((lib.get_device_guid)(dev)))
        };
        devices.push(((name, guid), dev));
    }
    let result = f(&devices);
    // SAFETY: the list came from ibv_get_device_list and is freed once; opened contexts
    // stay valid after the list is freed (verbs.h).
    unsafe { (lib.free_device_list)(list) };
    result
}
