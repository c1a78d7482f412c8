//! Fuzz target: `rdmasock_uiwarp::fuzzing::handshake` on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rdmasock_uiwarp::fuzzing::handshake(data);
});
