//! Fuzz target: `rdmasock_uiwarp::fuzzing::transmit`, arbitrary SEND, WRITE and READ posts
//! between two connections in RTS, their frames checked and their bytes modelled.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = rdmasock_uiwarp::fuzzing::transmit(data);
});
