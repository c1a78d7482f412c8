//! The verbs objects of one connection: the registered rings, the completion queue with its
//! channel and the RC queue pair, created for the stream protocol's configuration (step 1 of
//! [`crate::protocol`]'s sequence), on the device context and protection domain the
//! process's connections on that device share (see `devices`). The send area is a slice of
//! the domain's pool of local-only memory (see `pool`); what the peer writes (the receive
//! ring, the target list) is registered per connection, with keys of its own.
#![forbid(unsafe_code)]

use super::census;
use super::devices::{self, OpenDevice};
use super::options::SocketOptions;
use super::pool::LocalSlice;
use super::post::SCRATCH_LEN;
use super::srq::SrqShare;
use super::warm::RingWarmer;
use crate::cm::CmEndpoint;
use crate::protocol::{LocalRegions, FENCE_READ_LEN};
use crate::verbs::{
    AccessFlags, CompletionChannel, CompletionQueue, HugePages, MemoryRegion, ProtectionDomain,
    QpCapabilities, QpInitAttributes, QueuePair, RegisteredMemory, Transport,
};
use std::io;
use std::sync::Arc;

/// The bytes of write+send mode's message word, which goes as an inline SEND.
const MESSAGE_WORD_LEN: u32 = 4;
/// The most inline bytes asked of a device that lends inline sends.
const LEND_REQUEST_CAP: u32 = 1 << 30;
const REMOTE: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_WRITE);
/// The bytes after the target area where a placement fence's READ response lands (see
/// [`Resources::fence_sink`]): remotely writable, as iWARP wants a READ's sink, and read by
/// nothing.
const FENCE_SINK_LEN: usize = 8;

/// The verbs objects of a connection. Field order is drop order: the queue pair goes first,
/// the shared device (which the last connection on it closes) last.
#[derive(Debug)]
pub(crate) struct Resources {
    pub(crate) qp: QueuePair,
    /// The connection's share of its device's shared receive queue, where it posts its
    /// receives (`None`: on its queue pair's own receive queue). Dropped after the queue
    /// pair, before the completion queue it reads the last completions from.
    pub(crate) srq: Option<SrqShare>,
    pub(crate) cq: CompletionQueue,
    /// The send ring, the control slots and the scratch area: a slice of the device's pool.
    pub(crate) send_area: LocalSlice,
    pub(crate) recv_mr: MemoryRegion,
    /// The receive ring replaced last, while the engine still reads from it.
    pub(crate) old_recv_mr: Option<MemoryRegion>,
    pub(crate) target_mr: MemoryRegion,
    /// Where in `target_mr` a placement fence's READ response lands, where fences go.
    fence_sink: Option<usize>,
    pub(crate) message_mr: Option<MemoryRegion>,
    pub(crate) cq_channel: CompletionChannel,
    /// The largest message posted from the caller's buffer where the queue pair lends inline
    /// sends (0: it does not, and only the writes the engine sends inline go from the
    /// caller's buffer; see `lend`).
    pub(crate) lend_limit: usize,
    /// On a device whose registrations pin nothing, what brings the send and receive rings'
    /// pages in ahead of use (see `warm`); `None` once a ring is in.
    pub(crate) send_warm: Option<RingWarmer>,
    pub(crate) recv_warm: Option<RingWarmer>,
    /// Whether the rings go on huge pages ([`SocketOptions::huge_pages`]).
    huge_pages: HugePages,
    /// This connection in the process's census (regions and bytes registered).
    _census: census::Entry,
    /// The device context and protection domain, shared with the process's other
    /// connections on the device.
    pub(crate) device: Arc<OpenDevice>,
}

impl Resources {
    /// Creates everything the stream needs on the endpoint's device (opened, with its
    /// protection domain, unless a live connection already shares it) (step 1 of the
    /// [`crate::protocol`] sequence); the queue pair is in INIT.
    pub(crate) fn create(
        endpoint: &dyn CmEndpoint,
        opts: &mut SocketOptions,
    ) -> io::Result<Resources> {
        let device = devices::for_endpoint(endpoint)?;
        let context = device.context();
        let unpinned = context.device().uverbs_path.is_none();
        if context.device().transport == Transport::Iwarp {
            opts.stream.write_with_send = true;
            // A WRITE's completion says only that TCP took it (uiwarp and siw alike): a flush
            // proves placement with a one-byte READ of the peer's target list, against a
            // peer whose hello says it answers one (see `FLAG_ANSWERS_FENCE`).
            opts.stream.placement_fence = true;
        }
        if unpinned {
            // No kernel device: registrations pin nothing (see UNPINNED_RING).
            opts.unpinned_rings();
        }
        let cfg = &opts.stream;
        // A device that lends inline sends takes whole messages inline (see `lend`).
        let lends = context.lends_inline();
        let inline = if lends {
            let message = cfg.max_transfer().min(cfg.send_ring() as u32);
            cfg.inline_threshold().max(message).min(LEND_REQUEST_CAP)
        } else if cfg.write_with_send() {
            // Write+send mode posts each message's 4-byte word as an inline SEND, whatever
            // the inline threshold (rsocket asks for at least 16 inline bytes on every QP).
            cfg.inline_threshold().max(MESSAGE_WORD_LEN)
        } else {
            cfg.inline_threshold()
        };
        let pd = device.pd();
        let cq_channel = context.create_comp_channel()?;
        let depth = u32::from(cfg.send_queue_depth()) + cfg.recv_posted();
        let cq = context.create_cq(depth, Some(&cq_channel))?;
        let init = QpInitAttributes {
            caps: QpCapabilities {
                max_send_wr: u32::from(cfg.send_queue_depth()),
                max_recv_wr: cfg.recv_posted(),
                max_send_sge: 2,
                max_recv_sge: 1,
                max_inline_data: inline,
            },
            // Each request carries its own flag (the engine signals one message in
            // `signal_interval`, and every control message), except on a device that may
            // read an unsignalled send's ring bytes after the completion that lets the ring
            // reuse them (siw's zero-copy sends, which TCP may retransmit): there every
            // request is signalled, whatever the interval.
            sq_sig_all: context.unsignaled_sends_borrow_memory(),
        };
        let srq = match opts.uses_shared_receive_queue() {
            true => device
                .srqs()
                .join(pd, cfg.recv_posted(), cfg.write_with_send(), &cq)?,
            false => None,
        };
        let qp = match &srq {
            Some(share) => pd.create_qp_with_srq(&init, &cq, &cq, share.queue())?,
            None => pd.create_qp(&init, &cq, &cq)?,
        };
        endpoint
            .init_qp(&qp)
            .map_err(|e| io::Error::new(e.kind(), InitQpFailed(e)))?;
        // Rings start at their smallest size (see `replace_recv_ring`).
        let send_len = send_area_len(cfg.send_ring_min(), cfg.control_area_len());
        let huge_pages = opts.huge_pages;
        let send_area = device.carve_local(send_len, huge_pages)?;
        let recv_mr = register_ring(pd, cfg.recv_ring_min(), REMOTE, huge_pages)?;
        // The target list, and the iomap table after it (rsocket's layout); where placement
        // fences go, the peer may read it (its fences read the first byte) and the sink of
        // our own fences follows it.
        let (target_access, fence_sink_len) = if cfg.placement_fence() {
            (REMOTE | AccessFlags::REMOTE_READ, FENCE_SINK_LEN)
        } else {
            (REMOTE, 0)
        };
        let target_mr = pd.register(cfg.target_area_len() + fence_sink_len, target_access)?;
        let fence_sink = cfg.placement_fence().then(|| cfg.target_area_len());
        // On an SRQ the message words land in its own registration.
        let message_mr = match cfg.message_area_len() {
            _ if srq.is_some() => None,
            0 => None,
            n => Some(pd.register(n, AccessFlags::LOCAL_WRITE)?),
        };
        let lend_limit = if lends {
            qp.caps().max_inline_data as usize
        } else {
            0
        };
        let (send_warm, recv_warm) = if unpinned {
            (
                Some(RingWarmer::new(&send_area, cfg.send_ring_min())),
                Some(RingWarmer::new(&recv_mr, cfg.recv_ring_min())),
            )
        } else {
            (None, None)
        };
        // The connection's own registrations; the send area's chunk counts once, in `pool`.
        let regions = [Some(&recv_mr), Some(&target_mr), message_mr.as_ref()];
        let registered = regions.iter().flatten();
        let entry = census::Entry::new(
            registered.clone().count() as u64,
            registered.map(|mr| mr.len() as u64).sum(),
        );
        Ok(Resources {
            huge_pages,
            _census: entry,
            lend_limit,
            send_warm,
            recv_warm,
            qp,
            srq,
            cq,
            send_area,
            recv_mr,
            old_recv_mr: None,
            target_mr,
            fence_sink,
            message_mr,
            cq_channel,
            device,
        })
    }

    /// Registers a receive ring of `len` bytes in place of the current one, which is kept
    /// as `old_recv_mr` for the bytes in it not yet read: only when the engine asks for it
    /// ([`RingChange::Receive`](crate::protocol::RingChange)), when the peer can no longer
    /// write into the old one. On an error the current ring stays.
    pub(crate) fn replace_recv_ring(&mut self, len: usize) -> io::Result<()> {
        let mr = register_ring(self.device.pd(), len, REMOTE, self.huge_pages)?;
        if self.recv_warm.is_some() {
            self.recv_warm = Some(RingWarmer::new(&mr, len));
        }
        self.old_recv_mr = Some(std::mem::replace(&mut self.recv_mr, mr));
        Ok(())
    }

    /// The receive ring a read copies from now.
    #[inline]
    pub(crate) fn reading_ring(&self, old: bool) -> &MemoryRegion {
        match (&self.old_recv_mr, old) {
            (Some(mr), true) => mr,
            _ => &self.recv_mr,
        }
    }

    /// Carves a send ring of `len` bytes, with the control and scratch areas after it, from
    /// the pool in place of the current one, which goes back to the pool: only when the
    /// engine asks for it ([`RingChange::Send`](crate::protocol::RingChange)), when no posted
    /// work request reads the old one. On an error the current ring stays.
    pub(crate) fn replace_send_ring(&mut self, len: usize, control_area: usize) -> io::Result<()> {
        let area = self
            .device
            .carve_local(send_area_len(len, control_area), self.huge_pages)?;
        if self.send_warm.is_some() {
            self.send_warm = Some(RingWarmer::new(&area, len));
        }
        self.send_area = area;
        Ok(())
    }

    /// Where a placement fence's READ response lands: [`FENCE_READ_LEN`] byte after the
    /// target area, in the target list's registration (only where placement fences go).
    pub(crate) fn fence_sink(&self) -> io::Result<crate::verbs::ScatterGather<'_>> {
        let offset = self.fence_sink.ok_or_else(|| {
            io::Error::other(
                "a placement fence was posted on a connection set up without one (no sink \
                 registered for its READ)",
            )
        })?;
        Ok(self.target_mr.slice(offset, FENCE_READ_LEN as usize)?)
    }

    /// Where the peer writes: the receive ring and the target list, with their keys.
    pub(crate) fn regions(&self) -> LocalRegions {
        LocalRegions {
            recv_ring_addr: self.recv_mr.addr(),
            recv_ring_rkey: self.recv_mr.rkey().0,
            target_list_addr: self.target_mr.addr(),
            target_list_rkey: self.target_mr.rkey().0,
        }
    }
}

/// Allocates and registers a ring of `len` bytes, on huge pages as `huge` asks.
fn register_ring(
    pd: &ProtectionDomain,
    len: usize,
    access: AccessFlags,
    huge: HugePages,
) -> io::Result<MemoryRegion> {
    let memory = RegisteredMemory::allocate_with(len, huge)?;
    Ok(pd.register_memory(memory, access)?)
}

/// The bytes of the send registration: the ring, the control slots, the scratch area.
pub(crate) fn send_area_len(ring: usize, control_area: usize) -> usize {
    ring + control_area + SCRATCH_LEN
}

/// The connection manager could not move a new queue pair to INIT (the error inside). On a
/// passive endpoint this means the request it answers is no longer valid: its client gave
/// up, or the kernel timed the request out. The listener skips such a request; any other
/// failure to set up a connection (memory, device) is the listener's own.
#[derive(Debug)]
pub(crate) struct InitQpFailed(pub(crate) io::Error);

impl std::fmt::Display for InitQpFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for InitQpFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}
