//! The transmit side on arbitrary posts: SENDs, WRITEs and READs of arbitrary lengths and
//! offsets against registered regions, segmented by an arbitrary MULPDU, written to TCP in
//! arbitrary pieces and read in others; every frame must parse back and the bytes must land
//! where a model of the posts says.

use super::Input;
use crate::protocol::connected_pair;
use crate::protocol::{
    Config, Connection, LocalSegment, RecvWork, RegionTable, Segments, SendOperation, SendWork,
    TxQueue, MIN_MULPDU,
};
use crate::wire::ddp::{Segment, SegmentRepr};
use crate::wire::fpdu::Fpdu;
use rdmasock_verbs::{
    AccessFlags, LocalKey, QpState, RegisteredMemory, RemoteKey, SendPiece, WcStatus,
};

use std::sync::Arc;

/// The size of every region.
const REGION: usize = 8192;

/// A region of `REGION` bytes, its content given by `fill`, registered in `table`.
fn region(table: &mut RegionTable, access: AccessFlags, fill: impl Fn(usize) -> u8) -> Side {
    let memory = Arc::new(RegisteredMemory::allocate(REGION).expect("8 KiB"));
    let bytes: Vec<u8> = (0..REGION).map(fill).collect();
    memory.write_at(0, &bytes).expect("fill");
    let key = table.register(memory.clone(), access);
    Side {
        memory,
        key,
        model: bytes,
    }
}

/// A registered region and what the posts so far say it holds.
struct Side {
    memory: Arc<RegisteredMemory>,
    key: u32,
    model: Vec<u8>,
}

impl Side {
    fn addr(&self, offset: usize) -> u64 {
        self.memory.addr() + offset as u64
    }
    fn segment(&self, offset: usize, len: usize) -> Segments {
        let mut s = Segments::new();
        s.push(LocalSegment {
            addr: self.addr(offset),
            length: len as u32,
            lkey: LocalKey(self.key),
        });
        s
    }
    fn check(&self, what: &str) {
        let mut bytes = vec![0u8; REGION];
        self.memory.read_at(0, &mut bytes).expect("read back");
        if let Some(at) = (0..REGION).find(|&i| bytes[i] != self.model[i]) {
            panic!("{what} differs from the posts at byte {at}");
        }
    }
}

/// One direction of the wire: the sender's queue, the bytes in flight, and the bytes sent
/// that do not yet make a whole FPDU to check.
struct Wire {
    queue: TxQueue,
    flight: Vec<u8>,
    unchecked: Vec<u8>,
}

impl Wire {
    /// Moves up to `budget` bytes (at least one FPDU's worth is made) from `from` into the
    /// flight, as a partial TCP write would, and checks every whole FPDU in it; returns how
    /// many bytes it moved.
    fn send(
        &mut self,
        from: &mut Connection,
        table: &RegionTable,
        budget: usize,
        crc: bool,
    ) -> usize {
        from.poll_transmit_queue(table, &mut self.queue, budget);
        let want = budget.max(1);
        let mut bytes = Vec::new();
        {
            let mut pieces = [SendPiece::Bytes(&[]); 8];
            let n = self.queue.pieces(&mut pieces);
            for piece in &pieces[..n] {
                if bytes.len() >= want {
                    break;
                }
                piece
                    .copy_to(&mut bytes)
                    .expect("a queued piece lies inside its memory");
            }
        }
        bytes.truncate(want);
        let taken = bytes.len();
        self.flight.extend_from_slice(&bytes);
        self.unchecked.extend_from_slice(&bytes);
        self.queue.advance(taken, from);
        let mut parsed = 0;
        while let Some(len) = Fpdu::<&[u8]>::peek_len(&self.unchecked[parsed..]) {
            let Ok(frame) = Fpdu::new_checked(&self.unchecked[parsed..]) else {
                break;
            };
            assert_eq!(frame.total_len(), len, "an FPDU's length");
            assert!(
                !crc || frame.crc_is_valid(),
                "an FPDU we made has a bad CRC"
            );
            let segment = Segment::new_checked(frame.ulpdu()).expect("our segment parses");
            SegmentRepr::parse(&segment).expect("our segment header parses");
            parsed += len;
        }
        self.unchecked.drain(..parsed);
        taken
    }

    /// Feeds the first `cut` bytes in flight to `to` (all of them when `cut` is 0).
    fn deliver(&mut self, to: &mut Connection, table: &RegionTable, cut: usize) {
        let n = if cut == 0 {
            self.flight.len()
        } else {
            cut.min(self.flight.len())
        };
        to.handle_input(&self.flight[..n], table);
        self.flight.drain(..n);
    }
}

/// Posts SENDs, WRITEs and READs from an initiator to a responder, both in RTS, and moves
/// the frames between them in arbitrary pieces. The first byte picks CRC and the MULPDU (so
/// that messages split into many segments); then each step is an op byte and its fields. With
/// lengths and offsets inside the regions, every request completes successfully and the
/// responder's write region, its receive buffer and the initiator's READ sink end up as the
/// posts say; an op outside them (now and then) may fail the connection, but nothing may
/// panic or write outside a region. Returns how many requests completed as the model says
/// (zero once an op was out of range).
pub fn transmit(data: &[u8]) -> usize {
    let mut input = Input(data);
    let pick = input.byte();
    let crc = pick & 1 != 0;
    let mulpdu = [MIN_MULPDU, 100, 1000, 4096][usize::from(pick >> 1 & 3)];
    let config = Config {
        crc,
        mulpdu,
        ..Config::default()
    };
    let (mut a_table, mut b_table) = (RegionTable::new(), RegionTable::new());
    let source = region(&mut a_table, AccessFlags::empty(), |i| {
        (i * 7 + i / 251) as u8
    });
    // An iWARP READ sink is written by the peer's READ response: it needs REMOTE_WRITE.
    let sink_access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mut sink = region(&mut a_table, sink_access, |_| 0);
    let mut target = region(&mut b_table, AccessFlags::REMOTE_WRITE, |_| 0);
    let readable = region(&mut b_table, AccessFlags::REMOTE_READ, |i| {
        (i * 13 + 5) as u8
    });
    let mut receive = region(&mut b_table, AccessFlags::LOCAL_WRITE, |_| 0);
    let (mut a, mut b) = connected_pair(config, &a_table, &b_table);
    let (mut ab, mut ba) = (wire(), wire());
    let mut exact = true;
    let (mut posted, mut receives) = (0usize, 0usize);
    while !input.is_empty() {
        let op = input.byte();
        let wild = op & 0x80 != 0 && op & 0x40 != 0;
        let len = usize::from(input.u16()) % (REGION + 1);
        let (from, to) = (usize::from(input.u16()), usize::from(input.u16()));
        let (from, to) = if wild {
            exact = false;
            (from * 3, to * 3)
        } else {
            (from % (REGION - len + 1), to % (REGION - len + 1))
        };
        let work = |op, segments| SendWork {
            wr_id: posted as u64,
            op,
            segments,
            small: None,
            signaled: true,
            fence: false,
        };
        let posted_ok = match op % 4 {
            0 => {
                let half = if receives % 2 == 0 { 0 } else { REGION / 2 };
                let len = len.min(REGION / 2);
                let recv = RecvWork {
                    wr_id: receives as u64,
                    segments: receive.segment(half, REGION / 2),
                };
                if b.post_recv(recv).is_ok() {
                    receives += 1;
                    let send = work(
                        SendOperation::Send {
                            solicited: false,
                            invalidate: None,
                        },
                        source.segment(from, len),
                    );
                    let ok = a.post_send(send).is_ok();
                    if ok && !wild {
                        let bytes = source.model[from..from + len].to_vec();
                        receive.model[half..half + len].copy_from_slice(&bytes);
                    }
                    ok
                } else {
                    false
                }
            }
            1 | 2 => {
                let write = work(
                    SendOperation::RdmaWrite {
                        remote_addr: target.addr(to),
                        rkey: RemoteKey(target.key),
                    },
                    source.segment(from, len),
                );
                let ok = a.post_send(write).is_ok();
                if ok && !wild {
                    let bytes = source.model[from..from + len].to_vec();
                    target.model[to..to + len].copy_from_slice(&bytes);
                }
                ok
            }
            _ => {
                let read = work(
                    SendOperation::RdmaRead {
                        remote_addr: readable.addr(from),
                        rkey: RemoteKey(readable.key),
                    },
                    sink.segment(to, len),
                );
                let ok = a.post_send(read).is_ok();
                if ok && !wild {
                    let bytes = readable.model[from..from + len].to_vec();
                    sink.model[to..to + len].copy_from_slice(&bytes);
                }
                ok
            }
        };
        posted += usize::from(posted_ok);
        // Move some bytes each way, in pieces the input picks.
        let budget = usize::from(input.u16());
        let cut = usize::from(input.u16());
        ab.send(&mut a, &a_table, budget, crc);
        ab.deliver(&mut b, &b_table, cut);
        ba.send(&mut b, &b_table, budget, crc);
        ba.deliver(&mut a, &a_table, cut);
    }
    // Let everything through, until a round moves nothing.
    for _ in 0..4 * posted + 8 {
        let moved = ab.send(&mut a, &a_table, usize::MAX, crc) + ab.flight.len();
        ab.deliver(&mut b, &b_table, 0);
        let moved = moved + ba.send(&mut b, &b_table, usize::MAX, crc) + ba.flight.len();
        ba.deliver(&mut a, &a_table, 0);
        if moved == 0 {
            break;
        }
    }
    let (mut completed, mut received) = (0, 0);
    while let Some(c) = a.poll_completion() {
        let wc = c.completion;
        assert!(!exact || wc.status() == WcStatus::Success, "{wc:?}");
        completed += 1;
    }
    while let Some(c) = b.poll_completion() {
        let wc = c.completion;
        assert!(!exact || wc.status() == WcStatus::Success, "{wc:?}");
        received += 1;
    }
    if exact {
        assert_eq!(a.qp_state(), QpState::ReadyToSend, "the initiator");
        assert_eq!(b.qp_state(), QpState::ReadyToSend, "the responder");
        assert_eq!(completed, posted, "every posted request completes");
        assert_eq!(received, receives, "every posted receive completes");
        target.check("the responder's write region");
        receive.check("the responder's receive buffer");
        sink.check("the initiator's READ sink");
    } else {
        assert!(completed <= posted && received <= receives);
    }
    source.check("the initiator's source region");
    readable.check("the responder's READ source");
    if exact {
        completed
    } else {
        0
    }
}

fn wire() -> Wire {
    Wire {
        queue: TxQueue::new(),
        flight: Vec::new(),
        unchecked: Vec::new(),
    }
}
