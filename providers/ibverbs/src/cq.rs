//! Completion channels and queues through libibverbs. Every event taken from a channel is
//! counted for its CQ, and whatever the user did not acknowledge is acknowledged when the
//! CQ goes (`ibv_destroy_cq` would otherwise wait forever).
#![forbid(unsafe_code)]

use crate::context::BridgeContext;
use crate::convert::work_completion;
use crate::sys::abi::IbvWc;
use crate::sys::{RawChannel, RawCq};
use rdmasock_verbs::provider::{ChannelOps, CqOps};
use rdmasock_verbs::{Error, Result, WorkCompletion};
use std::any::Any;
use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// Events taken from the channel for one CQ, and how many were acknowledged.
#[derive(Debug, Default)]
struct EventCount {
    taken: AtomicU32,
    acked: AtomicU32,
}

/// A completion channel.
#[derive(Debug)]
pub struct BridgeChannel {
    raw: Arc<RawChannel>,
    context: BridgeContext,
    counts: Mutex<HashMap<u64, Arc<EventCount>>>,
}

impl BridgeChannel {
    /// `ibv_create_comp_channel`.
    pub(crate) fn create(context: &BridgeContext) -> Result<BridgeChannel> {
        let raw = RawChannel::create(context.raw())
            .map_err(|e| context.error("ibv_create_comp_channel", e))?;
        Ok(BridgeChannel {
            raw: Arc::new(raw),
            context: context.clone(),
            counts: Mutex::new(HashMap::new()),
        })
    }

    fn register(&self, cookie: u64) -> Arc<EventCount> {
        let count = Arc::new(EventCount::default());
        self.counts
            .lock()
            .expect("channel lock")
            .insert(cookie, count.clone());
        count
    }

    fn unregister(&self, cookie: u64) {
        self.counts.lock().expect("channel lock").remove(&cookie);
    }
}

impl ChannelOps for BridgeChannel {
    fn fd(&self) -> BorrowedFd<'_> {
        self.raw.fd()
    }

    fn get_event(&self) -> Result<Option<u64>> {
        let cookie = self.raw.get_event().map_err(|e| {
            Error::io(
                format!(
                    "reading a completion channel of {} through libibverbs",
                    self.context.name()
                ),
                e,
            )
        })?;
        if let Some(cookie) = cookie {
            if let Some(count) = self.counts.lock().expect("channel lock").get(&cookie) {
                count.taken.fetch_add(1, Ordering::AcqRel);
            }
        }
        Ok(cookie)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The receives a QP has outstanding, counted down by the polls of its receive CQ.
///
/// Some providers' receive queues hold more than the `max_recv_wr` they report (rdma-core's
/// rxe rounds up to a power of two), so the bridge enforces the reported depth itself, as
/// the pure-Rust providers do. Every receive ends in exactly one completion on the receive
/// CQ; on a CQ shared with the QP's sends only completions with the receive opcode bit
/// count (error completions need not carry an opcode, so the count can only be too high
/// after an error, when the QP is dead; a move to RESET clears it).
#[derive(Debug, Default)]
pub(crate) struct ReceiveAccount {
    pub(crate) outstanding: AtomicU32,
    pub(crate) shared_with_sends: bool,
}

/// A completion queue.
#[derive(Debug)]
pub struct BridgeCq {
    raw: Arc<RawCq>,
    context: BridgeContext,
    cookie: u64,
    events: Arc<EventCount>,
    channel: Option<Arc<dyn ChannelOps>>,
    receivers: Mutex<HashMap<u32, Arc<ReceiveAccount>>>,
}

impl BridgeCq {
    /// `ibv_create_cq` reporting to `channel` (one of this provider's), if any.
    pub(crate) fn create(
        context: &BridgeContext,
        depth: u32,
        channel: Option<Arc<dyn ChannelOps>>,
        comp_vector: u32,
    ) -> Result<BridgeCq> {
        let bridge_channel = match &channel {
            None => None,
            Some(c) => Some(c.as_any().downcast_ref::<BridgeChannel>().ok_or_else(|| {
                Error::InvalidArgument(
                    "the completion channel belongs to another provider than the rdma-core bridge"
                        .into(),
                )
            })?),
        };
        let cookie = context.next_cookie();
        let raw = RawCq::create(
            context.raw(),
            depth,
            cookie,
            bridge_channel.map(|c| c.raw.clone()),
            comp_vector,
        )
        .map_err(|e| context.error("ibv_create_cq", e))?;
        let events = match bridge_channel {
            Some(c) => c.register(cookie),
            None => Arc::new(EventCount::default()),
        };
        Ok(BridgeCq {
            raw: Arc::new(raw),
            context: context.clone(),
            cookie,
            events,
            channel,
            receivers: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn raw(&self) -> &Arc<RawCq> {
        &self.raw
    }

    /// Counts the receives of QP `qp_num` down as their completions are polled here.
    pub(crate) fn track_receives(&self, qp_num: u32, account: Arc<ReceiveAccount>) {
        self.receivers
            .lock()
            .expect("receivers lock")
            .insert(qp_num, account);
    }

    /// Stops counting for a QP that is being destroyed.
    pub(crate) fn untrack_receives(&self, qp_num: u32) {
        self.receivers
            .lock()
            .expect("receivers lock")
            .remove(&qp_num);
    }

    fn count_receives(&self, wcs: &[IbvWc]) {
        let receivers = self.receivers.lock().expect("receivers lock");
        if receivers.is_empty() {
            return;
        }
        for wc in wcs {
            if let Some(account) = receivers.get(&wc.qp_num) {
                if !account.shared_with_sends || wc.opcode & 128 != 0 {
                    let _ = account.outstanding.fetch_update(
                        Ordering::AcqRel,
                        Ordering::Acquire,
                        |n| n.checked_sub(1),
                    );
                }
            }
        }
    }
}

impl Drop for BridgeCq {
    fn drop(&mut self) {
        if let Some(c) = &self.channel {
            if let Some(c) = c.as_any().downcast_ref::<BridgeChannel>() {
                c.unregister(self.cookie);
            }
        }
        let taken = self.events.taken.load(Ordering::Acquire);
        let acked = self.events.acked.load(Ordering::Acquire);
        self.raw.ack_events(taken.saturating_sub(acked));
    }
}

/// Completions moved per `ibv_poll_cq` call.
const POLL_BATCH: usize = 16;

impl CqOps for BridgeCq {
    fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        let mut buf = [IbvWc::default(); POLL_BATCH];
        let encoding = self.context.wc_flags_encoding();
        let mut total = 0;
        while total < out.len() {
            let want = (out.len() - total).min(POLL_BATCH);
            let n = self
                .raw
                .poll(&mut buf[..want])
                .map_err(|e| self.context.error("ibv_poll_cq", e))?;
            self.count_receives(&buf[..n]);
            for (slot, wc) in out[total..].iter_mut().zip(&buf[..n]) {
                *slot = work_completion(wc, encoding);
            }
            total += n;
            if n < want {
                break;
            }
        }
        Ok(total)
    }

    fn req_notify(&self, solicited_only: bool) -> Result<()> {
        self.raw
            .req_notify(solicited_only)
            .map_err(|e| self.context.error("ibv_req_notify_cq", e))
    }

    fn ack_events(&self, n: u32) {
        // Never acknowledge more than was taken: ibv_destroy_cq waits for the counts to
        // match exactly.
        let taken = self.events.taken.load(Ordering::Acquire);
        let mut acked = self.events.acked.load(Ordering::Acquire);
        loop {
            let k = n.min(taken.saturating_sub(acked));
            if k == 0 {
                return;
            }
            match self.events.acked.compare_exchange(
                acked,
                acked + k,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.raw.ack_events(k);
                    return;
                }
                Err(now) => acked = now,
            }
        }
    }

    fn depth(&self) -> u32 {
        self.raw.cqe()
    }

    fn cookie(&self) -> u64 {
        self.cookie
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
