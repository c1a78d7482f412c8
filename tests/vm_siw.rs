//! Verbs conformance on siw0 (soft-iWARP) through the pure-Rust siw provider: two QPs on one
//! device connected through rdma_cm (the only way iWARP QPs reach RTS), every supported
//! opcode byte for byte, post-time refusal of what siw cannot do, error statuses, event
//! mode, load and leak checks.
//!
//! Runs only in the VM (`tests/vm/run.sh`, or `run-in-vm.sh --both '<binary> --ignored
//! --test-threads=1'`); on the host every test is ignored. Each test first asserts that siw0
//! exists, so none can pass without the device.

#[path = "vm_support/mod.rs"]
mod cm_support;
#[allow(dead_code)]
#[path = "vm_verbs_support/mod.rs"]
mod verbs_support;

use cm_support::{device_ip, pattern, post_recv, wait_async, CmPair, SideOptions, CM_TIMEOUT};
use rdmasock::cm::CmEvent;
use rdmasock::verbs::{
    AsyncEventKind, Error, PortState, QpCapabilities, QpInitAttributes, RecvRequest, RemoteKey,
    SendFlags, SendOp, SendRequest, Transport, WcOpcode, WcStatus, WorkCompletion,
};
use rdmasock_siw::SiwCq;
use std::time::{Duration, Instant};
use verbs_support::{all_access, assert_empty, open_fds, poll_ok, poll_one, rss_kib};

const DEVICE: &str = "siw0";

fn pair() -> CmPair {
    CmPair::connect(device_ip(DEVICE), &SideOptions::default())
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn siw0_is_driven_by_the_siw_provider() {
    device_ip(DEVICE);
    let context = rdmasock::open_device(Some(DEVICE)).expect("opening siw0");
    assert_eq!(context.provider_name(), "siw");
    assert_eq!(context.device().transport, Transport::Iwarp);
    let attr = context.query_device().expect("QUERY_DEVICE");
    assert!(attr.max_qp > 0, "{attr:?}");
    let port = context.query_port(1).expect("QUERY_PORT");
    assert_eq!(port.state, PortState::Active, "siw0 port 1: {port:?}");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn send_gathers_and_scatters_byte_for_byte_both_ways() {
    let p = pair();
    for (from, to) in [(&p.active, &p.passive), (&p.passive, &p.active)] {
        from.mr.write_at(0, b"hello").unwrap();
        from.mr.write_at(100, b", ").unwrap();
        from.mr.write_at(200, b"soft-iWARP world").unwrap();
        post_recv(to, 7, &[(0, 10), (1000, 100)]);
        let sg = [
            from.mr.slice(0, 5).unwrap(),
            from.mr.slice(100, 2).unwrap(),
            from.mr.slice(200, 16).unwrap(),
        ];
        from.qp
            .post_send(&[SendRequest::new(1, SendOp::Send, &sg)])
            .unwrap();
        let s = poll_ok(&from.cq);
        assert_eq!((s.wr_id, s.opcode()), (1, WcOpcode::Send));
        assert_eq!(s.qp_num, from.qp.qp_num());
        let r = poll_ok(&to.cq);
        assert_eq!((r.wr_id, r.opcode(), r.byte_len), (7, WcOpcode::Recv, 23));
        assert_eq!((r.imm(), r.qp_num), (None, to.qp.qp_num()));
        let whole = b"hello, soft-iWARP world";
        assert_eq!(&to.mr.as_slice()[..10], &whole[..10]);
        assert_eq!(&to.mr.as_slice()[1000..1013], &whole[10..]);
        assert_empty(&from.cq);
        assert_empty(&to.cq);
    }
    p.disconnect();
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rdma_write_lands_without_a_receive() {
    let p = pair();
    let (a, b) = (&p.active, &p.passive);
    for (len, at) in [(3000usize, 512usize), (60_000, 4096)] {
        let data = pattern(len, len as u8);
        a.mr.write_at(0, &data).unwrap();
        let half = len / 2;
        let sg = [
            a.mr.slice(0, half).unwrap(),
            a.mr.slice(half, len - half).unwrap(),
        ];
        let op = SendOp::RdmaWrite {
            remote_addr: b.mr.addr() + at as u64,
            rkey: b.mr.rkey(),
        };
        a.qp.post_send(&[SendRequest::new(4, op, &sg)]).unwrap();
        let s = poll_ok(&a.cq);
        assert_eq!((s.wr_id, s.opcode()), (4, WcOpcode::RdmaWrite));
        // siw completes a WRITE once it is on the wire: wait for the bytes to land.
        let deadline = Instant::now() + Duration::from_secs(20);
        while b.mr.as_slice()[at..at + len] != data[..] {
            assert!(Instant::now() < deadline, "the written bytes never landed");
            std::thread::yield_now();
        }
        assert_empty(&b.cq);
    }
    p.disconnect();
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rdma_read_fetches_remote_bytes() {
    let p = pair();
    let (a, b) = (&p.active, &p.passive);
    b.mr.write_at(4096, b"remote bytes to read").unwrap();
    let sg = [a.mr.slice(64, 20).unwrap()];
    let op = SendOp::RdmaRead {
        remote_addr: b.mr.addr() + 4096,
        rkey: b.mr.rkey(),
    };
    a.qp.post_send(&[SendRequest::new(6, op, &sg)]).unwrap();
    let s = poll_ok(&a.cq);
    assert_eq!(
        (s.wr_id, s.opcode(), s.byte_len),
        (6, WcOpcode::RdmaRead, 20)
    );
    assert_eq!(&a.mr.as_slice()[64..84], b"remote bytes to read");
    let big = pattern(40_000, 3);
    b.mr.write_at(20_000, &big).unwrap();
    let sg = [a.mr.slice(1000, big.len()).unwrap()];
    let op = SendOp::RdmaRead {
        remote_addr: b.mr.addr() + 20_000,
        rkey: b.mr.rkey(),
    };
    a.qp.post_send(&[SendRequest::new(8, op, &sg)]).unwrap();
    let s = poll_ok(&a.cq);
    assert_eq!((s.wr_id, s.byte_len), (8, 40_000));
    assert_eq!(&a.mr.as_slice()[1000..41_000], &big[..]);
    assert_empty(&b.cq);
    p.disconnect();
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn chained_inline_fence_and_selective_signaling() {
    let p = pair();
    let (a, b) = (&p.active, &p.passive);
    a.mr.write_at(0, b"abcdefgh").unwrap();
    a.mr.write_at(1000, b"XYZ").unwrap();
    a.mr.write_at(2000, b"registered").unwrap();
    for i in 0..3 {
        post_recv(b, 100 + i as u64, &[(i * 100, 100)]);
    }
    let registered = [a.mr.slice(2000, 10).unwrap()];
    let two = [a.mr.slice(0, 8).unwrap(), a.mr.slice(1000, 3).unwrap()];
    let one = [a.mr.slice(4, 4).unwrap()];
    let write = SendOp::RdmaWrite {
        remote_addr: b.mr.addr() + 5000,
        rkey: b.mr.rkey(),
    };
    let wrs = [
        SendRequest::new(1, SendOp::Send, &registered).with_flags(SendFlags::empty()),
        SendRequest::new(2, SendOp::Send, &two).with_flags(SendFlags::INLINE),
        SendRequest::new(3, write, &two).with_flags(SendFlags::INLINE | SendFlags::FENCE),
        SendRequest::new(4, SendOp::Send, &one)
            .with_flags(SendFlags::INLINE | SendFlags::SIGNALED | SendFlags::SOLICITED),
    ];
    a.qp.post_send(&wrs).unwrap();
    // Inline data was copied at post time: changing its buffer now must not matter.
    a.mr.write_at(0, b"--------").unwrap();
    a.mr.write_at(1000, b"---").unwrap();
    let s = poll_ok(&a.cq);
    assert_eq!(s.wr_id, 4, "only the signaled request completes");
    for (i, expect) in [&b"registered"[..], b"abcdefghXYZ", b"efgh"]
        .iter()
        .enumerate()
    {
        let r = poll_ok(&b.cq);
        assert_eq!(r.wr_id, 100 + i as u64, "in order");
        assert_eq!(r.byte_len as usize, expect.len());
        assert_eq!(&b.mr.as_slice()[i * 100..i * 100 + expect.len()], *expect);
    }
    assert_eq!(&b.mr.as_slice()[5000..5011], b"abcdefghXYZ", "inline WRITE");
    assert_empty(&a.cq);
    p.disconnect();
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn sq_sig_all_signals_every_request() {
    let p = CmPair::connect(
        device_ip(DEVICE),
        &SideOptions {
            sq_sig_all: true,
            ..Default::default()
        },
    );
    let (a, b) = (&p.active, &p.passive);
    assert!(a.qp.sq_sig_all());
    let sg = [a.mr.slice(0, 8).unwrap()];
    let op = SendOp::RdmaWrite {
        remote_addr: b.mr.addr(),
        rkey: b.mr.rkey(),
    };
    let wrs = [
        SendRequest::new(1, op, &sg).with_flags(SendFlags::empty()),
        SendRequest::new(2, op, &sg).with_flags(SendFlags::empty()),
    ];
    a.qp.post_send(&wrs).unwrap();
    assert_eq!(poll_ok(&a.cq).wr_id, 1);
    assert_eq!(poll_ok(&a.cq).wr_id, 2);
    p.disconnect();
}

fn unsupported_ops(rkey: RemoteKey, addr: u64) -> [SendOp; 4] {
    [
        SendOp::SendWithImm(0x1234),
        SendOp::RdmaWriteWithImm {
            remote_addr: addr,
            rkey,
            imm: 1,
        },
        SendOp::AtomicCompareSwap {
            remote_addr: addr,
            rkey,
            compare: 0,
            swap: 1,
        },
        SendOp::AtomicFetchAdd {
            remote_addr: addr,
            rkey,
            add: 1,
        },
    ]
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn unsupported_operations_fail_at_post_time_naming_device_and_operation() {
    let p = pair();
    let (a, b) = (&p.active, &p.passive);
    let sg = [a.mr.slice(0, 8).unwrap()];
    post_recv(b, 50, &[(0, 64)]);
    for op in unsupported_ops(b.mr.rkey(), b.mr.addr()) {
        let err =
            a.qp.post_send(&[SendRequest::new(0x99, op, &sg)])
                .unwrap_err();
        assert_eq!((err.index, err.wr_id), (0, 0x99));
        let text = err.to_string();
        assert!(matches!(err.error, Error::Unsupported { .. }), "{text}");
        assert!(text.contains("device `siw0` does not support"), "{text}");
        assert!(text.contains(op.name()), "{text}");
        println!("{text}");
    }
    // In a chain, the requests before the refused one are posted and run.
    let chain = [
        SendRequest::new(1, SendOp::Send, &sg),
        SendRequest::new(2, SendOp::SendWithImm(7), &sg),
    ];
    let err = a.qp.post_send(&chain).unwrap_err();
    assert_eq!((err.index, err.wr_id), (1, 2));
    assert_eq!(poll_ok(&a.cq).wr_id, 1);
    assert_eq!(poll_ok(&b.cq).wr_id, 50);
    // READ limits of siw, refused before they could break the QP.
    let two = [a.mr.slice(0, 8).unwrap(), a.mr.slice(8, 8).unwrap()];
    let read = SendOp::RdmaRead {
        remote_addr: b.mr.addr(),
        rkey: b.mr.rkey(),
    };
    let err =
        a.qp.post_send(&[SendRequest::new(3, read, &two)])
            .unwrap_err();
    assert!(err.to_string().contains("exactly one"), "{err}");
    let wr = SendRequest::new(4, read, &sg).with_flags(SendFlags::FENCE | SendFlags::SIGNALED);
    let err = a.qp.post_send(&[wr]).unwrap_err();
    assert!(err.to_string().contains("fenced RDMA_READ"), "{err}");
    // Nothing was silently queued: no completion appeared, and the QP still works.
    assert_empty(&a.cq);
    a.qp.post_send(&[SendRequest::new(5, read, &sg[..1])])
        .unwrap();
    assert_eq!(poll_ok(&a.cq).wr_id, 5);
    assert_empty(&a.cq);
    assert_empty(&b.cq);
    p.disconnect();
}

/// Posts an RDMA READ or WRITE of 16 bytes from the active side to `offset` of the passive
/// side's region under `rkey`; returns its completion.
fn post_remote(p: &CmPair, read: bool, offset: u64, rkey: RemoteKey) -> WorkCompletion {
    let (a, b) = (&p.active, &p.passive);
    let sg = [a.mr.slice(0, 16).unwrap()];
    let remote_addr = b.mr.addr() + offset;
    let op = if read {
        SendOp::RdmaRead { remote_addr, rkey }
    } else {
        SendOp::RdmaWrite { remote_addr, rkey }
    };
    a.qp.post_send(&[SendRequest::new(0x77, op, &sg)]).unwrap();
    let wc = poll_one(&a.cq);
    println!("{} at +{offset:#x} with rkey {rkey:?}: {wc:?}", op.name());
    if let Err(e) = wc.ok() {
        println!("as an error: {e}");
    }
    assert_eq!(wc.wr_id, 0x77);
    wc
}

fn wrong_rkey(p: &CmPair) -> RemoteKey {
    RemoteKey(p.passive.mr.rkey().0 ^ 0x5a00)
}

/// What siw reports for a READ with a wrong rkey: the responder refuses the request (a
/// `QP_REQ_ERR` async event on its QP) and terminates the connection; the requester's READ
/// gets no response, and is flushed when the TERMINATE moves its QP to ERROR. siw has no
/// "remote access error" completion for user QPs.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn wrong_rkey_read_is_flushed_after_the_peer_terminates() {
    let p = pair();
    let wc = post_remote(&p, true, 0, wrong_rkey(&p));
    let err = wc.ok().unwrap_err().to_string();
    assert_eq!(wc.status(), WcStatus::WorkRequestFlushError, "{err}");
    assert_eq!(wc.opcode(), WcOpcode::RdmaRead);
    assert!(err.contains("Work Request Flushed Error"), "{err}");
    assert!(err.contains("0x77"), "{err}");
    wait_async(&p.passive, AsyncEventKind::QpRequestError);
}

/// A WRITE with a wrong rkey: siw completes a WRITE once TCP has it, before the peer can
/// object, so the requester sees success; the responder finds no such STag and terminates
/// the connection, which both connection-manager ids report as DISCONNECTED.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn wrong_rkey_write_terminates_the_connection() {
    let p = pair();
    let wc = post_remote(&p, false, 0, wrong_rkey(&p));
    assert_eq!(
        (wc.status(), wc.opcode()),
        (WcStatus::Success, WcOpcode::RdmaWrite)
    );
    for id in [&p.active_id, &p.passive_id] {
        let ev = id
            .wait_event(CM_TIMEOUT)
            .expect("a connection-manager event");
        println!("cm event: {ev}");
        assert!(matches!(ev, CmEvent::Disconnected { .. }), "{ev}");
    }
}

/// A WRITE with the right rkey beyond the end of the region: the responder's access check
/// fails (a `QP_ACCESS_ERR` async event on its QP) and it terminates the connection.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn write_outside_the_region_is_an_access_error_at_the_responder() {
    let p = pair();
    let beyond = p.passive.mr.len() as u64 - 8;
    let wc = post_remote(&p, false, beyond, p.passive.mr.rkey());
    assert_eq!(wc.opcode(), WcOpcode::RdmaWrite);
    wait_async(&p.passive, AsyncEventKind::QpAccessError);
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn event_mode_wakes_the_channel_and_disarms() {
    let p = CmPair::connect(
        device_ip(DEVICE),
        &SideOptions {
            with_channel: true,
            ..Default::default()
        },
    );
    let (a, b) = (&p.active, &p.passive);
    let channel = b.channel.as_ref().unwrap();
    assert_eq!(
        channel.try_get_event().unwrap(),
        None,
        "no event before arming"
    );
    let siw_cq =
        b.cq.ops()
            .as_any()
            .downcast_ref::<SiwCq>()
            .expect("a siw CQ");
    for (round, solicited_only) in [false, true, false].into_iter().enumerate() {
        b.cq.req_notify(solicited_only).unwrap();
        assert_ne!(siw_cq.arming_word(), 0, "armed");
        post_recv(b, round as u64, &[(0, 64)]);
        let sg = [a.mr.slice(0, 8).unwrap()];
        let flags = if solicited_only {
            SendFlags::SIGNALED | SendFlags::SOLICITED
        } else {
            SendFlags::SIGNALED
        };
        a.qp.post_send(&[SendRequest::new(2, SendOp::Send, &sg).with_flags(flags)])
            .unwrap();
        let cookie = channel
            .wait(Some(Duration::from_secs(20)))
            .unwrap()
            .expect("a channel event for the receive CQ");
        assert_eq!(cookie, b.cq.cookie());
        assert_eq!(siw_cq.arming_word(), 0, "the kernel disarms when it fires");
        b.cq.ack_events(1);
        assert_eq!(poll_ok(&b.cq).wr_id, round as u64);
        poll_ok(&a.cq);
    }
    // Not re-armed: a further completion raises no event.
    post_recv(b, 9, &[(0, 64)]);
    let sg = [a.mr.slice(0, 8).unwrap()];
    a.qp.post_send(&[SendRequest::new(3, SendOp::Send, &sg)])
        .unwrap();
    poll_ok(&a.cq);
    assert_eq!(poll_ok(&b.cq).wr_id, 9);
    assert_eq!(channel.try_get_event().unwrap(), None);
    // The active CQ was never armed: its completions raised no event on its channel.
    assert_eq!(a.channel.as_ref().unwrap().try_get_event().unwrap(), None);
    p.disconnect();
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rings_wrap_over_thousands_of_post_poll_cycles() {
    let p = pair();
    let (a, b) = (&p.active, &p.passive);
    let mut wc = [WorkCompletion::default(); 4];
    for i in 0..3000u64 {
        a.mr.write_at(0, &i.to_le_bytes()).unwrap();
        post_recv(b, i, &[(0, 64)]);
        let sg = [a.mr.slice(0, 8).unwrap()];
        a.qp.post_send(&[SendRequest::new(i, SendOp::Send, &sg)
            .with_flags(SendFlags::SIGNALED | SendFlags::INLINE)])
            .unwrap();
        assert_eq!(poll_ok(&a.cq).wr_id, i);
        let r = poll_ok(&b.cq);
        assert_eq!((r.wr_id, r.byte_len), (i, 8));
        assert_eq!(&b.mr.as_slice()[..8], &i.to_le_bytes());
    }
    assert!(a.cq.poll(&mut wc).unwrap().is_empty());
    p.disconnect();
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn post_time_limits_and_sends_before_connection() {
    let p = pair();
    let (a, b) = (&p.active, &p.passive);
    let caps = a.qp.caps();
    let sg: Vec<_> = (0..caps.max_send_sge as usize + 1)
        .map(|i| a.mr.slice(i * 8, 8).unwrap())
        .collect();
    let err =
        a.qp.post_send(&[SendRequest::new(1, SendOp::Send, &sg)])
            .unwrap_err();
    assert!(err.to_string().contains("max_send_sge"), "{err}");
    let big = [a.mr.slice(0, caps.max_inline_data as usize + 1).unwrap()];
    let wr = SendRequest::new(2, SendOp::Send, &big).with_flags(SendFlags::INLINE);
    let err = a.qp.post_send(&[wr]).unwrap_err();
    assert!(err.to_string().contains("max_inline_data"), "{err}");
    // The receive array fills up when nothing arrives.
    let recv = [b.mr.slice(0, 8).unwrap()];
    let rr: Vec<_> = (0..=1024u64)
        .map(|i| RecvRequest {
            wr_id: i,
            sg_list: &recv,
        })
        .collect();
    let err = b.qp.post_recv(&rr).unwrap_err();
    assert!(err.index >= caps.max_recv_wr as usize, "{err}");
    assert!(matches!(err.error, Error::QueueFull { .. }), "{err}");
    p.disconnect();

    // Sizes siw rejects are named at creation; a QP not connected refuses sends.
    let context = rdmasock::open_device(Some(DEVICE)).unwrap();
    let pd = context.alloc_pd().unwrap();
    let cq = context.create_cq(8, None).unwrap();
    let too_much_inline = QpInitAttributes {
        caps: QpCapabilities {
            max_inline_data: 81,
            ..Default::default()
        },
        sq_sig_all: false,
    };
    let err = pd.create_qp(&too_much_inline, &cq, &cq).unwrap_err();
    assert!(err.to_string().contains("max_inline_data = 81"), "{err}");
    let qp = pd.create_qp(&Default::default(), &cq, &cq).unwrap();
    let mr = pd.register(4096, all_access()).unwrap();
    let sg = [mr.slice(0, 8).unwrap()];
    let err = qp
        .post_send(&[SendRequest::new(1, SendOp::Send, &sg)])
        .unwrap_err();
    assert!(err.to_string().contains("connection manager"), "{err}");
    assert_empty(&cq);
}

fn create_destroy_cycle(context: &rdmasock::verbs::Context) {
    let pd = context.alloc_pd().unwrap();
    let mr = pd.register(8192, all_access()).unwrap();
    let channel = context.create_comp_channel().unwrap();
    let cq = context.create_cq(16, Some(&channel)).unwrap();
    let qp = pd.create_qp(&Default::default(), &cq, &cq).unwrap();
    // Drop in the "wrong" order: the objects keep what they need alive.
    drop(pd);
    drop(channel);
    drop(cq);
    assert!(mr.lkey().0 != 0 || mr.rkey().0 != 0);
    drop(mr);
    drop(qp);
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn create_destroy_cycles_leak_nothing() {
    device_ip(DEVICE);
    let context = rdmasock::open_device(Some(DEVICE)).unwrap();
    for _ in 0..100 {
        create_destroy_cycle(&context);
    }
    let fds = open_fds();
    let rss = rss_kib();
    for _ in 0..1000 {
        create_destroy_cycle(&context);
    }
    assert_eq!(open_fds(), fds, "file descriptors leaked");
    let grown = rss_kib().saturating_sub(rss);
    assert!(
        grown < 4096,
        "resident memory grew by {grown} KiB over 1000 cycles"
    );
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn connect_disconnect_cycles_leak_no_fd() {
    let ip = device_ip(DEVICE);
    drop(CmPair::connect(ip, &SideOptions::default()).disconnect());
    let fds = open_fds();
    for _ in 0..10 {
        let p = CmPair::connect(ip, &SideOptions::default());
        post_recv(&p.passive, 1, &[(0, 8)]);
        let sg = [p.active.mr.slice(0, 8).unwrap()];
        p.active
            .qp
            .post_send(&[SendRequest::new(1, SendOp::Send, &sg)])
            .unwrap();
        poll_ok(&p.active.cq);
        poll_ok(&p.passive.cq);
        drop(p.disconnect());
    }
    assert_eq!(
        open_fds(),
        fds,
        "file descriptors leaked over 10 connections"
    );
}
