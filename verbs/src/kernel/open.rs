//! Opening a uverbs character device with errors that say what to do.
#![forbid(unsafe_code)]

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

    /// A temporary file removed on drop.
    struct TempFile(std::path::PathBuf);

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// The whole message for EACCES (and the variant for EPERM): the path, the mode in octal
    /// without the file-type bits, owner uid and gid, our uid, and the fix.
    #[test]
    fn permission_denied_reports_mode_and_owner() {
        use std::os::unix::fs::PermissionsExt;
        // Root may open anything, so the error is built from an EACCES handed to
        // `open_error`, for a file whose mode and owner the test sets.
        let file = TempFile(
            std::env::temp_dir().join(format!("rdmasock-open-test-{}-uverbs9", std::process::id())),
        );
        std::fs::write(&file.0, b"").unwrap();
        std::fs::set_permissions(&file.0, std::fs::Permissions::from_mode(0o640)).unwrap();
        // Owner and group distinct from each other and from us when we may set them (root);
        // otherwise the file is ours and the values are read back from it.
        let (owner_uid, owner_gid) = match std::os::unix::fs::chown(&file.0, Some(4242), Some(4343))
        {
            Ok(()) => (4242, 4343),
            Err(e) => {
                assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "chown: {e}");
                let meta = std::fs::metadata(&file.0).unwrap();
                (meta.uid(), meta.gid())
            }
        };
        let uid = nix::unistd::getuid().as_raw();
        let err = open_error(&file.0, io::Error::from_raw_os_error(libc::EACCES));
        let path = file.0.display();
        // The mode in octal, without the file-type bits (0o100640 for a regular file).
        assert_eq!(
            err.to_string(),
            format!(
                "permission denied opening {path} (mode 640, owner uid {owner_uid} gid \
                 {owner_gid}; you are uid {uid}). Fix: run as a member of the device's group, \
                 or `chmod 666 {path}` (rdma-core's udev rules do this: install rdma-core)"
            )
        );
        assert_eq!(io::Error::from(err).kind(), io::ErrorKind::PermissionDenied);
        // EPERM is reported the same way.
        let err = open_error(&file.0, io::Error::from_raw_os_error(libc::EPERM));
        assert!(
            matches!(err, Error::PermissionDenied { mode: 0o640, .. }),
            "{err:?}"
        );
    }
}
