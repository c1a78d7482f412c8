//! Environment variables that name files the library opens or loads (`RDMASOCK_LIBIBVERBS`,
//! `RDMASOCK_PCAP`): a program that runs with more privileges than its caller (setuid,
//! setgid, file capabilities) must not let the caller choose which library it loads or where
//! it writes, so such variables are ignored there, as glibc's `secure_getenv` does.
#![forbid(unsafe_code)]

use std::ffi::OsString;

/// Who the process runs as, and whether the kernel marked its exec as secure.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The real user id (who started the program).
    pub real_user: u32,
    /// The effective user id (whose rights the program has).
    pub effective_user: u32,
    /// The real group id.
    pub real_group: u32,
    /// The effective group id.
    pub effective_group: u32,
    /// The kernel's `AT_SECURE` flag: set for setuid/setgid programs and for those that
    /// gained capabilities at exec.
    pub secure_exec: bool,
}

impl Identity {
    /// This process's identity.
    pub fn current() -> Identity {
        Identity {
            real_user: nix::unistd::getuid().as_raw(),
            effective_user: nix::unistd::geteuid().as_raw(),
            real_group: nix::unistd::getgid().as_raw(),
            effective_group: nix::unistd::getegid().as_raw(),
            secure_exec: crate::sys::auxv::at_secure(),
        }
    }

    /// Whether the process runs with privileges its caller may not have: `AT_SECURE`, or a
    /// real user or group that differs from the effective one.
    pub fn elevated(&self) -> bool {
        self.secure_exec
            || self.real_user != self.effective_user
            || self.real_group != self.effective_group
    }
}

/// The value of the path-bearing variable `name`, or `None` when it is unset or the process
/// runs with elevated privileges (then it says once on stderr that the variable is ignored).
pub fn path_variable(name: &str) -> Option<OsString> {
    let value = std::env::var_os(name)?;
    if Identity::current().elevated() {
        eprintln!(
            "rdmasock: {name} is ignored: this process runs with elevated privileges (setuid, \
             setgid or file capabilities), so the environment may not choose files it opens; \
             run it unprivileged to use {name}"
        );
        return None;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::Identity;

    const PLAIN: Identity = Identity {
        real_user: 1000,
        effective_user: 1000,
        real_group: 1000,
        effective_group: 1000,
        secure_exec: false,
    };

    #[test]
    fn elevated_when_any_id_differs_or_the_exec_was_secure() {
        assert!(!PLAIN.elevated(), "an ordinary process");
        let root = Identity {
            real_user: 0,
            effective_user: 0,
            real_group: 0,
            effective_group: 0,
            ..PLAIN
        };
        assert!(!root.elevated(), "root that was started as root");
        let setuid = Identity {
            effective_user: 0,
            ..PLAIN
        };
        assert!(setuid.elevated(), "setuid");
        let setgid = Identity {
            effective_group: 0,
            ..PLAIN
        };
        assert!(setgid.elevated(), "setgid");
        let dropped = Identity {
            real_user: 0,
            ..PLAIN
        };
        assert!(
            dropped.elevated(),
            "real and effective user differ either way"
        );
        let capabilities = Identity {
            secure_exec: true,
            ..PLAIN
        };
        assert!(capabilities.elevated(), "file capabilities (AT_SECURE)");
    }

    #[test]
    fn this_test_process_is_not_elevated() {
        assert!(!Identity::current().elevated());
    }
}
