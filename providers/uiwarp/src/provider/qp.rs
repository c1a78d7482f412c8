//! Queue pairs: posting into the engine, states, and the iWARP rule that only connection
//! setup moves a QP to RTS.

use super::DEVICE_NAME;
use crate::driver::completion::uiwarp_cq;
use crate::driver::UiwarpCq;
use crate::driver::{self, Endpoint};
use crate::memory::{InlinePool, QpMemory, RegionSet};
use crate::protocol::{
    InlineSend, LocalSegment, MemoryTable, ProtocolError, RecvWork, SendOperation, SendWork,
    SmallPayload,
};
use rdmasock_verbs::provider::{CqOps, QpOps};
use rdmasock_verbs::qp_attr::{QpAttrMask, QpAttributes, QpCapabilities, QpInitAttributes};
use rdmasock_verbs::wr::PostError;
use rdmasock_verbs::{
    AccessFlags, Error, LocalKey, QpNumber, QpState, RecvRequest, RegisteredMemory, Result,
    SendFlags, SendOp, SendRequest, WcOpcode, WcStatus, WorkCompletion,
};
use std::any::Any;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};

mod lean;

/// The deepest work queue.
pub(crate) const MAX_QUEUE_DEPTH: u32 = 32_768;
/// Scatter/gather entries per request.
pub(crate) const MAX_SGE: u32 = 6;
/// The most inline bytes per send request. An inline payload of at least
/// [`LEND_INLINE_FROM`] bytes given as borrowed entries goes to TCP from the caller's memory
/// while the post runs; smaller ones, and what TCP does not take at once, are copied.
pub(crate) const MAX_INLINE: u32 = 1 << 30;
/// The smallest inline payload sent from the caller's memory instead of copied (a smaller
/// one is copied next to its header anyway).
pub(crate) const LEND_INLINE_FROM: u64 = 512;
/// The inline bytes every QP gets, whatever it asked for.
pub(crate) const MIN_INLINE: u32 = 64;

static NEXT_QPN: AtomicU32 = AtomicU32::new(1);

/// A reliable-connected queue pair on uiwarp0.
#[derive(Debug)]
pub struct UiwarpQp {
    endpoint: Arc<Endpoint>,
    sq_sig_all: bool,
}

fn invalid(what: String) -> Error {
    Error::InvalidArgument(what)
}

impl UiwarpQp {
    pub(crate) fn create(
        init: &QpInitAttributes,
        regions: Arc<RwLock<RegionSet>>,
        send_cq: Arc<dyn CqOps>,
        recv_cq: Arc<dyn CqOps>,
    ) -> Result<UiwarpQp> {
        for cq in [&send_cq, &recv_cq] {
            if !cq.as_any().is::<UiwarpCq>() {
                return Err(invalid(format!(
                    "a {DEVICE_NAME} QP needs completion queues of {DEVICE_NAME}"
                )));
            }
        }
        let c = init.caps;
        if c.max_send_wr == 0 || c.max_send_wr > MAX_QUEUE_DEPTH || c.max_recv_wr > MAX_QUEUE_DEPTH
        {
            return Err(invalid(format!(
                "queue depths {}/{} (send/receive): {DEVICE_NAME} allows 1..={MAX_QUEUE_DEPTH} sends and 0..={MAX_QUEUE_DEPTH} receives",
                c.max_send_wr, c.max_recv_wr
            )));
        }
        if c.max_send_sge > MAX_SGE || c.max_recv_sge > MAX_SGE || c.max_inline_data > MAX_INLINE {
            return Err(invalid(format!(
                "{} send / {} receive SGEs and {} inline bytes: {DEVICE_NAME} allows {MAX_SGE} SGEs and {MAX_INLINE} inline bytes",
                c.max_send_sge, c.max_recv_sge, c.max_inline_data
            )));
        }
        // Like the kernel providers, give at least what was asked (inline: at least
        // MIN_INLINE, so small control messages may always go inline).
        let caps = QpCapabilities {
            max_send_sge: c.max_send_sge.max(1),
            max_recv_sge: c.max_recv_sge.max(1),
            max_inline_data: c.max_inline_data.max(MIN_INLINE),
            ..c
        };
        let qpn = QpNumber(NEXT_QPN.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff);
        Ok(UiwarpQp {
            endpoint: Endpoint::new(qpn, caps, regions, send_cq, recv_cq)?,
            sq_sig_all: init.sq_sig_all,
        })
    }

    fn flush_completion(&self, wr_id: u64, opcode: WcOpcode) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status: WcStatus::WorkRequestFlushError.to_raw(),
            opcode: opcode.to_raw(),
            qp_num: self.endpoint.qpn,
            ..WorkCompletion::default()
        }
    }

    fn cq(cq: &Arc<dyn CqOps>) -> &UiwarpCq {
        uiwarp_cq(cq)
    }

    fn post_error(&self, index: usize, wr_id: u64, e: ProtocolError) -> PostError {
        let qp_num = self.endpoint.qpn;
        let error = match e {
            ProtocolError::QueueFull { queue, depth } => Error::QueueFull {
                queue: if queue == "send" {
                    "send queue"
                } else {
                    "receive queue"
                },
                qp_num,
                depth: depth as u32,
            },
            ProtocolError::Unsupported { operation, why } => Error::Unsupported {
                device: DEVICE_NAME.into(),
                operation: format!("{operation} ({why})"),
            },
            other => invalid(other.to_string()),
        };
        PostError {
            index,
            wr_id,
            error,
        }
    }

    /// Posts `wrs` in order; `lent` holds the borrowed entries of the requests [`lends`]
    /// picks, in order, lent for this call (see `RegisteredMemory::lend`).
    fn post_sends(
        &self,
        wrs: &[SendRequest<'_>],
        lent: &[Arc<RegisteredMemory>],
    ) -> std::result::Result<(), PostError> {
        let engine = driver::engine().map_err(|e| PostError {
            index: 0,
            wr_id: wrs.first().map_or(0, |w| w.wr_id),
            error: Error::io("the uiwarp engine", e),
        })?;
        let mut st = self.endpoint.lock();
        if lent.is_empty() {
            // The inline pool's gather buffer stages payloads read from registered memory.
            let mut staged = std::mem::take(&mut st.inline.gather);
            let mut chain = [InlineSend::EMPTY; lean::LEAN_CHAIN];
            let framed = self
                .inline_chain(wrs, &mut staged, &mut chain)
                .is_some_and(|bytes| {
                    !self.endpoint.would_hold(&st, bytes, wrs.len())
                        && st
                            .link
                            .as_mut()
                            .is_some_and(|link| link.post_inline_chain(&chain[..wrs.len()]))
                });
            st.inline.gather = staged;
            if framed {
                st.posted_sends += wrs.len() as u64;
                self.endpoint.flush(&mut st, engine);
                return Ok(());
            }
        }
        let mut result = Ok(());
        let mut lent_left = lent;
        // What this call handed to the core (for doorbell coalescing).
        let (mut posted, mut posted_bytes) = (0usize, 0u64);
        for (index, wr) in wrs.iter().enumerate() {
            let mut work = match SendWork::from_request(wr) {
                Ok(w) => w,
                Err(e) => {
                    result = Err(self.post_error(index, wr.wr_id, e));
                    break;
                }
            };
            work.signaled |= self.sq_sig_all;
            // This request's lent entries (taken first: every lending request has its own).
            let mut mine: &[Arc<RegisteredMemory>] = &[];
            if lends(wr) {
                (mine, lent_left) = lent_left.split_at(wr.sg_list.len());
            }
            if work.segments.len() > self.endpoint.caps.max_send_sge as usize {
                result = Err(PostError {
                    index,
                    wr_id: wr.wr_id,
                    error: invalid(format!(
                        "{} gather entries: QP {} was created with max_send_sge {}",
                        work.segments.len(),
                        self.endpoint.qpn,
                        self.endpoint.caps.max_send_sge
                    )),
                });
                break;
            }
            let inline = wr.flags.contains(SendFlags::INLINE)
                && !matches!(work.op, SendOperation::RdmaRead { .. });
            if inline && work.total_length() > u64::from(self.endpoint.caps.max_inline_data) {
                result = Err(PostError {
                    index,
                    wr_id: wr.wr_id,
                    error: invalid(format!(
                        "{} inline bytes: QP {} was created with max_inline_data {}",
                        work.total_length(),
                        self.endpoint.qpn,
                        self.endpoint.caps.max_inline_data
                    )),
                });
                break;
            }
            if st.link.is_none() {
                if st.qp_state == QpState::Error {
                    let op = match work.op {
                        SendOperation::Send { .. } => WcOpcode::Send,
                        SendOperation::RdmaWrite { .. } => WcOpcode::RdmaWrite,
                        SendOperation::RdmaRead { .. } => WcOpcode::RdmaRead,
                    };
                    Self::cq(&self.endpoint.send_cq)
                        .push(self.flush_completion(wr.wr_id, op), false);
                    continue;
                }
                result = Err(PostError {
                    index,
                    wr_id: wr.wr_id,
                    error: invalid(format!(
                        "QP {} is in {}: an iWARP QP sends once connected (connect or accept it first)",
                        self.endpoint.qpn,
                        st.qp_state.name()
                    )),
                });
                break;
            }
            if !mine.is_empty() {
                let seq = st.posted_sends;
                for (segment, memory) in work.segments.iter_mut().zip(mine) {
                    segment.lkey = LocalKey(st.inline.lend(seq, memory));
                }
            } else if inline {
                let seq = st.posted_sends;
                if let Err(error) = self.stage_inline(&mut st.inline, seq, &mut work, wr) {
                    result = Err(PostError {
                        index,
                        wr_id: wr.wr_id,
                        error,
                    });
                    break;
                }
            }
            let link = st.link.as_mut().expect("checked above");
            let bytes = work.total_length();
            if let Err(e) = link.conn.post_send(work) {
                result = Err(self.post_error(index, wr.wr_id, e));
                break;
            }
            st.posted_sends += 1;
            posted_bytes += bytes;
            posted += 1;
        }
        if lent.is_empty()
            && result.is_ok()
            && posted > 0
            && self
                .endpoint
                .try_hold(&mut st, engine, posted_bytes, posted)
        {
            return Ok(());
        }
        let ended = self.endpoint.flush_lent(&mut st, engine, lent);
        drop(st);
        match (result, ended) {
            (Err(e), _) => Err(e),
            (Ok(()), Ok(())) => Ok(()),
            // A lent payload could not be copied (no memory): its request fails on the queue
            // with a local protection error; say why here too.
            (Ok(()), Err(error)) => Err(PostError {
                index: wrs.len().saturating_sub(1),
                wr_id: wrs.last().map_or(0, |w| w.wr_id),
                error,
            }),
        }
    }

    /// Copies an inline request's payload where the engine will frame it from: into the
    /// request itself when it is small, else into `pool` (the request's gather list then
    /// names the copy).
    fn stage_inline(
        &self,
        pool: &mut InlinePool,
        seq: u64,
        work: &mut SendWork,
        wr: &SendRequest<'_>,
    ) -> Result<()> {
        // The socket layer's 4-byte messages: one borrowed entry, copied straight into the
        // request.
        if let [entry] = wr.sg_list {
            if let Some(small) = entry.borrowed_bytes().and_then(SmallPayload::new) {
                work.segments.clear();
                work.small = Some(small);
                return Ok(());
            }
        }
        let mut bytes = std::mem::take(&mut pool.gather);
        let staged = self.gather_inline(work, wr, &mut bytes).and_then(|()| {
            work.segments.clear();
            if let Some(small) = SmallPayload::new(&bytes) {
                // It rides in the request: no copy buffer, no key to look up.
                work.small = Some(small);
                return Ok(());
            }
            let (key, addr) = pool.store(seq, &bytes)?;
            work.segments.push(LocalSegment {
                addr,
                length: bytes.len() as u32,
                lkey: LocalKey(key),
            });
            Ok(())
        });
        pool.gather = bytes;
        staged
    }

    /// Copies an inline request's gather list into `bytes` (cleared first). Borrowed entries
    /// (the socket layer's small payloads) are copied as they are; the regions are locked
    /// only for an entry that names one.
    fn gather_inline(
        &self,
        work: &SendWork,
        wr: &SendRequest<'_>,
        bytes: &mut Vec<u8>,
    ) -> Result<()> {
        // Made only for an entry that names a region (a borrowed one needs no table).
        let mut no_inline = None;
        let mut regions = None;
        bytes.clear();
        for (s, entry) in work.segments.iter().zip(wr.sg_list) {
            if let Some(borrowed) = entry.borrowed_bytes() {
                bytes.extend_from_slice(borrowed);
                continue;
            }
            let regions = regions
                .get_or_insert_with(|| self.endpoint.regions.read().expect("uiwarp regions lock"));
            let table = QpMemory {
                regions,
                inline: no_inline.get_or_insert_with(InlinePool::default),
            };
            let view = table.local(s.lkey).ok_or_else(|| {
                invalid(format!(
                    "inline gather entry with lkey {:#x} is not in a region of this QP's protection domain",
                    s.lkey.0
                ))
            })?;
            let start = bytes.len();
            bytes.resize(start + s.length as usize, 0);
            view.read(s.addr, &mut bytes[start..], AccessFlags::empty())
                .map_err(|e| invalid(format!("inline gather entry at {:#x}: {e:?}", s.addr)))?;
        }
        Ok(())
    }
}

impl QpOps for UiwarpQp {
    fn qp_num(&self) -> QpNumber {
        self.endpoint.qpn
    }

    fn caps(&self) -> QpCapabilities {
        self.endpoint.caps
    }

    fn modify(&self, attr: &QpAttributes, mask: QpAttrMask) -> Result<()> {
        if !mask.contains(QpAttrMask::STATE) {
            return Ok(());
        }
        let engine = driver::engine().map_err(|e| Error::io("the uiwarp engine", e))?;
        let mut st = self.endpoint.lock();
        let current = st.qp_state();
        match attr.qp_state {
            QpState::Init if st.link.is_none() && current != QpState::Error => {
                st.qp_state = QpState::Init;
                Ok(())
            }
            s @ (QpState::ReadyToReceive | QpState::ReadyToSend) if s == current => Ok(()),
            QpState::Error => {
                drop(st);
                crate::driver::close_endpoint(&self.endpoint, engine);
                let mut st = self.endpoint.lock();
                let early = std::mem::take(&mut st.early_recvs);
                drop(st);
                for r in early.into_works() {
                    Self::cq(&self.endpoint.recv_cq)
                        .push(self.flush_completion(r.wr_id, WcOpcode::Recv), false);
                }
                Ok(())
            }
            QpState::Reset if st.link.is_none() => {
                st.qp_state = QpState::Reset;
                st.early_recvs.clear();
                st.outcome = crate::driver::endpoint_idle();
                Ok(())
            }
            QpState::ReadyToReceive | QpState::ReadyToSend => Err(Error::Unsupported {
                device: DEVICE_NAME.into(),
                operation: format!(
                    "moving QP {} to {} by hand: iWARP QPs reach RTS only through connection setup (rdmasock_uiwarp::connect, UiwarpListener, or RdmaSocket)",
                    self.endpoint.qpn,
                    attr.qp_state.name()
                ),
            }),
            to => Err(invalid(format!(
                "QP {} cannot go from {} to {} on {DEVICE_NAME}",
                self.endpoint.qpn,
                current.name(),
                to.name()
            ))),
        }
    }

    fn query(&self, _mask: QpAttrMask) -> Result<QpAttributes> {
        let st = self.endpoint.lock();
        let state = st.qp_state();
        let (ird, ord) = st
            .negotiated
            .as_ref()
            .map_or((0, 0), |n| (n.ird.min(255) as u8, n.ord.min(255) as u8));
        Ok(QpAttributes {
            qp_state: state,
            cur_qp_state: state,
            cap: self.endpoint.caps,
            max_rd_atomic: ord,
            max_dest_rd_atomic: ird,
            qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            port_num: 1,
            ..QpAttributes::default()
        })
    }

    fn post_send(&self, wrs: &[SendRequest<'_>]) -> std::result::Result<(), PostError> {
        if !wrs.iter().any(lends) {
            return self.post_sends(wrs, &[]);
        }
        let borrowed = wrs
            .iter()
            .filter(|wr| lends(wr))
            .flat_map(|wr| wr.sg_list.iter().filter_map(|s| s.borrowed_bytes()));
        RegisteredMemory::lend(borrowed, |lent| self.post_sends(wrs, lent))
    }

    fn post_recv(&self, wrs: &[RecvRequest<'_>]) -> std::result::Result<(), PostError> {
        let mut st = self.endpoint.lock();
        for (index, wr) in wrs.iter().enumerate() {
            // One scatter entry on a connection (a socket's repost): no work request built
            // unless it starts a run of the receive queue.
            if let (Some(link), [entry]) = (st.link.as_mut(), wr.sg_list) {
                let segment = LocalSegment {
                    addr: entry.addr(),
                    length: entry.length(),
                    lkey: entry.lkey(),
                };
                if let Err(e) = link.conn.post_recv_parts(wr.wr_id, &[segment]) {
                    return Err(self.post_error(index, wr.wr_id, e));
                }
                continue;
            }
            let work = RecvWork::from_request(wr);
            if work.segments.len() > self.endpoint.caps.max_recv_sge as usize {
                return Err(PostError {
                    index,
                    wr_id: wr.wr_id,
                    error: invalid(format!(
                        "{} scatter entries: QP {} was created with max_recv_sge {}",
                        work.segments.len(),
                        self.endpoint.qpn,
                        self.endpoint.caps.max_recv_sge
                    )),
                });
            }
            match st.link.as_mut() {
                Some(link) => {
                    if let Err(e) = link.conn.post_recv(work) {
                        return Err(self.post_error(index, wr.wr_id, e));
                    }
                }
                None => match st.qp_state {
                    QpState::Error => Self::cq(&self.endpoint.recv_cq)
                        .push(self.flush_completion(wr.wr_id, WcOpcode::Recv), false),
                    QpState::Reset => {
                        return Err(PostError {
                            index,
                            wr_id: wr.wr_id,
                            error: invalid(format!(
                                "QP {} is in RESET: move it to INIT before posting receives",
                                self.endpoint.qpn
                            )),
                        })
                    }
                    _ => {
                        if st.early_recvs.len() >= self.endpoint.caps.max_recv_wr as usize {
                            return Err(self.post_error(
                                index,
                                wr.wr_id,
                                ProtocolError::QueueFull {
                                    queue: "receive",
                                    depth: self.endpoint.caps.max_recv_wr as usize,
                                },
                            ));
                        }
                        st.early_recvs.push_back(work);
                    }
                },
            }
        }
        // Receive completions of a flushed queue go out now (a receive posted to a live
        // connection completes nothing and changes nothing else the dispatch reports).
        if st
            .link
            .as_ref()
            .is_some_and(|link| !link.conn.completions.is_empty())
        {
            if let Ok(engine) = driver::engine() {
                self.endpoint.dispatch(&mut st, engine);
            }
        }
        Ok(())
    }

    fn lends_inline(&self) -> bool {
        true
    }

    fn send_backlog(&self) -> Option<usize> {
        Some(self.endpoint.send_backlog())
    }

    fn set_send_coalescing(&self, on: bool) -> bool {
        self.endpoint.set_coalescing(on);
        if !on {
            // What is held goes now, as a later post would not be held.
            self.endpoint.ring_held();
        }
        true
    }

    /// The QP's endpoint, which connection setup ([`crate::driver`]) needs back: the driver
    /// finds a uiwarp QP's connection through it without knowing this type.
    fn as_any(&self) -> &dyn Any {
        &self.endpoint
    }
}

/// Whether a send request's payload is lent rather than copied: an inline SEND or WRITE of at
/// least [`LEND_INLINE_FROM`] bytes whose gather entries are all borrowed.
fn lends(wr: &SendRequest<'_>) -> bool {
    // The first entry decides the common case (registered memory) at once.
    wr.sg_list
        .first()
        .is_some_and(|s| s.borrowed_bytes().is_some())
        && wr.flags.contains(SendFlags::INLINE)
        && !matches!(wr.op, SendOp::RdmaRead { .. })
        && wr.sg_list.iter().all(|s| s.borrowed_bytes().is_some())
        && wr.total_length() >= LEND_INLINE_FROM
}

impl Drop for UiwarpQp {
    fn drop(&mut self) {
        if let Ok(engine) = driver::engine() {
            crate::driver::close_endpoint(&self.endpoint, engine);
        }
    }
}
