//! A seeded, simulated byte stream between two sans-IO connections.
#![allow(dead_code)]

use rdmasock_uiwarp::protocol::{
    Completion, Config, Connection, Event, LocalSegment, RecvWork, RegionTable, SendOperation,
    SendWork, WorkQueue,
};
use rdmasock_verbs::{AccessFlags, LocalKey, RegisteredMemory, WcStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A tiny deterministic PRNG (SplitMix64).
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in 0..n (n > 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub(crate) fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.next() as u8;
        }
    }
}

/// How bytes travel from one side to the other.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// Each transmitted batch arrives in one piece.
    Whole,
    /// Each batch is cut once at this byte (every split point, one run each).
    SplitAt(usize),
    /// Random pieces of 1..=max bytes.
    Random { max: usize },
    /// Batches pile up and arrive together, every few steps.
    Coalesce,
    /// The reader takes at most this many bytes per step; the writer keeps producing.
    SlowReader { per_step: usize },
}

/// One end: its connection, its memory, what it saw.
pub(crate) struct Side {
    pub conn: Connection,
    pub table: RegionTable,
    pub memory: Vec<Arc<RegisteredMemory>>,
    pub events: Vec<Event>,
    pub completions: Vec<Completion>,
    /// Bytes sent but not yet delivered to the other side.
    pub in_flight: Vec<u8>,
    pub auto_accept: Option<Vec<u8>>,
}

impl Side {
    pub(crate) fn new(conn: Connection) -> Side {
        Side {
            conn,
            table: RegionTable::new(),
            memory: Vec::new(),
            events: Vec::new(),
            completions: Vec::new(),
            in_flight: Vec::new(),
            auto_accept: None,
        }
    }

    /// Allocates and registers `len` bytes; returns (key, address, memory).
    pub(crate) fn region(
        &mut self,
        len: usize,
        access: AccessFlags,
    ) -> (u32, u64, Arc<RegisteredMemory>) {
        let m = Arc::new(RegisteredMemory::allocate(len).expect("allocate"));
        let key = self.table.register(m.clone(), access);
        self.memory.push(m.clone());
        (key, m.addr(), m)
    }

    pub(crate) fn recv(&mut self, wr_id: u64, key: u32, addr: u64, len: u32) {
        self.conn
            .post_recv(RecvWork {
                wr_id,
                segments: vec![LocalSegment {
                    addr,
                    length: len,
                    lkey: LocalKey(key),
                }]
                .into(),
            })
            .expect("post_recv");
    }

    pub(crate) fn send(&mut self, wr_id: u64, op: SendOperation, segments: Vec<LocalSegment>) {
        self.conn
            .post_send(SendWork {
                wr_id,
                op,
                segments: segments.into(),
                small: None,
                signaled: true,
                fence: false,
            })
            .expect("post_send");
    }

    fn drain(&mut self, now: Instant) {
        while let Some(e) = self.conn.poll_event() {
            if let (Event::ConnectRequest(_), Some(pd)) = (&e, &self.auto_accept) {
                self.conn.accept(&pd.clone(), now).expect("accept");
            }
            self.events.push(e);
        }
        while let Some(c) = self.conn.poll_completion() {
            self.completions.push(c);
        }
    }

    pub(crate) fn completions_of(&self, queue: WorkQueue) -> Vec<(u64, WcStatus, u32)> {
        self.completions
            .iter()
            .filter(|c| c.queue == queue)
            .map(|c| {
                (
                    c.completion.wr_id,
                    c.completion.status(),
                    c.completion.byte_len,
                )
            })
            .collect()
    }

    pub(crate) fn established(&self) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e, Event::Established(_)))
    }

    pub(crate) fn terminated(&self) -> Option<&rdmasock_uiwarp::protocol::Termination> {
        self.events.iter().find_map(|e| match e {
            Event::Terminated(t) => Some(t),
            _ => None,
        })
    }
}

/// Two connected ends and the stream between them.
pub(crate) struct Sim {
    pub a: Side,
    pub b: Side,
    pub rng: Rng,
    pub now: Instant,
    pub delivery: Delivery,
    /// Largest batch one `poll_transmit` call may append (roughly).
    pub batch: usize,
    step_count: u64,
    max_batch: usize,
    /// When set, every transmitted batch in order: (from the initiator?, bytes).
    pub trace: Option<Vec<(bool, Vec<u8>)>>,
}

pub(crate) fn segment(key: u32, addr: u64, len: u32) -> LocalSegment {
    LocalSegment {
        addr,
        length: len,
        lkey: LocalKey(key),
    }
}

impl Sim {
    /// An initiator `a` and a responder `b` that accepts with private data "welcome".
    pub(crate) fn new(seed: u64, a_config: Config, b_config: Config, delivery: Delivery) -> Sim {
        let now = Instant::now();
        let a = Connection::initiator(a_config, b"hello", now).expect("initiator");
        let mut b = Side::new(Connection::responder(b_config, now));
        b.auto_accept = Some(b"welcome".to_vec());
        Sim {
            a: Side::new(a),
            b,
            rng: Rng::new(seed),
            now,
            delivery,
            batch: 1 << 16,
            step_count: 0,
            max_batch: 0,
            trace: None,
        }
    }

    pub(crate) fn advance(&mut self, d: Duration) {
        self.now += d;
        self.a.conn.handle_timeout(self.now);
        self.b.conn.handle_timeout(self.now);
    }

    /// One round: each side transmits, then some bytes travel each way. Returns whether
    /// anything happened.
    pub(crate) fn step(&mut self) -> bool {
        self.step_count += 1;
        let mut progress = false;
        for (from_a, side) in [(true, &mut self.a), (false, &mut self.b)] {
            let mut out = Vec::new();
            side.conn.poll_transmit(&side.table, &mut out, self.batch);
            progress |= !out.is_empty();
            self.max_batch = self.max_batch.max(out.len());
            if let (Some(t), false) = (&mut self.trace, out.is_empty()) {
                t.push((from_a, out.clone()));
            }
            side.in_flight.extend_from_slice(&out);
        }
        let (a, b) = (&mut self.a, &mut self.b);
        progress |= Self::deliver(&mut self.rng, self.delivery, self.step_count, a, b);
        progress |= Self::deliver(&mut self.rng, self.delivery, self.step_count, b, a);
        self.a.drain(self.now);
        self.b.drain(self.now);
        progress
    }

    fn deliver(rng: &mut Rng, d: Delivery, step: u64, from: &mut Side, to: &mut Side) -> bool {
        if from.in_flight.is_empty() {
            return false;
        }
        let bytes = match d {
            Delivery::Coalesce if !step.is_multiple_of(3) => return false,
            Delivery::SlowReader { per_step } => {
                let n = per_step.min(from.in_flight.len());
                from.in_flight.drain(..n).collect::<Vec<u8>>()
            }
            _ => std::mem::take(&mut from.in_flight),
        };
        match d {
            Delivery::SplitAt(k) => {
                let k = k.min(bytes.len());
                to.conn.handle_input(&bytes[..k], &to.table);
                to.conn.handle_input(&bytes[k..], &to.table);
            }
            Delivery::Random { max } => {
                let mut rest = &bytes[..];
                while !rest.is_empty() {
                    let n = 1 + rng.below(max.min(rest.len()));
                    to.conn.handle_input(&rest[..n], &to.table);
                    rest = &rest[n..];
                }
            }
            _ => to.conn.handle_input(&bytes, &to.table),
        }
        true
    }

    /// Steps until nothing moves for a few rounds; releases the responder's first-FPDU hold
    /// by advancing time when the stream is otherwise idle.
    pub(crate) fn run(&mut self) {
        let mut idle = 0;
        for _ in 0..100_000 {
            if self.step() {
                idle = 0;
            } else {
                idle += 1;
                if idle == 2 {
                    self.advance(Duration::from_millis(60));
                }
                if idle > 4 {
                    return;
                }
            }
        }
        panic!("the simulation did not settle");
    }

    /// The largest batch one `poll_transmit` gave.
    pub(crate) fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Runs the handshake and checks both sides are established.
    pub(crate) fn connect(&mut self) {
        self.run();
        assert!(
            self.a.established(),
            "initiator events: {:?}",
            self.a.events
        );
        assert!(
            self.b.established(),
            "responder events: {:?}",
            self.b.events
        );
    }
}

pub(crate) fn p2p_off() -> Config {
    Config {
        peer_to_peer: false,
        ..Config::default()
    }
}

pub(crate) fn small_mulpdu(mulpdu: u16) -> Config {
    Config {
        mulpdu,
        ..Config::default()
    }
}

use rdmasock_uiwarp::protocol::Origin;
use rdmasock_uiwarp::wire::ddp::{Opcode, Placement, Segment, SegmentRepr};
use rdmasock_uiwarp::wire::fpdu::{self, Fpdu};
use rdmasock_uiwarp::wire::rdmap::{TerminateCode, TerminateRepr};

/// One FPDU with the given header and body.
pub(crate) fn frame(
    crc: bool,
    last: bool,
    opcode: Opcode,
    placement: Placement,
    body: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    let start = fpdu::begin(&mut out);
    SegmentRepr {
        last,
        opcode,
        placement,
    }
    .append(&mut out);
    out.extend_from_slice(body);
    fpdu::finish(&mut out, start, crc);
    out
}

/// An untagged SEND segment header.
pub(crate) fn untagged(queue: u32, msn: u32, offset: u32) -> Placement {
    Placement::Untagged {
        reserved_ulp: 0,
        queue,
        msn,
        offset,
    }
}

/// Finds the TERMINATE among FPDUs in `bytes`.
pub(crate) fn find_terminate(mut bytes: &[u8]) -> Option<TerminateCode> {
    if bytes.starts_with(b"MPA ID Re") {
        let len = rdmasock_uiwarp::wire::mpa::MpaFrame::<&[u8]>::frame_len(bytes)?;
        bytes = &bytes[len..];
    }
    while let Ok(f) = Fpdu::new_checked(bytes) {
        let len = f.total_len();
        if let Ok(seg) = Segment::new_checked(f.ulpdu()) {
            if let Ok(r) = SegmentRepr::parse(&seg) {
                if r.opcode == Opcode::Terminate {
                    return TerminateRepr::parse(seg.payload()).ok().map(|t| t.code);
                }
            }
        }
        bytes = &bytes[len..];
    }
    None
}

impl Side {
    /// Checks this side found an error: it sends a TERMINATE with `code`, reports it, is in
    /// the error state, and asks the driver to close once the bytes are out.
    #[track_caller]
    pub(crate) fn expect_terminate(&mut self, code: TerminateCode) -> Vec<u8> {
        let mut out = Vec::new();
        self.conn.poll_transmit(&self.table, &mut out, usize::MAX);
        self.drain(Instant::now());
        assert_eq!(
            find_terminate(&out),
            Some(code),
            "sent {} bytes; events {:?}",
            out.len(),
            self.events
        );
        let t = self.terminated().expect("a Terminated event");
        assert_eq!((t.origin, t.code), (Origin::Local, code), "{}", t.reason);
        assert!(!t.reason.is_empty());
        assert_eq!(self.conn.qp_state(), rdmasock_verbs::QpState::Error);
        assert!(self.conn.should_close());
        out
    }

    pub(crate) fn drain_now(&mut self) {
        self.drain(Instant::now());
    }
}
pub(crate) mod victim;
