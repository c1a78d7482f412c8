//! The system calls of the fork cases: `fork`, and what a child of this multi-threaded test
//! process may do before it ends (only async-signal-safe calls: no allocation, no lock that
//! another thread of the parent may have held at the fork).

use std::ffi::{c_char, CStr};
use std::io;

/// A prepared `execv`: the path and the argument vector, made before the fork (the child may
/// not allocate).
pub(crate) struct Exec {
    path: &'static CStr,
    args: [&'static CStr; 3],
}

impl Exec {
    /// `/bin/sh -c script`.
    pub(crate) fn shell(script: &'static CStr) -> Exec {
        Exec {
            path: c"/bin/sh",
            args: [c"sh", c"-c", script],
        }
    }
}

/// What a child does after the fork.
pub(crate) enum Child<'a> {
    /// Replaces itself with another program (exit status 127 when `execv` fails).
    Exec(&'a Exec),
    /// Runs `body` (async-signal-safe code only) and `_exit`s with what it returns.
    Run(Box<dyn FnOnce() -> i32 + 'a>),
}

/// Forks; the child does `child` and never returns; the parent gets the child's pid.
pub(crate) fn fork(child: Child<'_>) -> io::Result<libc::pid_t> {
    // Everything the child needs is made before the fork.
    let argv: Option<[*const c_char; 4]> = match &child {
        Child::Exec(e) => Some([
            e.args[0].as_ptr(),
            e.args[1].as_ptr(),
            e.args[2].as_ptr(),
            std::ptr::null(),
        ]),
        Child::Run(_) => None,
    };
    // SAFETY: the child runs only async-signal-safe code: `execv` with the vector made above,
    // or a body that its callers keep to such code, then `_exit` (no atexit handlers, no
    // unwinding into the parent's frames).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid > 0 {
        return Ok(pid);
    }
    let code = match child {
        Child::Exec(e) => {
            let argv = argv.expect("made for an exec");
            // SAFETY: a NUL-terminated path and a null-terminated vector of NUL-terminated
            // strings, all 'static.
            unsafe { libc::execv(e.path.as_ptr(), argv.as_ptr()) };
            127
        }
        Child::Run(body) => body(),
    };
    // SAFETY: ends the child at once, running nothing of the parent's.
    unsafe { libc::_exit(code) }
}

/// Waits for child `pid`: its exit status, or an error naming the signal that killed it.
pub(crate) fn wait(pid: libc::pid_t) -> Result<i32, String> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer for the call.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(format!("waitpid({pid}): {e}"));
        }
    }
    if libc::WIFEXITED(status) {
        Ok(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Err(format!("killed by signal {}", libc::WTERMSIG(status)))
    } else {
        Err(format!("status {status:#x}"))
    }
}

/// Whether `addr..addr+len` (page-aligned, at most 64 pages) is mapped in this process
/// (`mincore` fails with ENOMEM on an unmapped range). Async-signal-safe.
pub(crate) fn mapped(addr: u64, len: usize) -> bool {
    let mut pages = [0u8; 64];
    assert!(len <= 64 * 4096, "at most 64 pages");
    // SAFETY: mincore writes one byte per page of the range into `pages`, which has room for
    // 64; it reads no memory of the range itself.
    let rc = unsafe { libc::mincore(addr as *mut libc::c_void, len, pages.as_mut_ptr()) };
    rc == 0
}
