//! The receive fast path: a whole message in one FPDU (an RDMA WRITE, or a plain SEND that
//! fits the oldest posted receive), the common case of small messages, checked and placed
//! straight from the input bytes.
//!
//! It makes every check the general path (`receive.rs`) makes: versions, opcode and T bit,
//! queue, MSN and message offset, STag, bounds and access, the receive's length and scatter
//! list. It changes no connection state until the message is placed (a scatter list that
//! fails part way has written only what the general path then writes the same way);
//! whatever it does not take (a multi-segment message, another opcode, a failed check) goes
//! the general way, which processes it, or reports the failure, from scratch. Reposting a
//! receive that continues the receive queue's last run builds no work request.

use super::connection::{Connection, Phase};
use super::memory::MemoryTable;
use super::receive::scatter;
use super::{LocalSegment, ProtocolError};
use crate::wire::ddp::{
    queue, Opcode, Segment, DDP_VERSION, RDMAP_VERSION, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN,
};
use rdmasock_verbs::{AccessFlags, RemoteKey, WcStatus};

impl Connection {
    /// [`Connection::post_recv`] of the request of `wr_id` and `segments`, which builds no
    /// [`RecvWork`](super::RecvWork) when the request continues the last run of the receive
    /// queue (a stream socket's reposts).
    pub fn post_recv_parts(
        &mut self,
        wr_id: u64,
        segments: &[LocalSegment],
    ) -> Result<(), ProtocolError> {
        if self.admit_recv(wr_id)? {
            self.rq.push_back_parts(wr_id, segments);
        }
        Ok(())
    }

    /// Before a receive is queued: `false` when the connection is in error (the request
    /// completes flushed at once), an error when the queue is full, else `true`.
    pub(super) fn admit_recv(&mut self, wr_id: u64) -> Result<bool, ProtocolError> {
        if matches!(self.phase, Phase::Error) {
            self.push_recv_completion(wr_id, WcStatus::WorkRequestFlushError, 0, 0, false, 0);
            return Ok(false);
        }
        if self.rq.len() + usize::from(self.rx_send.is_some()) >= self.config.max_recv_requests {
            return Err(ProtocolError::QueueFull {
                queue: "receive",
                depth: self.config.max_recv_requests,
            });
        }
        Ok(true)
    }

    /// Places `ulpdu`, a CRC-checked FPDU's, when it is a whole RDMA WRITE or plain SEND
    /// on an established connection with no message in progress, and every check passes.
    /// Returns `false`, having changed nothing but receive memory the general path writes
    /// the same way, for anything else.
    pub(super) fn whole_message_input(&mut self, ulpdu: &[u8], memory: &dyn MemoryTable) -> bool {
        if !matches!(self.phase, Phase::Established) || ulpdu.len() < TAGGED_HEADER_LEN {
            return false;
        }
        let segment = Segment::new_unchecked(ulpdu);
        if !segment.last()
            || segment.ddp_version() != DDP_VERSION
            || segment.rdmap_version() != RDMAP_VERSION
        {
            return false;
        }
        if segment.tagged() {
            self.whole_write_input(&segment, memory)
        } else {
            self.whole_send_input(&segment, ulpdu.len(), memory)
        }
    }

    /// A tagged segment: an RDMA WRITE with data, not continuing another message.
    fn whole_write_input(&mut self, segment: &Segment<&[u8]>, memory: &dyn MemoryTable) -> bool {
        if segment.opcode_raw() != Opcode::RdmaWrite.to_raw() || self.rx_tagged.is_some() {
            return false;
        }
        let payload = segment.payload();
        let offset = segment.tagged_offset();
        if payload.is_empty() || offset.checked_add(payload.len() as u64).is_none() {
            return false;
        }
        memory
            .remote(RemoteKey(segment.stag()))
            .is_some_and(|region| {
                region
                    .write(offset, payload, AccessFlags::REMOTE_WRITE)
                    .is_ok()
            })
    }

    /// An untagged segment: a plain SEND, the whole message, for the oldest receive.
    fn whole_send_input(
        &mut self,
        segment: &Segment<&[u8]>,
        ulpdu_len: usize,
        memory: &dyn MemoryTable,
    ) -> bool {
        if ulpdu_len < UNTAGGED_HEADER_LEN
            || segment.opcode_raw() != Opcode::Send.to_raw()
            || segment.queue_number() != queue::SEND
            || segment.msn() != self.rx_msn[queue::SEND as usize]
            || segment.message_offset() != 0
            || self.rx_send.is_some()
        {
            return false;
        }
        let payload = segment.payload();
        let Some(work) = self.rq.front() else {
            return false;
        };
        let Ok(byte_len) = u32::try_from(payload.len()) else {
            return false;
        };
        if u64::from(byte_len) > work.capacity() || scatter(memory, work, 0, payload).is_err() {
            return false;
        }
        let wr_id = work.wr_id;
        self.rq.drop_front();
        self.rx_msn[queue::SEND as usize] = self.rx_msn[queue::SEND as usize].wrapping_add(1);
        self.push_recv_completion(wr_id, WcStatus::Success, byte_len, 0, false, 0);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::config::{Config, Role};
    use crate::protocol::memory::RegionTable;
    use crate::protocol::{LocalSegment, RecvWork, Segments};
    use crate::wire::ddp::{Placement, SegmentRepr};
    use rdmasock_verbs::{LocalKey, RegisteredMemory};
    use std::sync::Arc;

    struct Setup {
        conn: Connection,
        table: RegionTable,
        memory: Arc<RegisteredMemory>,
        /// Registered for remote and local write.
        key: u32,
        /// Registered for local write only.
        local_key: u32,
    }

    fn setup() -> Setup {
        let memory = Arc::new(RegisteredMemory::allocate(4096).unwrap());
        let mut table = RegionTable::new();
        let key = table.register_range(
            memory.clone(),
            0,
            1024,
            AccessFlags::REMOTE_WRITE | AccessFlags::LOCAL_WRITE,
        );
        let local_key = table.register_range(memory.clone(), 1024, 1024, AccessFlags::LOCAL_WRITE);
        let mut conn = Connection::new(Config::default(), Role::Initiator, Phase::Established);
        let mut segments = Segments::new();
        segments.push(LocalSegment {
            addr: memory.addr() + 1024,
            length: 8,
            lkey: LocalKey(local_key),
        });
        conn.rq.push_back(RecvWork {
            wr_id: 77,
            segments,
        });
        Setup {
            conn,
            table,
            memory,
            key,
            local_key,
        }
    }

    fn ulpdu(last: bool, opcode: Opcode, placement: Placement, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        SegmentRepr {
            last,
            opcode,
            placement,
        }
        .append(&mut out);
        out.extend_from_slice(body);
        out
    }

    fn send(msn: u32, offset: u32, body: &[u8]) -> Vec<u8> {
        let placement = Placement::Untagged {
            reserved_ulp: 0,
            queue: queue::SEND,
            msn,
            offset,
        };
        ulpdu(true, Opcode::Send, placement, body)
    }

    fn write(stag: u32, offset: u64, body: &[u8]) -> Vec<u8> {
        ulpdu(
            true,
            Opcode::RdmaWrite,
            Placement::Tagged { stag, offset },
            body,
        )
    }

    #[test]
    fn a_whole_write_and_send_are_placed_and_the_send_completed() {
        let mut s = setup();
        let at = s.memory.addr() + 16;
        assert!(s
            .conn
            .whole_message_input(&write(s.key, at, b"written"), &s.table));
        assert!(s.conn.whole_message_input(&send(1, 0, b"sent"), &s.table));
        let bytes = s.memory.to_vec();
        assert_eq!(&bytes[16..23], b"written");
        assert_eq!(&bytes[1024..1028], b"sent");
        let c = s
            .conn
            .poll_completion()
            .expect("the SEND's receive completes");
        assert_eq!(c.completion.wr_id, 77);
        assert_eq!(c.completion.byte_len, 4);
        assert_eq!(c.completion.status, WcStatus::Success.to_raw());
        assert_eq!(s.conn.rx_msn[queue::SEND as usize], 2);
        assert!(s.conn.rq.is_empty());
    }

    #[test]
    fn anything_unusual_is_left_to_the_general_path_untouched() {
        let s = setup();
        let base = s.memory.addr();
        let cases = [
            (
                "a WRITE past its region",
                write(s.key, base + 1020, b"overflow"),
            ),
            ("a WRITE below its region", write(s.key, base - 1, b"under")),
            ("a WRITE that wraps", write(s.key, u64::MAX - 2, b"wraps")),
            (
                "a WRITE with no such STag",
                write(s.key + 1, base, b"nokey"),
            ),
            (
                "a WRITE without remote write",
                write(s.local_key, base + 1024, b"rights"),
            ),
            ("an empty WRITE", write(s.key, base, b"")),
            (
                "a WRITE that is not the last segment",
                ulpdu(
                    false,
                    Opcode::RdmaWrite,
                    Placement::Tagged {
                        stag: s.key,
                        offset: base,
                    },
                    b"more",
                ),
            ),
            ("a SEND with the wrong MSN", send(2, 0, b"msn")),
            ("a SEND at a message offset", send(1, 4, b"offset")),
            ("a SEND too long for its receive", send(1, 0, b"too long!")),
            (
                "a SEND on another queue",
                ulpdu(
                    true,
                    Opcode::Send,
                    Placement::Untagged {
                        reserved_ulp: 0,
                        queue: queue::READ_REQUEST,
                        msn: 1,
                        offset: 0,
                    },
                    b"queue",
                ),
            ),
            (
                "a SEND with solicited event",
                ulpdu(
                    true,
                    Opcode::SendWithSolicitedEvent,
                    Placement::Untagged {
                        reserved_ulp: 0,
                        queue: queue::SEND,
                        msn: 1,
                        offset: 0,
                    },
                    b"se",
                ),
            ),
        ];
        for (what, bytes) in cases {
            let mut s = setup();
            assert!(
                !s.conn.whole_message_input(&bytes, &s.table),
                "{what} was taken"
            );
            assert!(s.memory.to_vec().iter().all(|&b| b == 0), "{what} wrote");
            assert_eq!(s.conn.rq.len(), 1, "{what} took the receive");
            assert_eq!(
                s.conn.rx_msn[queue::SEND as usize],
                1,
                "{what} moved the MSN"
            );
            assert!(s.conn.poll_completion().is_none(), "{what} completed");
        }
        // A bad version, and a receive with no buffer posted.
        let mut s = setup();
        let mut bytes = send(1, 0, b"v");
        bytes[0] ^= 0x02;
        assert!(!s.conn.whole_message_input(&bytes, &s.table));
        s.conn.rq.pop_front();
        assert!(!s.conn.whole_message_input(&send(1, 0, b"none"), &s.table));
        // Not yet established.
        let mut s = setup();
        s.conn.phase = Phase::Error;
        assert!(!s.conn.whole_message_input(&send(1, 0, b"late"), &s.table));
    }
}
