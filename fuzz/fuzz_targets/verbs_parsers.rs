//! Fuzz target: `rdmasock_verbs::device::fuzzing::parsers`, device discovery's netlink reply
//! parser and sysfs text parsers, on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rdmasock_verbs::device::fuzzing::parsers(data);
});
