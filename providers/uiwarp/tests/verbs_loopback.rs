//! The provider on real TCP sockets over loopback: two QPs of uiwarp0 connected through the
//! userspace connection setup, every opcode byte for byte, errors, event mode, leaks.

mod loopback;

use loopback::*;
use rdmasock_uiwarp::{connect, device_info, disconnect, UiwarpListener};
use rdmasock_verbs::{
    QpState, RemoteKey, SendFlags, SendOp, SendRequest, Transport, WcOpcode, WcStatus,
};
use std::time::{Duration, Instant};

#[test]
fn device_is_iwarp_rnic_of_driver_uiwarp() {
    let d = device_info();
    assert_eq!(d.name, "uiwarp0");
    assert_eq!(d.transport, Transport::Iwarp);
    assert_eq!(d.driver.as_deref(), Some("uiwarp"));
    assert!(d.uverbs_path.is_none());
    let ctx = context();
    assert_eq!(ctx.provider_name(), "uiwarp");
    let attr = ctx.query_device().unwrap();
    assert_eq!(attr.max_sge_rd, 1);
    assert!(!attr.supports_atomics());
    assert_eq!(
        ctx.query_port(1).unwrap().state,
        rdmasock_verbs::PortState::Active
    );
    assert!(ctx.query_port(2).is_err());
}

#[test]
fn send_gathers_and_scatters_byte_for_byte_both_ways() {
    let p = pair();
    for (from, to) in [(&p.a, &p.b), (&p.b, &p.a)] {
        from.mr.write_at(0, b"hello").unwrap();
        from.mr.write_at(100, b", ").unwrap();
        from.mr.write_at(200, b"userspace iWARP").unwrap();
        to.post_recv(7, &[(5000, 10), (9000, 100)]);
        let sg = [
            from.mr.slice(0, 5).unwrap(),
            from.mr.slice(100, 2).unwrap(),
            from.mr.slice(200, 15).unwrap(),
        ];
        from.qp
            .post_send(&[SendRequest::new(1, SendOp::Send, &sg).with_flags(SendFlags::SIGNALED)])
            .unwrap();
        let s = poll_ok(&from.cq);
        assert_eq!((s.wr_id, s.opcode()), (1, WcOpcode::Send));
        let r = poll_ok(&to.cq);
        assert_eq!((r.wr_id, r.opcode(), r.byte_len), (7, WcOpcode::Recv, 22));
        assert_eq!(r.qp_num, to.qp.qp_num());
        let mut got = vec![0u8; 22];
        to.mr.read_at(5000, &mut got[..10]).unwrap();
        to.mr.read_at(9000, &mut got[10..]).unwrap();
        assert_eq!(&got, b"hello, userspace iWARP");
    }
}

#[test]
fn rdma_write_and_read_move_large_buffers_byte_for_byte() {
    let p = pair();
    let data = pattern(300_000, 3);
    p.a.mr.write_at(0, &data).unwrap();
    let sg = [p.a.mr.slice(0, data.len()).unwrap()];
    let op = SendOp::RdmaWrite {
        remote_addr: p.b.mr.addr() + 4096,
        rkey: p.b.mr.rkey(),
    };
    p.a.qp
        .post_send(&[SendRequest::new(4, op, &sg).with_flags(SendFlags::SIGNALED)])
        .unwrap();
    assert_eq!(poll_ok(&p.a.cq).opcode(), WcOpcode::RdmaWrite);
    // A READ back from b after the WRITE (fenced) sees the written bytes.
    let sink = [p.a.mr.slice(500_000, data.len()).unwrap()];
    let op = SendOp::RdmaRead {
        remote_addr: p.b.mr.addr() + 4096,
        rkey: p.b.mr.rkey(),
    };
    p.a.qp
        .post_send(&[
            SendRequest::new(5, op, &sink).with_flags(SendFlags::SIGNALED | SendFlags::FENCE)
        ])
        .unwrap();
    let c = poll_ok(&p.a.cq);
    assert_eq!(
        (c.wr_id, c.opcode(), c.byte_len),
        (5, WcOpcode::RdmaRead, data.len() as u32)
    );
    let mut got = vec![0u8; data.len()];
    p.a.mr.read_at(500_000, &mut got).unwrap();
    assert!(got == data, "READ returned other bytes");
    let mut at_b = vec![0u8; data.len()];
    p.b.mr.read_at(4096, &mut at_b).unwrap();
    assert!(at_b == data, "WRITE placed other bytes");
}

#[test]
fn inline_send_may_reuse_its_buffer_at_once() {
    let p = pair();
    for i in 0..50u64 {
        p.b.post_recv(i, &[(i as usize * 64, 64)]);
    }
    for i in 0..50u64 {
        p.a.mr.write_at(0, &[i as u8; 40]).unwrap();
        let sg = [p.a.mr.slice(0, 40).unwrap()];
        p.a.qp
            .post_send(&[SendRequest::new(i, SendOp::Send, &sg).with_flags(SendFlags::INLINE)])
            .unwrap();
        // Overwrite at once: the inline copy was taken at post time.
        p.a.mr.write_at(0, &[0xee; 40]).unwrap();
    }
    for i in 0..50u64 {
        let r = poll_ok(&p.b.cq);
        assert_eq!((r.wr_id, r.byte_len), (i, 40));
        let mut got = [0u8; 40];
        p.b.mr.read_at(i as usize * 64, &mut got).unwrap();
        assert_eq!(got, [i as u8; 40]);
    }
}

#[test]
fn sq_sig_all_and_selective_signaling() {
    let p = pair_with(caps(), true, &[]);
    let sg = [p.a.mr.slice(0, 8).unwrap()];
    let op = SendOp::RdmaWrite {
        remote_addr: p.b.mr.addr(),
        rkey: p.b.mr.rkey(),
    };
    for i in 0..5 {
        p.a.qp.post_send(&[SendRequest::new(i, op, &sg)]).unwrap();
    }
    for i in 0..5 {
        assert_eq!(poll_ok(&p.a.cq).wr_id, i);
    }
    let q = pair();
    let op = SendOp::RdmaWrite {
        remote_addr: q.b.mr.addr(),
        rkey: q.b.mr.rkey(),
    };
    let sg = [q.a.mr.slice(0, 8).unwrap()];
    let wrs = [
        SendRequest::new(1, op, &sg).with_flags(SendFlags::empty()),
        SendRequest::new(2, op, &sg).with_flags(SendFlags::empty()),
        SendRequest::new(3, op, &sg),
    ];
    q.a.qp.post_send(&wrs).unwrap();
    assert_eq!(poll_ok(&q.a.cq).wr_id, 3);
}

#[test]
fn unsupported_operations_fail_at_post_time() {
    let p = pair();
    let sg = [p.a.mr.slice(0, 8).unwrap()];
    for op in [
        SendOp::SendWithImm(1),
        SendOp::RdmaWriteWithImm {
            remote_addr: p.b.mr.addr(),
            rkey: p.b.mr.rkey(),
            imm: 1,
        },
    ] {
        let e =
            p.a.qp
                .post_send(&[SendRequest::new(9, op, &sg)])
                .unwrap_err();
        assert_eq!(e.index, 0);
        let text = e.to_string();
        assert!(
            text.contains("uiwarp0") && text.contains("immediate"),
            "{text}"
        );
    }
}

#[test]
fn wrong_rkey_write_fails_both_sides_and_flushes() {
    let p = pair_with(caps(), false, &[(1, 0, 64), (2, 64, 64)]);
    let sg = [p.a.mr.slice(0, 16).unwrap()];
    let op = SendOp::RdmaWrite {
        remote_addr: p.b.mr.addr(),
        rkey: RemoteKey(p.b.mr.rkey().0 ^ 0x100),
    };
    p.a.qp
        .post_send(&[SendRequest::new(1, op, &sg).with_flags(SendFlags::SIGNALED)])
        .unwrap();
    // The WRITE completes locally when sent; the responder's TERMINATE then fails the QP.
    let first = poll_one(&p.a.cq);
    assert_eq!(first.wr_id, 1);
    let r1 = poll_one(&p.b.cq);
    let r2 = poll_one(&p.b.cq);
    assert_eq!(
        (r1.status(), r2.status()),
        (
            WcStatus::WorkRequestFlushError,
            WcStatus::WorkRequestFlushError
        )
    );
    // a's QP is in error once the TERMINATE arrives: later requests are flushed.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let st =
            p.a.qp
                .query(rdmasock_verbs::qp_attr::QpAttrMask::STATE)
                .unwrap()
                .qp_state;
        if st == QpState::Error {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a never saw the TERMINATE (state {st:?})"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    p.a.qp
        .post_send(&[SendRequest::new(2, SendOp::Send, &sg)])
        .unwrap();
    assert_eq!(poll_one(&p.a.cq).status(), WcStatus::WorkRequestFlushError);
}

#[test]
fn wrong_rkey_read_fails_with_remote_access_error() {
    let p = pair();
    let sink = [p.a.mr.slice(0, 16).unwrap()];
    let op = SendOp::RdmaRead {
        remote_addr: p.b.mr.addr(),
        rkey: RemoteKey(0x1234_5600),
    };
    p.a.qp
        .post_send(&[SendRequest::new(3, op, &sink).with_flags(SendFlags::SIGNALED)])
        .unwrap();
    let c = poll_one(&p.a.cq);
    assert_eq!((c.wr_id, c.status()), (3, WcStatus::RemoteAccessError));
    assert_ne!(c.vendor_err, 0);
}

#[test]
fn send_without_receive_terminates_the_connection() {
    let p = pair();
    let sg = [p.a.mr.slice(0, 16).unwrap()];
    p.a.qp
        .post_send(&[SendRequest::new(1, SendOp::Send, &sg).with_flags(SendFlags::SIGNALED)])
        .unwrap();
    assert_eq!(poll_one(&p.a.cq).wr_id, 1);
    let deadline = Instant::now() + TIMEOUT;
    let endpoint = rdmasock_uiwarp::driver::endpoint(&p.b.qp).unwrap();
    while endpoint.poll_notice().is_none() {
        assert!(Instant::now() < deadline, "b never ended the connection");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(endpoint.end_reason().is_some());
}

#[test]
fn event_mode_wakes_the_channel_and_disarms() {
    let p = pair();
    for i in 0..3 {
        p.b.post_recv(i, &[(i as usize * 100, 100)]);
    }
    p.b.cq.req_notify(false).unwrap();
    let sg = [p.a.mr.slice(0, 10).unwrap()];
    p.a.qp
        .post_send(&[SendRequest::new(1, SendOp::Send, &sg)])
        .unwrap();
    let cookie = p.b.channel.wait(Some(TIMEOUT)).unwrap();
    assert_eq!(cookie, Some(p.b.cq.cookie()));
    p.b.cq.ack_events(1);
    assert_eq!(poll_ok(&p.b.cq).wr_id, 0);
    // Not re-armed: a second completion raises no event.
    p.a.qp
        .post_send(&[SendRequest::new(2, SendOp::Send, &sg)])
        .unwrap();
    assert_eq!(poll_ok(&p.b.cq).wr_id, 1);
    assert_eq!(p.b.channel.try_get_event().unwrap(), None);
    // Solicited-only arm: an unsolicited SEND does not wake, a solicited one does.
    p.b.cq.req_notify(true).unwrap();
    p.a.qp
        .post_send(&[SendRequest::new(3, SendOp::Send, &sg).with_flags(SendFlags::SOLICITED)])
        .unwrap();
    assert_eq!(
        p.b.channel.wait(Some(TIMEOUT)).unwrap(),
        Some(p.b.cq.cookie())
    );
    assert_eq!(poll_ok(&p.b.cq).wr_id, 2);
}

#[test]
fn posts_before_connection_and_by_hand_rts_are_refused() {
    let ctx = context();
    let s = Side::new(&ctx, caps(), false);
    let sg = [s.mr.slice(0, 8).unwrap()];
    assert!(s
        .qp
        .post_send(&[SendRequest::new(1, SendOp::Send, &sg)])
        .is_err());
    init(&s.qp);
    let e =
        s.qp.modify(
            &rdmasock_verbs::QpAttributes {
                qp_state: QpState::ReadyToReceive,
                ..Default::default()
            },
            rdmasock_verbs::qp_attr::QpAttrMask::all()
                - rdmasock_verbs::qp_attr::QpAttrMask::CUR_STATE,
        )
        .unwrap_err();
    assert!(e.to_string().contains("connection setup"), "{e}");
    s.post_recv(1, &[(0, 8)]);
    s.qp.to_error().unwrap();
    let c = poll_one(&s.cq);
    assert_eq!((c.wr_id, c.status()), (1, WcStatus::WorkRequestFlushError));
}

#[test]
fn rejected_connection_returns_the_reason() {
    let ctx = context();
    let a = Side::new(&ctx, caps(), false);
    init(&a.qp);
    let listener = UiwarpListener::bind("127.0.0.1:0".parse().unwrap(), 8).unwrap();
    let addr = listener.local_addr();
    let t = std::thread::spawn(move || {
        let req = listener.get_request(Some(TIMEOUT)).unwrap();
        req.reject(b"go away").unwrap();
        listener
    });
    let e = connect(&a.qp, addr, b"hi", TIMEOUT).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
    let r = e
        .get_ref()
        .unwrap()
        .downcast_ref::<rdmasock_uiwarp::Rejected>()
        .unwrap();
    assert_eq!(r.private_data, b"go away");
    drop(t.join().unwrap());
}

#[test]
fn connect_to_a_closed_port_says_so() {
    let ctx = context();
    let a = Side::new(&ctx, caps(), false);
    init(&a.qp);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let e = connect(&a.qp, port, b"hi", TIMEOUT).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
    assert!(e.to_string().contains("nothing listens"), "{e}");
}

#[test]
fn disconnect_flushes_the_peer_and_notifies_it() {
    let p = pair_with(caps(), false, &[(1, 0, 64)]);
    disconnect(&p.a.qp).unwrap();
    let r = poll_one(&p.b.cq);
    assert_eq!((r.wr_id, r.status()), (1, WcStatus::WorkRequestFlushError));
    let endpoint = rdmasock_uiwarp::driver::endpoint(&p.b.qp).unwrap();
    let deadline = Instant::now() + TIMEOUT;
    while endpoint.poll_notice().is_none() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn connect_disconnect_cycles_leak_no_fd() {
    // Warm up the engine and allocator.
    drop(pair());
    let before = open_fds();
    for _ in 0..200 {
        let p = pair();
        disconnect(&p.a.qp).unwrap();
        drop(p);
    }
    // Closing sockets finish on the engine thread: give them a moment, bounded.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let now = open_fds();
        if now <= before + 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "fds: {before} before, {now} after 200 cycles"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
