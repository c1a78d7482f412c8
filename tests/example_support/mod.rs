//! Finding the example programs from a host test: `cargo test` builds every example next to
//! the test binaries (`target/<profile>/examples`).

use std::path::PathBuf;

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
