//! Fuzz target: `rdmasock_uiwarp::fuzzing::established_crc` (FPDUs with valid or broken
//! checksums to a responder in RTS with CRC on) on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = rdmasock_uiwarp::fuzzing::established_crc(data);
});
