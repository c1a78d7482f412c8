//! Fuzz target: `rdmasock::protocol::fuzzing::hello` (the rsocket hello parser) on arbitrary
//! bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rdmasock::protocol::fuzzing::hello(data);
});
