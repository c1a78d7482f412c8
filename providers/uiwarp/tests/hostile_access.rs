//! Hostile input, placement and rights: WRITEs and READ requests outside a region, with a
//! wrong STag or without the right, READs beyond IRD, SENDs with no buffer or too long, and
//! the requester's side of a peer's TERMINATE. Every case ends in a TERMINATE, the QP in
//! error and clear completion statuses, with no panic and nothing touched outside a
//! registration (the victim is in `common/victim.rs`; malformed frames: `hostile.rs`).

mod common;

use common::victim::*;
use common::*;
use rdmasock_uiwarp::protocol::{Config, Origin, SendOperation, WorkQueue};
use rdmasock_uiwarp::wire::ddp::{Opcode, Placement};
use rdmasock_uiwarp::wire::rdmap::{ReadRequestRepr, TerminateCode};
use rdmasock_verbs::{AccessFlags, QpState, RemoteKey, WcStatus};

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
        assert_eq!(&v.mem.to_vec()[1024..1028], b"abcd");
        assert!(v.mem.to_vec()[..1024].iter().all(|&x| x == 0));
        assert!(v.mem.to_vec()[1028..].iter().all(|&x| x == 0));
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
    assert_eq!(&v.recv_mem.to_vec()[64..66], b"ok");
    assert!(v.recv_mem.to_vec()[..64].iter().all(|&x| x == 0));
    assert!(v.recv_mem.to_vec()[66..].iter().all(|&x| x == 0));
    assert!(v.mem.to_vec().iter().all(|&x| x == 0));
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
    assert!(v.mem.to_vec().iter().all(|&x| x == 0));
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
    assert!(v.mem.to_vec().iter().all(|&x| x == 0));
}
