//! The victim of the hostile-input tests (`hostile.rs`, `hostile_access.rs`): an
//! established pair whose `b` end takes the hostile frames, with guarded memory to prove
//! nothing outside a registration is touched.

use super::*;
use rdmasock_uiwarp::protocol::{Config, SendOperation, WorkQueue};
use rdmasock_uiwarp::wire::ddp::{Opcode, Placement, Segment};
use rdmasock_uiwarp::wire::fpdu::Fpdu;
use rdmasock_uiwarp::wire::rdmap::{ReadRequestRepr, TerminateCode};
use rdmasock_verbs::{AccessFlags, QpState, WcStatus};
use std::sync::Arc;

/// An established pair; `b` is the victim with one receive posted (wr 100, 64 bytes in the
/// middle of `recv_mem`) and, unless built by [`victim_without_send`], a zero-length send
/// request queued behind nothing (wr 200, unsent because `b` is never polled for it), which
/// hostile input must flush.
pub(crate) struct Victim {
    pub sim: Sim,
    pub mem: Arc<rdmasock_verbs::RegisteredMemory>,
    /// 192 bytes; only 64..128 are registered (LOCAL_WRITE), for receive wr 100. The rest are
    /// guards that nothing may write.
    pub recv_mem: Arc<rdmasock_verbs::RegisteredMemory>,
    /// A REMOTE_WRITE region covering bytes 1024..2048 of `mem`, with guards either side.
    pub write_key: u32,
    pub write_addr: u64,
    pub read_key: u32,
    pub read_addr: u64,
}

/// A victim with the send request wr 200 queued.
pub(crate) fn victim(b_config: Config) -> Victim {
    victim_with(b_config, true)
}

/// A victim without the queued send, for tests that run the simulation: `b` would send it.
pub(crate) fn victim_without_send(b_config: Config) -> Victim {
    victim_with(b_config, false)
}

pub(crate) fn victim_with(b_config: Config, queued_send: bool) -> Victim {
    let mut sim = Sim::new(21, Config::default(), b_config, Delivery::Whole);
    let mem = Arc::new(rdmasock_verbs::RegisteredMemory::allocate(4096).unwrap());
    let write_key = sim
        .b
        .table
        .register_range(mem.clone(), 1024, 1024, AccessFlags::REMOTE_WRITE);
    let read_key = sim
        .b
        .table
        .register_range(mem.clone(), 2048, 1024, AccessFlags::REMOTE_READ);
    let recv_mem = Arc::new(rdmasock_verbs::RegisteredMemory::allocate(192).unwrap());
    let rk = sim
        .b
        .table
        .register_range(recv_mem.clone(), 64, 64, AccessFlags::LOCAL_WRITE);
    sim.b.recv(100, rk, recv_mem.addr() + 64, 64);
    sim.connect();
    if queued_send {
        sim.b.send(
            200,
            SendOperation::Send {
                solicited: false,
                invalidate: None,
            },
            vec![],
        );
    }
    Victim {
        write_addr: mem.addr() + 1024,
        read_addr: mem.addr() + 2048,
        sim,
        mem,
        recv_mem,
        write_key,
        read_key,
    }
}

impl Victim {
    pub(crate) fn inject(&mut self, bytes: &[u8]) {
        let b = &mut self.sim.b;
        b.conn.handle_input(bytes, &b.table);
    }

    /// The TERMINATE went out and nothing else did (no READ response, no queued SEND), the
    /// receive was flushed (or charged `recv_status`), the queued send was flushed, and no
    /// byte of the memory changed.
    #[track_caller]
    pub(crate) fn check(&mut self, code: TerminateCode, recv_status: WcStatus) {
        let out = self.sim.b.expect_terminate(code);
        assert_eq!(
            opcodes(&out),
            vec![Opcode::Terminate],
            "the TERMINATE must be the only frame out: no READ response, no SEND"
        );
        assert_eq!(
            self.sim.b.completions_of(WorkQueue::Receive),
            vec![(
                100,
                recv_status,
                self.sim.b.completions_of(WorkQueue::Receive)[0].2
            )]
        );
        self.expect_send_flushed();
        self.expect_untouched();
        // Later posts complete at once as flushed; later input is ignored.
        self.sim.b.recv(101, 0, 0, 0);
        self.inject(&[0xff; 64]);
        self.sim.b.drain_now();
        assert_eq!(
            self.sim
                .b
                .completions_of(WorkQueue::Receive)
                .last()
                .unwrap()
                .1,
            WcStatus::WorkRequestFlushError
        );
        assert_eq!(self.sim.b.conn.qp_state(), QpState::Error);
    }

    /// The queued send (wr 200) completed, flushed, and nothing else on the send queue.
    #[track_caller]
    pub(crate) fn expect_send_flushed(&self) {
        assert_eq!(
            self.sim.b.completions_of(WorkQueue::Send),
            vec![(200, WcStatus::WorkRequestFlushError, 0)],
            "the queued send must be flushed by the error"
        );
    }

    /// No byte of the REMOTE_WRITE/REMOTE_READ memory or of the receive buffer and its guards
    /// changed.
    #[track_caller]
    pub(crate) fn expect_untouched(&self) {
        assert!(
            self.mem.to_vec().iter().all(|&x| x == 0),
            "memory was touched"
        );
        assert!(
            self.recv_mem.to_vec().iter().all(|&x| x == 0),
            "the receive buffer or its guards were touched"
        );
    }
}

/// The RDMAP opcodes of the FPDUs in `bytes`, in order (`bytes` must hold whole FPDUs).
pub(crate) fn opcodes(mut bytes: &[u8]) -> Vec<Opcode> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let f = Fpdu::new_checked(bytes).expect("whole FPDUs");
        let seg = Segment::new_checked(f.ulpdu()).expect("a DDP segment");
        out.push(Opcode::from_raw(seg.opcode_raw()).expect("a known opcode"));
        bytes = &bytes[f.total_len()..];
    }
    out
}

pub(crate) fn write_frame(stag: u32, offset: u64, data: &[u8]) -> Vec<u8> {
    frame(
        true,
        true,
        Opcode::RdmaWrite,
        Placement::Tagged { stag, offset },
        data,
    )
}

pub(crate) fn read_request(msn: u32, r: ReadRequestRepr) -> Vec<u8> {
    let mut body = Vec::new();
    r.append(&mut body);
    frame(true, true, Opcode::ReadRequest, untagged(1, msn, 0), &body)
}
