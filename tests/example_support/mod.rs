//! Finding the example programs from a host test (`cargo test` builds every example next to
//! the test binaries, in `target/<profile>/examples`), and waiting for one to exit.

use std::path::PathBuf;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// The example binary `name`; panics, saying how to build it, when it is missing.
pub(crate) fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/TEST-HASH -> target/<profile>/examples
    let path = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("examples")
        .join(name);
    assert!(
        path.is_file(),
        "example binary {} not found: `cargo test` builds the examples, `cargo test --test \
         NAME` alone does not (run `cargo build --examples` first)",
        path.display()
    );
    path
}

/// Waits up to `limit` for `child` to exit and returns its output. Past `limit` it kills the
/// child and fails the test, naming `what` and showing what the child printed.
pub(crate) fn output_within(mut child: Child, limit: Duration, what: &str) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("poll the example").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect output");
            panic!(
                "{what} still running after {limit:?}: stdout {:?} stderr {:?}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collect output")
}
