//! The shared receive queues of one open device: where the connections on a device that has
//! them post their receives instead of on a receive queue per queue pair, when their options
//! ask for it (off by default, see `SocketOptionsBuilder::shared_receive_queue`).
//!
//! Each connection posts the receives its engine asks for ([`StreamConfig::recv_posted`]
//! at first, one more for each message it takes) on the SRQ, and its queue pair's messages
//! take whichever receive the SRQ holds next; the completion comes on the connection's own
//! completion queue. So what the peer may send is bounded as before by the receives the
//! connection posted, and the SRQ holds at least the sum of what every connection on it
//! advertised: iWARP (siw) has no RNR retry, and a SEND that finds the SRQ empty would end
//! its connection. A connection joins an SRQ only where its whole share fits
//! ([`SrqPool::join`]); when it leaves, the receives it had posted stay on the SRQ for the
//! next connection to count as its own (`orphans`), and the SRQ goes with the last
//! connection on it (a device whose connections all closed holds none). Where no SRQ has
//! room, another is created (up to the device's `max_srq`); past that the connection is
//! refused with an error saying so.
//!
//! In write+send mode (iWARP) each receive carries a 4-byte buffer for the message word,
//! in one registration per SRQ instead of one per connection; a receive's work request id
//! names its slot there, and the slot goes back to the free list when a completion naming it
//! has been read.
//!
//! The receives of an SRQ are not flushed when a queue pair on it fails, so a connection
//! that the connection manager reports closed learns that every message of the peer was fed
//! from the peer's DISCONNECT message alone, and a peer that vanished without one is
//! reported when the close timeout runs out (see `Connection::flush_tick`). InfiniBand's
//! answer, the "last WQE reached" async event of a queue pair on an SRQ in the error state
//! (raised after its last receive completion), is not used: Linux 6.1's rxe and siw (the
//! VM's kernel) never raise it; later kernels' rxe does, siw does not.
//!
//! [`StreamConfig::recv_posted`]: crate::protocol::StreamConfig::recv_posted
#![forbid(unsafe_code)]

use crate::protocol::WrId;
use crate::verbs::{
    AccessFlags, CompletionQueue, Error, MemoryRegion, ProtectionDomain, RecvRequest,
    ScatterGather, SharedReceiveQueue, SrqInitAttributes, WorkCompletion,
};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Receives an SRQ is created for at least (a connection needing more gets an SRQ of its
/// own size): ten connections of rsocket's default 384 credits and the reserve (400 each).
/// One less than a power of two: rxe's ring has a power of two of slots, one of them always
/// empty, so 4095 receives take 4096 slots (4096 would take 8192); siw rounds 4095 to 4096.
pub(crate) const SRQ_MIN_RECEIVES: u32 = 4095;
/// The bytes of write+send mode's message word.
const WORD_LEN: usize = 4;

/// The shared receive queues of one device, created as connections need them.
#[derive(Debug, Default)]
pub(crate) struct SrqPool {
    /// The queues some connection holds a share of: each is destroyed with its last share
    /// (its orphans with it), so a device whose connections all closed holds none.
    queues: Mutex<Vec<Weak<SocketSrq>>>,
    /// The device has none (learnt at the first join): later joins ask nothing.
    unsupported: AtomicBool,
}

/// One shared receive queue with its message-word slots.
#[derive(Debug)]
pub(crate) struct SocketSrq {
    srq: SharedReceiveQueue,
    /// The message words' buffers, one [`WORD_LEN`] slot per receive (write+send mode).
    words: Option<MemoryRegion>,
    /// The words' registration in the process's census.
    _census: Option<super::census::Entry>,
    state: Mutex<Accounts>,
}

/// What an SRQ holds and owes, under its lock.
#[derive(Debug)]
struct Accounts {
    /// Slots not posted (nor taken by a message whose completion is not read yet).
    free: Vec<u32>,
    /// The receives it can hold.
    capacity: u32,
    /// The shares of the connections on it plus the orphans: what it may have to hold.
    committed: u32,
    /// Receives posted by connections that left, which no connection counts as its own.
    orphans: u32,
}

impl SrqPool {
    /// A share of `need` receives on an SRQ of this device with room for it, creating one
    /// where none has; `None` where the device has no SRQs (the connection then uses a
    /// receive queue of its own). `words`: the receives carry a message word.
    pub(crate) fn join(
        &self,
        pd: &ProtectionDomain,
        need: u32,
        words: bool,
        cq: &CompletionQueue,
    ) -> io::Result<Option<SrqShare>> {
        if self.unsupported.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        queues.retain(|q| q.strong_count() > 0);
        for srq in queues.iter().filter_map(Weak::upgrade) {
            if let Some(share) = srq.try_join(&srq, need, cq) {
                return Ok(Some(share));
            }
        }
        let context = pd.context();
        let attr = context.query_device()?;
        if attr.max_srq == 0 {
            self.unsupported.store(true, Ordering::Relaxed);
            return Ok(None);
        }
        if queues.len() as u32 >= attr.max_srq {
            return Err(io::Error::other(format!(
                "no shared receive queue of {} has room for another connection's {need} \
                 receives, and the device allows no more than {} queues: turn shared receive \
                 queues off (SocketOptionsBuilder::shared_receive_queue(false)) or lower the \
                 receive queue depth",
                context.device().name,
                attr.max_srq
            )));
        }
        let size = need.max(SRQ_MIN_RECEIVES).min(attr.max_srq_wr);
        if size < need {
            return Err(io::Error::other(format!(
                "a connection's {need} receives exceed the largest shared receive queue of {} \
                 ({} receives): lower the receive queue depth or turn shared receive queues \
                 off (SocketOptionsBuilder::shared_receive_queue(false))",
                context.device().name,
                attr.max_srq_wr
            )));
        }
        let srq = match pd.create_srq(&SrqInitAttributes {
            max_wr: size,
            max_sge: 1,
            limit: 0,
        }) {
            Ok(srq) => srq,
            Err(Error::Unsupported { .. }) => {
                self.unsupported.store(true, Ordering::Relaxed);
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        // The kernel may round the size up; the slots are what was asked.
        let words = match words {
            true => Some(pd.register(size as usize * WORD_LEN, AccessFlags::LOCAL_WRITE)?),
            false => None,
        };
        let census = words
            .as_ref()
            .map(|mr| super::census::Entry::buffer(mr.len() as u64));
        let srq = Arc::new(SocketSrq {
            srq,
            words,
            _census: census,
            state: Mutex::new(Accounts::new(size)),
        });
        let share = srq
            .try_join(&srq, need, cq)
            .expect("a new queue has room for the share it was sized for");
        queues.push(Arc::downgrade(&srq));
        Ok(Some(share))
    }
}

impl SocketSrq {
    /// The queue's accounts, locked (also past a poisoned lock).
    fn accounts(&self) -> std::sync::MutexGuard<'_, Accounts> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gives a receive slot back to the free list.
    fn free_slot(&self, slot: u32) {
        self.accounts().free.push(slot);
    }

    /// A share of `need` receives when they fit: the orphans count first.
    fn try_join(&self, me: &Arc<SocketSrq>, need: u32, cq: &CompletionQueue) -> Option<SrqShare> {
        let prepaid = self.accounts().join(need)?;
        Some(SrqShare {
            srq: me.clone(),
            need,
            prepaid,
            outstanding: prepaid,
            cq: cq.clone(),
        })
    }
}

impl Accounts {
    /// A fresh queue of `capacity` receives, none posted.
    fn new(capacity: u32) -> Accounts {
        Accounts {
            free: (0..capacity).rev().collect(),
            capacity,
            committed: 0,
            orphans: 0,
        }
    }

    /// Takes a share of `need` receives when it fits: the orphans it takes over (counted as
    /// already posted), or `None`.
    fn join(&mut self, need: u32) -> Option<u32> {
        let prepaid = self.orphans.min(need);
        if self.committed - prepaid + need > self.capacity {
            return None;
        }
        self.orphans -= prepaid;
        self.committed = self.committed - prepaid + need;
        Some(prepaid)
    }

    /// A share of `need` leaves with `outstanding` receives still posted: they become
    /// orphans.
    fn leave(&mut self, need: u32, outstanding: u32) {
        self.orphans += outstanding;
        self.committed = self.committed - need + outstanding;
    }
}

/// A connection's part of an SRQ: the receives it counts as posted. Dropped after its queue
/// pair is destroyed (and before its completion queue), it reads the completions left for
/// the receives its messages took, and leaves the rest to the SRQ as orphans.
#[derive(Debug)]
pub(crate) struct SrqShare {
    srq: Arc<SocketSrq>,
    /// The receives it joined with (its engine's `recv_posted`).
    need: u32,
    /// Orphans taken over at the join: the engine's first posts that are not posted again.
    prepaid: u32,
    /// Receives on the SRQ that count as this connection's: posted (or taken over) and not
    /// yet consumed by one of its messages.
    outstanding: u32,
    cq: CompletionQueue,
}

impl SrqShare {
    /// The SRQ.
    pub(crate) fn queue(&self) -> &SharedReceiveQueue {
        &self.srq.srq
    }

    /// Posts the receive the engine asked for (a taken-over orphan counts as posted).
    pub(crate) fn post(&mut self) -> io::Result<()> {
        if self.prepaid > 0 {
            self.prepaid -= 1;
            return Ok(());
        }
        let slot = {
            let mut a = self.srq.accounts();
            a.free.pop().ok_or_else(|| {
                io::Error::other(format!(
                    "the shared receive queue has no free slot for a receive: its {} are all \
                     posted, more than the shares of its connections allow (a bug)",
                    a.capacity
                ))
            })?
        };
        let sge;
        let sg_list: &[ScatterGather<'_>] = match &self.srq.words {
            Some(mr) => {
                sge = [mr.slice(slot as usize * WORD_LEN, WORD_LEN)?];
                &sge
            }
            None => &[],
        };
        let posted = self.srq.srq.post_recv(&[RecvRequest {
            wr_id: WrId::recv(slot).0,
            sg_list,
        }]);
        if let Err(e) = posted {
            self.srq.free_slot(slot);
            return Err(Error::from(e).into());
        }
        self.outstanding += 1;
        Ok(())
    }

    /// One of this connection's messages took the receive of `wr_id`: reads its message
    /// word into `word` (write+send mode) and frees its slot.
    pub(crate) fn consumed(&mut self, wr_id: WrId, word: Option<&mut [u8; 4]>) -> io::Result<()> {
        let slot = wr_id.message_slot();
        if let (Some(mr), Some(word)) = (&self.srq.words, word) {
            mr.read_at(slot as usize * WORD_LEN, word)?;
        }
        self.outstanding = self.outstanding.saturating_sub(1);
        self.srq.free_slot(slot);
        Ok(())
    }
}

impl Drop for SrqShare {
    fn drop(&mut self) {
        // The queue pair is gone: no message takes another receive. Those its messages took
        // and nobody read go back to the free list.
        let mut wcs = [WorkCompletion::default(); 16];
        while let Ok(got) = self.cq.poll(&mut wcs) {
            if got.is_empty() {
                break;
            }
            for wc in got.iter() {
                let id = WrId(wc.wr_id);
                if id.is_receive() {
                    let _ = self.consumed(id, None);
                }
            }
        }
        // Taken-over orphans the engine never counted as posted stay orphans too.
        self.srq.accounts().leave(self.need, self.outstanding);
    }
}

#[cfg(test)]
mod tests {
    use super::Accounts;

    #[test]
    fn shares_fit_within_the_capacity() {
        let mut a = Accounts::new(1000);
        assert_eq!(a.join(400), Some(0));
        assert_eq!(a.join(400), Some(0));
        assert_eq!(a.join(400), None, "1200 receives do not fit in 1000");
        assert_eq!(a.join(200), Some(0));
        assert_eq!(a.committed, 1000);
    }

    /// What a connection leaves posted counts for the next one, so the queue never owes
    /// more than it holds: joining after a leave posts only the difference.
    #[test]
    fn a_leaving_share_s_receives_go_to_the_next() {
        let mut a = Accounts::new(1000);
        assert_eq!(a.join(400), Some(0));
        assert_eq!(a.join(400), Some(0));
        // The first leaves with 390 of its 400 still posted (10 taken by its messages).
        a.leave(400, 390);
        assert_eq!((a.orphans, a.committed), (390, 790));
        // The next needs 400: it takes the 390 over and posts 10.
        assert_eq!(a.join(400), Some(390));
        assert_eq!((a.orphans, a.committed), (0, 800));
        // A smaller one after a leave takes only what it needs.
        a.leave(400, 400);
        assert_eq!(a.join(100), Some(100));
        assert_eq!((a.orphans, a.committed), (300, 800));
        // Shares of 400 and 100 are held and 300 orphans posted: one of 600 would bring the
        // queue to 1100; one of 500 takes the orphans over and fills it.
        assert_eq!(a.join(600), None);
        assert_eq!(a.join(500), Some(300));
        assert_eq!((a.orphans, a.committed), (0, 1000));
    }
}
