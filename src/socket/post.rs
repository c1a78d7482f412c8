//! The one post path: every work request of a connection reaches the provider through
//! [`Connection::submit`], and a failed post fails the stream in one way
//! ([`Connection::post_failed`]). The routes differ only in how they fill the requests: the
//! engine's queued sends in chained batches, their payloads gathered from the send ring,
//! staged inline, lent from the caller's buffer (see `lend`), or from the caller's registered
//! buffer (see `zero_copy`); a lone small write straight
//! from the caller's buffer ([`Connection::post_inline_write`]), and a lone small iowrite
//! likewise ([`Connection::post_inline_iowrite`]); receives with their message slots.
#![forbid(unsafe_code)]

use super::conn::Connection;
use super::lend::Lend;
use crate::protocol::{InlineIowrite, InlineMessage, InlineWrite, Op, Payload, StreamError, WrId};
use crate::verbs::{
    MemoryRegion, RecvRequest, RemoteKey, ScatterGather, SendFlags, SendOp, SendRequest,
};
use std::io;

/// Send work requests chained into one `post_send` call at most (one doorbell).
pub(crate) const POST_BATCH: usize = 16;
/// Bytes after the control slots where inline small payloads are staged: 16 for each request
/// of a batch (the provider copies inline data when the batch is posted).
pub(crate) const SCRATCH_LEN: usize = 16 * POST_BATCH;
/// Receive reposts held back behind the sends of one `post_ops_with` call at most.
const RECV_BATCH: usize = 8;

/// Work requests on their way to the provider.
#[derive(Debug)]
pub(crate) enum Work<'r, 'a> {
    /// A chained list of sends (one doorbell).
    Sends(&'r [SendRequest<'a>]),
    /// One receive.
    Receive(RecvRequest<'a>),
}

impl Connection {
    /// The one place where this connection's work requests reach the provider (as mio's
    /// `do_io` is the one place a source does its I/O). An error means the queue pair is
    /// unusable; the route that posted hands it to [`post_failed`](Self::post_failed).
    #[inline(always)]
    pub(crate) fn submit(&self, work: Work<'_, '_>) -> io::Result<()> {
        let posted = match work {
            Work::Sends(wrs) => self.res.qp.post_send(wrs),
            Work::Receive(wr) => self.res.qp.post_recv(&[wr]),
        };
        posted.map_err(|e| io::Error::from(crate::verbs::Error::from(e)))
    }

    /// Posts the engine's queued work requests in order; consecutive sends go out as one
    /// chained list.
    #[inline]
    pub(crate) fn post_ops(&mut self) -> io::Result<()> {
        // Checked here, inlined into every progress pass: most find nothing to post.
        if !self.engine.has_ops() {
            return Ok(());
        }
        if self.engine.only_receives() {
            return self.post_queued_receives();
        }
        self.post_ops_with(Lend::NONE)
    }

    /// [`Connection::post_ops`] when only receive reposts are queued (the deferred reposts
    /// that a read's or a write's progress posts): each straight to the provider, in order,
    /// without the batch's arrays.
    fn post_queued_receives(&mut self) -> io::Result<()> {
        while let Some(&Op::PostRecv {
            wr_id,
            message_slot,
        }) = self.engine.peek_op()
        {
            self.engine.pop_op();
            if let Err(e) = self.post_recv(wr_id, message_slot) {
                self.post_failed(&e);
                return Err(e);
            }
        }
        Ok(())
    }

    /// [`Connection::post_ops`], with the payloads of `lend`'s messages taken from the
    /// caller's buffer as borrowed inline sends. Receive reposts go after the sends queued
    /// with them (in their own order, a few at a time): a send's doorbell, which the peer
    /// waits for, does not wait for them, and they come out of the receive reserve
    /// ([`RECV_DEFER_MAX`](crate::protocol::RECV_DEFER_MAX)) meanwhile.
    pub(crate) fn post_ops_with(&mut self, lend: Lend<'_>) -> io::Result<()> {
        self.post_ops_from(lend, None)
    }

    /// [`Connection::post_ops`], with the payloads of zero-copy messages
    /// ([`Payload::Registered`]) posted from `registered`, the caller's buffer's registration
    /// on this connection's device (see `zero_copy`).
    pub(crate) fn post_ops_registered(&mut self, registered: &MemoryRegion) -> io::Result<()> {
        self.post_ops_from(Lend::NONE, Some(registered))
    }

    /// Posts the queued work requests, their payloads from the ring, `lend` or `registered`.
    fn post_ops_from(
        &mut self,
        lend: Lend<'_>,
        registered: Option<&MemoryRegion>,
    ) -> io::Result<()> {
        let mut result = Ok(());
        let mut receives = [(WrId(0), None); RECV_BATCH];
        let mut held = 0;
        while let Some(op) = self.engine.pop_op() {
            result = match op {
                Op::PostRecv {
                    wr_id,
                    message_slot,
                } => {
                    // A full batch goes out first, so that the reposts keep their order.
                    let flushed = if held == RECV_BATCH {
                        held = 0;
                        self.post_receives(&receives)
                    } else {
                        Ok(())
                    };
                    receives[held] = (wr_id, message_slot);
                    held += 1;
                    flushed
                }
                Op::ClearTargetEntry { offset } => self
                    .res
                    .target_mr
                    .write_at(offset, &[0u8; 16])
                    .map_err(Into::into),
                send => match PreparedSend::from_op(send) {
                    Some(send) => self.post_send_run(send, lend, registered),
                    None => Ok(()),
                },
            };
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() {
            result = self.post_receives(&receives[..held]);
        }
        if let Err(e) = &result {
            self.post_failed(e);
        }
        result
    }

    /// Posts the message [`StreamEngine::write_inline`](crate::protocol::StreamEngine::write_inline)
    /// made of `bytes` as one inline RDMA WRITE WITH IMMEDIATE, or in write+send mode as an
    /// inline RDMA WRITE and the inline SEND of its message word chained (one doorbell),
    /// without the op queue, the batch arrays or a ring copy: a ping-pong's small reply
    /// reaches the doorbell with the least work. The receive reposts queued before it go
    /// with the next progress pass.
    #[inline]
    pub(crate) fn post_inline_write(
        &mut self,
        message: InlineWrite,
        bytes: &[u8],
    ) -> Result<(), StreamError> {
        let sge = [ScatterGather::borrowed(bytes)];
        let posted = match message.message {
            InlineMessage::Immediate(imm) => {
                let send = PreparedSend::inline_write(
                    message,
                    SendOp::RdmaWriteWithImm {
                        remote_addr: message.remote_addr,
                        rkey: RemoteKey(message.rkey),
                        imm,
                    },
                );
                self.submit(Work::Sends(&[send.request(&sge, true)]))
            }
            InlineMessage::Send { wr_id, word } => {
                let write = PreparedSend {
                    signaled: false,
                    ..PreparedSend::inline_write(
                        message,
                        SendOp::RdmaWrite {
                            remote_addr: message.remote_addr,
                            rkey: RemoteKey(message.rkey),
                        },
                    )
                };
                let send = PreparedSend {
                    wr_id,
                    op: SendOp::Send,
                    payload: Payload::Empty,
                    inline: true,
                    signaled: message.signaled,
                };
                let word_sge = [ScatterGather::borrowed(&word)];
                self.submit(Work::Sends(&[
                    write.request(&sge, true),
                    send.request(&word_sge, true),
                ]))
            }
        };
        posted.map_err(|e| self.post_failed(&e))
    }

    /// Posts the iowrite [`StreamEngine::iowrite_inline`](crate::protocol::StreamEngine::iowrite_inline)
    /// made of `bytes` as one inline RDMA WRITE, as [`post_inline_write`](Self::post_inline_write)
    /// posts a small message.
    #[inline]
    pub(crate) fn post_inline_iowrite(
        &mut self,
        write: InlineIowrite,
        bytes: &[u8],
    ) -> Result<(), StreamError> {
        let send = PreparedSend {
            wr_id: write.wr_id,
            op: SendOp::RdmaWrite {
                remote_addr: write.remote_addr,
                rkey: RemoteKey(write.rkey),
            },
            payload: Payload::Empty,
            inline: true,
            signaled: write.signaled,
        };
        let sge = [ScatterGather::borrowed(bytes)];
        self.submit(Work::Sends(&[send.request(&sge, true)]))
            .map_err(|e| self.post_failed(&e))
    }

    /// A post failed: the queue pair is unusable, so the stream fails with `e`. Returns that
    /// error, for the caller to report.
    pub(crate) fn post_failed(&mut self, e: &io::Error) -> StreamError {
        let error = StreamError::ConnectionReset(format!("posting a work request failed: {e}"));
        self.engine.fail(error.clone());
        error
    }

    /// Posts `first` and the sends queued right after it as chained lists of up to
    /// `POST_BATCH` requests (one doorbell each).
    fn post_send_run(
        &mut self,
        first: PreparedSend,
        lend: Lend<'_>,
        registered: Option<&MemoryRegion>,
    ) -> io::Result<()> {
        if !self.engine.peek_op().is_some_and(Op::is_send) {
            // The common case on the data path: one send, without a batch's arrays.
            return self.post_sends::<1>(&[first], lend, registered);
        }
        let second = self.next_send();
        if !self.engine.peek_op().is_some_and(Op::is_send) {
            // A message in write+send mode (a WRITE and its SEND): small arrays too.
            return self.post_sends::<2>(&[first, second], lend, registered);
        }
        let mut batch = [first; POST_BATCH];
        batch[1] = second;
        let mut n = 2;
        while n < POST_BATCH && self.engine.peek_op().is_some_and(Op::is_send) {
            batch[n] = self.next_send();
            n += 1;
        }
        self.post_sends::<POST_BATCH>(&batch[..n], lend, registered)
    }

    /// Takes the next op, which the caller peeked to be a send.
    fn next_send(&mut self) -> PreparedSend {
        let op = self.engine.pop_op().expect("peeked");
        PreparedSend::from_op(op).expect("a send")
    }

    /// Posts `batch` (at most `N` requests) as one chained list.
    fn post_sends<'a, const N: usize>(
        &'a self,
        batch: &'a [PreparedSend],
        lend: Lend<'a>,
        registered: Option<&'a MemoryRegion>,
    ) -> io::Result<()> {
        let empty = self.res.send_area.slice(0, 0)?;
        let mut sges = [[empty; 2]; N];
        let mut counts = [0usize; N];
        let mut lent_at = [false; N];
        for (i, send) in batch.iter().enumerate() {
            let lent = match &send.payload {
                // A small inline payload goes from where the engine made it: every provider
                // takes an inline send's bytes while the post runs.
                Payload::Small { bytes, len, .. } if send.inline => {
                    Some(&bytes[..usize::from(*len)])
                }
                _ if lend.is_empty() => None,
                _ => self.lent_payload(send.payload, send.inline, lend),
            };
            match lent {
                Some(bytes) => {
                    (sges[i], counts[i], lent_at[i]) =
                        ([ScatterGather::borrowed(bytes); 2], 1, true)
                }
                None => {
                    (sges[i], counts[i]) = self.gather(send.payload, send.inline, i, registered)?
                }
            }
            if matches!(send.op, SendOp::RdmaRead { .. }) {
                // A placement fence's sink: one entry (siw takes exactly one).
                (sges[i], counts[i]) = ([self.res.fence_sink()?; 2], 1);
            }
        }
        let wrs: [SendRequest<'_>; N] = std::array::from_fn(|i| {
            let send = batch.get(i).copied().unwrap_or(PreparedSend::NONE);
            send.request(&sges[i][..counts[i]], lent_at[i])
        });
        self.submit(Work::Sends(&wrs[..batch.len()]))
    }

    /// The caller's bytes of `payload`, when `lend` holds them and the message goes inline:
    /// the engine made it inline (every provider copies that in the post), or the queue pair
    /// takes a message that long inline from borrowed memory.
    fn lent_payload<'a>(&self, payload: Payload, inline: bool, lend: Lend<'a>) -> Option<&'a [u8]> {
        let Payload::SendRing { first, second } = payload else {
            return None;
        };
        let len = first.len + second.map_or(0, |s| s.len);
        if !inline && len > self.res.lend_limit {
            return None;
        }
        lend.bytes(first.offset, len)
    }

    /// The gather list of a send's payload; `index` is its place in the batch (where an
    /// inline small payload is staged).
    fn gather<'a>(
        &'a self,
        payload: Payload,
        inline: bool,
        index: usize,
        registered: Option<&'a MemoryRegion>,
    ) -> io::Result<([ScatterGather<'a>; 2], usize)> {
        let mr = &self.res.send_area;
        Ok(match payload {
            Payload::Empty => ([mr.slice(0, 0)?; 2], 0),
            Payload::Registered { offset, len } => {
                // Only the call that queued it posts it, with its buffer's registration.
                let buffer = registered.ok_or_else(|| {
                    io::Error::other(
                        "a zero-copy message was left unposted by the write that queued it",
                    )
                })?;
                let a = buffer.slice(offset, len)?;
                ([a, a], 1)
            }
            Payload::SendRing { first, second } => {
                let a = mr.slice(first.offset, first.len)?;
                match second {
                    None => ([a, a], 1),
                    Some(s) => ([a, mr.slice(s.offset, s.len)?], 2),
                }
            }
            Payload::Small {
                bytes,
                len,
                control_slot,
            } => {
                let offset = if inline {
                    self.scratch_offset + 16 * index
                } else {
                    self.engine.send_ring_len() + 16 * usize::from(control_slot)
                };
                let len = usize::from(len);
                mr.write_at(offset, &bytes[..len])?;
                let a = mr.slice(offset, len)?;
                ([a, a], 1)
            }
        })
    }

    /// Posts `receives` in order, one at a time.
    fn post_receives(&mut self, receives: &[(WrId, Option<u32>)]) -> io::Result<()> {
        for &(wr_id, message_slot) in receives {
            self.post_recv(wr_id, message_slot)?;
        }
        Ok(())
    }

    /// Posts one receive (with its 4-byte message slot in write+send mode), on the shared
    /// receive queue where the connection has a share of one.
    fn post_recv(&mut self, wr_id: WrId, message_slot: Option<u32>) -> io::Result<()> {
        if let Some(share) = &mut self.res.srq {
            return share.post();
        }
        let sge;
        let sg_list: &[ScatterGather<'_>] = match (message_slot, &self.res.message_mr) {
            (Some(slot), Some(mr)) => {
                sge = [mr.slice(slot as usize * 4, 4)?];
                &sge
            }
            _ => &[],
        };
        self.submit(Work::Receive(RecvRequest {
            wr_id: wr_id.0,
            sg_list,
        }))
    }
}

/// A send work request taken from the engine, waiting in a batch.
#[derive(Debug, Clone, Copy)]
struct PreparedSend {
    wr_id: WrId,
    op: SendOp,
    payload: Payload,
    inline: bool,
    signaled: bool,
}

impl PreparedSend {
    /// Fills the unused tail of a batch's request array; never posted.
    const NONE: PreparedSend = PreparedSend {
        wr_id: WrId(0),
        op: SendOp::Send,
        payload: Payload::Empty,
        inline: false,
        signaled: false,
    };

    /// The WRITE of the message [`StreamEngine::write_inline`](crate::protocol::StreamEngine::write_inline)
    /// made, as `op` (with or without immediate data): inline, its bytes the caller's.
    #[inline(always)]
    fn inline_write(message: InlineWrite, op: SendOp) -> PreparedSend {
        PreparedSend {
            wr_id: message.wr_id,
            op,
            payload: Payload::Empty,
            inline: true,
            signaled: message.signaled,
        }
    }

    /// The work request for this send with its payload at `sges`; `lent` says the bytes are
    /// borrowed from the caller, which makes the send inline.
    #[inline(always)]
    fn request<'a>(&self, sges: &'a [ScatterGather<'a>], lent: bool) -> SendRequest<'a> {
        let mut flags = SendFlags::empty();
        if self.signaled {
            flags |= SendFlags::SIGNALED;
        }
        if self.inline || lent {
            flags |= SendFlags::INLINE;
        }
        SendRequest::new(self.wr_id.0, self.op, sges).with_flags(flags)
    }

    /// The send in `op`, or `None` for an op that is not a send.
    fn from_op(op: Op) -> Option<PreparedSend> {
        let (wr_id, op, payload, inline, signaled) = match op {
            Op::WriteWithImm {
                wr_id,
                payload,
                remote_addr,
                rkey,
                imm,
                inline,
                signaled,
            } => {
                let op = SendOp::RdmaWriteWithImm {
                    remote_addr,
                    rkey: RemoteKey(rkey),
                    imm,
                };
                (wr_id, op, payload, inline, signaled)
            }
            Op::Write {
                wr_id,
                payload,
                remote_addr,
                rkey,
                inline,
                signaled,
            } => {
                let op = SendOp::RdmaWrite {
                    remote_addr,
                    rkey: RemoteKey(rkey),
                };
                (wr_id, op, payload, inline, signaled)
            }
            Op::Send {
                wr_id,
                payload,
                inline,
                signaled,
            } => (wr_id, SendOp::Send, payload, inline, signaled),
            Op::Read {
                wr_id,
                remote_addr,
                rkey,
            } => {
                let op = SendOp::RdmaRead {
                    remote_addr,
                    rkey: RemoteKey(rkey),
                };
                (wr_id, op, Payload::Empty, false, true)
            }
            Op::PostRecv { .. } | Op::ClearTargetEntry { .. } => return None,
        };
        Some(PreparedSend {
            wr_id,
            op,
            payload,
            inline,
            signaled,
        })
    }
}
