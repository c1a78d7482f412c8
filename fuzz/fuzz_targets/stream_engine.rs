//! Fuzz target: `rdmasock::protocol::fuzzing::engine`, the rsocket stream engine driven by a
//! hostile peer's script.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rdmasock::protocol::fuzzing::engine(data);
});
