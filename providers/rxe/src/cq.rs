//! [`RxeCq`]: a kernel CQ handle and its mapped completion ring.
#![forbid(unsafe_code)]

use crate::ring::{next_index, Ring};
use crate::wqe::decode_cqe;
use rdmasock_verbs::kernel::{KernelContext, KernelCq};
use rdmasock_verbs::provider::{ChannelOps, CqOps};
use rdmasock_verbs::sys::abi::WorkCompletionDesc;
use rdmasock_verbs::{Error, Result, WorkCompletion};
use std::any::Any;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// `struct mminfo` in a driver response: where to mmap a queue.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MmapInfo {
    /// mmap offset on the uverbs fd.
    pub offset: u64,
    /// mmap length.
    pub size: u32,
}

impl MmapInfo {
    /// Reads the 16-byte `mminfo` at `at` of a driver response.
    pub fn parse(bytes: &[u8], at: usize) -> MmapInfo {
        MmapInfo {
            offset: u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes")),
            size: u32::from_le_bytes(bytes[at + 8..at + 12].try_into().expect("4 bytes")),
        }
    }
}

/// Maps a queue and checks its header.
pub fn map_ring(context: &KernelContext, info: MmapInfo, what: &str) -> Result<Ring> {
    let map = context.map_queue(info.offset, info.size as usize)?;
    Ring::new(map).map_err(|e| {
        Error::InvalidArgument(format!(
            "{what} of {}: {e} (unsupported rxe ABI?)",
            context.device_info().name
        ))
    })
}

/// An rxe completion queue.
#[derive(Debug)]
pub struct RxeCq {
    // Field order is drop order: DESTROY_CQ first, then the ring is unmapped.
    kernel: KernelCq,
    ring: Ring,
    /// Our consumer index: pollers take turns under this lock; the ring's shared copy is
    /// stored (released) only under it.
    consumer: Mutex<u32>,
}

impl RxeCq {
    /// CREATE_CQ (driver response: `rxe_create_cq_resp`, 16 bytes) and the ring mapping.
    pub fn create(
        context: &KernelContext,
        depth: u32,
        channel: Option<Arc<dyn ChannelOps>>,
        comp_vector: u32,
    ) -> Result<RxeCq> {
        let mut out = [0u8; 16];
        let kernel = KernelCq::create(context, depth, channel, comp_vector, &[], &mut out)?;
        let ring = map_ring(context, MmapInfo::parse(&out, 0), "completion queue")?;
        let consumer = ring.consumer(Ordering::Relaxed);
        Ok(RxeCq {
            kernel,
            ring,
            consumer: Mutex::new(consumer),
        })
    }

    /// The kernel handle.
    pub fn kernel(&self) -> &KernelCq {
        &self.kernel
    }
}

impl CqOps for RxeCq {
    fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        // An empty queue costs two loads and no lock: a busy-polling caller comes here in a
        // tight loop. The shared consumer index moves only under the lock, by us; a poller
        // that races one taking the last entry sees the queue empty a moment early.
        if out.is_empty()
            || self.ring.producer(Ordering::Acquire) == self.ring.consumer(Ordering::Relaxed)
        {
            return Ok(0);
        }
        let mut guard = self.consumer.lock().expect("cq lock");
        let producer = self.ring.producer(Ordering::Acquire);
        if producer == *guard {
            return Ok(0);
        }
        let mask = self.ring.mask();
        let mut consumer = *guard;
        let mut n = 0;
        for slot in out.iter_mut() {
            *slot = decode_cqe(self.ring.read::<WorkCompletionDesc>(consumer));
            consumer = next_index(consumer, mask);
            n += 1;
            if consumer == producer {
                break;
            }
        }
        // One store hands every slot read back to the kernel.
        *guard = consumer;
        self.ring.release_consumer(consumer);
        Ok(n)
    }

    fn req_notify(&self, solicited_only: bool) -> Result<()> {
        self.kernel.req_notify(solicited_only)
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
