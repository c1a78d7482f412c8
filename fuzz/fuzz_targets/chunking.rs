//! Fuzz target: `rdmasock_uiwarp::fuzzing::chunking`, an initiator's stream (valid or
//! broken) fed to a responder in arbitrary pieces, with late decisions, clock jumps and
//! early closes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = rdmasock_uiwarp::fuzzing::chunking(data);
});
