//! Fuzz target: `rdmasock::protocol::fuzzing_iomap::iomap`, the stream engine's iomap table
//! and iowrites against a hostile peer's table, entries and announcements.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rdmasock::protocol::fuzzing_iomap::iomap(data);
});
