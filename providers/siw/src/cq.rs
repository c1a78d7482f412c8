//! [`SiwCq`]: a kernel CQ handle and its mapped completion array with the arming word.
#![forbid(unsafe_code)]

use crate::element::{decode_cqe, flags, notify, CQE_LEN, CQ_CTRL_LEN, INVALID_MMAP_KEY};
use crate::ring::ElementRing;
use rdmasock_verbs::kernel::{KernelContext, KernelCq};
use rdmasock_verbs::provider::{ChannelOps, CqOps};
use rdmasock_verbs::{Error, Result, WorkCompletion};
use std::any::Any;
use std::sync::{Arc, Mutex};

/// Bytes of `struct siw_uresp_create_cq`.
const CREATE_CQ_RESPONSE_LEN: usize = 16;

/// Maps `count` elements of `stride` bytes (plus `trailer`) at mmap key `key`.
pub(crate) fn map_elements(
    context: &KernelContext,
    key: u64,
    count: u32,
    stride: usize,
    trailer: usize,
    what: &str,
) -> Result<ElementRing> {
    let name = &context.device_info().name;
    let len = count as usize * stride + trailer;
    // Where siw takes its keys from the kernel's common mmap table (Linux 6.1 does), a key
    // is a page offset the context hands out in turn, so the first siw's "invalid key" value
    // is a valid key once a context has mapped 144 pages (a process with many connections on
    // one shared context gets there), and a failed preparation fails the call instead: only
    // a mapping that fails at that key is the old refusal.
    let map = context.map_queue(key, len).map_err(|e| {
        if key == INVALID_MMAP_KEY {
            Error::InvalidArgument(format!(
                "{name} could not prepare the mapping of a {what} (it reported the invalid mmap \
                 key): the kernel is short of memory, or this siw is not the ABI this provider \
                 speaks"
            ))
        } else {
            e
        }
    })?;
    ElementRing::new(map, count, stride, trailer).map_err(|e| {
        Error::InvalidArgument(format!("{what} of {name}: {e} (unsupported siw ABI?)"))
    })
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// A siw completion queue.
#[derive(Debug)]
pub struct SiwCq {
    // Field order is drop order: DESTROY_CQ first, then the array is unmapped.
    kernel: KernelCq,
    ring: Mutex<CqConsumer>,
}

#[derive(Debug)]
struct CqConsumer {
    ring: ElementRing,
    /// Free-running count of completions taken.
    get: u32,
}

impl SiwCq {
    /// CREATE_CQ (driver response `siw_uresp_create_cq`: id, element count, mmap key) and the
    /// mapping of the completion array followed by `siw_cq_ctrl`.
    pub fn create(
        context: &KernelContext,
        depth: u32,
        channel: Option<Arc<dyn ChannelOps>>,
        comp_vector: u32,
    ) -> Result<SiwCq> {
        let mut out = [0u8; CREATE_CQ_RESPONSE_LEN];
        let kernel = KernelCq::create(context, depth, channel, comp_vector, &mut out)?;
        let num_cqe = u32_at(&out, 4);
        let key = u64_at(&out, 8);
        let ring = map_elements(
            context,
            key,
            num_cqe,
            CQE_LEN,
            CQ_CTRL_LEN,
            "completion queue",
        )?;
        Ok(SiwCq {
            kernel,
            ring: Mutex::new(CqConsumer { ring, get: 0 }),
        })
    }

    /// The kernel handle.
    pub fn kernel(&self) -> &KernelCq {
        &self.kernel
    }

    /// The arming word's current value (`SIW_NOTIFY_*`; the kernel resets it to 0 when it
    /// raises an event).
    pub fn arming_word(&self) -> u32 {
        self.ring.lock().expect("cq lock").ring.load_trailer_word(0)
    }
}

impl CqOps for SiwCq {
    fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        let mut guard = self.ring.lock().expect("cq lock");
        let c = &mut *guard;
        let mut n = 0;
        let mut cqe = [0u8; CQE_LEN];
        while n < out.len() && c.ring.take_completion(c.get, flags::VALID as u8, &mut cqe) {
            out[n] = decode_cqe(&cqe);
            c.ring.release_completion(c.get);
            c.get = c.get.wrapping_add(1);
            n += 1;
        }
        Ok(n)
    }

    /// Arms the CQ through the shared arming word, with no system call.
    ///
    /// siw evaluates every receive completion as "signalled, not solicited", so an arming
    /// for solicited completions only would never be woken by an incoming solicited SEND.
    /// A solicited-only request is therefore widened to "any completion" (the value
    /// rdma-core writes for a plain request): at worst an extra wake-up, never a missed one.
    fn req_notify(&self, _solicited_only: bool) -> Result<()> {
        let guard = self.ring.lock().expect("cq lock");
        guard
            .ring
            .store_trailer_word(0, notify::SOLICITED | notify::NEXT_COMPLETION);
        Ok(())
    }

    fn ack_events(&self, n: u32) {
        self.kernel.ack_events(n)
    }

    fn depth(&self) -> u32 {
        self.kernel.depth()
    }

    fn cookie(&self) -> u64 {
        self.kernel.cookie()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
