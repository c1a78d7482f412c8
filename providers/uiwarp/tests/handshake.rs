//! MPA connection setup: states, negotiation, private data, reject, timeouts, RTR rules.

mod common;

use common::*;
use rdmasock_uiwarp::protocol::{
    CloseReason, Config, Connection, Event, ProtocolError, RegionTable, Rtr, SendOperation,
    WorkQueue, MAX_USER_PRIVATE_DATA,
};
use rdmasock_uiwarp::wire::ddp::{Opcode, Placement};
use rdmasock_uiwarp::wire::mpa::{FrameKind, IrdOrd, MpaFrame, MpaRepr, RtrKinds};
use rdmasock_uiwarp::wire::rdmap::TerminateCode;
use rdmasock_verbs::{AccessFlags, QpState, WcStatus};
use std::time::{Duration, Instant};

fn transmit(c: &mut Connection, t: &RegionTable) -> Vec<u8> {
    let mut out = Vec::new();
    c.poll_transmit(t, &mut out, usize::MAX);
    out
}

fn events(c: &mut Connection) -> Vec<Event> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

#[test]
fn peer_to_peer_state_transitions_and_request_bytes() {
    let t = RegionTable::new();
    let now = Instant::now();
    let mut a = Connection::initiator(Config::default(), b"hello", now).unwrap();
    let mut b = Connection::responder(Config::default(), now);
    assert_eq!((a.qp_state(), b.qp_state()), (QpState::Init, QpState::Init));

    let req = transmit(&mut a, &t);
    assert_eq!(&req[..16], b"MPA ID Req Frame");
    assert_eq!(req[16], 0x50, "C and Enhanced");
    assert_eq!(req[17], 2);
    assert_eq!(&req[18..20], &[0, 9]);
    assert_eq!(
        &req[20..24],
        &[0x80, 16, 0xC0, 16],
        "P2P + IRD 16; WRITE and READ RTR + ORD 16"
    );
    assert_eq!(&req[24..], b"hello");
    // Nothing follows the request until the reply, even with work posted.
    a.post_send(rdmasock_uiwarp::protocol::SendWork {
        wr_id: 1,
        op: SendOperation::Send {
            solicited: false,
            invalidate: None,
        },
        segments: Default::default(),
        small: None,
        signaled: true,
        fence: false,
    })
    .unwrap();
    assert!(transmit(&mut a, &t).is_empty());

    b.handle_input(&req[..10], &t);
    assert!(events(&mut b).is_empty());
    b.handle_input(&req[10..], &t);
    let ev = events(&mut b);
    let Event::ConnectRequest(cr) = &ev[0] else {
        panic!("{ev:?}")
    };
    assert_eq!(cr.private_data, b"hello");
    assert_eq!(
        (cr.ird, cr.ord, cr.peer_to_peer, cr.crc),
        (Some(16), Some(16), true, true)
    );
    assert_eq!(b.qp_state(), QpState::Init);
    assert!(b.accept(b"x", now).is_ok());
    assert!(matches!(
        b.accept(b"x", now),
        Err(ProtocolError::InvalidState { .. })
    ));
    assert_eq!(b.qp_state(), QpState::ReadyToReceive, "waits for the RTR");
    let reply = transmit(&mut b, &t);
    let f = MpaFrame::new_checked(&reply[..]).unwrap();
    let r = MpaRepr::parse(&f).unwrap();
    assert_eq!(r.kind, FrameKind::Reply);
    assert!(r.crc && !r.reject);
    let e = r.enhanced.unwrap();
    assert!(e.peer_to_peer);
    assert_eq!(
        e.rtr,
        RtrKinds {
            send: false,
            write: true,
            read: false
        },
        "siw's choice: WRITE"
    );

    a.handle_input(&reply, &t);
    assert_eq!(a.qp_state(), QpState::ReadyToSend);
    let ev = events(&mut a);
    let Event::Established(est) = &ev[0] else {
        panic!("{ev:?}")
    };
    assert_eq!(est.private_data, b"x");
    assert_eq!(est.rtr(), Some(Rtr::Write));
    let first = transmit(&mut a, &t);
    // The RTR (zero-length tagged WRITE, STag 1) comes first, then the SEND.
    assert_eq!(&first[..4], &[0, 14, 0xC1, 0x40]);
    assert_eq!(&first[4..8], &[0, 0, 0, 1]);
    b.handle_input(&first[..20], &t);
    assert_eq!(b.qp_state(), QpState::ReadyToSend);
    assert!(matches!(events(&mut b)[0], Event::Established(_)));
    a.close();
    assert_eq!(a.qp_state(), QpState::Error);
    assert!(matches!(
        events(&mut a).last(),
        Some(Event::Closed(CloseReason::LocalClose))
    ));
    // The SEND completed when its FPDU was handed over, before the close.
    let done: Vec<_> = std::iter::from_fn(|| a.poll_completion())
        .map(|c| (c.completion.wr_id, c.completion.status()))
        .collect();
    assert_eq!(done, vec![(1, WcStatus::Success)]);
}

#[test]
fn crc_is_used_when_either_side_asks() {
    for (ca, cb) in [(false, false), (false, true), (true, false), (true, true)] {
        let mut sim = Sim::new(
            11,
            Config {
                crc: ca,
                ..Config::default()
            },
            Config {
                crc: cb,
                ..Config::default()
            },
            Delivery::Whole,
        );
        sim.connect();
        let want = ca || cb;
        assert_eq!(sim.a.conn.negotiated().unwrap().crc, want);
        assert_eq!(sim.b.conn.negotiated().unwrap().crc, want);
        // A SEND's FPDU carries a real CRC or zeros.
        let (k, addr, _) = sim.b.region(64, AccessFlags::LOCAL_WRITE);
        sim.b.recv(1, k, addr, 64);
        let (ak, aaddr, _) = sim.a.region(64, AccessFlags::LOCAL_WRITE);
        sim.a.send(
            2,
            SendOperation::Send {
                solicited: false,
                invalidate: None,
            },
            vec![segment(ak, aaddr, 13)],
        );
        let mut out = Vec::new();
        sim.a.conn.poll_transmit(&sim.a.table, &mut out, usize::MAX);
        let f = rdmasock_uiwarp::wire::fpdu::Fpdu::new_checked(&out[..]).unwrap();
        assert_eq!(f.crc_is_valid(), want);
        assert_eq!(f.crc_field() == 0, !want);
        sim.a.in_flight.extend_from_slice(&out);
        sim.run();
        assert_eq!(
            sim.b.completions_of(WorkQueue::Receive),
            vec![(1, WcStatus::Success, 13)]
        );
    }
}

#[test]
fn ird_ord_negotiation_is_relaxed_like_siw() {
    let mut sim = Sim::new(
        12,
        Config {
            ird: 4,
            ord: 8,
            ..Config::default()
        },
        Config {
            ird: 2,
            ord: 16,
            ..Config::default()
        },
        Delivery::Whole,
    );
    sim.connect();
    let (a, b) = (
        sim.a.conn.negotiated().unwrap(),
        sim.b.conn.negotiated().unwrap(),
    );
    assert_eq!((a.ird, a.ord), (4, 2));
    assert_eq!((b.ird, b.ord), (2, 4));
    let clamped = Connection::initiator(
        Config {
            ird: 1000,
            ..Config::default()
        },
        b"",
        Instant::now(),
    )
    .unwrap();
    assert_eq!(clamped.config().ird, 128);
}

#[test]
fn reject_carries_private_data_and_flushes() {
    let mut sim = Sim::new(13, Config::default(), Config::default(), Delivery::Whole);
    sim.b.auto_accept = None;
    let (k, addr, _) = sim.a.region(64, AccessFlags::LOCAL_WRITE);
    sim.a.recv(5, k, addr, 64);
    sim.run();
    assert!(matches!(sim.b.events[0], Event::ConnectRequest(_)));
    sim.b.conn.reject(b"go away").unwrap();
    assert_eq!(sim.b.conn.qp_state(), QpState::Error);
    sim.run();
    assert!(sim.a.events.contains(&Event::Rejected {
        private_data: b"go away".to_vec()
    }));
    assert!(sim.a.events.contains(&Event::Closed(CloseReason::Rejected)));
    assert_eq!(sim.a.conn.qp_state(), QpState::Error);
    assert_eq!(
        sim.a.completions_of(WorkQueue::Receive),
        vec![(5, WcStatus::WorkRequestFlushError, 0)]
    );
    assert!(sim.a.conn.should_close() && sim.b.conn.should_close());
}

#[test]
fn private_data_limits() {
    let now = Instant::now();
    let big = vec![7u8; MAX_USER_PRIVATE_DATA + 1];
    assert!(matches!(
        Connection::initiator(Config::default(), &big, now),
        Err(ProtocolError::PrivateDataTooLong { len: 509, max: 508 })
    ));
    // The largest allowed private data goes through both ways.
    let max = vec![9u8; MAX_USER_PRIVATE_DATA];
    let t = RegionTable::new();
    let mut a = Connection::initiator(Config::default(), &max, now).unwrap();
    let mut b = Connection::responder(Config::default(), now);
    b.handle_input(&transmit(&mut a, &t), &t);
    let Event::ConnectRequest(cr) = b.poll_event().unwrap() else {
        panic!()
    };
    assert_eq!(cr.private_data, max);
    assert!(matches!(
        b.accept(&big, now),
        Err(ProtocolError::PrivateDataTooLong { .. })
    ));
    b.accept(&max, now).unwrap();
    a.handle_input(&transmit(&mut b, &t), &t);
    let Event::Established(e) = a.poll_event().unwrap() else {
        panic!()
    };
    assert_eq!(e.private_data, max);

    // A request announcing PD_Length 513 is refused as soon as its header is in.
    let mut b = Side::new(Connection::responder(Config::default(), now));
    let mut hdr = b"MPA ID Req Frame".to_vec();
    hdr.extend_from_slice(&[0x50, 2, 0x02, 0x01]);
    b.conn.handle_input(&hdr, &b.table);
    let out = b.expect_terminate(TerminateCode::LLP_INVALID_REQUEST_REPLY);
    let f = MpaFrame::new_checked(&out[..]).unwrap();
    assert!(
        MpaRepr::parse(&f).unwrap().reject,
        "a reject reply precedes the TERMINATE"
    );
}

#[test]
fn handshake_timeouts() {
    let mut sim = Sim::new(14, Config::default(), Config::default(), Delivery::Whole);
    let (k, addr, _) = sim.a.region(64, AccessFlags::LOCAL_WRITE);
    sim.a.recv(1, k, addr, 64);
    let deadline = sim.a.conn.poll_timeout().unwrap();
    assert_eq!(deadline - sim.now, Duration::from_secs(10));
    sim.a
        .conn
        .handle_timeout(deadline - Duration::from_millis(1));
    assert_eq!(sim.a.conn.qp_state(), QpState::Init);
    sim.a.conn.handle_timeout(deadline);
    sim.a.drain_now();
    assert!(sim
        .a
        .events
        .contains(&Event::Closed(CloseReason::HandshakeTimeout)));
    assert_eq!(
        sim.a.completions_of(WorkQueue::Receive),
        vec![(1, WcStatus::WorkRequestFlushError, 0)]
    );

    let mut b = Connection::responder(Config::default(), sim.now);
    assert_eq!(b.poll_timeout().unwrap() - sim.now, Duration::from_secs(5));
    b.handle_timeout(sim.now + Duration::from_secs(5));
    assert_eq!(b.qp_state(), QpState::Error);
    assert_eq!(
        events(&mut b),
        vec![Event::Closed(CloseReason::HandshakeTimeout)]
    );
}

#[test]
fn responder_without_p2p_holds_its_first_fpdu() {
    for release_by_peer in [false, true] {
        let mut sim = Sim::new(15, p2p_off(), Config::default(), Delivery::Whole);
        let (k, addr, _) = sim.b.region(64, AccessFlags::LOCAL_WRITE);
        let (ak, aaddr, _) = sim.a.region(64, AccessFlags::LOCAL_WRITE);
        sim.a.recv(1, ak, aaddr, 64);
        sim.b.recv(2, k, addr, 64);
        sim.b.send(
            3,
            SendOperation::Send {
                solicited: false,
                invalidate: None,
            },
            vec![segment(k, addr, 4)],
        );
        for _ in 0..3 {
            sim.step();
        }
        assert!(sim.b.established());
        assert!(!sim.b.conn.wants_transmit(), "held");
        assert!(sim.a.completions.is_empty());
        let hold = sim.b.conn.poll_timeout().expect("hold deadline");
        if release_by_peer {
            sim.a.send(
                4,
                SendOperation::Send {
                    solicited: false,
                    invalidate: None,
                },
                vec![segment(ak, aaddr, 4)],
            );
            for _ in 0..3 {
                sim.step();
            }
        } else {
            sim.b.conn.handle_timeout(hold);
            for _ in 0..3 {
                sim.step();
            }
        }
        assert_eq!(
            sim.a.completions_of(WorkQueue::Receive),
            vec![(1, WcStatus::Success, 4)]
        );
    }
}

#[test]
fn responder_refuses_markers_bad_keys_and_revisions() {
    let now = Instant::now();
    let base = MpaRepr {
        kind: FrameKind::Request,
        markers: false,
        crc: true,
        reject: false,
        revision: 2,
        enhanced: Some(IrdOrd {
            ird: 1,
            ord: 1,
            peer_to_peer: false,
            rtr: RtrKinds::default(),
        }),
        private_data: b"",
    };
    let bad = [
        MpaRepr {
            markers: true,
            ..base
        },
        MpaRepr {
            revision: 3,
            ..base
        },
        MpaRepr {
            revision: 0,
            ..base
        },
        MpaRepr {
            kind: FrameKind::Reply,
            ..base
        },
    ];
    for repr in bad {
        let mut b = Side::new(Connection::responder(Config::default(), now));
        b.conn.handle_input(&repr.to_vec(), &b.table);
        b.expect_terminate(TerminateCode::LLP_INVALID_REQUEST_REPLY);
    }
}

#[test]
fn a_peer_that_is_not_mpa_is_quoted_in_the_failure() {
    // What a web server or proxy answers an MPA request with.
    let t = RegionTable::new();
    let mut a = Side::new(Connection::initiator(Config::default(), b"", Instant::now()).unwrap());
    transmit(&mut a.conn, &t);
    a.conn
        .handle_input(b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n", &t);
    let out = a.expect_terminate(TerminateCode::LLP_INVALID_REQUEST_REPLY);
    assert!(!out.is_empty());
    let reason = a.terminated().expect("terminated").reason.clone();
    assert!(
        reason.contains(r#"it sent "HTTP/1.1 400 Bad Request\r\nconnec";"#),
        "{reason}"
    );
    assert!(reason.contains("other than an iWARP peer"), "{reason}");
}

#[test]
fn a_request_where_a_reply_belongs_is_named_even_when_it_comes_in_pieces() {
    // An echo service (or another initiator) answers the initiator with an MPA request.
    let t = RegionTable::new();
    let mut a = Side::new(Connection::initiator(Config::default(), b"", Instant::now()).unwrap());
    let request = transmit(&mut a.conn, &t);
    for piece in request.chunks(5) {
        a.conn.handle_input(piece, &t);
    }
    a.expect_terminate(TerminateCode::LLP_INVALID_REQUEST_REPLY);
    let reason = a.terminated().expect("terminated").reason.clone();
    assert!(
        reason.contains("the peer sent an MPA request, not a reply"),
        "{reason}"
    );
    // And a responder that is sent a reply.
    let mut b = Side::new(Connection::responder(Config::default(), Instant::now()));
    b.conn
        .handle_input(b"MPA ID Rep Frame\x80\x01\x00\x00", &b.table);
    b.expect_terminate(TerminateCode::LLP_INVALID_REQUEST_REPLY);
    let reason = b.terminated().expect("terminated").reason.clone();
    assert!(
        reason.contains("the peer sent an MPA reply, not a request"),
        "{reason}"
    );
}

#[test]
fn initiator_checks_the_rtr_choice() {
    let t = RegionTable::new();
    let now = Instant::now();
    let offer = Config {
        rtr_offer: RtrKinds {
            send: false,
            write: false,
            read: true,
        },
        ..Config::default()
    };
    for chosen in [
        RtrKinds {
            send: false,
            write: true,
            read: false,
        },
        RtrKinds {
            send: false,
            write: false,
            read: false,
        },
    ] {
        let mut a = Side::new(Connection::initiator(offer.clone(), b"", now).unwrap());
        transmit(&mut a.conn, &t);
        let reply = MpaRepr {
            kind: FrameKind::Reply,
            markers: false,
            crc: true,
            reject: false,
            revision: 2,
            enhanced: Some(IrdOrd {
                ird: 4,
                ord: 4,
                peer_to_peer: true,
                rtr: chosen,
            }),
            private_data: b"",
        };
        a.conn.handle_input(&reply.to_vec(), &t);
        a.expect_terminate(TerminateCode::LLP_NO_MATCHING_RTR);
    }
}

#[test]
fn responder_requires_the_rtr_first() {
    let mut sim = Sim::new(16, Config::default(), Config::default(), Delivery::Whole);
    let (k, addr, _) = sim.b.region(64, AccessFlags::LOCAL_WRITE);
    sim.b.recv(1, k, addr, 64);
    // Deliver the request, let b accept, deliver the reply, but drop a's RTR.
    for _ in 0..2 {
        sim.step();
    }
    let mut out = Vec::new();
    sim.a.conn.poll_transmit(&sim.a.table, &mut out, usize::MAX);
    assert_eq!(sim.b.conn.qp_state(), QpState::ReadyToReceive);
    let send = frame(true, true, Opcode::Send, untagged(0, 1, 0), b"early");
    sim.b.conn.handle_input(&send, &sim.b.table);
    sim.b.expect_terminate(TerminateCode::LLP_NO_MATCHING_RTR);
    assert_eq!(
        sim.b.completions_of(WorkQueue::Receive),
        vec![(1, WcStatus::WorkRequestFlushError, 0)]
    );
    let _ = Placement::Tagged { stag: 0, offset: 0 };
}
