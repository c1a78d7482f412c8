//! Fuzz target: `rdmasock::stream::fuzzing::hello` (the rsocket hello parser) on arbitrary
//! bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rdmasock::stream::fuzzing::hello(data);
});
