//! The receive side's chunking and the responder's accept state machine: one byte stream,
//! as an initiator sent it (its MPA request, then FPDUs), fed in the pieces TCP reads could
//! return, with the application deciding on the request late, the clock jumping, and the
//! peer closing early; or the stream broken first.

use super::Input;
use crate::protocol::{
    Config, Connection, Event, LocalSegment, RecvWork, RegionTable, Segments, SendOperation,
    SendWork,
};
use rdmasock_verbs::{AccessFlags, LocalKey, QpState, RegisteredMemory, RemoteKey};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The size of each memory.
const SIZE: usize = 4096;

/// A responder's memory: a region the initiator writes and a buffer for two receives. The
/// reference responder and the chunked one use the same memory (zeroed in between), so that
/// the addresses in the stream are valid for both.
struct Responder {
    table: RegionTable,
    target: Arc<RegisteredMemory>,
    receive: Arc<RegisteredMemory>,
    target_key: u32,
    receive_key: u32,
}

impl Responder {
    fn new() -> Responder {
        let mut table = RegionTable::new();
        let target = Arc::new(RegisteredMemory::allocate(SIZE).expect("4 KiB"));
        let receive = Arc::new(RegisteredMemory::allocate(SIZE).expect("4 KiB"));
        let target_key = table.register(target.clone(), AccessFlags::REMOTE_WRITE);
        let receive_key = table.register(receive.clone(), AccessFlags::LOCAL_WRITE);
        Responder {
            table,
            target,
            receive,
            target_key,
            receive_key,
        }
    }

    /// Zeroes the memory and posts the two receives on `conn`.
    fn prepare(&self, conn: &mut Connection) {
        self.target.write_at(0, &[0; SIZE]).expect("zero");
        self.receive.write_at(0, &[0; SIZE]).expect("zero");
        for half in 0..2 {
            let mut segments = Segments::new();
            segments.push(LocalSegment {
                addr: self.receive.addr() + (half * SIZE / 2) as u64,
                length: (SIZE / 2) as u32,
                lkey: LocalKey(self.receive_key),
            });
            conn.post_recv(RecvWork {
                wr_id: half as u64,
                segments,
            })
            .expect("two receives");
        }
    }

    /// The bytes of both memories.
    fn snapshot(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; 2 * SIZE];
        self.target.read_at(0, &mut bytes[..SIZE]).expect("read");
        self.receive.read_at(0, &mut bytes[SIZE..]).expect("read");
        bytes
    }
}

/// A completion as (on the send queue, wr_id, status, byte_len): the fields a chunking
/// cannot change.
type Done = (bool, u64, u32, u32);

/// The completions `conn` has, as [`Done`]s.
fn completions(conn: &mut Connection) -> Vec<Done> {
    let mut all = Vec::new();
    while let Some(c) = conn.poll_completion() {
        let wc = c.completion;
        all.push((
            c.queue == crate::protocol::WorkQueue::Send,
            wc.wr_id,
            wc.status,
            wc.byte_len,
        ));
    }
    all
}

/// An initiator's whole stream to a responder that accepts at once: its MPA request, RTR
/// and the FPDUs of up to four SENDs and WRITEs with lengths from `input`; with what that
/// responder completed and its memory at the end.
fn reference(
    input: &mut Input,
    config: &Config,
    now: Instant,
    memory: &Responder,
) -> (Vec<u8>, Vec<Done>, Vec<u8>) {
    let mut a_table = RegionTable::new();
    let source = Arc::new(RegisteredMemory::allocate(SIZE).expect("4 KiB"));
    let pattern: Vec<u8> = (0..SIZE).map(|i| (i * 31 + 7) as u8).collect();
    source.write_at(0, &pattern).expect("fill");
    let source_key = a_table.register(source.clone(), AccessFlags::empty());
    let mut a = Connection::initiator(config.clone(), b"chunks", now).expect("private data");
    let mut b = Connection::responder(config.clone(), now);
    memory.prepare(&mut b);
    let mut sends = 0;
    for wr_id in 0..u64::from(input.byte() % 5) {
        let len = usize::from(input.u16()) % (SIZE / 2 + 1);
        let mut segments = Segments::new();
        segments.push(LocalSegment {
            addr: source.addr(),
            length: len as u32,
            lkey: LocalKey(source_key),
        });
        // No more SENDs than the two receives.
        let op = if input.byte() & 1 == 0 && sends < 2 {
            sends += 1;
            SendOperation::Send {
                solicited: false,
                invalidate: None,
            }
        } else {
            SendOperation::RdmaWrite {
                remote_addr: memory.target.addr() + (SIZE - len) as u64,
                rkey: RemoteKey(memory.target_key),
            }
        };
        a.post_send(SendWork {
            wr_id,
            op,
            segments,
            small: None,
            signaled: true,
            fence: false,
        })
        .expect("a post");
    }
    let mut stream = Vec::new();
    let mut wire = Vec::new();
    for _ in 0..12 {
        let start = stream.len();
        a.poll_transmit(&a_table, &mut stream, usize::MAX);
        b.handle_input(&stream[start..], &memory.table);
        while let Some(e) = b.poll_event() {
            if let Event::ConnectRequest(_) = e {
                b.accept(b"", now).expect("accept");
                b.handle_input(&[], &memory.table);
            }
        }
        wire.clear();
        b.poll_transmit(&memory.table, &mut wire, usize::MAX);
        a.handle_input(&wire, &a_table);
        while a.poll_event().is_some() {}
    }
    assert_eq!(
        b.qp_state(),
        QpState::ReadyToSend,
        "the reference responder"
    );
    let done = completions(&mut b);
    (stream, done, memory.snapshot())
}

/// Feeds an initiator's stream to a fresh responder in pieces whose sizes come from the
/// input. The first byte picks what happens besides: whether the stream is broken first
/// (a byte changed, or cut short), when the application accepts (at once, some pieces
/// later, or it rejects), whether the clock jumps between pieces, and whether the peer
/// closes early. Undisturbed, the responder must end exactly as the reference one did (the
/// same completions and memory): how TCP cuts a stream must not matter. Disturbed, it must
/// not panic, and a TERMINATE must leave it in error. Returns whether the comparison ran.
pub fn chunking(data: &[u8]) -> bool {
    let mut input = Input(data);
    let mode = input.byte();
    let config = Config {
        crc: mode & 1 != 0,
        ..Config::default()
    };
    let now = Instant::now();
    let memory = Responder::new();
    let (mut stream, expected, memory_expected) = reference(&mut input, &config, now, &memory);
    let broken = match mode >> 1 & 3 {
        1 if !stream.is_empty() => {
            let at = usize::from(input.u16()) % stream.len();
            stream[at] ^= input.byte() | 1;
            true
        }
        2 => {
            stream.truncate(usize::from(input.u16()) % (stream.len() + 1));
            true
        }
        _ => false,
    };
    let accept_delay = usize::from(mode >> 3 & 3);
    let reject = mode >> 3 & 3 == 3;
    let clock = mode & 0x20 != 0;
    let close_early = mode & 0x40 != 0;
    let mut b = Connection::responder(config, now);
    memory.prepare(&mut b);
    let mut clock_now = now;
    let mut requested: Option<usize> = None;
    let mut rest = &stream[..];
    let mut pieces = 0;
    let mut sink = Vec::new();
    let mut ended = None;
    while !rest.is_empty() || requested.is_some_and(|at| pieces <= at + accept_delay) {
        let size = usize::from(input.byte()).max(1) * if input.byte() & 1 == 0 { 1 } else { 37 };
        let (piece, tail) = rest.split_at(size.min(rest.len()));
        rest = tail;
        pieces += 1;
        if clock {
            clock_now += Duration::from_millis(u64::from(input.byte()) * 40);
            if b.poll_timeout().is_some_and(|t| t <= clock_now) {
                b.handle_timeout(clock_now);
            }
        }
        b.handle_input(piece, &memory.table);
        while let Some(e) = b.poll_event() {
            match e {
                Event::ConnectRequest(_) => requested = Some(pieces),
                Event::Terminated(t) => {
                    assert_eq!(b.qp_state(), QpState::Error);
                    ended = Some(t.reason.clone());
                }
                Event::Closed(c) => ended = ended.or(Some(format!("{c:?}"))),
                _ => {}
            }
        }
        if requested.is_some_and(|at| pieces == at + accept_delay) {
            let decided = if reject {
                b.reject(b"no")
            } else {
                b.accept(b"", clock_now)
            };
            // The request may have timed out meanwhile; then the decision is refused.
            if decided.is_ok() {
                b.handle_input(&[], &memory.table);
            }
        }
        sink.clear();
        b.poll_transmit(&memory.table, &mut sink, usize::MAX);
        if close_early && input.byte() < 16 {
            b.handle_peer_closed(input.byte() & 1 != 0);
            assert_eq!(b.qp_state(), QpState::Error, "after the peer closed");
            break;
        }
    }
    let got = completions(&mut b);
    let exact = !broken && accept_delay == 0 && !clock && !close_early;
    if exact {
        assert_eq!(
            b.qp_state(),
            QpState::ReadyToSend,
            "the chunked responder ended: {ended:?}"
        );
        assert_eq!(got, expected, "completions differ from the reference");
        assert!(
            memory.snapshot() == memory_expected,
            "memory differs from the reference"
        );
    }
    exact
}
