//! Fuzz target: `rdmasock::socket::fuzzing::completions`, arbitrary work completions fed
//! through the socket's completion feed to a connected stream engine.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rdmasock::socket::fuzzing::completions(data);
});
