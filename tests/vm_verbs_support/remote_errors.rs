//! Conformance bodies: what the responder refuses, as the requester sees it (with the
//! status text), and how the refusal ends the connection: on iWARP the TERMINATE, on
//! InfiniBand transports the NAK that puts both queue pairs in the error state.

use super::{pattern, poll_one, post_recv, Dut, Outcome, Pair, PairOptions, COMPLETION_DEADLINE};
use rdmasock::verbs::qp_attr::QpAttrMask;
use rdmasock::verbs::{
    AccessFlags, MemoryRegion, QpState, RemoteKey, SendFlags, SendOp, SendRequest, Transport,
    WcOpcode, WcStatus, WorkCompletion,
};
use std::time::Instant;

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

/// Waits until the responder's refusal has ended the connection — on iWARP its TERMINATE,
/// on InfiniBand transports its NAK, after which both QPs are in the error state (see
/// [`super::RemoteErrors::terminates`]) — then checks that the receive `wr_id` still posted
/// on `b` was flushed, with no completion before it.
fn assert_terminated(dut: &Dut, p: &Pair, flushed_wr_id: u64) {
    if dut.remote_errors.terminates {
        p.wait_terminated();
    } else {
        assert_eq!(
            dut.transport,
            Transport::InfiniBand,
            "{}: a device whose responder does not terminate must be InfiniBand's",
            dut.device
        );
        p.wait_error_state("the responder's NAK did not end the connection");
        for (name, side) in [("requester", &p.a), ("responder", &p.b)] {
            let event = side
                .context
                .read_async_event()
                .expect("reading async events");
            assert!(
                event.is_none(),
                "the {name} got an async event after the NAK: {event:?}"
            );
        }
    }
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

/// Why a device that leaves the responder's receives posted after a refused READ must
/// terminate: then the TERMINATE is what the test checks.
const READ_UNFLUSHED: &str =
    "only a device whose responder terminates may leave its receives posted after a refused READ";

fn wrong_rkey(p: &Pair) -> RemoteKey {
    RemoteKey(p.b.mr.rkey().0 ^ 0x5a00)
}

/// An RDMA READ under a wrong rkey fails with the device's status (a remote access error;
/// on siw the READ gets no response and is flushed once the TERMINATE arrives).
pub(crate) fn wrong_rkey_read_is_reported_with_its_status(dut: &Dut) {
    let p = dut.pair();
    post_recv(&p.b, 0x55, &[(0, 64)]);
    let wc = post_remote(&p, true, 0, wrong_rkey(&p));
    assert_ne!(wc.status(), WcStatus::Success, "a READ under a wrong rkey");
    assert_status(&p, &wc, dut.remote_errors.bad_rkey_read, WcOpcode::RdmaRead);
    if dut.remote_errors.read_error_flushes_responder {
        assert_terminated(dut, &p, 0x55);
    } else {
        assert!(
            dut.remote_errors.terminates,
            "{}: {READ_UNFLUSHED}",
            dut.device
        );
        p.wait_terminated();
    }
}

/// An RDMA WRITE under a wrong rkey: a remote access error at the requester on InfiniBand
/// transports; on iWARP the WRITE completes once sent and the responder terminates.
pub(crate) fn wrong_rkey_write_is_reported_with_its_status(dut: &Dut) {
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
pub(crate) fn send_without_receive_is_reported(dut: &Dut) {
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
    if !dut.remote_errors.terminates {
        // RNR NAKs are no responder error (class B): the responder's QP stays connected.
        let state = p.b.qp.query(QpAttrMask::STATE).unwrap().qp_state;
        assert_eq!(
            state,
            QpState::ReadyToSend,
            "the responder's QP after RNR NAKs"
        );
    }
}

/// What the error text of a refusal for a missing access right names as the likely cause.
const MISSING_RIGHT: &str = "a region registered without REMOTE_READ/REMOTE_WRITE/REMOTE_ATOMIC";

/// A 4 KiB region on the responder's PD with every right the device has but `missing`
/// (LOCAL_WRITE always: the kernel wants it beside REMOTE_WRITE and REMOTE_ATOMIC), filled
/// with a pattern. It keeps another remote right, so its rkey is valid: a refusal is about
/// the right alone.
fn region_without(dut: &Dut, p: &Pair, missing: AccessFlags) -> MemoryRegion {
    let access = dut.access() - missing;
    assert!(
        access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ),
        "{access:?} leaves the region no remote right"
    );
    let mr = p.b.pd.register(4096, access).expect("REG_MR");
    assert_eq!(mr.access(), access);
    mr.write_at(0, &pattern(4096, 0x3c)).unwrap();
    mr
}

/// Posts `op` (signaled, work request `wr_id`) from `p.a` with `len` bytes of its region at
/// `local` as the source or sink; returns its completion.
fn post_op(p: &Pair, wr_id: u64, op: SendOp, local: usize, len: usize) -> WorkCompletion {
    let sg = [p.a.mr.slice(local, len).unwrap()];
    p.a.qp
        .post_send(&[SendRequest::new(wr_id, op, &sg).with_flags(SendFlags::SIGNALED)])
        .unwrap();
    let wc = poll_one(&p.a.cq);
    println!("{} (work request {wr_id:#x}): {wc:?}", op.name());
    assert_eq!(wc.wr_id, wr_id);
    wc
}

/// An RDMA READ of 16 bytes at `offset` of `mr` into `p.a`'s region at `local` succeeds and
/// fetches them: the region's rkey is right.
fn read_succeeds(p: &Pair, mr: &MemoryRegion, offset: usize, local: usize) {
    let op = SendOp::RdmaRead {
        remote_addr: mr.addr() + offset as u64,
        rkey: mr.rkey(),
    };
    let wc = post_op(p, 0x76, op, local, 16);
    wc.ok()
        .unwrap_or_else(|e| panic!("a READ the region allows: {e}"));
    assert_eq!(
        &p.a.mr.to_vec()[local..local + 16],
        &mr.to_vec()[offset..offset + 16]
    );
}

/// When the completion `text` of a refusal names causes, it names the missing right.
fn assert_names_missing_right(text: Option<String>) {
    if let Some(text) = text.filter(|t| t.contains("the peer refused the access")) {
        assert!(text.contains(MISSING_RIGHT), "{text}");
    }
}

/// A region registered without REMOTE_WRITE serves a READ under its rkey but refuses an RDMA
/// WRITE: a remote access error at the requester on InfiniBand transports (on iWARP the
/// WRITE completes once sent and the responder terminates), and not one byte of the region
/// changes.
pub(crate) fn region_without_remote_write_refuses_a_write(dut: &Dut) {
    let p = dut.pair();
    let mr = region_without(dut, &p, AccessFlags::REMOTE_WRITE);
    post_recv(&p.b, 0x57, &[(0, 64)]);
    read_succeeds(&p, &mr, 64, 0);
    let before = mr.to_vec();
    p.a.mr.write_at(0, &[0xa5; 16]).unwrap();
    let op = SendOp::RdmaWrite {
        remote_addr: mr.addr() + 64,
        rkey: mr.rkey(),
    };
    let wc = post_op(&p, 0x77, op, 0, 16);
    let text = assert_status(&p, &wc, dut.remote_errors.denied_write, WcOpcode::RdmaWrite);
    assert_names_missing_right(text);
    // On iWARP the TERMINATE comes once the responder has refused the WRITE's bytes.
    assert_terminated(dut, &p, 0x57);
    assert!(
        mr.to_vec() == before,
        "an RDMA WRITE changed a region registered without REMOTE_WRITE"
    );
}

/// A region registered without REMOTE_READ takes a WRITE under its rkey but refuses an RDMA
/// READ: the requester's completion is a remote access error, the READ's sink keeps its
/// bytes and the region is unchanged. siw, whose kernel never checks REMOTE_READ, serves the
/// READ instead (pinned: see `SIW`).
pub(crate) fn region_without_remote_read_refuses_a_read(dut: &Dut) {
    let p = dut.pair();
    let mr = region_without(dut, &p, AccessFlags::REMOTE_READ);
    post_recv(&p.b, 0x55, &[(0, 64)]);
    p.a.mr.write_at(0, b"written, allowed").unwrap();
    let write = SendOp::RdmaWrite {
        remote_addr: mr.addr() + 64,
        rkey: mr.rkey(),
    };
    let wc = post_op(&p, 0x76, write, 0, 16);
    wc.ok()
        .unwrap_or_else(|e| panic!("a WRITE the region allows: {e}"));
    // iWARP completes a WRITE once it is on the wire: wait for the bytes to land.
    let deadline = Instant::now() + COMPLETION_DEADLINE;
    while &mr.to_vec()[64..80] != b"written, allowed" {
        assert!(Instant::now() < deadline, "the allowed WRITE never landed");
        std::thread::yield_now();
    }
    let before = mr.to_vec();
    p.a.mr.write_at(256, &[0xee; 16]).unwrap();
    let read = SendOp::RdmaRead {
        remote_addr: mr.addr() + 64,
        rkey: mr.rkey(),
    };
    let wc = post_op(&p, 0x77, read, 256, 16);
    let text = assert_status(&p, &wc, dut.remote_errors.denied_read, WcOpcode::RdmaRead);
    if dut.remote_errors.denied_read.status == WcStatus::Success {
        // The device does not enforce REMOTE_READ (siw, see its `Dut`): it served the READ.
        assert_eq!(&p.a.mr.to_vec()[256..272], b"written, allowed");
        assert!(mr.to_vec() == before, "the region changed");
        println!(
            "{} served a READ from a region without REMOTE_READ",
            dut.device
        );
        return p.disconnect();
    }
    assert_names_missing_right(text);
    if dut.remote_errors.read_error_flushes_responder {
        assert_terminated(dut, &p, 0x55);
    } else {
        assert!(
            dut.remote_errors.terminates,
            "{}: {READ_UNFLUSHED}",
            dut.device
        );
        p.wait_terminated();
    }
    assert_eq!(
        &p.a.mr.to_vec()[256..272],
        &[0xee; 16],
        "the refused READ's sink changed"
    );
    assert!(mr.to_vec() == before, "the region changed");
}

/// A region registered without REMOTE_ATOMIC serves a READ under its rkey but refuses a
/// fetch-and-add: a remote access error at the requester, the target keeps its value and
/// the requester's result buffer its bytes. iWARP (RFC 5040) has no atomics: there (siw,
/// uiwarp) the fetch-and-add towards the region is refused at post time, so no responder
/// ever sees one, and the region keeps its value.
pub(crate) fn region_without_remote_atomic_refuses_an_atomic(dut: &Dut) {
    let p = dut.pair();
    let mr = region_without(dut, &p, AccessFlags::REMOTE_ATOMIC);
    if !dut.atomics {
        mr.write_at(0, &100u64.to_ne_bytes()).unwrap();
        let add = SendOp::AtomicFetchAdd {
            remote_addr: mr.addr(),
            rkey: mr.rkey(),
            add: 1,
        };
        super::opcodes::assert_refused(dut, &p.a, add);
        read_succeeds(&p, &mr, 0, 0);
        assert_eq!(
            &mr.to_vec()[..8],
            &100u64.to_ne_bytes(),
            "the target changed"
        );
        return p.disconnect();
    }
    mr.write_at(0, &100u64.to_ne_bytes()).unwrap();
    read_succeeds(&p, &mr, 0, 0);
    let before = mr.to_vec();
    p.a.mr.write_at(64, &[0xee; 8]).unwrap();
    let add = SendOp::AtomicFetchAdd {
        remote_addr: mr.addr(),
        rkey: mr.rkey(),
        add: 1,
    };
    let wc = post_op(&p, 0x77, add, 64, 8);
    let text = assert_status(&p, &wc, dut.remote_errors.denied_atomic, WcOpcode::FetchAdd);
    assert_names_missing_right(text);
    assert_eq!(
        &mr.to_vec()[..8],
        &100u64.to_ne_bytes(),
        "the atomic's target changed"
    );
    assert!(mr.to_vec() == before, "the region changed");
    assert_eq!(
        &p.a.mr.to_vec()[64..72],
        &[0xee; 8],
        "the refused atomic's result buffer changed"
    );
}
