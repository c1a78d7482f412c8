//! Fuzz target: `rdmasock_uiwarp::fuzzing::established` (FPDUs to a responder in RTS, no CRC)
//! on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rdmasock_uiwarp::fuzzing::established(data);
});
