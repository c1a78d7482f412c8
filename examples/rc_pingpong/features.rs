//! The device capabilities behind ibv_rc_pingpong's `-o -O -P -t -j`: checked as
//! ibv_rc_pingpong checks them (`ibv_query_device_ex`, the same messages and exit status
//! where the device lacks one), then refused plainly where the device has the capability but
//! rdmasock's verbs layer cannot use it.

use crate::options::Config;
use rdmasock::verbs::{AccessFlags, Context, ExtendedDeviceAttributes};
use std::process::ExitCode;

/// `IBV_ODP_SUPPORT`: the device can page on demand at all.
const ODP_SUPPORT: u64 = 1;
/// `IBV_ODP_SUPPORT_IMPLICIT`: one region may cover the whole address space.
const ODP_SUPPORT_IMPLICIT: u64 = 1 << 1;
/// `IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV`: what a ping-pong needs on RC.
const ODP_RC_SEND_RECV: u32 = 1 | 1 << 1;

/// Prints `message` and gives ibv_rc_pingpong's exit status for a failed setup.
fn refuse(message: &str) -> ExitCode {
    eprintln!("{message}");
    ExitCode::FAILURE
}

/// Checks what `c` asks of the device behind `context`; returns the access flags the
/// buffer's registration adds (on-demand paging for `-o`).
pub(crate) fn check(context: &Context, c: &Config) -> Result<AccessFlags, ExitCode> {
    if !c.needs_features() {
        return Ok(AccessFlags::empty());
    }
    let attributes = context
        .query_device()
        .map_err(|_| refuse("Couldn't query device for its features"))?;
    let e = &attributes.extended;
    lacks(e, c)?;
    cannot(context.device().name.as_str(), e, c)?;
    Ok(if c.odp {
        AccessFlags::ON_DEMAND
    } else {
        AccessFlags::empty()
    })
}

/// ibv_rc_pingpong's refusals, in its order, for a capability the device lacks.
fn lacks(e: &ExtendedDeviceAttributes, c: &Config) -> Result<(), ExitCode> {
    if c.odp {
        let odp = &e.odp_caps;
        if odp.general_caps & ODP_SUPPORT == 0
            || odp.rc_odp_caps & ODP_RC_SEND_RECV != ODP_RC_SEND_RECV
        {
            return Err(refuse(
                "The device isn't ODP capable or does not support RC send and receive with ODP",
            ));
        }
        if c.implicit_odp && odp.general_caps & ODP_SUPPORT_IMPLICIT == 0 {
            return Err(refuse("The device doesn't support implicit ODP"));
        }
    }
    if c.timestamps && e.completion_timestamp_mask == 0 {
        return Err(refuse("The device isn't completion timestamp capable"));
    }
    if c.device_memory {
        if e.max_dm_size == 0 {
            return Err(refuse("Device doesn't support dm allocation"));
        }
        if e.max_dm_size < c.size as u64 {
            return Err(refuse("Device memory is insufficient"));
        }
    }
    Ok(())
}

/// Where the device has the capability but rdmasock's verbs layer has no call for it.
fn cannot(device: &str, e: &ExtendedDeviceAttributes, c: &Config) -> Result<(), ExitCode> {
    if c.implicit_odp {
        return Err(refuse(&format!(
            "{device} supports implicit on-demand paging, but rdmasock's verbs layer cannot \
             register an implicit ODP memory region (one covering the whole address space): \
             run without -O (-o registers the buffer itself for on-demand paging)"
        )));
    }
    if c.prefetch {
        return Err(refuse(&format!(
            "{device} supports on-demand paging, but rdmasock's verbs layer cannot prefetch a \
             memory region (ibv_advise_mr): run without -P"
        )));
    }
    if c.timestamps {
        return Err(refuse(&format!(
            "{device} can timestamp completions (mask {:#x}), but rdmasock's verbs layer \
             cannot create a completion queue whose completions carry timestamps \
             (ibv_create_cq_ex): run without -t",
            e.completion_timestamp_mask
        )));
    }
    if c.device_memory {
        return Err(refuse(&format!(
            "{device} has {} bytes of device memory, but rdmasock's verbs layer cannot \
             allocate device memory (ibv_alloc_dm): run without -j",
            e.max_dm_size
        )));
    }
    Ok(())
}
