//! Verbs conformance on siw0 (soft-iWARP) through the pure-Rust siw provider: the shared
//! conformance suite (tests/vm_verbs_support/: every supported opcode byte for byte, the
//! post-time refusal of what iWARP cannot do, error statuses with their text and the
//! TERMINATE that ends the connection, event mode, load and leak checks) on two QPs of one
//! device connected through rdma_cm (the only way iWARP QPs reach RTS), and the tests only
//! siw has (its READ limits, responder-side async events, QP creation limits, the CQ
//! arming word).
//!
//! Runs only in the VM (`tests/vm/run.sh`, or `run-in-vm.sh --both '<binary> --ignored
//! --test-threads=1'`); on the host every test is ignored. Each test first asserts that siw0
//! exists, so none can pass without the device.

#[macro_use]
#[path = "vm_verbs_support/mod.rs"]
mod support;

use rdmasock::verbs::{
    AsyncEventKind, QpCapabilities, QpInitAttributes, RemoteKey, SendFlags, SendOp, SendRequest,
};
use rdmasock_siw::SiwCq;
use support::cm_support::wait_async;
use support::iwarp::{open_siw0, SIW};
use support::{assert_empty, poll_ok, poll_one, post_recv, PairOptions, COMPLETION_DEADLINE};

conformance_suite!(vm, SIW);

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

/// Every operation siw lacks is refused alone and in a chain (the requests before it run),
/// and so are READs siw cannot carry (two scatter entries, fenced), before they could
/// break the QP.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn unsupported_operations_fail_at_post_time_naming_device_and_operation() {
    let p = SIW.pair();
    let (a, b) = (&p.a, &p.b);
    let sg = [a.mr.slice(0, 8).unwrap()];
    post_recv(b, 50, &[(0, 64)]);
    for op in unsupported_ops(b.mr.rkey(), b.mr.addr()) {
        support::assert_refused(&SIW, a, op);
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

/// A WRITE with the right rkey beyond the end of the region: the responder's access check
/// fails (a `QP_ACCESS_ERR` async event on its QP) and it terminates the connection.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn write_outside_the_region_is_an_access_error_at_the_responder() {
    let p = SIW.pair();
    let (a, b) = (&p.a, &p.b);
    let sg = [a.mr.slice(0, 16).unwrap()];
    let op = SendOp::RdmaWrite {
        remote_addr: b.mr.addr() + b.mr.len() as u64 - 8,
        rkey: b.mr.rkey(),
    };
    a.qp.post_send(&[SendRequest::new(0x77, op, &sg)]).unwrap();
    let wc = poll_one(&a.cq);
    println!("RDMA_WRITE across the region's end: {wc:?}");
    assert_eq!(wc.wr_id, 0x77);
    wait_async(b, AsyncEventKind::QpAccessError);
    p.wait_terminated();
}

/// Sizes siw rejects are named at QP creation; a QP not connected refuses sends, naming
/// the connection manager.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn oversized_qps_and_sends_before_connection_are_refused() {
    let context = open_siw0();
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
    let mr = pd.register(4096, SIW.access()).unwrap();
    let sg = [mr.slice(0, 8).unwrap()];
    let err = qp
        .post_send(&[SendRequest::new(1, SendOp::Send, &sg)])
        .unwrap_err();
    assert!(err.to_string().contains("connection manager"), "{err}");
    assert_empty(&cq);
}

/// A READ under a wrong rkey: the responder refuses the request (a `QP_REQ_ERR` async event
/// on its QP) before it terminates the connection.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn refused_read_is_a_request_error_at_the_responder() {
    let p = SIW.pair();
    let (a, b) = (&p.a, &p.b);
    let sg = [a.mr.slice(0, 16).unwrap()];
    let op = SendOp::RdmaRead {
        remote_addr: b.mr.addr(),
        rkey: RemoteKey(b.mr.rkey().0 ^ 0x5a00),
    };
    a.qp.post_send(&[SendRequest::new(0x77, op, &sg)]).unwrap();
    wait_async(b, AsyncEventKind::QpRequestError);
    let wc = poll_one(&a.cq);
    println!("RDMA_READ under a wrong rkey: {wc:?}");
    assert_eq!(wc.wr_id, 0x77);
    p.wait_terminated();
}

/// Arming writes the CQ's shared arming word with no system call; the kernel clears it when
/// it raises the event.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn arming_word_is_set_by_req_notify_and_cleared_by_the_kernel() {
    let p = SIW.pair_with(PairOptions {
        with_channel: true,
        ..Default::default()
    });
    let (a, b) = (&p.a, &p.b);
    let siw_cq =
        b.cq.ops()
            .as_any()
            .downcast_ref::<SiwCq>()
            .expect("a siw CQ");
    for solicited_only in [false, true] {
        b.cq.req_notify(solicited_only).unwrap();
        assert_ne!(siw_cq.arming_word(), 0, "armed");
        post_recv(b, 1, &[(0, 64)]);
        let sg = [a.mr.slice(0, 8).unwrap()];
        let flags = SendFlags::SIGNALED | SendFlags::SOLICITED;
        a.qp.post_send(&[SendRequest::new(2, SendOp::Send, &sg).with_flags(flags)])
            .unwrap();
        let channel = b.channel.as_ref().unwrap();
        let cookie = channel.wait(Some(COMPLETION_DEADLINE)).unwrap();
        assert_eq!(cookie, Some(b.cq.cookie()));
        assert_eq!(siw_cq.arming_word(), 0, "the kernel disarms when it fires");
        b.cq.ack_events(1);
        assert_eq!(poll_ok(&b.cq).wr_id, 1);
        assert_eq!(poll_ok(&a.cq).wr_id, 2);
    }
    p.disconnect();
}
