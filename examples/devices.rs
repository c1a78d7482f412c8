//! `devices`: the twin of rdma-core's `ibv_devices`. Lists each RDMA device and its node GUID
//! in the same format (a tab after the padded name column):
//!
//! ```text
//!     device              node GUID
//!     ------          ----------------
//!     rxe0            505400fffe123456
//! ```
//!
//! Run: `cargo run --example devices`.
#![forbid(unsafe_code)]

use rdmasock::verbs::Error;
use std::process::ExitCode;

fn main() -> ExitCode {
    println!("    {:<16}\t   node GUID", "device");
    println!("    {:<16}\t----------------", "------");
    match rdmasock::listed_devices() {
        Ok(list) => {
            for d in &list.devices {
                println!("    {:<16}\t{}", d.name, d.guid_hex());
            }
            ExitCode::SUCCESS
        }
        // Like ibv_devices, an empty list is not a failure; say how to get a device.
        Err(e @ Error::NoDevice) => {
            eprintln!("{e}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("Failed to get IB devices list: {e}");
            ExitCode::FAILURE
        }
    }
}
