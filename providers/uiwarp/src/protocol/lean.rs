//! The lean transmit path: a chain of small inline SENDs and RDMA WRITEs, posted while
//! nothing else waits to be framed, goes into the transmit queue as whole FPDUs at post
//! time, each framed in one pass from the caller's bytes (header, payload, pad, CRC). No
//! [`super::SendWork`] is made, nothing waits in the send queue and no registered memory is
//! looked up: the bytes on the wire are those the general path (`transmit`) makes for the
//! same requests.

use super::connection::Connection;
use super::state::SqSlot;
use super::txqueue::TxQueue;
use crate::wire::ddp::{queue, Opcode, Placement, SegmentRepr};
use crate::wire::ddp::{TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use crate::wire::fpdu;
use rdmasock_verbs::{RemoteKey, WcOpcode, WcStatus};

/// What an [`InlineSend`] does.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum InlineOperation {
    /// A SEND (without invalidate), consuming one receive at the peer.
    Send {
        /// Raise a solicited event at the peer.
        solicited: bool,
    },
    /// An RDMA WRITE into the peer's region.
    RdmaWrite {
        /// The peer address (tagged offset).
        remote_addr: u64,
        /// The peer region's STag.
        rkey: RemoteKey,
    },
}

/// One request of a chain for [`Connection::post_inline_chain`]: its payload is the
/// caller's bytes, framed before the post returns.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct InlineSend<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub operation: InlineOperation,
    /// The payload.
    pub payload: &'a [u8],
    /// Give a completion on success too.
    pub signaled: bool,
    /// Wait until earlier READs have completed before starting.
    pub fence: bool,
}

impl InlineSend<'_> {
    /// A placeholder entry (a zero-length unsignaled SEND), for fixed-size arrays.
    pub const EMPTY: InlineSend<'static> = InlineSend {
        wr_id: 0,
        operation: InlineOperation::Send { solicited: false },
        payload: &[],
        signaled: false,
        fence: false,
    };

    fn header_len(&self) -> usize {
        match self.operation {
            InlineOperation::Send { .. } => UNTAGGED_HEADER_LEN,
            InlineOperation::RdmaWrite { .. } => TAGGED_HEADER_LEN,
        }
    }
}

impl Connection {
    /// Frames `chain` into `queue` now, one FPDU a request, and returns `true`; or returns
    /// `false` with nothing changed when the general path must take it: the connection is
    /// not established or holds its first FPDU, something else waits to be framed (control
    /// frames, an RTR, READ responses, queued or half-sent requests), the send queue lacks
    /// room, a payload needs more than one FPDU, or a fenced request would wait for READs.
    /// The requests complete as the general path's do, when [`TxQueue::advance`] passes
    /// their last byte.
    pub fn post_inline_chain(&mut self, chain: &[InlineSend<'_>], queue: &mut TxQueue) -> bool {
        let idle = self.control.is_empty()
            && self.rtr_to_send.is_none()
            && self.tx_current.is_none()
            && self.irq.is_empty()
            && self.sq_pending.is_empty();
        if !idle
            || !self.may_send_fpdus()
            || self.sq_slots.len() + chain.len() > self.config.max_send_requests
        {
            return false;
        }
        let mulpdu = usize::from(self.config.mulpdu);
        let mut frames = 0;
        for request in chain {
            if request.header_len() + request.payload.len() > mulpdu
                || (request.fence && !self.orq.is_empty())
            {
                return false;
            }
            frames += fpdu::frame_len(request.header_len() + request.payload.len());
        }
        queue.bytes().reserve(frames);
        for request in chain {
            let seq = self.next_seq;
            self.next_seq += 1;
            let (opcode, placement, wc_opcode) = match request.operation {
                InlineOperation::Send { solicited } => {
                    self.tx_msn[0] = self.tx_msn[0].wrapping_add(1);
                    let opcode = if solicited {
                        Opcode::SendWithSolicitedEvent
                    } else {
                        Opcode::Send
                    };
                    let placement = Placement::Untagged {
                        reserved_ulp: 0,
                        queue: queue::SEND,
                        msn: self.tx_msn[0],
                        offset: 0,
                    };
                    (opcode, placement, WcOpcode::Send)
                }
                InlineOperation::RdmaWrite { remote_addr, rkey } => {
                    let placement = Placement::Tagged {
                        stag: rkey.0,
                        offset: remote_addr,
                    };
                    (Opcode::RdmaWrite, placement, WcOpcode::RdmaWrite)
                }
            };
            self.sq_slots.push_back(SqSlot {
                seq,
                wr_id: request.wr_id,
                opcode: wc_opcode,
                signaled: request.signaled,
                byte_len: request.payload.len() as u32,
                status: None,
                vendor_err: 0,
            });
            let out = queue.bytes();
            let start = fpdu::begin(out);
            SegmentRepr {
                last: true,
                opcode,
                placement,
            }
            .append(out);
            out.extend_from_slice(request.payload);
            fpdu::finish(out, start, self.crc);
            queue.push_sent(seq);
        }
        true
    }

    /// Marks send slot `seq` done because all its bytes are written. The common case, the
    /// oldest slot unsignalled and still pending, leaves nothing to report: it is dropped at
    /// once, without the search and the completion bookkeeping of [`Self::finish_send`].
    pub(crate) fn finish_written_send(&mut self, seq: u64) {
        match self.sq_slots.front() {
            Some(front) if front.seq == seq && front.status.is_none() && !front.signaled => {
                self.sq_slots.pop_front();
                // Slots behind it that finished first (after a READ) may go now.
                if self.sq_slots.front().is_some_and(|s| s.status.is_some()) {
                    self.release_send_completions();
                }
            }
            _ => self.finish_send(seq, WcStatus::Success, 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::config::Role;
    use crate::protocol::connection::Phase;
    use crate::protocol::{
        connected_pair, Completion, Config, LocalSegment, RegionTable, SendOperation, SendWork,
    };
    use rdmasock_verbs::{AccessFlags, LocalKey, RegisteredMemory};
    use std::sync::Arc;

    const WRITE: [u8; 64] = [0x5a; 64];
    const SEND: [u8; 4] = [1, 2, 3, 4];

    fn chain() -> [InlineSend<'static>; 3] {
        [
            InlineSend {
                wr_id: 1,
                operation: InlineOperation::RdmaWrite {
                    remote_addr: 0x1000,
                    rkey: RemoteKey(0x1234),
                },
                payload: &WRITE,
                signaled: false,
                fence: false,
            },
            InlineSend {
                wr_id: 2,
                operation: InlineOperation::Send { solicited: true },
                payload: &SEND,
                signaled: true,
                fence: false,
            },
            InlineSend {
                wr_id: 3,
                operation: InlineOperation::Send { solicited: false },
                payload: &[],
                signaled: true,
                fence: true,
            },
        ]
    }

    /// The general path's bytes and completions for `chain`, its payloads in registered
    /// memory.
    fn general(config: &Config) -> (Vec<u8>, Vec<Completion>) {
        let mut table = RegionTable::new();
        let (mut conn, _) = connected_pair(config.clone(), &table, &table);
        for request in chain() {
            let memory = Arc::new(RegisteredMemory::allocate(64).unwrap());
            memory.write_at(0, request.payload).unwrap();
            let addr = memory.addr();
            let key = table.register(memory, AccessFlags::LOCAL_WRITE);
            let op = match request.operation {
                InlineOperation::Send { solicited } => SendOperation::Send {
                    solicited,
                    invalidate: None,
                },
                InlineOperation::RdmaWrite { remote_addr, rkey } => {
                    SendOperation::RdmaWrite { remote_addr, rkey }
                }
            };
            let segment = LocalSegment {
                addr,
                length: request.payload.len() as u32,
                lkey: LocalKey(key),
            };
            conn.post_send(SendWork {
                wr_id: request.wr_id,
                op,
                segments: [segment].into_iter().collect(),
                small: None,
                signaled: request.signaled,
                fence: request.fence,
            })
            .unwrap();
        }
        let mut wire = Vec::new();
        conn.poll_transmit(&table, &mut wire, usize::MAX);
        (
            wire,
            std::iter::from_fn(|| conn.poll_completion()).collect(),
        )
    }

    fn slot(seq: u64, opcode: WcOpcode, signaled: bool) -> SqSlot {
        SqSlot {
            seq,
            wr_id: 100 + seq,
            opcode,
            signaled,
            byte_len: 8,
            status: None,
            vendor_err: 0,
        }
    }

    #[test]
    fn written_requests_complete_in_order_behind_a_read() {
        let mut conn = Connection::new(Config::default(), Role::Initiator, Phase::Established);
        conn.sq_slots.extend([
            slot(0, WcOpcode::RdmaWrite, false),
            slot(1, WcOpcode::RdmaRead, true),
            slot(2, WcOpcode::RdmaWrite, false),
            slot(3, WcOpcode::Send, true),
            slot(4, WcOpcode::RdmaWrite, false),
        ]);
        // The oldest, unsignalled, goes without a completion; the READ then holds the rest.
        conn.finish_written_send(0);
        conn.finish_written_send(2);
        conn.finish_written_send(3);
        assert!(conn.poll_completion().is_none());
        assert_eq!(conn.sq_slots.len(), 4);
        conn.finish_send(1, WcStatus::Success, 0);
        let ids: Vec<u64> = std::iter::from_fn(|| conn.poll_completion())
            .map(|c| c.completion.wr_id)
            .collect();
        assert_eq!(ids, [101, 103]);
        assert_eq!(conn.sq_slots.len(), 1);
        // A signalled request at the front still completes.
        conn.sq_slots.push_back(slot(5, WcOpcode::Send, true));
        conn.finish_written_send(4);
        conn.finish_written_send(5);
        assert_eq!(
            conn.poll_completion().map(|c| c.completion.wr_id),
            Some(105)
        );
        assert!(conn.sq_slots.is_empty());
    }

    #[test]
    fn a_chain_goes_out_as_the_general_path_sends_it() {
        for crc in [false, true] {
            let config = Config {
                crc,
                ..Config::default()
            };
            let (wire, completions) = general(&config);
            let table = RegionTable::new();
            let (mut conn, _) = connected_pair(config, &table, &table);
            let mut queue = TxQueue::new();
            assert!(conn.post_inline_chain(&chain(), &mut queue));
            assert!(
                conn.poll_completion().is_none(),
                "nothing completes before it is written"
            );
            let mut lean = Vec::new();
            queue.copy_to(&mut lean);
            assert_eq!(lean, wire, "crc {crc}: the same bytes");
            let len = queue.len();
            queue.advance(len, &mut conn);
            let lean_completions: Vec<_> = std::iter::from_fn(|| conn.poll_completion()).collect();
            assert_eq!(lean_completions, completions, "the same completions");
            assert_eq!(lean_completions.len(), 2, "the two signaled requests");
        }
    }

    #[test]
    fn the_general_path_takes_what_the_lean_one_cannot() {
        let config = Config {
            mulpdu: 128,
            ..Config::default()
        };
        let table = RegionTable::new();
        let (mut conn, _) = connected_pair(config, &table, &table);
        let mut queue = TxQueue::new();
        // A payload that needs two FPDUs.
        let big = [0u8; 128];
        let mut long = chain();
        long[1].payload = &big;
        assert!(!conn.post_inline_chain(&long, &mut queue));
        assert!(queue.is_empty());
        // A request queued ahead of the chain.
        conn.post_send(SendWork {
            wr_id: 9,
            op: SendOperation::Send {
                solicited: false,
                invalidate: None,
            },
            segments: Default::default(),
            small: None,
            signaled: true,
            fence: false,
        })
        .unwrap();
        assert!(!conn.post_inline_chain(&chain(), &mut queue));
        assert!(queue.is_empty());
        assert_eq!(conn.unsent_send_requests(), 1, "nothing was added");
        let mut wire = Vec::new();
        conn.poll_transmit(&table, &mut wire, usize::MAX);
        assert!(conn.post_inline_chain(&chain(), &mut queue));
    }
}
