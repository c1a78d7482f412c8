//! SEND, WRITE and READ end to end over the simulated stream, under every delivery pattern.

mod common;

use common::*;
use rdmasock_uiwarp::protocol::{Config, SendOperation, WorkQueue};
use rdmasock_verbs::{AccessFlags, RemoteKey, WcStatus};

const SEND_LEN: usize = 300;
const WRITE_LEN: usize = 700;
const READ_LEN: usize = 500;

/// Posts a SEND, a WRITE and a READ from `a` and checks every byte and completion.
/// Returns the largest batch either side transmitted.
fn exchange(mut sim: Sim) -> usize {
    let (rk, raddr, rmem) = sim.b.region(4096, AccessFlags::LOCAL_WRITE);
    sim.b.recv(10, rk, raddr, 4096);
    let (wk, waddr, wmem) = sim.b.region(4096, AccessFlags::REMOTE_WRITE);
    let (sk, saddr, smem) = sim.b.region(4096, AccessFlags::REMOTE_READ);
    let mut pattern = vec![0u8; 4096];
    sim.rng.fill(&mut pattern);
    smem.write_at(0, &pattern).unwrap();

    let (ak, aaddr, amem) = sim.a.region(4096, AccessFlags::LOCAL_WRITE);
    let mut src = vec![0u8; 4096];
    sim.rng.fill(&mut src);
    amem.write_at(0, &src).unwrap();
    let (sink_k, sink_addr, sink_mem) = sim
        .a
        .region(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);

    sim.connect();
    assert_eq!(sim.a.conn.qp_state(), rdmasock_verbs::QpState::ReadyToSend);
    assert_eq!(sim.b.conn.qp_state(), rdmasock_verbs::QpState::ReadyToSend);

    sim.a.send(
        1,
        SendOperation::Send {
            solicited: true,
            invalidate: None,
        },
        // Two gather entries to cross an SGE boundary inside a segment.
        vec![
            segment(ak, aaddr, 100),
            segment(ak, aaddr + 100, (SEND_LEN - 100) as u32),
        ],
    );
    sim.a.send(
        2,
        SendOperation::RdmaWrite {
            remote_addr: waddr + 100,
            rkey: RemoteKey(wk),
        },
        vec![segment(ak, aaddr + 1000, WRITE_LEN as u32)],
    );
    sim.a.send(
        3,
        SendOperation::RdmaRead {
            remote_addr: saddr + 7,
            rkey: RemoteKey(sk),
        },
        vec![segment(sink_k, sink_addr + 3, READ_LEN as u32)],
    );
    sim.run();

    assert_eq!(
        sim.a.completions_of(WorkQueue::Send),
        vec![
            (1, WcStatus::Success, SEND_LEN as u32),
            (2, WcStatus::Success, WRITE_LEN as u32),
            (3, WcStatus::Success, READ_LEN as u32)
        ],
        "events: {:?}",
        sim.a.events
    );
    assert_eq!(
        sim.b.completions_of(WorkQueue::Receive),
        vec![(10, WcStatus::Success, SEND_LEN as u32)]
    );
    assert!(sim
        .b
        .completions
        .iter()
        .all(|c| c.queue != WorkQueue::Receive || c.solicited));
    assert_eq!(&rmem.to_vec()[..SEND_LEN], &src[..SEND_LEN]);
    assert!(rmem.to_vec()[SEND_LEN..].iter().all(|&b| b == 0));
    assert_eq!(
        &wmem.to_vec()[100..100 + WRITE_LEN],
        &src[1000..1000 + WRITE_LEN]
    );
    assert!(wmem.to_vec()[..100].iter().all(|&b| b == 0));
    assert!(wmem.to_vec()[100 + WRITE_LEN..].iter().all(|&b| b == 0));
    assert_eq!(
        &sink_mem.to_vec()[3..3 + READ_LEN],
        &pattern[7..7 + READ_LEN]
    );
    assert!(sink_mem.to_vec()[..3].iter().all(|&b| b == 0));
    assert!(sim.a.terminated().is_none() && sim.b.terminated().is_none());
    sim.max_batch()
}

#[test]
fn whole_batches_with_default_segmentation() {
    exchange(Sim::new(
        1,
        Config::default(),
        Config::default(),
        Delivery::Whole,
    ));
}

#[test]
fn every_split_point() {
    let max = exchange(Sim::new(
        2,
        small_mulpdu(128),
        small_mulpdu(96),
        Delivery::Whole,
    ));
    assert!(
        max > 1000,
        "the first data batch should hold many FPDUs ({max})"
    );
    for k in 0..=max {
        exchange(Sim::new(
            3,
            small_mulpdu(128),
            small_mulpdu(96),
            Delivery::SplitAt(k),
        ));
    }
}

#[test]
fn random_pieces_across_seeds() {
    for seed in 0..200 {
        let max = 1 + (seed as usize % 40);
        let cfg = small_mulpdu(64 + (seed as u16 * 13) % 400);
        exchange(Sim::new(seed, cfg.clone(), cfg, Delivery::Random { max }));
    }
}

#[test]
fn coalesced_batches() {
    for seed in 0..20 {
        exchange(Sim::new(
            seed,
            small_mulpdu(100),
            Config::default(),
            Delivery::Coalesce,
        ));
    }
}

#[test]
fn slow_reader() {
    for per_step in [1, 3, 17, 64] {
        let mut sim = Sim::new(
            9,
            small_mulpdu(80),
            small_mulpdu(80),
            Delivery::SlowReader { per_step },
        );
        sim.batch = 256;
        exchange(sim);
    }
}

#[test]
fn without_peer_to_peer_and_without_crc() {
    let no_crc = Config {
        crc: false,
        ..p2p_off()
    };
    exchange(Sim::new(
        4,
        no_crc.clone(),
        no_crc,
        Delivery::Random { max: 7 },
    ));
}

#[test]
fn read_rtr_and_send_rtr() {
    use rdmasock_uiwarp::wire::mpa::RtrKinds;
    for rtr in [
        RtrKinds {
            send: false,
            write: false,
            read: true,
        },
        RtrKinds {
            send: true,
            write: false,
            read: false,
        },
    ] {
        let cfg = Config {
            rtr_offer: rtr,
            ..Config::default()
        };
        exchange(Sim::new(
            5,
            cfg,
            Config::default(),
            Delivery::Random { max: 5 },
        ));
    }
}

#[test]
fn zero_length_operations_and_unsignaled_requests() {
    let mut sim = Sim::new(6, Config::default(), Config::default(), Delivery::Whole);
    let (rk, raddr, _) = sim.b.region(64, AccessFlags::LOCAL_WRITE);
    sim.b.recv(20, rk, raddr, 64);
    sim.connect();
    // Zero-length WRITE and READ to an STag that does not exist: legal, not checked.
    sim.a.send(
        1,
        SendOperation::RdmaWrite {
            remote_addr: 0,
            rkey: RemoteKey(0xdead),
        },
        vec![],
    );
    sim.a
        .conn
        .post_send(rdmasock_uiwarp::protocol::SendWork {
            wr_id: 2,
            op: SendOperation::RdmaRead {
                remote_addr: 0,
                rkey: RemoteKey(0xbeef),
            },
            segments: Default::default(),
            small: None,
            signaled: false,
            fence: false,
        })
        .unwrap();
    sim.a.send(
        3,
        SendOperation::Send {
            solicited: false,
            invalidate: Some(RemoteKey(0x4242)),
        },
        vec![],
    );
    sim.run();
    assert_eq!(
        sim.a.completions_of(WorkQueue::Send),
        vec![(1, WcStatus::Success, 0), (3, WcStatus::Success, 0)]
    );
    let recv = &sim.b.completions[0];
    assert_eq!(recv.completion.byte_len, 0);
    assert_eq!(recv.completion.imm_data, 0x4242);
    assert!(!recv.solicited);
    assert!(recv
        .completion
        .flags()
        .contains(rdmasock_verbs::WcFlags::WITH_INVALIDATE));
}

#[test]
fn ord_limits_outstanding_reads() {
    let cfg = Config {
        ord: 2,
        ..Config::default()
    };
    let mut sim = Sim::new(7, cfg, Config::default(), Delivery::Whole);
    let (sk, saddr, smem) = sim.b.region(1024, AccessFlags::REMOTE_READ);
    smem.write_at(0, &[7u8; 1024]).unwrap();
    let (k, addr, mem) = sim
        .a
        .region(1024, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
    sim.connect();
    assert_eq!(sim.a.conn.negotiated().unwrap().ord, 2);
    for i in 0..5u64 {
        sim.a.send(
            i,
            SendOperation::RdmaRead {
                remote_addr: saddr + i * 100,
                rkey: RemoteKey(sk),
            },
            vec![segment(k, addr + i * 100, 100)],
        );
    }
    // One transmit round: only ORD = 2 READ requests may go out before responses return.
    let mut out = Vec::new();
    sim.a.conn.poll_transmit(&sim.a.table, &mut out, usize::MAX);
    assert_eq!(out.len(), 2 * 52, "two READ request FPDUs of 52 bytes each");
    sim.a.in_flight.extend_from_slice(&out);
    sim.run();
    let done = sim.a.completions_of(WorkQueue::Send);
    assert_eq!(done.len(), 5);
    assert!(done
        .iter()
        .enumerate()
        .all(|(i, c)| c.0 == i as u64 && c.1 == WcStatus::Success));
    assert!(mem.to_vec()[..500].iter().all(|&b| b == 7));
}

#[test]
fn small_payloads_carried_by_the_request_arrive_like_gathered_ones() {
    use rdmasock_uiwarp::protocol::{SendWork, SmallPayload, SMALL_PAYLOAD};
    for (seed, delivery) in [(11, Delivery::Whole), (12, Delivery::Random { max: 3 })] {
        let mut sim = Sim::new(seed, Config::default(), Config::default(), delivery);
        let (rk, raddr, rmem) = sim.b.region(4096, AccessFlags::LOCAL_WRITE);
        sim.b.recv(10, rk, raddr, 64);
        let (wk, waddr, wmem) = sim.b.region(4096, AccessFlags::REMOTE_WRITE);
        sim.connect();
        let sent = b"small, in the WR";
        assert_eq!(sent.len(), SMALL_PAYLOAD);
        assert!(SmallPayload::new(&[0; SMALL_PAYLOAD + 1]).is_none());
        let post = |sim: &mut Sim, wr_id, op, bytes: &[u8]| {
            sim.a
                .conn
                .post_send(SendWork {
                    wr_id,
                    op,
                    segments: Default::default(),
                    small: SmallPayload::new(bytes),
                    signaled: true,
                    fence: false,
                })
                .expect("post_send");
        };
        let send = SendOperation::Send {
            solicited: false,
            invalidate: None,
        };
        post(&mut sim, 1, send, &sent[..5]);
        let write = SendOperation::RdmaWrite {
            remote_addr: waddr + 3,
            rkey: RemoteKey(wk),
        };
        post(&mut sim, 2, write, sent);
        sim.run();
        assert_eq!(
            sim.a.completions_of(WorkQueue::Send),
            vec![(1, WcStatus::Success, 5), (2, WcStatus::Success, 16)]
        );
        assert_eq!(
            sim.b.completions_of(WorkQueue::Receive),
            vec![(10, WcStatus::Success, 5)]
        );
        let mut got = [0u8; 5];
        rmem.read_at(0, &mut got).unwrap();
        assert_eq!(&got, &sent[..5]);
        let mut got = [0u8; 20];
        wmem.read_at(0, &mut got).unwrap();
        assert_eq!(&got[..3], &[0; 3]);
        assert_eq!(&got[3..19], sent);
        assert_eq!(got[19], 0);
    }
}
