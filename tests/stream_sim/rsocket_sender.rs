//! A plain rsocket sender, modelled on its wire behaviour, against an engine whose receive
//! ring grows and shrinks: it takes each destination straight from the 16-byte entry the
//! engine wrote into its target list (address, key and length as they lie in memory), uses
//! that entry up in order (advancing the entry's address and length in place) before the
//! next, writes WITH IMMEDIATE, and counts credits from the buffer-update messages. It knows
//! nothing of ring changes: the test checks every write lands inside a ring the engine
//! still holds (an old ring's key is gone the moment the engine hands it back), that no
//! entry is overwritten while the sender still uses it, and the bytes end to end.

use crate::fabric::{Fnv, Rng, Stream};
use rdmasock::protocol::{
    ByteOrder, Hello, LocalRegions, Message, Op, Received, RemoteSge, RingChange, StreamConfig,
    StreamEngine, WrId, SGE_LEN,
};
use std::collections::{HashMap, VecDeque};

const TARGET_ADDR: u64 = 0x7000_0000;
const TARGET_KEY: u32 = 0x77;

/// What the engine's side of the fabric delivers to it, in order.
enum Event {
    Data(WrId, u32),
    SendDone(WrId),
}

struct Receiver {
    engine: StreamEngine,
    /// key -> (address, memory): the rings the engine holds now.
    rings: HashMap<u32, (u64, Vec<u8>)>,
    key: u32,
    next_key: u32,
    /// The ring replaced last, for the bytes left in it (its key is gone: no write may
    /// land there).
    old_ring: Vec<u8>,
    posted: VecDeque<WrId>,
    events: VecDeque<Event>,
    expected: Stream,
    expect_buf: Vec<u8>,
    hash: Fnv,
    received: usize,
    changes: usize,
    largest: usize,
}

impl Receiver {
    /// Posts the engine's ops: receives are posted, sends executed into the sender's
    /// memory at once (they are small), then ring changes carried out.
    fn drain(&mut self, sender: &mut Sender) {
        loop {
            while let Some(op) = self.engine.pop_op() {
                match op {
                    Op::PostRecv { wr_id, .. } => self.posted.push_back(wr_id),
                    Op::WriteWithImm {
                        wr_id,
                        payload,
                        remote_addr,
                        rkey,
                        imm,
                        ..
                    } => {
                        if let Some(bytes) = payload.small_bytes() {
                            assert_eq!(rkey, TARGET_KEY, "a write into the sender's memory");
                            sender.write_target(remote_addr, bytes);
                        }
                        sender.on_message(imm);
                        self.events.push_back(Event::SendDone(wr_id));
                    }
                    Op::Write { wr_id, .. } | Op::Read { wr_id, .. } => {
                        self.events.push_back(Event::SendDone(wr_id))
                    }
                    Op::Send { .. } => panic!("write+send mode is not modelled"),
                    Op::ClearTargetEntry { .. } => {}
                }
            }
            let Some(change) = self.engine.ring_change() else {
                return;
            };
            let RingChange::Receive(len) = change else {
                panic!("the receiver sends nothing: no send-ring change expected");
            };
            let old = self.key;
            self.key = self.next_key;
            self.next_key += 1;
            let addr = 0x1000_0000 * u64::from(self.key);
            self.rings.insert(self.key, (addr, vec![0xEE; len]));
            self.engine.install_recv_ring(addr, self.key, len);
            // The peer writes there no more: its key is gone at once; bytes left in it are
            // read from a copy.
            self.old_ring = self.rings.remove(&old).unwrap().1;
            self.changes += 1;
            self.largest = self.largest.max(len);
        }
    }

    fn feed_one(&mut self, sender: &mut Sender) -> bool {
        let Some(event) = self.events.pop_front() else {
            return false;
        };
        match event {
            Event::Data(wr_id, imm) => {
                self.engine
                    .on_receive(wr_id, Received::Immediate(imm), &[0; 32])
            }
            Event::SendDone(wr_id) => self.engine.on_send_completion(wr_id, true),
        }
        self.drain(sender);
        true
    }

    fn read(&mut self, n: usize, sender: &mut Sender) -> usize {
        let ring = if self.engine.reads_old_recv_ring() {
            &self.old_ring
        } else {
            &self.rings[&self.key].1
        };
        let mut buf = vec![0u8; n];
        let Ok(k) = self.engine.read(n, |c| {
            buf[c.data_offset..c.data_offset + c.len]
                .copy_from_slice(&ring[c.ring_offset..c.ring_offset + c.len]);
        }) else {
            self.drain(sender);
            return 0;
        };
        self.expect_buf.clear();
        self.expected.fill(&mut self.expect_buf, k);
        assert_eq!(
            &buf[..k],
            &self.expect_buf[..],
            "stream corrupted at {}",
            self.received
        );
        self.hash.update(&buf[..k]);
        self.received += k;
        self.drain(sender);
        k
    }
}

struct Sender {
    target: [u8; 2 * SGE_LEN],
    target_sge: usize,
    sseq_no: u16,
    sseq_comp: u16,
    source: Stream,
    hash: Fnv,
    sent: usize,
}

impl Sender {
    fn entry(&self, i: usize) -> RemoteSge {
        RemoteSge::decode(
            &self.target[i * SGE_LEN..(i + 1) * SGE_LEN],
            ByteOrder::Little,
        )
        .unwrap()
    }

    fn set_entry(&mut self, i: usize, sge: RemoteSge) {
        self.target[i * SGE_LEN..(i + 1) * SGE_LEN].copy_from_slice(&sge.encode(ByteOrder::Little));
    }

    fn write_target(&mut self, addr: u64, bytes: &[u8]) {
        let at = (addr - TARGET_ADDR) as usize;
        assert!(at.is_multiple_of(SGE_LEN) && at + bytes.len() <= self.target.len());
        let i = at / SGE_LEN;
        assert_eq!(
            self.entry(i).length,
            0,
            "the receiver overwrote target entry {i} while the sender still used it"
        );
        self.target[at..at + bytes.len()].copy_from_slice(bytes);
    }

    fn on_message(&mut self, imm: u32) {
        if let Message::Sgl(limit) = Message::decode(imm) {
            self.sseq_comp = limit as u16;
        }
    }

    /// rsocket's `rs_write_data`: one message of up to `want` bytes into the current entry.
    fn send(&mut self, want: usize, rx: &mut Receiver) -> bool {
        let sge = self.entry(self.target_sge);
        if self.sseq_no == self.sseq_comp || sge.length == 0 || rx.posted.is_empty() {
            return false;
        }
        let n = want.min(sge.length as usize).min(65536);
        let mut bytes = Vec::new();
        self.source.fill(&mut bytes, n);
        self.hash.update(&bytes);
        let Some((base, ring)) = rx.rings.get_mut(&sge.key) else {
            panic!(
                "a write with key {:#x}: a ring the receiver gave back",
                sge.key
            );
        };
        let at = sge.addr.checked_sub(*base).expect("a write below the ring") as usize;
        assert!(at + n <= ring.len(), "a write past the ring's end");
        ring[at..at + n].copy_from_slice(&bytes);
        let mut left = sge;
        left.addr += n as u64;
        left.length -= n as u32;
        self.set_entry(self.target_sge, left);
        if left.length == 0 {
            self.target_sge = (self.target_sge + 1) % 2;
        }
        self.sseq_no = self.sseq_no.wrapping_add(1);
        let wr_id = rx.posted.pop_front().unwrap();
        rx.events
            .push_back(Event::Data(wr_id, Message::Data(n as u32).encode()));
        self.sent += n;
        true
    }
}

/// Streams `total` bytes from the model to an adaptive engine, with random reads, pauses and
/// idle ticks; checks the bytes and that the ring grew, shrank and grew again.
pub(crate) fn run(seed: u64, total: usize) {
    let cfg = StreamConfig::builder()
        .recv_ring_range(4096, 64 * 1024)
        .recv_queue_depth(32)
        .build()
        .unwrap();
    let key = 1;
    let local = LocalRegions {
        recv_ring_addr: 0x1000_0000,
        recv_ring_rkey: key,
        target_list_addr: 0x9000_0000,
        target_list_rkey: 0x99,
    };
    let mut rx = Receiver {
        engine: StreamEngine::new(cfg.clone(), local),
        rings: HashMap::from([(key, (0x1000_0000, vec![0xEE; 4096]))]),
        key,
        next_key: 2,
        old_ring: Vec::new(),
        posted: VecDeque::new(),
        events: VecDeque::new(),
        expected: Stream::new(seed),
        expect_buf: Vec::new(),
        hash: Fnv::new(),
        received: 0,
        changes: 0,
        largest: 4096,
    };
    let ours = rx.engine.hello();
    let mut tx = Sender {
        target: [0; 2 * SGE_LEN],
        target_sge: 0,
        sseq_no: 0,
        sseq_comp: ours.credits,
        source: Stream::new(seed),
        hash: Fnv::new(),
        sent: 0,
    };
    tx.set_entry(0, ours.data_buf);
    let theirs = Hello {
        flags: 0,
        credits: 64,
        target_iomap_size: 0,
        target_sgl: RemoteSge::new(TARGET_ADDR, TARGET_KEY, 2),
        data_buf: RemoteSge::new(0x5000_0000, 0x55, 4096),
    };
    rx.drain(&mut tx);
    rx.engine.on_connected(&theirs).unwrap();
    rx.drain(&mut tx);
    let mut rng = Rng(seed | 1);
    let mut shrunk_at = None;
    let mut idle = 0u32;
    // Every 256 KiB the sender pauses for a while, and the receiver's timer finds it idle.
    let mut quiet = 0u32;
    let mut next_pause = 256 * 1024;
    while rx.received < total {
        if tx.sent >= next_pause {
            next_pause += 256 * 1024;
            quiet = 3000;
        }
        quiet = quiet.saturating_sub(1);
        let progressed = match rng.below(8) {
            0..=2 if quiet > 0 || tx.sent >= total => false,
            0..=2 => {
                (0..1 + rng.below(8))
                    .filter(|_| {
                        let want = (1 + rng.below(20_000) as usize).min(total - tx.sent);
                        want > 0 && tx.send(want, &mut rx)
                    })
                    .count()
                    > 0
            }
            3..=5 => {
                (0..1 + rng.below(8))
                    .filter(|_| rx.feed_one(&mut tx))
                    .count()
                    > 0
            }
            6 => rx.read(1 + rng.below(40_000) as usize, &mut tx) > 0,
            _ => {
                let before = rx.engine.recv_ring_len();
                if rx.engine.on_idle_tick() && before > cfg.recv_ring_min() {
                    shrunk_at.get_or_insert(rx.changes);
                }
                rx.drain(&mut tx);
                quiet > 0
            }
        };
        if progressed {
            idle = 0;
        } else {
            idle += 1;
            assert!(
                idle < 100_000,
                "no progress: received {} of {total}",
                rx.received
            );
        }
        assert!(rx.engine.error().is_none(), "{:?}", rx.engine.error());
    }
    assert_eq!((rx.received, rx.hash.0), (tx.sent, tx.hash.0));
    assert_eq!(rx.largest, 64 * 1024, "the ring grew to its largest");
    assert!(
        shrunk_at.is_some_and(|at| rx.changes > at),
        "a shrink was started and the ring changed after it ({shrunk_at:?}, {} changes)",
        rx.changes
    );
}
