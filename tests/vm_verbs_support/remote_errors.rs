//! Conformance bodies: what the responder refuses, as the requester sees it (with the
//! status text), and, on iWARP, the TERMINATE that ends the connection.

use super::{poll_one, post_recv, Dut, Outcome, Pair, PairOptions};
use rdmasock::verbs::{
    RemoteKey, SendFlags, SendOp, SendRequest, WcOpcode, WcStatus, WorkCompletion,
};

/// Posts an RDMA READ or WRITE of 16 bytes from `a` to `offset` of `b`'s region under
/// `rkey`; returns its completion.
fn post_remote(p: &Pair, read: bool, offset: u64, rkey: RemoteKey) -> WorkCompletion {
    let sg = [p.a.mr.slice(0, 16).unwrap()];
    let remote_addr = p.b.mr.addr() + offset;
    let op = if read {
        SendOp::RdmaRead { remote_addr, rkey }
    } else {
        SendOp::RdmaWrite { remote_addr, rkey }
    };
    p.a.qp
        .post_send(&[SendRequest::new(0x77, op, &sg).with_flags(SendFlags::SIGNALED)])
        .unwrap();
    let wc = poll_one(&p.a.cq);
    println!("{} at +{offset:#x} with rkey {rkey:?}: {wc:?}", op.name());
    assert_eq!(wc.wr_id, 0x77);
    wc
}

/// What the error text of a completion with `status` must say about the likely cause, in
/// words a user can act on (`None`: no cause is named).
fn cause(status: WcStatus) -> Option<&'static str> {
    match status {
        WcStatus::RnrRetryExceededError => Some("the peer had no receive posted"),
        WcStatus::RemoteAccessError => Some("the peer refused the access: wrong rkey"),
        WcStatus::WorkRequestFlushError => Some("the queue pair is in the error state"),
        _ => None,
    }
}

/// Asserts that `wc`, a completion of work request 0x77 on `p.a`'s QP, is `expected`; when
/// that is an error, that its text names the request, the QP, the status (text and number),
/// the vendor error and the cause. Returns that text.
fn assert_status(
    p: &Pair,
    wc: &WorkCompletion,
    expected: Outcome,
    opcode: WcOpcode,
) -> Option<String> {
    let Outcome { status, vendor_err } = expected;
    assert_eq!(
        (wc.status(), wc.vendor_err),
        (status, vendor_err),
        "status and vendor error of {wc:?}"
    );
    match wc.ok() {
        Ok(_) => {
            assert_eq!(wc.opcode(), opcode);
            None
        }
        Err(e) => {
            let text = e.to_string();
            println!("as an error: {text}");
            assert_eq!(wc.qp_num, p.a.qp.qp_num(), "the completion's QP: {text}");
            let head = format!(
                "work request 0x77 on QP {} failed: {} (status {}, vendor error {vendor_err:#x})",
                p.a.qp.qp_num(),
                status.text(),
                status.to_raw()
            );
            assert!(text.starts_with(&head), "expected `{head}…`, got: {text}");
            if let Some(cause) = cause(status) {
                let tail = &text[head.len()..];
                assert!(tail.starts_with(": ") && tail.contains(cause), "{text}");
            }
            Some(text)
        }
    }
}

/// On a device whose responder terminates: waits until the connection has ended, then
/// checks that the receive `wr_id` still posted on `b` was flushed.
fn assert_terminated(dut: &Dut, p: &Pair, flushed_wr_id: u64) {
    if !dut.remote_errors.terminates {
        return;
    }
    p.wait_terminated();
    assert_flushed(&p.b.cq, flushed_wr_id);
}

/// Asserts that the next completion of `cq` is the flush of receive `wr_id`.
fn assert_flushed(cq: &rdmasock::verbs::CompletionQueue, wr_id: u64) {
    let r = poll_one(cq);
    let text = r.ok().unwrap_err().to_string();
    assert_eq!(
        (r.wr_id, r.status()),
        (wr_id, WcStatus::WorkRequestFlushError),
        "{text}"
    );
    assert!(text.contains("Work Request Flushed Error"), "{text}");
    assert!(
        text.contains("the queue pair is in the error state"),
        "{text}"
    );
}

fn wrong_rkey(p: &Pair) -> RemoteKey {
    RemoteKey(p.b.mr.rkey().0 ^ 0x5a00)
}

/// An RDMA READ under a wrong rkey fails with the device's status (a remote access error;
/// on siw the READ gets no response and is flushed once the TERMINATE arrives).
pub fn wrong_rkey_read_is_reported_with_its_status(dut: &Dut) {
    let p = dut.pair();
    post_recv(&p.b, 0x55, &[(0, 64)]);
    let wc = post_remote(&p, true, 0, wrong_rkey(&p));
    assert_ne!(wc.status(), WcStatus::Success, "a READ under a wrong rkey");
    assert_status(&p, &wc, dut.remote_errors.bad_rkey_read, WcOpcode::RdmaRead);
    if dut.remote_errors.read_error_flushes_responder {
        assert_terminated(dut, &p, 0x55);
    } else if dut.remote_errors.terminates {
        p.wait_terminated();
    }
}

/// An RDMA WRITE under a wrong rkey: a remote access error at the requester on InfiniBand
/// transports; on iWARP the WRITE completes once sent and the responder terminates.
pub fn wrong_rkey_write_is_reported_with_its_status(dut: &Dut) {
    let p = dut.pair();
    post_recv(&p.b, 0x56, &[(0, 64)]);
    let wc = post_remote(&p, false, 0, wrong_rkey(&p));
    assert_status(
        &p,
        &wc,
        dut.remote_errors.bad_rkey_write,
        WcOpcode::RdmaWrite,
    );
    assert_terminated(dut, &p, 0x56);
}

/// A SEND that finds no receive: RNR retries run out (one retry here) on InfiniBand
/// transports; on iWARP the SEND completes once sent and the responder terminates. Either
/// way the requester's QP ends in error and flushes the receive it had posted.
pub fn send_without_receive_is_reported(dut: &Dut) {
    let p = dut.pair_with(PairOptions {
        rnr_retry: 1,
        ..Default::default()
    });
    post_recv(&p.a, 0x58, &[(0, 64)]);
    let sg = [p.a.mr.slice(0, 16).unwrap()];
    p.a.qp
        .post_send(&[SendRequest::new(0x77, SendOp::Send, &sg).with_flags(SendFlags::SIGNALED)])
        .unwrap();
    let wc = poll_one(&p.a.cq);
    println!("SEND without a receive: {wc:?}");
    assert_eq!(wc.wr_id, 0x77);
    let text = assert_status(&p, &wc, dut.remote_errors.no_receive, WcOpcode::Send);
    if dut.remote_errors.no_receive.status == WcStatus::RnrRetryExceededError {
        let text = text.expect("an RNR error");
        assert!(
            text.contains("RNR retry counter exceeded")
                && text.contains(": the peer had no receive posted"),
            "{text}"
        );
    }
    if dut.remote_errors.terminates {
        p.wait_terminated();
    }
    assert_flushed(&p.a.cq, 0x58);
}
