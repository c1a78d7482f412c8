//! Opening a uverbs character device with errors that say what to do.

use crate::error::{Error, Result};
use crate::sys::uverbs::UverbsFile;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Opens `path` (`/dev/infiniband/uverbsN`) read-write and close-on-exec.
///
/// Permission problems become [`Error::PermissionDenied`] with the file's mode and owner and
/// our uid; a missing file says that the `ib_uverbs` module is not loaded.
pub fn open_uverbs(path: &Path) -> Result<UverbsFile> {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path);
    match opened {
        Ok(file) => Ok(UverbsFile::new(OwnedFd::from(file))),
        Err(e) => Err(open_error(path, e)),
    }
}

fn open_error(path: &Path, e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => {
            let meta = std::fs::metadata(path).ok();
            Error::PermissionDenied {
                path: path.to_path_buf(),
                mode: meta.as_ref().map_or(0, |m| m.mode() & 0o7777),
                owner_uid: meta.as_ref().map_or(0, |m| m.uid()),
                owner_gid: meta.as_ref().map_or(0, |m| m.gid()),
                uid: nix::unistd::getuid().as_raw(),
            }
        }
        Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::ENXIO) => Error::io(
            format!(
                "opening {}: the uverbs device node does not exist — the kernel module ib_uverbs \
                 isn't loaded (run `modprobe ib_uverbs` as root; rdma-core's udev rules load it \
                 automatically)",
                path.display()
            ),
            e,
        ),
        _ => Error::io(format!("opening {}", path.display()), e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_node_names_the_module() {
        let err = open_uverbs(Path::new("/dev/infiniband/uverbs-does-not-exist")).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("ib_uverbs isn't loaded"), "{text}");
        assert!(
            text.contains("/dev/infiniband/uverbs-does-not-exist"),
            "{text}"
        );
    }

    #[test]
    fn permission_denied_reports_mode_and_owner() {
        // A file we may not write: root can write anything, so build the error directly
        // from a path whose metadata exists.
        let err = open_error(Path::new("/"), io::Error::from_raw_os_error(libc::EACCES));
        match err {
            Error::PermissionDenied {
                path, mode, uid, ..
            } => {
                assert_eq!(path, Path::new("/"));
                assert_ne!(mode, 0);
                assert_eq!(uid, nix::unistd::getuid().as_raw());
            }
            other => panic!("expected PermissionDenied, got {other:?}"),
        }
    }
}
