//! Hostile input over real TCP on 127.0.0.1, through the provider's driver and progress
//! engine (not the in-memory core): a raw-TCP attacker completes the MPA handshake with a
//! uiwarp listener, then sends one hostile frame on the established connection. Each case
//! must end in a TERMINATE on the wire (layer, type and code checked, with a copy of the
//! offending header), the victim QP in error with its receives flushed and a reason told,
//! no byte written inside or outside the registration, while a second, good connection in
//! the same process (the same engine) keeps moving data that is checked byte for byte
//! before, during and after the attacks.

mod common;
mod loopback;

use common::{frame, untagged};
use loopback::*;
use rdmasock_uiwarp::driver::endpoint;
use rdmasock_uiwarp::protocol::{Config, Connection, Event, RegionTable};
use rdmasock_uiwarp::wire::ddp::{queue, Opcode, Placement, Segment, SegmentRepr};
use rdmasock_uiwarp::wire::fpdu::Fpdu;
use rdmasock_uiwarp::wire::rdmap::{TerminateCode, TerminateRepr};
use rdmasock_uiwarp::{Notice, UiwarpListener};
use rdmasock_verbs::qp_attr::QpAttrMask;
use rdmasock_verbs::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpInitAttributes,
    QpState, QueuePair, RegisteredMemory, SendFlags, SendOp, SendRequest, WcStatus,
};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

/// Bytes of the victim's REMOTE_WRITE registration.
const REGION: usize = 4096;
/// Guard bytes either side of it, in the same allocation and never registered.
const GUARD: usize = 4096;
/// Where in the good connection's receiving region the attacker aims with that region's STag;
/// the good traffic never uses these bytes.
const SENTINEL_AT: usize = 900_000;
/// Receives the victim posts before each attack; all must come back flushed.
const VICTIM_RECVS: u64 = 3;

/// What each victim's memory holds before an attack: nothing may change it.
fn victim_fill() -> Vec<u8> {
    pattern(GUARD + REGION + GUARD, 0x5a)
}

/// A uiwarp QP an attacker will connect to, with a REMOTE_WRITE region carved out of the middle
/// of a larger allocation (guards either side) and receives posted in a buffer of its own.
struct Victim {
    // Field order is drop order: the QP and registrations go before the memory they name.
    qp: QueuePair,
    cq: CompletionQueue,
    region: MemoryRegion,
    recv_mr: MemoryRegion,
    _pd: ProtectionDomain,
    /// The whole allocation: guard, registered region, guard.
    outer: std::sync::Arc<RegisteredMemory>,
}

impl Victim {
    fn new(ctx: &Context) -> Victim {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64, None).unwrap();
        let qp = pd
            .create_qp(
                &QpInitAttributes {
                    caps: caps(),
                    sq_sig_all: false,
                },
                &cq,
                &cq,
            )
            .unwrap();
        let outer =
            std::sync::Arc::new(RegisteredMemory::allocate(GUARD + REGION + GUARD).unwrap());
        outer.write_at(0, &victim_fill()).unwrap();
        let start = (outer.addr() + GUARD as u64) as *mut u8;
        // SAFETY: the range lies inside `outer`, which this struct keeps alive until after the
        // QP and the registration are dropped (field order), and the test holds no Rust
        // reference into it: it reads it only through `RegisteredMemory::read_at`.
        let inner = unsafe { RegisteredMemory::from_raw(start, REGION) };
        let region = pd
            .register_memory(inner, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
            .unwrap();
        let recv_mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
        recv_mr.write_at(0, &pattern(4096, 0xa5)).unwrap();
        init(&qp);
        for i in 0..VICTIM_RECVS {
            let sg = [recv_mr.slice(i as usize * 1024, 1024).unwrap()];
            qp.post_recv(&[rdmasock_verbs::RecvRequest {
                wr_id: 100 + i,
                sg_list: &sg,
            }])
            .unwrap();
        }
        Victim {
            qp,
            cq,
            region,
            recv_mr,
            _pd: pd,
            outer,
        }
    }

    /// Checks that not one byte of the allocation (guards and region) or of the receive
    /// buffer changed.
    #[track_caller]
    fn expect_untouched(&self, case: &str) {
        let mut now = vec![0u8; GUARD + REGION + GUARD];
        self.outer.read_at(0, &mut now).unwrap();
        if let Some(at) = now.iter().zip(victim_fill()).position(|(a, b)| *a != b) {
            let place = if (GUARD..GUARD + REGION).contains(&at) {
                "inside the registration"
            } else {
                "outside the registration"
            };
            panic!("{case}: the victim's memory changed at byte {at} ({place})");
        }
        let mut recv = vec![0u8; 4096];
        self.recv_mr.read_at(0, &mut recv).unwrap();
        assert!(
            recv == pattern(4096, 0xa5),
            "{case}: the victim's receive buffer changed"
        );
    }
}

/// A raw TCP client that ran the MPA exchange (request, reply, ready-to-receive) with the
/// protocol core, then speaks bytes of its own.
struct Attacker {
    tcp: TcpStream,
    /// Whether the connection checks MPA CRCs (it must, for the CRC case to mean anything).
    crc: bool,
}

/// Connects an attacker to `listener` and accepts it on `victim`'s QP.
fn attack_connection(listener: &UiwarpListener, victim: &Victim) -> Attacker {
    let mut core = Connection::initiator(Config::default(), b"attacker", Instant::now())
        .expect("an initiator");
    let memory = RegionTable::new();
    let mut request = Vec::new();
    core.poll_transmit(&memory, &mut request, usize::MAX);
    let mut tcp = TcpStream::connect(listener.local_addr()).expect("the attacker connects");
    tcp.set_nodelay(true).unwrap();
    tcp.set_read_timeout(Some(TIMEOUT)).unwrap();
    tcp.write_all(&request).unwrap();
    let req = listener
        .get_request(Some(TIMEOUT))
        .expect("the attacker's MPA request reaches the listener");
    assert_eq!(req.private_data(), b"attacker");
    std::thread::scope(|s| {
        let qp = &victim.qp;
        let accept = s.spawn(move || req.accept(qp, b"victim", TIMEOUT));
        let mut buf = [0u8; 4096];
        let deadline = Instant::now() + TIMEOUT;
        loop {
            assert!(Instant::now() < deadline, "no MPA reply in time");
            let n = tcp.read(&mut buf).expect("the listener's MPA reply");
            assert_ne!(n, 0, "the listener closed on the attacker");
            core.handle_input(&buf[..n], &memory);
            match core.poll_event() {
                Some(Event::Established(e)) => {
                    assert_eq!(e.private_data, b"victim");
                    break;
                }
                None => {}
                Some(other) => panic!("the attacker's handshake: {other:?}"),
            }
        }
        let mut rtr = Vec::new();
        core.poll_transmit(&memory, &mut rtr, usize::MAX);
        assert!(!rtr.is_empty(), "a ready-to-receive to send");
        tcp.write_all(&rtr).unwrap();
        accept
            .join()
            .expect("accept thread")
            .expect("the victim accepts once the RTR arrives");
    });
    assert_eq!(victim.qp.state(), QpState::ReadyToSend);
    let crc = core.negotiated().expect("negotiated").crc;
    Attacker { tcp, crc }
}

impl Attacker {
    /// Reads what the victim sends until it closes (FIN or reset) or `TIMEOUT`; returns the
    /// bytes.
    fn read_until_closed(&mut self, case: &str) -> Vec<u8> {
        let deadline = Instant::now() + TIMEOUT;
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            assert!(
                Instant::now() < deadline,
                "{case}: the victim did not close within {TIMEOUT:?}; got {got:02x?}"
            );
            match self.tcp.read(&mut buf) {
                Ok(0) => return got,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return got,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => panic!("{case}: reading from the victim: {e}"),
            }
        }
    }
}

/// Checks that `bytes` are exactly one FPDU, a well-formed TERMINATE with `code` (and, when
/// given, a copy of the offending ULPDU's length and DDP header).
#[track_caller]
fn expect_terminate_frame(
    case: &str,
    bytes: &[u8],
    crc: bool,
    code: TerminateCode,
    offending: Option<&[u8]>,
) {
    let f = Fpdu::new_checked(bytes)
        .unwrap_or_else(|e| panic!("{case}: not an FPDU ({e:?}): {bytes:02x?}"));
    assert_eq!(
        f.total_len(),
        bytes.len(),
        "{case}: the TERMINATE must be the only frame before the close: {bytes:02x?}"
    );
    if crc {
        assert!(f.crc_is_valid(), "{case}: the TERMINATE's CRC is wrong");
    }
    let seg = Segment::new_checked(f.ulpdu()).expect("a DDP segment");
    let repr = SegmentRepr::parse(&seg).expect("a valid DDP/RDMAP header");
    assert_eq!(repr.opcode, Opcode::Terminate, "{case}");
    assert!(repr.last, "{case}: a TERMINATE is one segment");
    assert_eq!(
        repr.placement,
        untagged(queue::TERMINATE, 1, 0),
        "{case}: the first message on the TERMINATE queue"
    );
    let t = TerminateRepr::parse(seg.payload()).expect("a TERMINATE body");
    assert_eq!(
        (t.code.layer, t.code.etype, t.code.code),
        (code.layer, code.etype, code.code),
        "{case}: got {}, expected {}",
        t.code.description(),
        code.description()
    );
    if let Some(sent) = offending {
        let ulpdu = Fpdu::new_checked(sent).unwrap().ulpdu().to_vec();
        let header = Segment::new_checked(&ulpdu[..]).unwrap().header().to_vec();
        assert_eq!(
            t.segment_length,
            Some(ulpdu.len() as u16),
            "{case}: the offending ULPDU's length"
        );
        assert_eq!(
            t.ddp_header,
            Some(&header[..]),
            "{case}: a copy of the offending DDP header"
        );
    }
}

/// Waits (bounded) until the victim's QP is in the error state, its receives came back
/// flushed, and its connection told why it ended.
#[track_caller]
fn expect_victim_failed(case: &str, victim: &Victim, reason_has: &str) {
    let deadline = Instant::now() + TIMEOUT;
    let mut flushed = Vec::new();
    let mut wc = [rdmasock_verbs::WorkCompletion::default()];
    while flushed.len() < VICTIM_RECVS as usize {
        if let Some(c) = victim.cq.poll(&mut wc).unwrap().first() {
            flushed.push((c.wr_id, c.status()));
        } else {
            assert!(
                Instant::now() < deadline,
                "{case}: only {flushed:?} of the victim's receives completed"
            );
            std::thread::yield_now();
        }
    }
    let want: Vec<_> = (0..VICTIM_RECVS)
        .map(|i| (100 + i, WcStatus::WorkRequestFlushError))
        .collect();
    assert_eq!(flushed, want, "{case}: the victim's receives, in order");
    assert!(
        victim.cq.poll(&mut wc).unwrap().is_empty(),
        "{case}: no other completion"
    );
    let state = victim.qp.query(QpAttrMask::STATE).unwrap().qp_state;
    assert_eq!(state, QpState::Error, "{case}: the victim QP");
    let ep = endpoint(&victim.qp).unwrap();
    while ep.poll_notice() != Some(Notice::Disconnected) {
        assert!(Instant::now() < deadline, "{case}: no disconnect notice");
        std::thread::yield_now();
    }
    let reason = ep.end_reason().expect("a reason for the end");
    assert!(
        reason.contains(reason_has),
        "{case}: the reason {reason:?} should mention {reason_has:?}"
    );
    // A later post completes at once, flushed.
    let sg = [victim.recv_mr.slice(0, 8).unwrap()];
    victim
        .qp
        .post_send(&[SendRequest::new(7, SendOp::Send, &sg).with_flags(SendFlags::SIGNALED)])
        .unwrap();
    let c = poll_one(&victim.cq);
    assert_eq!(
        (c.wr_id, c.status()),
        (7, WcStatus::WorkRequestFlushError),
        "{case}: a send posted after the error"
    );
}

/// The good connection: rounds of an RDMA WRITE and a SEND of the same bytes from `a` to `b`,
/// each checked byte for byte at `b` (the WRITE's placement and the receive), until `stop`.
fn good_traffic(p: &Pair, stop: &AtomicBool, rounds: &AtomicU64) {
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let len = 1000 + (round % 13) as usize * 997;
        let mut data = pattern(len, round as u8);
        data[..8].copy_from_slice(&round.to_le_bytes());
        p.b.post_recv(round, &[(0, 65536)]);
        p.a.mr.write_at(0, &data).unwrap();
        let sg = [p.a.mr.slice(0, len).unwrap()];
        let write = SendOp::RdmaWrite {
            remote_addr: p.b.mr.addr() + 65536,
            rkey: p.b.mr.rkey(),
        };
        p.a.qp
            .post_send(&[
                SendRequest::new(2 * round, write, &sg).with_flags(SendFlags::SIGNALED),
                SendRequest::new(2 * round + 1, SendOp::Send, &sg).with_flags(SendFlags::SIGNALED),
            ])
            .unwrap();
        assert_eq!(poll_ok(&p.a.cq).wr_id, 2 * round);
        assert_eq!(poll_ok(&p.a.cq).wr_id, 2 * round + 1);
        let r = poll_ok(&p.b.cq);
        assert_eq!((r.wr_id, r.byte_len as usize), (round, len));
        let mut got = vec![0u8; len];
        p.b.mr.read_at(0, &mut got).unwrap();
        assert!(got == data, "round {round}: the SEND placed other bytes");
        p.b.mr.read_at(65536, &mut got).unwrap();
        assert!(got == data, "round {round}: the WRITE placed other bytes");
        round += 1;
        rounds.store(round, Ordering::Release);
    }
}

/// Waits (bounded) until the good connection completed `n` rounds in all.
#[track_caller]
fn wait_rounds(rounds: &AtomicU64, n: u64, traffic: &ScopedJoinHandle<'_, ()>, when: &str) {
    let deadline = Instant::now() + TIMEOUT;
    while rounds.load(Ordering::Acquire) < n {
        assert!(
            !traffic.is_finished(),
            "{when}: the good connection's traffic stopped (see its panic above)"
        );
        assert!(
            Instant::now() < deadline,
            "{when}: the good connection made {} of {n} rounds within {TIMEOUT:?}",
            rounds.load(Ordering::Acquire)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Sets its flag when dropped, so that a failing assertion stops the traffic thread and the
/// scope can end.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// One hostile case: a name, the frame (built from the victim's region and the good
/// connection's STag), the TERMINATE it must draw, whether that TERMINATE copies the
/// offending header, and a word the end reason must contain.
struct Case {
    name: &'static str,
    build: fn(&Victim, &Pair, bool) -> Vec<u8>,
    code: TerminateCode,
    copies_header: bool,
    reason_has: &'static str,
}

fn write_to(stag: u32, offset: u64, data: &[u8], crc: bool) -> Vec<u8> {
    frame(
        crc,
        true,
        Opcode::RdmaWrite,
        Placement::Tagged { stag, offset },
        data,
    )
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "a SEND with a bad CRC",
            build: |_, _, crc| {
                let mut f = frame(crc, true, Opcode::Send, untagged(0, 1, 0), b"bad crc!");
                let at = f.len() - 1;
                f[at] ^= 0x40;
                f
            },
            code: TerminateCode::LLP_CRC,
            copies_header: false,
            reason_has: "CRC",
        },
        Case {
            name: "a WRITE that runs past the region's end",
            build: |v, _, crc| {
                write_to(
                    v.region.rkey().0,
                    v.region.addr() + REGION as u64 - 4,
                    b"overflow",
                    crc,
                )
            },
            code: TerminateCode::DDP_TAGGED_BASE_BOUNDS,
            copies_header: true,
            reason_has: "outside the memory region",
        },
        Case {
            name: "a WRITE that starts before the region",
            build: |v, _, crc| write_to(v.region.rkey().0, v.region.addr() - 4, b"under!!!", crc),
            code: TerminateCode::DDP_TAGGED_BASE_BOUNDS,
            copies_header: true,
            reason_has: "outside the memory region",
        },
        Case {
            name: "a WRITE with an STag nobody registered",
            build: |v, _, crc| {
                write_to(
                    v.region.rkey().0 ^ 0x7f00,
                    v.region.addr(),
                    b"no such stag",
                    crc,
                )
            },
            code: TerminateCode::DDP_TAGGED_INVALID_STAG,
            copies_header: true,
            reason_has: "STag",
        },
        Case {
            name: "a WRITE with the good connection's STag",
            build: |_, p, crc| {
                write_to(
                    p.b.mr.rkey().0,
                    p.b.mr.addr() + SENTINEL_AT as u64,
                    b"another QP's memory",
                    crc,
                )
            },
            code: TerminateCode::DDP_TAGGED_INVALID_STAG,
            copies_header: true,
            reason_has: "STag",
        },
    ]
}

/// Every hostile case, each on its own attacker connection, while the good connection runs.
#[test]
fn hostile_frames_end_the_victim_only() {
    run_cases(cases());
}

/// A DDP segment shorter than the header its T bit announces (a 14-byte ULPDU whose control
/// bytes say untagged SEND, CRC correct) must draw a TERMINATE like any malformed segment.
/// A panic there (say, the TERMINATE's header copy slicing 18 bytes out of 14) would stop
/// the engine thread for every connection in the process.
#[test]
fn ddp_segment_shorter_than_its_header_ends_the_victim_only() {
    run_cases(vec![Case {
        name: "a DDP segment shorter than its header",
        build: |_, _, crc| {
            let tagged = Placement::Tagged { stag: 0, offset: 0 };
            let mut f = frame(crc, true, Opcode::RdmaWrite, tagged, &[]);
            // Untagged, last, DDP version 1; RDMAP version 1, SEND.
            f[2] = 0x41;
            f[3] = 0x43;
            let end = f.len() - 4;
            let c = if crc {
                rdmasock_uiwarp::wire::crc32c::checksum(&f[..end])
            } else {
                0
            };
            f[end..].copy_from_slice(&c.to_le_bytes());
            f
        },
        code: TerminateCode::LLP_FPDU,
        copies_header: false,
        reason_has: "malformed",
    }]);
}

/// Runs `cases`, each on a fresh victim and attacker connection, while a good connection in
/// the same process moves data checked byte for byte: at least 5 good rounds before the
/// first attack, after each attack and after the last one, and its memory where the
/// attacker aimed with its STag unchanged.
fn run_cases(cases: Vec<Case>) {
    let p = pair();
    let sentinel = pattern(4096, 0x3c);
    p.b.mr.write_at(SENTINEL_AT, &sentinel).unwrap();
    let ctx = context();
    let listener = UiwarpListener::bind("127.0.0.1:0".parse().unwrap(), 8).unwrap();
    let stop = AtomicBool::new(false);
    let rounds = AtomicU64::new(0);
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        let traffic = s.spawn(|| good_traffic(&p, &stop, &rounds));
        wait_rounds(&rounds, 5, &traffic, "before the attacks");
        for case in cases {
            let name = case.name;
            let victim = Victim::new(&ctx);
            let mut attacker = attack_connection(&listener, &victim);
            assert!(attacker.crc, "MPA CRC is in use (the attacker asks for it)");
            let before = rounds.load(Ordering::Acquire);
            let hostile = (case.build)(&victim, &p, attacker.crc);
            attacker.tcp.write_all(&hostile).unwrap();
            let answer = attacker.read_until_closed(name);
            expect_terminate_frame(
                name,
                &answer,
                attacker.crc,
                case.code,
                case.copies_header.then_some(&hostile[..]),
            );
            drop(attacker);
            expect_victim_failed(name, &victim, case.reason_has);
            victim.expect_untouched(name);
            let mut at_good = vec![0u8; sentinel.len()];
            p.b.mr.read_at(SENTINEL_AT, &mut at_good).unwrap();
            assert!(
                at_good == sentinel,
                "{name}: the good connection's memory changed"
            );
            wait_rounds(&rounds, before + 5, &traffic, name);
            eprintln!(
                "{name}: {} (good rounds: {before} before it, {} now)",
                case.code.description(),
                rounds.load(Ordering::Acquire)
            );
        }
        let done = rounds.load(Ordering::Acquire);
        wait_rounds(&rounds, done + 5, &traffic, "after the attacks");
        stop.store(true, Ordering::Relaxed);
        traffic.join().expect("the good connection's traffic");
    });
    assert_eq!(p.a.qp.state(), QpState::ReadyToSend);
    assert_eq!(p.b.qp.state(), QpState::ReadyToSend);
    // The good connection's own polling thread moves its bytes even without the engine
    // thread; connection setup needs the engine: a new connection must still work.
    let fresh = pair();
    let data = pattern(3000, 0x77);
    fresh.b.post_recv(1, &[(0, 4096)]);
    fresh.a.mr.write_at(0, &data).unwrap();
    let sg = [fresh.a.mr.slice(0, data.len()).unwrap()];
    fresh
        .a
        .qp
        .post_send(&[SendRequest::new(1, SendOp::Send, &sg).with_flags(SendFlags::SIGNALED)])
        .unwrap();
    poll_ok(&fresh.a.cq);
    assert_eq!(poll_ok(&fresh.b.cq).byte_len as usize, data.len());
    let mut got = vec![0u8; data.len()];
    fresh.b.mr.read_at(0, &mut got).unwrap();
    assert!(got == data, "a connection made after the attacks");
}
