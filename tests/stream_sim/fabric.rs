//! The simulated RDMA fabric used by `stream_sim.rs`: the work requests and completions it
//! carries, and the fabric that executes each side's requests in order against the peer's
//! memory. Each side (its engine, memory, queues and application) is in `side.rs`.
#![allow(dead_code)]

use rdmasock::protocol::{Hello, StreamConfig, StreamError, WrId};
use std::net::Shutdown;

#[path = "data.rs"]
mod data;
pub(crate) use data::{Fnv, Rng, Stream};

#[path = "side.rs"]
mod side;
pub(crate) use side::Side;

/// Where a posted send's bytes come from when the fabric executes it.
pub(crate) enum Source {
    Captured(Vec<u8>),
    Ring(Vec<(usize, usize)>),
    Control(usize, usize),
}

pub(crate) enum Kind {
    WriteImm(u32),
    Write,
    Send,
    /// A one-byte RDMA READ of the peer's target list (a placement fence): executed in
    /// order, it proves every earlier request placed. One that names other memory is
    /// refused (a TERMINATE): its completion fails.
    Read,
}

pub(crate) struct Posted {
    pub kind: Kind,
    pub wr_id: WrId,
    pub source: Source,
    pub remote_addr: u64,
    pub rkey: u32,
    pub signaled: bool,
}

pub(crate) enum Completion {
    Send(WrId, bool),
    Recv(WrId, Option<u32>),
    RecvFailed(WrId),
}

pub(crate) const RECV_KEY: [u32; 2] = [0xA1, 0xB1];
pub(crate) const TARGET_KEY: [u32; 2] = [0xA2, 0xB2];

pub(crate) fn base(side: usize) -> u64 {
    0x1000_0000_0000 * (side as u64 + 1)
}

pub(crate) struct Fabric {
    pub sides: [Side; 2],
    pub dead: bool,
    pub rng: Rng,
    /// iWARP: a message that finds no receive posted breaks the connection (the test
    /// panics) instead of waiting for one, as InfiniBand's RNR retries do.
    pub no_rnr: bool,
    /// Random steps include the socket layer's idle tick (`StreamEngine::on_idle_tick`).
    pub idle_ticks: bool,
}

pub(crate) enum Step {
    Idle,
    Progress,
}

impl Fabric {
    pub(crate) fn connect(cfg: [StreamConfig; 2], bytes: [usize; 2], seed: u64) -> Self {
        let mut a = Side::new(0, cfg[0].clone(), bytes[0], seed ^ 0x1111);
        let mut b = Side::new(1, cfg[1].clone(), bytes[1], seed ^ 0x2222);
        a.expect_gen = Stream::new(seed ^ 0x2222);
        b.expect_gen = Stream::new(seed ^ 0x1111);
        // Receives are posted before the hello goes out.
        a.drain_ops();
        b.drain_ops();
        let ha = Hello::parse(&a.engine.hello().to_bytes()).unwrap();
        let hb = Hello::parse(&b.engine.hello().to_bytes()).unwrap();
        b.engine.on_connected(&ha).unwrap();
        a.engine.on_connected(&hb).unwrap();
        a.drain_ops();
        b.drain_ops();
        Fabric {
            sides: [a, b],
            dead: false,
            rng: Rng(seed | 1),
            no_rnr: false,
            idle_ticks: false,
        }
    }

    /// Executes the next work request `from` posted, RC-style.
    pub(crate) fn execute(&mut self, from: usize) -> Step {
        let to = 1 - from;
        let Some(wr) = self.sides[from].sq.front() else {
            return Step::Idle;
        };
        let consumes_recv = !matches!(wr.kind, Kind::Write | Kind::Read);
        if self.dead {
            let wr = self.sides[from].sq.pop_front().unwrap();
            self.sides[from]
                .cq
                .push_back(Completion::Send(wr.wr_id, false));
            return Step::Progress;
        }
        if consumes_recv && self.sides[to].rq.is_empty() {
            assert!(
                !self.no_rnr,
                "side {from}'s message found no receive posted at side {to} (iWARP has no \
                 RNR: the connection would break)\n{}",
                self.dump()
            );
            return Step::Idle; // receiver not ready: the requester retries later
        }
        let wr = self.sides[from].sq.pop_front().unwrap();
        let data = self.sides[from].gather(&wr.source);
        let dst = &mut self.sides[to];
        let mut ok = true;
        if !matches!(wr.kind, Kind::Send) && !data.is_empty() {
            let b = base(to);
            let (mem, start): (&mut Vec<u8>, u64) = if wr.rkey == dst.recv_key {
                (&mut dst.recv_ring, dst.recv_base)
            } else if wr.rkey == TARGET_KEY[to] {
                (&mut dst.target, b + 0x1_0000_0000)
            } else if let Some(w) = dst.windows.iter_mut().find(|w| w.0 == wr.rkey) {
                (&mut w.2, w.1)
            } else {
                panic!("write with unknown rkey {:#x}", wr.rkey);
            };
            let off = wr
                .remote_addr
                .checked_sub(start)
                .expect("write below the region") as usize;
            assert!(off + data.len() <= mem.len(), "write past the region end");
            mem[off..off + data.len()].copy_from_slice(&data);
        }
        match wr.kind {
            Kind::Write => {}
            Kind::Read => {
                ok = wr.rkey == TARGET_KEY[to] && wr.remote_addr == base(to) + 0x1_0000_0000
            }
            Kind::WriteImm(imm) => {
                let (id, _) = dst.rq.pop_front().unwrap();
                dst.cq.push_back(Completion::Recv(id, Some(imm)));
            }
            Kind::Send => {
                let (id, slot) = dst.rq.pop_front().unwrap();
                let slot = slot.expect("a SEND needs a receive with a buffer") as usize;
                if data.len() > 4 {
                    ok = false;
                } else {
                    dst.messages[slot * 4..slot * 4 + data.len()].copy_from_slice(&data);
                    dst.cq.push_back(Completion::Recv(id, None));
                }
            }
        }
        if wr.signaled || !ok {
            self.sides[from]
                .cq
                .push_back(Completion::Send(wr.wr_id, ok));
        }
        Step::Progress
    }

    /// Runs the fabric and both completion queues until nothing moves (no application calls).
    pub(crate) fn pump(&mut self) {
        loop {
            let mut any = false;
            for s in 0..2 {
                while matches!(self.execute(s), Step::Progress) {
                    any = true;
                }
            }
            for s in 0..2 {
                while self.sides[s].poll() {
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
    }

    /// One random step; returns whether anything happened.
    pub(crate) fn step(&mut self, max_io: u64) -> bool {
        let s = self.rng.below(2) as usize;
        let n = match self.rng.below(3) {
            0 => 1 + self.rng.below(64),
            1 => 1 + self.rng.below(4096),
            _ => 1 + self.rng.below(max_io),
        } as usize;
        if self.idle_ticks && self.rng.below(64) == 0 {
            let side = &mut self.sides[s];
            let started = side.engine.on_idle_tick();
            side.drain_ops();
            return started;
        }
        match self.rng.below(6) {
            0 => self.app_write(s, n),
            1 => self.app_read(s, n),
            2 | 3 => {
                let k = 1 + self.rng.below(8);
                (0..k).any(|_| matches!(self.execute(s), Step::Progress))
            }
            // The socket layer feeds a batch of completions in one pass.
            _ if self.sides[s].defer_receives => self.sides[s].progress_pass() > 0,
            _ => {
                let k = 1 + self.rng.below(8);
                (0..k).filter(|_| self.sides[s].poll()).count() > 0
            }
        }
    }

    pub(crate) fn app_write(&mut self, s: usize, n: usize) -> bool {
        let side = &mut self.sides[s];
        if side.sent == side.to_send {
            if !side.shut {
                side.shut = true;
                side.engine.shutdown(Shutdown::Write);
                side.drain_ops();
                assert!(side.engine.readiness().write_closed);
                assert_eq!(side.engine.write(1, |_| {}), Err(StreamError::WriteClosed));
                return true;
            }
            return false;
        }
        let before = side.engine.readiness();
        match side.app_write(n) {
            Ok(k) => {
                assert!(
                    k > 0 && before.writable,
                    "wrote {k} without writable readiness"
                );
                true
            }
            Err(StreamError::WouldBlock) => {
                assert!(!before.writable, "WouldBlock while writable: {before:?}");
                false
            }
            Err(e) => panic!("write failed: {e}"),
        }
    }

    pub(crate) fn app_read(&mut self, s: usize, n: usize) -> bool {
        let peek = self.rng.below(4) == 0;
        let side = &mut self.sides[s];
        if side.eof {
            return false;
        }
        let before = side.engine.readiness();
        match side.app_read(n, peek) {
            Ok(_) => {
                assert!(before.readable, "read succeeded without readable readiness");
                true
            }
            Err(StreamError::WouldBlock) => {
                assert!(!before.readable, "WouldBlock while readable: {before:?}");
                false
            }
            Err(e) => panic!("read failed: {e}"),
        }
    }

    pub(crate) fn done(&self) -> bool {
        self.sides.iter().all(|s| {
            s.eof && s.shut && s.engine.all_sends_done() && s.sq.is_empty() && s.cq.is_empty()
        })
    }

    pub(crate) fn run(&mut self, max_io: u64) {
        let mut idle = 0u32;
        while !self.done() {
            if self.step(max_io) {
                idle = 0;
            } else {
                idle += 1;
                assert!(idle < 10_000, "no progress: {}", self.dump());
            }
        }
        for s in 0..2 {
            let (me, peer) = (&self.sides[s], &self.sides[1 - s]);
            assert_eq!(
                me.received, peer.to_send,
                "side {s} received a different length"
            );
            assert_eq!(me.recv_hash.0, peer.sent_hash.0, "side {s}: hash mismatch");
            let r = me.engine.readiness();
            assert!(
                r.disconnected && r.read_closed && r.write_closed && !r.error,
                "{r:?}"
            );
        }
    }

    pub(crate) fn dump(&self) -> String {
        let d = |s: &Side| {
            format!(
                "sent {}/{} recv {} eof {} shut {} sq {} rq {} cq {} ops {} {:?} {:?}",
                s.sent,
                s.to_send,
                s.received,
                s.eof,
                s.shut,
                s.sq.len(),
                s.rq.len(),
                s.cq.len(),
                s.engine.has_ops(),
                s.engine.readiness(),
                s.engine.error()
            )
        };
        format!("A: {}\nB: {}", d(&self.sides[0]), d(&self.sides[1]))
    }
}

/// Small rings and queues, so that tests reach their limits quickly.
pub(crate) fn small_config() -> rdmasock::protocol::StreamConfigBuilder {
    StreamConfig::builder()
        .send_ring(8192)
        .recv_ring(8192)
        .send_queue_depth(16)
        .recv_queue_depth(16)
        .max_transfer(3000)
}

const FOREVER: usize = 1 << 40;

/// Two connected engines with these configurations, both with unbounded data to send.
pub(crate) fn pair(a: StreamConfig, b: StreamConfig) -> Fabric {
    let mut f = Fabric::connect([a, b], [FOREVER, FOREVER], 99);
    f.pump();
    f
}

/// The local regions of an engine made outside a fabric.
pub(crate) fn local_regions() -> rdmasock::protocol::LocalRegions {
    rdmasock::protocol::LocalRegions {
        recv_ring_addr: 0x1000,
        recv_ring_rkey: 1,
        target_list_addr: 0x9000,
        target_list_rkey: 2,
    }
}
