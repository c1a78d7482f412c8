//! The process's auxiliary vector, as the kernel set it at exec.

/// Whether the kernel marked this process's exec as secure (`AT_SECURE`): a setuid or setgid
/// program, or one that gained file capabilities or an LSM transition.
pub(crate) fn at_secure() -> bool {
    // SAFETY: getauxval only reads the auxiliary vector the kernel put on the initial stack;
    // it takes no pointer and returns 0 for a type it does not find.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}
