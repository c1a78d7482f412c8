//! The progress engine's hand-off with application threads on real loopback sockets: a
//! thread that spins on a completion queue reads the socket itself while the engine stays
//! asleep, and the engine takes the socket back once no such thread reads it (an RDMA READ to
//! a side whose application never calls in is answered); a thread that sleeps on a channel
//! is woken by the engine's raise of the channel, and reads the socket itself; a sleeper
//! that also polls the socket (the channel's input watch) wakes on arrivals with no engine
//! wake-up at all, and the engine takes the socket back once it is gone, or after a few
//! backstops in a row in which nothing read it while the watch stayed.

mod loopback;

use loopback::*;
use rdmasock_uiwarp::{connect, UiwarpListener};
use rdmasock_verbs::{
    QpInitAttributes, RecvRequest, SendFlags, SendOp, SendRequest, WcOpcode, WcStatus,
    WorkCompletion,
};
use std::time::{Duration, Instant};

/// A thread that spins on its completion queue reads the socket itself, and the engine stops
/// watching that socket meanwhile. Once the spin ends, the engine must take the socket back:
/// an RDMA READ sent to a side whose application no longer calls in is answered by the
/// engine alone (within its 1 ms backstop), as an RNIC would.
#[test]
fn the_engine_takes_a_socket_back_after_a_spin_ends() {
    let p = pair();
    for round in 0..20u64 {
        // b spins on its CQ while a's SENDs arrive, and a little after the last.
        for i in 0..4 {
            p.b.post_recv(round * 4 + i, &[(i as usize * 64, 64)]);
        }
        let sg = [p.a.mr.slice(0, 32).unwrap()];
        let sends: Vec<_> = (0..4)
            .map(|i| SendRequest::new(i, SendOp::Send, &sg).with_flags(SendFlags::empty()))
            .collect();
        p.a.qp.post_send(&sends).unwrap();
        for _ in 0..4 {
            assert_eq!(poll_ok(&p.b.cq).opcode(), WcOpcode::Recv);
        }
        let spin_until = Instant::now() + Duration::from_micros(300);
        let mut wc = [WorkCompletion::default()];
        while Instant::now() < spin_until {
            assert_eq!(p.b.cq.poll(&mut wc).unwrap().len(), 0);
        }
        // b's application is gone quiet: only b's engine can answer the READ.
        read_from_b(&p, round);
    }
}

/// a reads 20,000 bytes of b's memory (a pattern of `round`) and checks them byte for byte;
/// b's application does not call in.
fn read_from_b(p: &Pair, round: u64) {
    let data = pattern(20_000, round as u8);
    p.b.mr.write_at(100_000, &data).unwrap();
    let sink = [p.a.mr.slice(200_000, data.len()).unwrap()];
    let op = SendOp::RdmaRead {
        remote_addr: p.b.mr.addr() + 100_000,
        rkey: p.b.mr.rkey(),
    };
    p.a.qp
        .post_send(&[SendRequest::new(round, op, &sink).with_flags(SendFlags::SIGNALED)])
        .unwrap();
    let c = poll_ok(&p.a.cq);
    assert_eq!(
        (c.wr_id, c.opcode()),
        (round, WcOpcode::RdmaRead),
        "round {round}"
    );
    let mut got = vec![0u8; data.len()];
    p.a.mr.read_at(200_000, &mut got).unwrap();
    assert!(got == data, "round {round}: READ returned other bytes");
}

/// A completion queue armed on a channel that nobody waits on: the engine raises the channel
/// on each arrival for a thread that would sleep there, and must read the socket itself when
/// no such thread does. An RDMA READ sent to that side is answered by the engine alone, as an
/// RNIC would.
#[test]
fn the_engine_answers_a_read_while_an_armed_cq_has_no_waiter() {
    let p = pair();
    p.b.cq.req_notify(false).unwrap();
    p.b.post_recv(0, &[(0, 64)]);
    for round in 0..10u64 {
        read_from_b(&p, round);
    }
    // The arm stands: b's first completion raises the event.
    let sg = [p.a.mr.slice(0, 8).unwrap()];
    p.a.qp
        .post_send(&[SendRequest::new(50, SendOp::Send, &sg)])
        .unwrap();
    assert_eq!(
        p.b.channel.wait(Some(TIMEOUT)).unwrap(),
        Some(p.b.cq.cookie())
    );
    assert_eq!(poll_ok(&p.b.cq).wr_id, 0);
}

/// Event mode, the way the socket layer waits: arm, sleep on the channel, take the event,
/// poll. The sleeper watches only the channel's eventfd (a connection costs no fd for it to
/// watch the socket): the engine raises the channel on each arrival and the woken thread
/// reads the socket; the engine wakes about once per arrival, not also per ACK for room to
/// write (each wake-up is a context switch that costs most of a message's time under QEMU's
/// TCG).
#[test]
fn an_event_mode_ping_pong_wakes_the_engine_about_once_per_arrival() {
    const ROUND_TRIPS: u64 = 1000;
    let p = pair();
    let ea = rdmasock_uiwarp::driver::endpoint(&p.a.qp).unwrap();
    let eb = rdmasock_uiwarp::driver::endpoint(&p.b.qp).unwrap();
    let sg_a = [p.a.mr.slice(0, 64).unwrap()];
    let sg_b = [p.b.mr.slice(0, 64).unwrap()];
    let wait = |side: &Side| {
        side.cq.req_notify(false).unwrap();
        let mut wc = [WorkCompletion::default()];
        loop {
            if side.cq.poll(&mut wc).unwrap().len() == 1 {
                assert_eq!(wc[0].status(), WcStatus::Success);
                return wc[0];
            }
            assert_eq!(
                side.channel.wait(Some(TIMEOUT)).unwrap(),
                Some(side.cq.cookie())
            );
            side.cq.ack_events(1);
            side.cq.req_notify(false).unwrap();
        }
    };
    let before = ea.engine_events() + eb.engine_events();
    for i in 0..ROUND_TRIPS {
        p.b.post_recv(i, &[(1000, 64)]);
        p.a.post_recv(i, &[(1000, 64)]);
        p.a.qp
            .post_send(&[SendRequest::new(i, SendOp::Send, &sg_a).with_flags(SendFlags::empty())])
            .unwrap();
        assert_eq!(wait(&p.b).opcode(), WcOpcode::Recv);
        p.b.qp
            .post_send(&[SendRequest::new(i, SendOp::Send, &sg_b).with_flags(SendFlags::empty())])
            .unwrap();
        assert_eq!(wait(&p.a).opcode(), WcOpcode::Recv);
    }
    let woke = ea.engine_events() + eb.engine_events() - before;
    // About one wake-up per arrival (an edge the woken thread's read made stale, or a frame
    // that came in two pieces, adds one); room to write (an ACK) never wakes it when nothing
    // waits for room, which would make it two per arrival at least.
    assert!(
        woke < 3 * ROUND_TRIPS,
        "the engine woke {woke} times for {} arrivals",
        2 * ROUND_TRIPS
    );
}

/// Event mode the way the socket layer's blocking calls wait: take the channel's input watch,
/// arm, sleep in poll(2) on the channel's fd and the watched socket, take the events, drop
/// the watch, poll. The engine leaves input to the watchers: it wakes for almost none of the
/// arrivals (each of which would be a thread hop). Once the watchers are gone, nothing is
/// lost: the engine answers an RDMA READ to the quiet side, and a thread that arms and waits
/// on the channel's fd alone is woken by the next arrival.
#[test]
fn a_sleeper_that_watches_the_socket_wakes_on_arrivals_without_the_engine() {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    const ROUND_TRIPS: u64 = 1000;
    let p = pair();
    let ea = rdmasock_uiwarp::driver::endpoint(&p.a.qp).unwrap();
    let eb = rdmasock_uiwarp::driver::endpoint(&p.b.qp).unwrap();
    let sg_a = [p.a.mr.slice(0, 64).unwrap()];
    let sg_b = [p.b.mr.slice(0, 64).unwrap()];
    let wait = |side: &Side| {
        let mut wc = [WorkCompletion::default()];
        loop {
            let watch = side.channel.watch_input().expect("one QP: its socket");
            side.cq.req_notify(false).unwrap();
            if side.cq.poll(&mut wc).unwrap().len() == 1 {
                assert_eq!(wc[0].status(), WcStatus::Success);
                return wc[0];
            }
            let mut fds = [
                PollFd::new(side.channel.as_fd(), PollFlags::POLLIN),
                PollFd::new(watch.as_fd(), PollFlags::POLLIN),
            ];
            assert!(
                poll(&mut fds, PollTimeout::from(10_000u16)).unwrap() > 0,
                "no wake-up"
            );
            let mut events = 0;
            while side.channel.try_get_event().unwrap().is_some() {
                events += 1;
            }
            side.cq.ack_events(events);
            drop(watch);
        }
    };
    let before = ea.engine_events() + eb.engine_events();
    for i in 0..ROUND_TRIPS {
        p.b.post_recv(i, &[(1000, 64)]);
        p.a.post_recv(i, &[(1000, 64)]);
        p.a.qp
            .post_send(&[SendRequest::new(i, SendOp::Send, &sg_a).with_flags(SendFlags::empty())])
            .unwrap();
        assert_eq!(wait(&p.b).opcode(), WcOpcode::Recv);
        p.b.qp
            .post_send(&[SendRequest::new(i, SendOp::Send, &sg_b).with_flags(SendFlags::empty())])
            .unwrap();
        assert_eq!(wait(&p.a).opcode(), WcOpcode::Recv);
    }
    let woke = ea.engine_events() + eb.engine_events() - before;
    // The engine hands each side's input to its watchers once (and again after a backstop
    // that found an idle millisecond); an engine raising the channel per arrival would wake
    // about once per arrival.
    assert!(
        woke < ROUND_TRIPS / 10,
        "the engine woke {woke} times for {} arrivals",
        2 * ROUND_TRIPS
    );
    // The watchers are gone: b's engine alone answers a's READs.
    for round in 0..5 {
        read_from_b(&p, round);
    }
    // A waiter on the channel's fd alone (as the mio hub waits): its arming takes the
    // socket back, and the next arrival raises the channel.
    p.b.post_recv(7, &[(0, 64)]);
    p.b.cq.req_notify(false).unwrap();
    p.a.qp
        .post_send(&[SendRequest::new(7, SendOp::Send, &sg_a)])
        .unwrap();
    assert_eq!(
        p.b.channel.wait(Some(TIMEOUT)).unwrap(),
        Some(p.b.cq.cookie())
    );
    assert_eq!(poll_ok(&p.b.cq).wr_id, 7);
}

/// A sleeper that holds the channel's input watch for good (as a tokio stream does for its
/// life) while its application stops calling in: the engine leaves the input to it for a
/// few backstops, then takes the socket back and answers RDMA READs to that side alone, as
/// an RNIC would, round after round (each READ is a new arrival that the watch would leave
/// unread).
#[test]
fn the_engine_answers_reads_while_a_watcher_that_never_reads_holds_the_input() {
    let p = pair();
    let watch = p.b.channel.watch_input().expect("one QP: its socket");
    for round in 0..10u64 {
        read_from_b(&p, round);
    }
    drop(watch);
}

/// One completion queue shared by many queue pairs: a thread spinning on it (which checks a
/// rotating share of the QPs' sockets per poll) gets every QP's completions, round after
/// round, with nothing lost or duplicated.
#[test]
fn a_spin_on_a_cq_shared_by_many_qps_sees_every_qp() {
    const QPS: usize = 9;
    let ctx = context();
    let pd = ctx.alloc_pd().unwrap();
    let shared = ctx.create_cq(256, None).unwrap();
    let mr = pd.register(QPS * 64, all()).unwrap();
    let init_attr = QpInitAttributes {
        caps: caps(),
        sq_sig_all: false,
    };
    let mut a_sides = Vec::new();
    let mut b_qps = Vec::new();
    let listener = UiwarpListener::bind("127.0.0.1:0".parse().unwrap(), 16).unwrap();
    let addr = listener.local_addr();
    for _ in 0..QPS {
        let a = Side::new(&ctx, caps(), false);
        let b = pd.create_qp(&init_attr, &shared, &shared).unwrap();
        init(&a.qp);
        init(&b);
        std::thread::scope(|s| {
            let (bq, l) = (&b, &listener);
            let server = s.spawn(move || {
                let req = l.get_request(Some(TIMEOUT)).unwrap();
                req.accept(bq, b"", TIMEOUT).unwrap();
            });
            connect(&a.qp, addr, b"", TIMEOUT).unwrap();
            server.join().unwrap();
        });
        a_sides.push(a);
        b_qps.push(b);
    }
    for round in 0..30u64 {
        for (i, b) in b_qps.iter().enumerate() {
            let sg = [mr.slice(i * 64, 64).unwrap()];
            b.post_recv(&[RecvRequest {
                wr_id: round * 100 + i as u64,
                sg_list: &sg,
            }])
            .unwrap();
        }
        for (i, a) in a_sides.iter().enumerate() {
            a.mr.write_at(0, &[(round as u8) ^ (i as u8); 16]).unwrap();
            let sg = [a.mr.slice(0, 16).unwrap()];
            a.qp.post_send(
                &[SendRequest::new(1, SendOp::Send, &sg).with_flags(SendFlags::empty())],
            )
            .unwrap();
        }
        let mut seen = [false; QPS];
        for _ in 0..QPS {
            let c = poll_ok(&shared);
            let i = (c.wr_id - round * 100) as usize;
            assert!(
                i < QPS && !seen[i],
                "round {round}: unexpected wr {}",
                c.wr_id
            );
            seen[i] = true;
            assert_eq!(c.qp_num, b_qps[i].qp_num());
            let mut got = [0u8; 16];
            mr.read_at(i * 64, &mut got).unwrap();
            assert_eq!(
                got,
                [(round as u8) ^ (i as u8); 16],
                "round {round}, QP {i}"
            );
        }
        let mut wc = [WorkCompletion::default()];
        assert_eq!(
            shared.poll(&mut wc).unwrap().len(),
            0,
            "round {round}: extra"
        );
    }
}
