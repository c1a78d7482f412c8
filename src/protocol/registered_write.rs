//! Zero-copy writes: stream data whose payload the driver posts from the caller's registered
//! buffer ([`Payload::Registered`]) instead of the send ring. On the wire nothing changes: each
//! message is the same RDMA WRITE WITH IMMEDIATE (or, in write+send mode, the same WRITE and
//! 4-byte SEND) into the peer's ring that a copying write makes, in stream order with them,
//! so a peer cannot tell the two apart. Zero-copy iowrites likewise are the plain RDMA WRITEs
//! into the peer's mapped window that a copying iowrite makes.
#![forbid(unsafe_code)]

use super::engine::StreamEngine;
use super::error::StreamError;
use super::msg::Message;
use super::op::{Op, Payload, WrId};

/// What [`StreamEngine::write_registered`] accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegisteredWrite {
    /// Bytes accepted (the first `accepted` bytes asked for).
    pub accepted: usize,
    /// The last work request queued for them, signalled: once
    /// [`StreamEngine::send_completed`] says it completed, the device reads the buffer no
    /// more (RC completes a queue pair's sends in order).
    pub last: WrId,
}

impl StreamEngine {
    /// Accepts up to `len` bytes of stream data that the driver posts from its caller's
    /// registered buffer, from `offset` in it: one message per piece (each at most the
    /// maximum transfer and what is left of the peer's current ring half), with a
    /// [`Payload::Registered`] payload, no send-ring space and no copy. The last message
    /// queued is signalled. Returns what was accepted, or [`StreamError::WouldBlock`] when
    /// nothing could be (no credit, send-queue slot or destination: wait for writable
    /// readiness).
    pub fn write_registered(
        &mut self,
        offset: usize,
        len: usize,
    ) -> Result<RegisteredWrite, StreamError> {
        self.write_allowed()?;
        let mut done = 0;
        while done < len && self.can_send_registered() {
            let xfer = (len - done)
                .min(self.cfg.max_transfer as usize)
                .min(self.target[self.target_index].length as usize);
            let (dest, interval_signal) = self.take_data_slot_with(xfer, 0);
            done += xfer;
            // The last message of the call is signalled, so its completion comes.
            let last = done == len || !self.can_send_registered();
            let signaled = interval_signal || last;
            if signaled {
                self.unsignaled = 0;
            }
            let msg = Message::Data(xfer as u32).encode();
            let inline = xfer <= self.cfg.inline_threshold as usize;
            let payload = Payload::Registered {
                offset: offset + done - xfer,
                len: xfer,
            };
            self.post_write_msg(
                payload, msg, dest.addr, dest.key, inline, signaled, false, 0,
            );
        }
        if done == 0 && len > 0 {
            return Err(StreamError::WouldBlock);
        }
        Ok(RegisteredWrite {
            accepted: done,
            last: WrId::send(self.next_seq.wrapping_sub(1)),
        })
    }

    /// [`iowrite`](Self::iowrite) from the caller's registered buffer: up to `len` bytes from
    /// `buf_offset` in it into the peer's window at `offset`, as plain RDMA WRITEs ordered
    /// with the stream, with [`Payload::Registered`] payloads (no send ring, no copy); the
    /// last one queued is signalled. The whole range must lie inside one window the peer
    /// mapped, or nothing is queued and [`StreamError::Iomap`] says why (the connection
    /// stays). Returns what was accepted, or [`StreamError::WouldBlock`] when nothing could
    /// be (no send-queue slot).
    pub fn iowrite_registered(
        &mut self,
        offset: u64,
        buf_offset: usize,
        len: usize,
    ) -> Result<RegisteredWrite, StreamError> {
        self.write_allowed()?;
        let Some(window) = self.iomap_window(offset, len as u64) else {
            return Err(self.iomap_miss(offset, len));
        };
        let mut done = 0;
        while done < len && self.sqe_avail >= 1 && self.send_resize.is_none() {
            let xfer = (len - done).min(self.cfg.max_transfer as usize);
            self.sqe_avail -= 1;
            let at = done;
            done += xfer;
            // The last WRITE of the call is signalled, so its completion comes.
            let last = done == len || self.sqe_avail == 0;
            let signaled = self.count_signal() || last;
            if signaled {
                self.unsignaled = 0;
            }
            let wr_id = self.track(false, 0, false, signaled);
            self.ops.push_back(Op::Write {
                wr_id,
                payload: Payload::Registered {
                    offset: buf_offset + at,
                    len: xfer,
                },
                remote_addr: window.window.addr + (offset - window.offset) + at as u64,
                rkey: window.window.key,
                inline: xfer <= self.cfg.inline_threshold as usize,
                signaled,
            });
        }
        if done == 0 && len > 0 {
            return Err(StreamError::WouldBlock);
        }
        Ok(RegisteredWrite {
            accepted: done,
            last: WrId::send(self.next_seq.wrapping_sub(1)),
        })
    }

    /// Whether a send work request `wr` (one [`write_registered`](Self::write_registered)
    /// returned) has completed: no send posted up to it is still outstanding.
    pub fn send_completed(&self, wr: WrId) -> bool {
        self.pending.front().is_none_or(|p| p.first > wr.seq())
    }

    /// rsocket's `rs_can_send` without the send-ring low-water mark, which a message from
    /// the caller's buffer does not use.
    fn can_send_registered(&self) -> bool {
        self.sqe_avail >= self.sqes_per_message()
            && self.sseq_no != self.sseq_comp
            && self.target[self.target_index].length != 0
            && self.send_resize.is_none()
    }
}

#[cfg(test)]
mod tests {
    use crate::protocol::{
        Hello, LocalRegions, Op, Payload, RemoteSge, StreamConfig, StreamEngine, StreamError,
    };

    fn connected(cfg: StreamConfig) -> StreamEngine {
        let local = LocalRegions {
            recv_ring_addr: 0x1000,
            recv_ring_rkey: 1,
            target_list_addr: 0x9000,
            target_list_rkey: 2,
        };
        let mut e = StreamEngine::new(cfg, local);
        while e.pop_op().is_some() {}
        let mut peer = e.hello();
        peer.data_buf = RemoteSge::new(0x10_0000, 7, 64 * 1024);
        e.on_connected(&Hello::parse(&peer.to_bytes()).unwrap())
            .unwrap();
        while e.pop_op().is_some() {}
        e
    }

    #[test]
    fn a_registered_write_queues_messages_from_the_buffer_and_signals_the_last() {
        let cfg = StreamConfig::builder()
            .max_transfer(16 * 1024)
            .signal_interval(8)
            .build()
            .unwrap();
        let mut e = connected(cfg);
        let ring_before = e.sbuf_avail;
        let w = e.write_registered(100, 40 * 1024).unwrap();
        assert_eq!(w.accepted, 40 * 1024);
        assert_eq!(e.sbuf_avail, ring_before, "no send ring is taken");
        let mut pieces = Vec::new();
        let mut last_signaled = None;
        while let Some(op) = e.pop_op() {
            if let Op::WriteWithImm {
                wr_id,
                payload,
                remote_addr,
                signaled,
                ..
            } = op
            {
                pieces.push((payload, remote_addr));
                last_signaled = Some((wr_id, signaled));
            }
        }
        assert_eq!(
            pieces,
            [
                (
                    Payload::Registered {
                        offset: 100,
                        len: 16 * 1024
                    },
                    0x10_0000
                ),
                (
                    Payload::Registered {
                        offset: 100 + 16 * 1024,
                        len: 16 * 1024
                    },
                    0x10_0000 + 16 * 1024
                ),
                (
                    Payload::Registered {
                        offset: 100 + 32 * 1024,
                        len: 8 * 1024
                    },
                    0x10_0000 + 32 * 1024
                ),
            ]
        );
        let (last, signaled) = last_signaled.unwrap();
        assert!(signaled, "the call's last message is signalled");
        assert_eq!(last, w.last);
        assert!(!e.send_completed(w.last));
        e.on_send_completion(w.last, true);
        assert!(e.send_completed(w.last));
    }

    #[test]
    fn a_registered_write_stops_at_the_destination_and_would_block_without_one() {
        let mut e = connected(StreamConfig::default());
        // The peer advertised 64 KiB: the write takes that much and no more.
        let w = e.write_registered(0, 100 * 1024).unwrap();
        assert_eq!(w.accepted, 64 * 1024);
        assert_eq!(
            e.write_registered(0, 10).unwrap_err(),
            StreamError::WouldBlock
        );
    }
}
