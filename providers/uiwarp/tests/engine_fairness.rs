//! One peer flooding frames cannot starve the other connections of the process's progress
//! engine: while a raw-TCP peer writes RDMA WRITE frames to one connection as fast as TCP
//! takes them, RDMA READs on another connection, which the engine answers (nobody polls the
//! responder's queue), keep completing. The engine reads a bounded number of bytes from one
//! connection per turn and comes back to it after the others.

mod common;
mod loopback;

use common::frame;
use loopback::*;
use rdmasock_uiwarp::protocol::{Config, Connection, Event, RegionTable};
use rdmasock_uiwarp::wire::ddp::{Opcode, Placement};
use rdmasock_uiwarp::UiwarpListener;
use rdmasock_verbs::{QpState, SendFlags, SendOp, SendRequest, WcStatus};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// READ round trips that must complete while the flood runs.
const ROUND_TRIPS: usize = 200;
/// The flood each round trip must complete within: progress measured against the flood,
/// not the clock. The engine reads at most 256 KiB of one connection per turn, so a round
/// trip waits for a few such turns (about 80 KiB of flood per round trip on an idle
/// machine, a few MiB when other processes take the cores from the test's thread); an
/// engine that reads a flooded connection until it would block completes none while
/// hundreds of MiB go through.
const FLOOD_BOUND: u64 = 64 << 20;
/// A last resort against a test that would hang: a flood that stalls.
const TIME_BOUND: Duration = Duration::from_secs(60);

/// A raw TCP client that ran the MPA exchange with `listener` and was accepted on `victim`'s
/// QP; returns its socket and whether MPA CRC is in use.
fn flooder_connection(listener: &UiwarpListener, victim: &Side) -> (TcpStream, bool) {
    let mut core =
        Connection::initiator(Config::default(), b"flooder", Instant::now()).expect("initiator");
    let memory = RegionTable::new();
    let mut request = Vec::new();
    core.poll_transmit(&memory, &mut request, usize::MAX);
    let mut tcp = TcpStream::connect(listener.local_addr()).unwrap();
    tcp.set_nodelay(true).unwrap();
    tcp.set_read_timeout(Some(TIMEOUT)).unwrap();
    tcp.write_all(&request).unwrap();
    let req = listener.get_request(Some(TIMEOUT)).expect("the request");
    std::thread::scope(|s| {
        let qp = &victim.qp;
        let accept = s.spawn(move || req.accept(qp, b"victim", TIMEOUT));
        let mut buf = [0u8; 4096];
        loop {
            let n = tcp.read(&mut buf).expect("the MPA reply");
            assert_ne!(n, 0, "the listener closed on the flooder");
            core.handle_input(&buf[..n], &memory);
            match core.poll_event() {
                Some(Event::Established(_)) => break,
                None => {}
                Some(other) => panic!("the flooder's handshake: {other:?}"),
            }
        }
        let mut rtr = Vec::new();
        core.poll_transmit(&memory, &mut rtr, usize::MAX);
        tcp.write_all(&rtr).unwrap();
        accept.join().unwrap().expect("the victim accepts");
    });
    assert_eq!(victim.qp.state(), QpState::ReadyToSend);
    let crc = core.negotiated().expect("negotiated").crc;
    (tcp, crc)
}

/// 4 MiB of RDMA WRITE frames (16 KiB each) into the victim's region, sent over and over.
fn flood_frames(victim: &Side, crc: bool) -> Vec<u8> {
    let body = pattern(16 * 1024, 0x42);
    let mut out = Vec::new();
    for i in 0..256u64 {
        let offset = (i % 32) * body.len() as u64;
        out.extend(frame(
            crc,
            true,
            Opcode::RdmaWrite,
            Placement::Tagged {
                stag: victim.mr.rkey().0,
                offset: victim.mr.addr() + offset,
            },
            &body,
        ));
    }
    out
}

#[test]
fn reads_on_one_connection_complete_while_another_is_flooded() {
    let p = pair();
    let ctx = context();
    let victim = Side::new(&ctx, caps(), false);
    init(&victim.qp);
    let listener = UiwarpListener::bind("127.0.0.1:0".parse().unwrap(), 8).unwrap();
    let (mut tcp, crc) = flooder_connection(&listener, &victim);
    let frames = flood_frames(&victim, crc);
    let stop = AtomicBool::new(false);
    let flooded = AtomicU64::new(0);
    std::thread::scope(|s| {
        let flood = s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                if tcp.write_all(&frames).is_err() {
                    return;
                }
                flooded.fetch_add(frames.len() as u64, Ordering::Relaxed);
            }
        });
        while flooded.load(Ordering::Relaxed) < 64 << 20 {
            assert!(!flood.is_finished(), "the flood stopped before it began");
            std::thread::yield_now();
        }
        let flood_start = flooded.load(Ordering::Relaxed);
        let sg = [p.a.mr.slice(0, 64).unwrap()];
        let read = SendOp::RdmaRead {
            remote_addr: p.b.mr.addr(),
            rkey: p.b.mr.rkey(),
        };
        let started = Instant::now();
        let mut latencies = Vec::with_capacity(ROUND_TRIPS);
        let mut wc = [rdmasock_verbs::WorkCompletion::default()];
        for i in 0..ROUND_TRIPS {
            let t = Instant::now();
            let round_trip_start = flooded.load(Ordering::Relaxed);
            p.a.qp
                .post_send(&[SendRequest::new(i as u64, read, &sg).with_flags(SendFlags::SIGNALED)])
                .unwrap();
            // Sleeps on the completion channel (no spinning thread takes a core from the
            // flood or the engine).
            let c = loop {
                if let Some(c) = p.a.cq.poll(&mut wc).unwrap().first() {
                    break *c;
                }
                p.a.cq.req_notify(false).unwrap();
                if let Some(c) = p.a.cq.poll(&mut wc).unwrap().first() {
                    break *c;
                }
                if p.a
                    .channel
                    .wait(Some(Duration::from_millis(100)))
                    .unwrap()
                    .is_some()
                {
                    p.a.cq.ack_events(1);
                }
                let so_far = flooded.load(Ordering::Relaxed) - round_trip_start;
                if so_far > FLOOD_BOUND || started.elapsed() > TIME_BOUND {
                    stop.store(true, Ordering::Relaxed);
                    panic!(
                        "round trip {i} of {ROUND_TRIPS} still waits while {} MiB flooded the \
                         other connection ({:?} into the test): the engine does not get to \
                         this one",
                        so_far >> 20,
                        started.elapsed()
                    );
                }
            };
            assert_eq!((c.wr_id, c.status()), (i as u64, WcStatus::Success));
            latencies.push(t.elapsed());
        }
        let took = started.elapsed();
        let during = flooded.load(Ordering::Relaxed) - flood_start;
        let still_flooding = !flood.is_finished();
        stop.store(true, Ordering::Relaxed);
        flood.join().unwrap();
        assert!(still_flooding, "the flood ended before the round trips did");
        latencies.sort_unstable();
        println!(
            "{ROUND_TRIPS} READ round trips in {took:?} while {} MiB flooded the other \
             connection ({:.0} MiB/s): median {:?}, 99th percentile {:?}, longest {:?}",
            during >> 20,
            during as f64 / (1 << 20) as f64 / took.as_secs_f64(),
            latencies[ROUND_TRIPS / 2],
            latencies[ROUND_TRIPS * 99 / 100],
            latencies[ROUND_TRIPS - 1]
        );
        assert!(during > 0, "no flood while the round trips ran");
    });
    assert_eq!(
        victim.qp.state(),
        QpState::ReadyToSend,
        "the flood was valid"
    );
}
