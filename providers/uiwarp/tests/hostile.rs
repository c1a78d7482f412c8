//! Hostile input: every case ends in a TERMINATE, the QP in error and clear completion
//! statuses, with no panic and nothing touched outside a registration.

mod common;

use common::*;
use rdmasock_uiwarp::core::{CloseReason, Config, Event, Origin, SendOperation, WorkQueue};
use rdmasock_uiwarp::wire::ddp::{Opcode, Placement, Segment};
use rdmasock_uiwarp::wire::fpdu::Fpdu;
use rdmasock_uiwarp::wire::rdmap::{ReadRequestRepr, TerminateCode};
use rdmasock_verbs::{AccessFlags, QpState, RemoteKey, WcStatus};
use std::sync::Arc;

/// An established pair; `b` is the victim with one receive posted (wr 100, 64 bytes in the
/// middle of `recv_mem`) and, unless built by [`victim_without_send`], a zero-length send
/// request queued behind nothing (wr 200, unsent because `b` is never polled for it), which
/// hostile input must flush.
struct Victim {
    sim: Sim,
    mem: Arc<rdmasock_verbs::RegisteredMemory>,
    /// 192 bytes; only 64..128 are registered (LOCAL_WRITE), for receive wr 100. The rest are
    /// guards that nothing may write.
    recv_mem: Arc<rdmasock_verbs::RegisteredMemory>,
    /// A REMOTE_WRITE region covering bytes 1024..2048 of `mem`, with guards either side.
    write_key: u32,
    write_addr: u64,
    read_key: u32,
    read_addr: u64,
}

/// A victim with the send request wr 200 queued.
fn victim(b_config: Config) -> Victim {
    victim_with(b_config, true)
}

/// A victim without the queued send, for tests that run the simulation: `b` would send it.
fn victim_without_send(b_config: Config) -> Victim {
    victim_with(b_config, false)
}

fn victim_with(b_config: Config, queued_send: bool) -> Victim {
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
    fn inject(&mut self, bytes: &[u8]) {
        let b = &mut self.sim.b;
        b.conn.handle_input(bytes, &b.table);
    }

    /// The TERMINATE went out and nothing else did (no READ response, no queued SEND), the
    /// receive was flushed (or charged `recv_status`), the queued send was flushed, and no
    /// byte of the memory changed.
    #[track_caller]
    fn check(&mut self, code: TerminateCode, recv_status: WcStatus) {
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
    fn expect_send_flushed(&self) {
        assert_eq!(
            self.sim.b.completions_of(WorkQueue::Send),
            vec![(200, WcStatus::WorkRequestFlushError, 0)],
            "the queued send must be flushed by the error"
        );
    }

    /// No byte of the REMOTE_WRITE/REMOTE_READ memory or of the receive buffer and its guards
    /// changed.
    #[track_caller]
    fn expect_untouched(&self) {
        assert!(
            self.mem.as_slice().iter().all(|&x| x == 0),
            "memory was touched"
        );
        assert!(
            self.recv_mem.as_slice().iter().all(|&x| x == 0),
            "the receive buffer or its guards were touched"
        );
    }
}

/// The RDMAP opcodes of the FPDUs in `bytes`, in order (`bytes` must hold whole FPDUs).
fn opcodes(mut bytes: &[u8]) -> Vec<Opcode> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let f = Fpdu::new_checked(bytes).expect("whole FPDUs");
        let seg = Segment::new_checked(f.ulpdu()).expect("a DDP segment");
        out.push(Opcode::from_raw(seg.opcode_raw()).expect("a known opcode"));
        bytes = &bytes[f.total_len()..];
    }
    out
}

fn write_frame(stag: u32, offset: u64, data: &[u8]) -> Vec<u8> {
    frame(
        true,
        true,
        Opcode::RdmaWrite,
        Placement::Tagged { stag, offset },
        data,
    )
}

fn read_request(msn: u32, r: ReadRequestRepr) -> Vec<u8> {
    let mut body = Vec::new();
    r.append(&mut body);
    frame(true, true, Opcode::ReadRequest, untagged(1, msn, 0), &body)
}

#[test]
fn bad_crc() {
    let mut v = victim(Config::default());
    let mut f = frame(true, true, Opcode::Send, untagged(0, 1, 0), b"payload!");
    f[22] ^= 0x40;
    v.inject(&f);
    v.check(TerminateCode::LLP_CRC, WcStatus::WorkRequestFlushError);
}

#[test]
fn malformed_frames() {
    let cases: Vec<(Vec<u8>, TerminateCode)> = vec![
        // ULPDU shorter than any DDP header.
        (
            vec![0, 4, 0x41, 0x43, 0, 0, 0, 0, 0, 0],
            TerminateCode::LLP_FPDU,
        ),
        (
            patch(
                frame(true, true, Opcode::Send, untagged(0, 1, 0), b"x"),
                2,
                0x42,
            ),
            TerminateCode::DDP_UNTAGGED_VERSION,
        ),
        (
            patch(
                frame(
                    true,
                    true,
                    Opcode::RdmaWrite,
                    Placement::Tagged { stag: 0, offset: 0 },
                    b"x",
                ),
                2,
                0xC0,
            ),
            TerminateCode::DDP_TAGGED_VERSION,
        ),
        (
            patch(
                frame(true, true, Opcode::Send, untagged(0, 1, 0), b"x"),
                3,
                0x03,
            ),
            TerminateCode::RDMAP_VERSION,
        ),
        (
            patch(
                frame(true, true, Opcode::Send, untagged(0, 1, 0), b"x"),
                3,
                0x49,
            ),
            TerminateCode::RDMAP_UNEXPECTED_OPCODE,
        ),
        (
            patch(
                frame(true, true, Opcode::Send, untagged(0, 1, 0), b"x"),
                3,
                0x40,
            ),
            TerminateCode::RDMAP_UNEXPECTED_OPCODE,
        ),
        (
            frame(true, true, Opcode::Send, untagged(5, 1, 0), b"x"),
            TerminateCode::DDP_UNTAGGED_INVALID_QN,
        ),
        (
            frame(true, true, Opcode::Send, untagged(0, 2, 0), b"x"),
            TerminateCode::DDP_UNTAGGED_MSN_RANGE,
        ),
        (
            frame(true, true, Opcode::Send, untagged(0, 1, 4), b"x"),
            TerminateCode::DDP_UNTAGGED_INVALID_MO,
        ),
        (
            frame(true, true, Opcode::Send, untagged(1, 1, 0), b"x"),
            TerminateCode::DDP_UNTAGGED_INVALID_QN,
        ),
        (
            frame(
                true,
                true,
                Opcode::ReadResponse,
                Placement::Tagged { stag: 0, offset: 0 },
                b"x",
            ),
            TerminateCode::RDMAP_UNEXPECTED_OPCODE,
        ),
        (
            frame(true, true, Opcode::ReadRequest, untagged(1, 1, 0), &[0; 20]),
            TerminateCode::DDP_UNTAGGED_INVALID_MO,
        ),
    ];
    for (bytes, code) in cases {
        let mut v = victim(Config::default());
        v.inject(&bytes);
        v.check(code, WcStatus::WorkRequestFlushError);
    }
}

/// A DDP segment shorter than the header its T bit announces: ULPDUs of 14 to 17 bytes (a
/// tagged header's worth and up) whose control bytes say untagged SEND (18-byte header), with
/// the CRC recomputed so that the DDP layer, not the CRC check, sees them. Each is a
/// malformed segment (the core's code for it is LLP_FPDU, as for a ULPDU shorter than any
/// header), with the usual TERMINATE, flushes and untouched memory.
#[test]
fn ddp_segment_shorter_than_its_header() {
    for extra in 0..4usize {
        let tagged = frame(
            true,
            true,
            Opcode::RdmaWrite,
            Placement::Tagged { stag: 0, offset: 0 },
            &vec![0u8; extra],
        );
        assert_eq!(
            usize::from(u16::from_be_bytes([tagged[0], tagged[1]])),
            14 + extra
        );
        let bytes = patch(patch(tagged, 2, 0x41), 3, 0x43);
        let mut v = victim(Config::default());
        v.inject(&bytes);
        v.check(TerminateCode::LLP_FPDU, WcStatus::WorkRequestFlushError);
    }
}

/// Sets byte `at` of FPDU `f` to `value` and recomputes the CRC.
fn patch(mut f: Vec<u8>, at: usize, value: u8) -> Vec<u8> {
    f[at] = value;
    let ulpdu = usize::from(u16::from_be_bytes([f[0], f[1]]));
    let end = rdmasock_uiwarp::wire::fpdu::frame_len(ulpdu) - 4;
    let crc = rdmasock_uiwarp::wire::crc32c::checksum(&f[..end]);
    f[end..end + 4].copy_from_slice(&crc.to_le_bytes());
    f
}

#[test]
fn writes_outside_the_region_or_with_a_wrong_stag() {
    let cases = |v: &Victim| -> Vec<(Vec<u8>, TerminateCode)> {
        vec![
            (
                write_frame(v.write_key, v.write_addr + 1020, b"overflow"),
                TerminateCode::DDP_TAGGED_BASE_BOUNDS,
            ),
            (
                write_frame(v.write_key, v.write_addr - 1, b"under"),
                TerminateCode::DDP_TAGGED_BASE_BOUNDS,
            ),
            (
                write_frame(v.write_key, u64::MAX - 2, b"wraps"),
                TerminateCode::DDP_TAGGED_TO_WRAP,
            ),
            (
                write_frame(v.write_key + 1, v.write_addr, b"nokey"),
                TerminateCode::DDP_TAGGED_INVALID_STAG,
            ),
            (
                write_frame(v.read_key, v.read_addr, b"readonly"),
                TerminateCode::RDMAP_ACCESS_RIGHTS,
            ),
        ]
    };
    for i in 0..5 {
        let mut v = victim(Config::default());
        let (bytes, code) = cases(&v).swap_remove(i);
        v.inject(&bytes);
        v.check(code, WcStatus::WorkRequestFlushError);
    }
    // A multi-segment WRITE that changes STag or skips ahead half way.
    for second in [0u8, 1] {
        let mut v = victim(Config::default());
        let first = frame(
            true,
            false,
            Opcode::RdmaWrite,
            Placement::Tagged {
                stag: v.write_key,
                offset: v.write_addr,
            },
            b"abcd",
        );
        v.inject(&first);
        assert_eq!(v.sim.b.conn.qp_state(), QpState::ReadyToSend);
        let (stag, off, code) = if second == 0 {
            (
                v.read_key,
                v.write_addr + 4,
                TerminateCode::DDP_TAGGED_INVALID_STAG,
            )
        } else {
            (
                v.write_key,
                v.write_addr + 8,
                TerminateCode::DDP_TAGGED_BASE_BOUNDS,
            )
        };
        v.inject(&write_frame(stag, off, b"efgh"));
        v.sim.b.expect_terminate(code);
        assert_eq!(&v.mem.as_slice()[1024..1028], b"abcd");
        assert!(v.mem.as_slice()[..1024].iter().all(|&x| x == 0));
        assert!(v.mem.as_slice()[1028..].iter().all(|&x| x == 0));
        v.expect_send_flushed();
    }
}

#[test]
fn read_requests_outside_the_region_wrong_stag_or_rights() {
    let base = |v: &Victim| ReadRequestRepr {
        sink_stag: 9,
        sink_offset: 0,
        size: 16,
        source_stag: v.read_key,
        source_offset: v.read_addr,
    };
    type Make = Box<dyn Fn(&Victim) -> ReadRequestRepr>;
    let cases: Vec<(Make, TerminateCode)> = vec![
        (
            Box::new(move |v| ReadRequestRepr {
                source_offset: v.read_addr + 1010,
                ..base(v)
            }),
            TerminateCode::RDMAP_BASE_BOUNDS,
        ),
        (
            Box::new(move |v| ReadRequestRepr {
                source_stag: 0x7777,
                ..base(v)
            }),
            TerminateCode::RDMAP_INVALID_STAG,
        ),
        (
            Box::new(move |v| ReadRequestRepr {
                source_stag: v.write_key,
                source_offset: v.write_addr,
                ..base(v)
            }),
            TerminateCode::RDMAP_ACCESS_RIGHTS,
        ),
        (
            Box::new(move |v| ReadRequestRepr {
                source_offset: u64::MAX - 4,
                ..base(v)
            }),
            TerminateCode::RDMAP_TO_WRAP,
        ),
    ];
    for (make, code) in cases {
        let mut v = victim(Config::default());
        let r = make(&v);
        v.inject(&read_request(1, r));
        v.check(code, WcStatus::WorkRequestFlushError);
    }
}

#[test]
fn reads_beyond_ird() {
    let mut v = victim(Config {
        ird: 2,
        ..Config::default()
    });
    let r = ReadRequestRepr {
        sink_stag: 9,
        sink_offset: 0,
        size: 8,
        source_stag: v.read_key,
        source_offset: v.read_addr,
    };
    v.inject(&read_request(1, r));
    v.inject(&read_request(2, r));
    assert_eq!(
        v.sim.b.conn.qp_state(),
        QpState::ReadyToSend,
        "two READs fit IRD 2"
    );
    v.inject(&read_request(3, r));
    // No READ response goes out, not even for the two READs within IRD: only the TERMINATE.
    v.check(
        TerminateCode::RDMAP_CATASTROPHIC_STREAM,
        WcStatus::WorkRequestFlushError,
    );
}

#[test]
fn sends_without_buffer_or_too_long() {
    let mut v = victim(Config::default());
    v.inject(&frame(
        true,
        true,
        Opcode::Send,
        untagged(0, 1, 0),
        &[1u8; 65],
    ));
    let out = v
        .sim
        .b
        .expect_terminate(TerminateCode::DDP_UNTAGGED_TOO_LONG);
    assert_eq!(opcodes(&out), vec![Opcode::Terminate]);
    assert_eq!(
        v.sim.b.completions_of(WorkQueue::Receive),
        vec![(100, WcStatus::LocalLengthError, 0)]
    );
    let recv = v
        .sim
        .b
        .completions
        .iter()
        .find(|c| c.queue == WorkQueue::Receive)
        .unwrap();
    assert_eq!(
        recv.completion.vendor_err, 0x0101_0205,
        "marker bit, layer DDP, etype 2, code 5"
    );
    v.expect_send_flushed();
    // Not one byte of the 65 was placed, in the buffer or past it.
    v.expect_untouched();

    let mut v = victim(Config::default());
    v.inject(&frame(true, true, Opcode::Send, untagged(0, 1, 0), b"ok"));
    v.inject(&frame(
        true,
        true,
        Opcode::Send,
        untagged(0, 2, 0),
        b"no buffer",
    ));
    v.sim
        .b
        .expect_terminate(TerminateCode::DDP_UNTAGGED_NO_BUFFER);
    assert_eq!(
        v.sim.b.completions_of(WorkQueue::Receive),
        vec![(100, WcStatus::Success, 2)]
    );
    v.expect_send_flushed();
    assert_eq!(&v.recv_mem.as_slice()[64..66], b"ok");
    assert!(v.recv_mem.as_slice()[..64].iter().all(|&x| x == 0));
    assert!(v.recv_mem.as_slice()[66..].iter().all(|&x| x == 0));
    assert!(v.mem.as_slice().iter().all(|&x| x == 0));
}

#[test]
fn peer_reset_mid_frame() {
    let mut v = victim(Config::default());
    let f = frame(true, true, Opcode::Send, untagged(0, 1, 0), b"half a frame");
    v.inject(&f[..f.len() / 2]);
    v.sim.b.conn.handle_peer_closed(true);
    v.sim.b.drain_now();
    assert!(v
        .sim
        .b
        .events
        .contains(&Event::Closed(CloseReason::PeerClosedMidFrame)));
    assert_eq!(v.sim.b.conn.qp_state(), QpState::Error);
    assert_eq!(
        v.sim.b.completions_of(WorkQueue::Receive),
        vec![(100, WcStatus::WorkRequestFlushError, 0)]
    );
    v.expect_send_flushed();
    assert!(v.sim.b.conn.should_close());
    // A FIN between frames is a plain close.
    let mut v = victim(Config::default());
    v.sim.b.conn.handle_peer_closed(false);
    v.sim.b.drain_now();
    assert!(v
        .sim
        .b
        .events
        .contains(&Event::Closed(CloseReason::PeerClosed)));
}

/// The requester's side of a peer's TERMINATE: the READ it concerns fails with a remote
/// access error, everything after it is flushed, in order.
#[test]
fn requester_sees_remote_errors() {
    let mut v = victim_without_send(Config::default());
    let (k, addr, _) = v
        .sim
        .a
        .region(256, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
    let (rk, raddr, _) = v.sim.a.region(64, AccessFlags::LOCAL_WRITE);
    v.sim.a.recv(7, rk, raddr, 64);
    v.sim.a.send(
        1,
        SendOperation::RdmaRead {
            remote_addr: v.read_addr + 1000,
            rkey: RemoteKey(v.read_key),
        },
        vec![segment(k, addr, 100)],
    );
    v.sim.a.send(
        2,
        SendOperation::RdmaWrite {
            remote_addr: v.write_addr,
            rkey: RemoteKey(v.write_key),
        },
        vec![segment(k, addr, 10)],
    );
    v.sim.a.send(
        3,
        SendOperation::Send {
            solicited: false,
            invalidate: None,
        },
        vec![segment(k, addr, 10)],
    );
    v.sim.run();
    // The WRITE and SEND were handed over before the TERMINATE came back, so they succeeded
    // (as in siw); they complete after the READ, in posting order.
    assert_eq!(
        v.sim.a.completions_of(WorkQueue::Send),
        vec![
            (1, WcStatus::RemoteAccessError, 0),
            (2, WcStatus::Success, 10),
            (3, WcStatus::Success, 10)
        ]
    );
    assert_eq!(
        v.sim.a.completions_of(WorkQueue::Receive),
        vec![(7, WcStatus::WorkRequestFlushError, 0)]
    );
    let t = v.sim.a.terminated().unwrap();
    assert_eq!(
        (t.origin, t.code),
        (Origin::Remote, TerminateCode::RDMAP_BASE_BOUNDS)
    );
    assert_eq!(v.sim.a.conn.qp_state(), QpState::Error);
    assert_eq!(
        v.sim.b.terminated().unwrap().code,
        TerminateCode::RDMAP_BASE_BOUNDS
    );
    assert!(v.mem.as_slice().iter().all(|&x| x == 0));
}

#[test]
fn local_protection_errors_fail_the_request() {
    let mut v = victim_without_send(Config::default());
    let (k, addr, _) = v.sim.a.region(64, AccessFlags::LOCAL_WRITE);
    // A READ sink without REMOTE_WRITE, then a request behind it.
    v.sim.a.send(
        1,
        SendOperation::RdmaRead {
            remote_addr: v.read_addr,
            rkey: RemoteKey(v.read_key),
        },
        vec![segment(k, addr, 8)],
    );
    v.sim.a.send(
        2,
        SendOperation::Send {
            solicited: false,
            invalidate: None,
        },
        vec![segment(k, addr, 8)],
    );
    v.sim.run();
    assert_eq!(
        v.sim.a.completions_of(WorkQueue::Send),
        vec![
            (1, WcStatus::LocalProtectionError, 0),
            (2, WcStatus::WorkRequestFlushError, 0)
        ]
    );
    assert_eq!(
        v.sim.a.terminated().unwrap().code,
        TerminateCode::RDMAP_LOCAL_CATASTROPHIC
    );
    let t = v.sim.b.terminated().unwrap();
    assert_eq!(
        (t.origin, t.code),
        (Origin::Remote, TerminateCode::RDMAP_LOCAL_CATASTROPHIC)
    );
    // A gather entry outside its region.
    let mut v = victim_without_send(Config::default());
    let (k, addr, _) = v.sim.a.region(64, AccessFlags::LOCAL_WRITE);
    v.sim.a.send(
        1,
        SendOperation::Send {
            solicited: false,
            invalidate: None,
        },
        vec![segment(k, addr + 60, 8)],
    );
    v.sim.run();
    assert_eq!(
        v.sim.a.completions_of(WorkQueue::Send),
        vec![(1, WcStatus::LocalProtectionError, 0)]
    );
}

#[test]
fn random_garbage_after_setup_never_panics() {
    let mut rng = Rng::new(77);
    for i in 0..300 {
        let mut v = victim_without_send(Config {
            crc: i % 2 == 0,
            ..Config::default()
        });
        let crc = v.sim.b.conn.negotiated().unwrap().crc;
        let mut junk = vec![0u8; 1 + rng.below(200)];
        rng.fill(&mut junk);
        if !crc && i % 4 == 1 {
            // Plausible lengths so that the DDP layer sees the junk.
            let n = junk.len().max(20) as u16 - 6;
            junk[0..2].copy_from_slice(&n.to_be_bytes());
            junk[2] = 0x41 | (junk[2] & 0x80);
            junk[3] = 0x40 | (junk[3] & 0x0f);
        }
        v.inject(&junk);
        v.sim.run();
        let b = &v.sim.b;
        if b.conn.qp_state() == QpState::Error {
            assert!(
                b.terminated().is_some() || b.events.iter().any(|e| matches!(e, Event::Closed(_)))
            );
            assert!(b
                .completions
                .iter()
                .all(|c| !c.completion.status().is_success() || c.queue == WorkQueue::Receive));
        }
        assert!(v.mem.as_slice().iter().all(|&x| x == 0));
        let guards = v.recv_mem.as_slice();
        assert!(guards[..64].iter().chain(&guards[128..]).all(|&x| x == 0));
    }
}

/// A long WRITE to a wrong STag: the peer's TERMINATE arrives while the WRITE is still being
/// sent, so the WRITE itself fails with a remote access error.
#[test]
fn write_in_progress_is_charged_with_the_remote_error() {
    let mut v = victim_without_send(Config::default());
    v.sim.batch = 200;
    let (k, addr, _) = v.sim.a.region(8192, AccessFlags::LOCAL_WRITE);
    v.sim.a.send(
        1,
        SendOperation::RdmaWrite {
            remote_addr: v.write_addr,
            rkey: RemoteKey(0x4444),
        },
        vec![segment(k, addr, 8192)],
    );
    v.sim.a.send(
        2,
        SendOperation::Send {
            solicited: false,
            invalidate: None,
        },
        vec![],
    );
    v.sim.run();
    assert_eq!(
        v.sim.a.completions_of(WorkQueue::Send),
        vec![
            (1, WcStatus::RemoteAccessError, 0),
            (2, WcStatus::WorkRequestFlushError, 0)
        ]
    );
    let t = v.sim.a.terminated().unwrap();
    assert_eq!(
        (t.origin, t.code),
        (Origin::Remote, TerminateCode::DDP_TAGGED_INVALID_STAG)
    );
    assert!(v.mem.as_slice().iter().all(|&x| x == 0));
}
