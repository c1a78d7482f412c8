//! Hostile input, malformed frames: a bad CRC, broken MPA/DDP/RDMAP headers, a segment
//! shorter than its header, a reset in mid-frame, random garbage. Every case ends in a
//! TERMINATE, the QP in error and clear completion statuses, with no panic and nothing
//! touched (the victim is in `common/victim.rs`; placement and rights: `hostile_access.rs`).

mod common;

use common::victim::*;
use common::*;
use rdmasock_uiwarp::protocol::{CloseReason, Config, Event, WorkQueue};
use rdmasock_uiwarp::wire::ddp::{Opcode, Placement};
use rdmasock_uiwarp::wire::rdmap::TerminateCode;
use rdmasock_verbs::{QpState, WcStatus};

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
        assert!(v.mem.to_vec().iter().all(|&x| x == 0));
        let guards = v.recv_mem.to_vec();
        assert!(guards[..64].iter().chain(&guards[128..]).all(|&x| x == 0));
    }
}
