//! [`RxeCq`]: a kernel CQ handle and its mapped completion ring.
#![forbid(unsafe_code)]

use crate::ring::{next_index, queued, Ring};
use crate::wqe::decode_cqe;
use rdmasock_verbs::__private::WorkCompletionDesc;
use rdmasock_verbs::kernel::{KernelContext, KernelCq};
use rdmasock_verbs::provider::{ChannelOps, CqOps};
use rdmasock_verbs::{Error, Result, WorkCompletion};
use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// `struct mminfo` in a driver response: where to mmap a queue.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct MmapInfo {
    /// mmap offset on the uverbs fd.
    pub offset: u64,
    /// mmap length.
    pub size: u32,
}

impl MmapInfo {
    /// Reads the 16-byte `mminfo` at `at` of a driver response.
    pub(crate) fn parse(bytes: &[u8], at: usize) -> MmapInfo {
        MmapInfo {
            offset: u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes")),
            size: u32::from_le_bytes(bytes[at + 8..at + 12].try_into().expect("4 bytes")),
        }
    }
}

/// Maps a queue and checks its header.
pub(crate) fn map_ring(context: &KernelContext, info: MmapInfo, what: &str) -> Result<Ring> {
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
    /// Pollers take turns under this flag, a spin lock (a turn lasts a few dozen
    /// instructions, as under the spinlock rdma-core's rxe takes at the same place). The
    /// ring's consumer index is ours: stored (released) only by the poller holding it.
    polling: AtomicBool,
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
        let kernel = KernelCq::create(context, depth, channel, comp_vector, &mut out)?;
        let ring = map_ring(context, MmapInfo::parse(&out, 0), "completion queue")?;
        Ok(RxeCq {
            kernel,
            ring,
            polling: AtomicBool::new(false),
        })
    }

    /// The kernel handle.
    pub fn kernel(&self) -> &KernelCq {
        &self.kernel
    }

    /// Moves up to `out.len()` entries (`out` not empty) from the ring into `out` in this
    /// poller's turn. Out of line, so that an empty poll — the busy-polling caller's usual
    /// case — saves and restores no registers.
    #[inline(never)]
    fn take(&self, out: &mut [WorkCompletion]) -> usize {
        let _turn = Turn::take(&self.polling);
        // The consumer index was last stored by a turn that ended before this one began;
        // the producer index is loaded again: a poller that went first may have taken entries
        // up to a producer index newer than the one `poll` saw.
        let mut consumer = self.ring.consumer(Ordering::Relaxed);
        let producer = self.ring.producer(Ordering::Acquire);
        let mask = self.ring.mask();
        let n = (queued(producer, consumer, mask) as usize).min(out.len());
        for slot in &mut out[..n] {
            *slot = decode_cqe(self.ring.read::<WorkCompletionDesc>(consumer));
            consumer = next_index(consumer, mask);
        }
        if n > 0 {
            // One store hands every slot read back to the kernel.
            self.ring.release_consumer(consumer);
        }
        n
    }
}

/// A poller's turn at a CQ: holds its `polling` flag until dropped.
struct Turn<'a>(&'a AtomicBool);

impl<'a> Turn<'a> {
    #[inline]
    fn take(flag: &'a AtomicBool) -> Turn<'a> {
        if flag
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            Self::wait(flag);
        }
        Turn(flag)
    }

    /// Another poller has the turn: spin briefly, then yield the CPU between tries (its
    /// holder may have been preempted).
    #[cold]
    fn wait(flag: &AtomicBool) {
        let mut spins = 0u32;
        loop {
            if !flag.load(Ordering::Relaxed)
                && flag
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            if spins < 64 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

impl Drop for Turn<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl CqOps for RxeCq {
    fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        // An empty queue costs two loads and no lock: a busy-polling caller comes here in a
        // tight loop. The shared consumer index moves only in a poller's turn, by us; a
        // poller that races one taking the last entry sees the queue empty a moment early.
        if out.is_empty()
            || self.ring.producer(Ordering::Relaxed) == self.ring.consumer(Ordering::Relaxed)
        {
            return Ok(0);
        }
        Ok(self.take(out))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// `struct mminfo` (`rdma_user_rxe.h`): `offset` (u64) at 0, `size` (u32) at 8, `pad`
    /// (u32, ignored) at 12, little-endian, read at the given offset of a driver response
    /// (here the CREATE_CQ one, `rxe_create_cq_resp`, behind 4 unrelated bytes).
    #[test]
    fn mmap_info_is_read_from_raw_bytes() {
        let mut out = [0xffu8; 4 + 16];
        out[4..12].copy_from_slice(&[0x00, 0x20, 0x00, 0x00, 0x03, 0x00, 0x00, 0x40]);
        out[12..16].copy_from_slice(&[0x00, 0x70, 0x01, 0x00]);
        out[16..20].copy_from_slice(&[0xab; 4]);
        assert_eq!(
            MmapInfo::parse(&out, 4),
            MmapInfo {
                offset: 0x4000_0003_0000_2000,
                size: 0x1_7000,
            }
        );
        let zero = [0u8; 16];
        assert_eq!(MmapInfo::parse(&zero, 0), MmapInfo { offset: 0, size: 0 });
    }

    #[test]
    fn turns_exclude_each_other() {
        // A read-modify-write split into a load and a store loses updates unless the turns
        // keep the threads apart.
        let flag = AtomicBool::new(false);
        let count = AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        let _turn = Turn::take(&flag);
                        let v = count.load(Ordering::Relaxed);
                        std::hint::black_box(v);
                        count.store(v + 1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(count.load(Ordering::Relaxed), 80_000);
        assert!(!flag.load(Ordering::Relaxed), "the last turn ended");
    }
}
