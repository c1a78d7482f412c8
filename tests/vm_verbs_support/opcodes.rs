//! Conformance bodies: the device, and every opcode byte for byte (or, where the device
//! lacks it, the clear post-time refusal).

use super::{
    assert_empty, pattern, poll_ok, post_recv, Dut, PairOptions, Side, COMPLETION_DEADLINE,
};
use rdmasock::verbs::{
    Error, PortState, RecvRequest, ScatterGather, SendFlags, SendOp, SendRequest, WcFlags, WcOpcode,
};
use std::time::Instant;

/// Posts `op` from `side` and asserts the device refuses it at post time, naming itself and
/// the operation, and that nothing was queued.
pub(crate) fn assert_refused(dut: &Dut, side: &Side, op: SendOp) {
    let sg = [side.mr.slice(0, 8).unwrap()];
    let err = side
        .qp
        .post_send(&[SendRequest::new(0x99, op, &sg)])
        .unwrap_err();
    assert_eq!((err.index, err.wr_id), (0, 0x99));
    let text = err.to_string();
    println!("{text}");
    assert!(matches!(err.error, Error::Unsupported { .. }), "{text}");
    let device = dut.device;
    assert!(
        text.contains(&format!("device `{device}` does not support")),
        "{text}"
    );
    assert!(text.contains(op.name()), "{text}");
    assert_empty(&side.cq);
}

/// The device is driven by the expected provider, is of its transport, has port 1 active,
/// and advertises atomics exactly when the suite expects them to work.
pub(crate) fn device_reports_its_provider_and_capabilities(dut: &Dut) {
    let context = (dut.open)();
    assert_eq!(context.device().name, dut.device);
    assert_eq!(context.provider_name(), (dut.provider)());
    assert_eq!(context.device().transport, dut.transport);
    let attr = context.query_device().expect("QUERY_DEVICE");
    assert!(attr.max_qp > 0, "{attr:?}");
    assert_eq!(attr.supports_atomics(), dut.atomics, "{attr:?}");
    let port = context.query_port(1).expect("QUERY_PORT");
    assert_eq!(port.state, PortState::Active, "port 1: {port:?}");
}

/// A SEND gathered from three pieces scatters into two, byte for byte, each way.
pub(crate) fn send_gathers_and_scatters_byte_for_byte_both_ways(dut: &Dut) {
    let p = dut.pair();
    for (from, to) in [(&p.a, &p.b), (&p.b, &p.a)] {
        from.mr.write_at(0, b"hello").unwrap();
        from.mr.write_at(100, b", ").unwrap();
        from.mr.write_at(200, b"conformance world").unwrap();
        post_recv(to, 7, &[(0, 10), (1000, 100)]);
        let sg = [
            from.mr.slice(0, 5).unwrap(),
            from.mr.slice(100, 2).unwrap(),
            from.mr.slice(200, 17).unwrap(),
        ];
        from.qp
            .post_send(&[SendRequest::new(1, SendOp::Send, &sg)])
            .unwrap();
        let s = poll_ok(&from.cq);
        assert_eq!((s.wr_id, s.opcode()), (1, WcOpcode::Send));
        assert_eq!(s.qp_num, from.qp.qp_num());
        let r = poll_ok(&to.cq);
        assert_eq!((r.wr_id, r.opcode(), r.byte_len), (7, WcOpcode::Recv, 24));
        assert_eq!((r.imm(), r.qp_num), (None, to.qp.qp_num()));
        let whole = b"hello, conformance world";
        assert_eq!(&to.mr.to_vec()[..10], &whole[..10]);
        assert_eq!(&to.mr.to_vec()[1000..1014], &whole[10..]);
        assert_empty(&from.cq);
        assert_empty(&to.cq);
    }
    p.disconnect();
}

/// SEND with immediate delivers the bytes and the immediate, flagged; a device without
/// immediate data refuses it at post time.
pub(crate) fn send_with_imm_carries_the_immediate(dut: &Dut) {
    let p = dut.pair();
    let op = SendOp::SendWithImm(0x1234_5678);
    if !dut.immediate {
        assert_refused(dut, &p.a, op);
        return p.disconnect();
    }
    p.a.mr.write_at(0, &[0xab; 32]).unwrap();
    post_recv(&p.b, 2, &[(0, 32)]);
    let send = [p.a.mr.slice(0, 32).unwrap()];
    p.a.qp.post_send(&[SendRequest::new(3, op, &send)]).unwrap();
    assert_eq!(poll_ok(&p.a.cq).opcode(), WcOpcode::Send);
    let r = poll_ok(&p.b.cq);
    assert_eq!((r.wr_id, r.opcode(), r.byte_len), (2, WcOpcode::Recv, 32));
    assert!(r.flags().contains(WcFlags::WITH_IMM));
    assert_eq!(r.imm(), Some(0x1234_5678));
    assert_eq!(&p.b.mr.to_vec()[..32], &[0xab; 32]);
    p.disconnect();
}

/// RDMA WRITE of 3000 and 60 000 bytes from two gather pieces lands byte for byte and uses
/// no receive.
pub(crate) fn rdma_write_lands_without_a_receive(dut: &Dut) {
    let p = dut.pair();
    let (a, b) = (&p.a, &p.b);
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
        // iWARP completes a WRITE once it is on the wire: wait for the bytes to land.
        let deadline = Instant::now() + COMPLETION_DEADLINE;
        while b.mr.to_vec()[at..at + len] != data[..] {
            assert!(Instant::now() < deadline, "the written bytes never landed");
            std::thread::yield_now();
        }
        assert_empty(&b.cq);
    }
    p.disconnect();
}

/// RDMA WRITE with immediate places the bytes and consumes a receive that reports the
/// immediate and the length; a device without immediate data refuses it at post time.
pub(crate) fn rdma_write_with_imm_consumes_a_receive(dut: &Dut) {
    let p = dut.pair();
    let op = SendOp::RdmaWriteWithImm {
        remote_addr: p.b.mr.addr() + 8,
        rkey: p.b.mr.rkey(),
        imm: 0xcafe_f00d,
    };
    if !dut.immediate {
        assert_refused(dut, &p.a, op);
        return p.disconnect();
    }
    p.a.mr.write_at(0, b"written").unwrap();
    p.b.qp
        .post_recv(&[RecvRequest {
            wr_id: 9,
            sg_list: &[],
        }])
        .unwrap();
    let sg = [p.a.mr.slice(0, 7).unwrap()];
    p.a.qp.post_send(&[SendRequest::new(5, op, &sg)]).unwrap();
    assert_eq!(poll_ok(&p.a.cq).opcode(), WcOpcode::RdmaWrite);
    let r = poll_ok(&p.b.cq);
    assert_eq!(
        (r.wr_id, r.opcode(), r.byte_len),
        (9, WcOpcode::RecvRdmaWithImm, 7)
    );
    assert_eq!(r.imm(), Some(0xcafe_f00d));
    assert_eq!(&p.b.mr.to_vec()[8..15], b"written");
    p.disconnect();
}

/// RDMA READ of 20 and 40 000 bytes fetches the remote bytes exactly.
pub(crate) fn rdma_read_fetches_remote_bytes(dut: &Dut) {
    let p = dut.pair();
    let (a, b) = (&p.a, &p.b);
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
    assert_eq!(&a.mr.to_vec()[64..84], b"remote bytes to read");
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
    assert_eq!(&a.mr.to_vec()[1000..41_000], &big[..]);
    assert_empty(&b.cq);
    p.disconnect();
}

/// Compare-and-swap swaps only on a match and returns the old value; fetch-and-add adds and
/// returns the old value. A device without atomics refuses both at post time.
pub(crate) fn atomic_compare_swap_and_fetch_add(dut: &Dut) {
    let p = dut.pair();
    let (a, b) = (&p.a, &p.b);
    let target = b.mr.addr() + 256;
    let swap = SendOp::AtomicCompareSwap {
        remote_addr: target,
        rkey: b.mr.rkey(),
        compare: 100,
        swap: 0x1122_3344_5566_7788,
    };
    let add = SendOp::AtomicFetchAdd {
        remote_addr: target,
        rkey: b.mr.rkey(),
        add: 0x11,
    };
    if !dut.atomics {
        assert_refused(dut, a, swap);
        assert_refused(dut, a, add);
        return p.disconnect();
    }
    b.mr.write_at(256, &100u64.to_ne_bytes()).unwrap();
    let sg = [a.mr.slice(0, 8).unwrap()];
    a.qp.post_send(&[SendRequest::new(7, swap, &sg)]).unwrap();
    assert_eq!(poll_ok(&a.cq).opcode(), WcOpcode::CompareSwap);
    let swapped = 0x1122_3344_5566_7788u64.to_ne_bytes();
    assert_eq!(&a.mr.to_vec()[..8], &100u64.to_ne_bytes(), "old value");
    assert_eq!(&b.mr.to_vec()[256..264], &swapped);
    // A compare that does not match leaves the target alone.
    a.qp.post_send(&[SendRequest::new(8, swap, &sg)]).unwrap();
    poll_ok(&a.cq);
    assert_eq!(&a.mr.to_vec()[..8], &swapped);
    assert_eq!(&b.mr.to_vec()[256..264], &swapped);
    a.qp.post_send(&[SendRequest::new(9, add, &sg)]).unwrap();
    assert_eq!(poll_ok(&a.cq).opcode(), WcOpcode::FetchAdd);
    assert_eq!(&a.mr.to_vec()[..8], &swapped);
    assert_eq!(
        &b.mr.to_vec()[256..264],
        &0x1122_3344_5566_7799u64.to_ne_bytes()
    );
    p.disconnect();
}

/// A chain of four: an unsignaled SEND from registered memory, an inline two-piece SEND, a
/// fenced inline WRITE and a signaled solicited inline SEND. Only the last completes at the
/// requester; the receives complete in order; inline data was copied at post time.
pub(crate) fn chained_inline_fence_and_selective_signaling(dut: &Dut) {
    let p = dut.pair();
    let (a, b) = (&p.a, &p.b);
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
        assert_eq!(&b.mr.to_vec()[i * 100..i * 100 + expect.len()], *expect);
    }
    assert_eq!(&b.mr.to_vec()[5000..5011], b"abcdefghXYZ", "inline WRITE");
    assert_empty(&a.cq);
    p.disconnect();
}

/// Inline sends of borrowed bytes (`ScatterGather::borrowed`): the provider takes them at
/// post time, so the buffer needs no registration and may change at once; a borrowed entry
/// in a send without INLINE, or in a receive, is refused before anything is posted.
pub(crate) fn borrowed_inline_sends_need_no_registration(dut: &Dut) {
    let p = dut.pair();
    let (a, b) = (&p.a, &p.b);
    let len = (a.qp.caps().max_inline_data as usize).min(48);
    let mut first: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(7)).collect();
    let mut second = *b"borrowed";
    let expected_first = first.clone();
    post_recv(b, 7, &[(0, 100)]);
    {
        let sg_send = [
            ScatterGather::borrowed(&first[..len / 2]),
            ScatterGather::borrowed(&first[len / 2..]),
        ];
        let sg_write = [ScatterGather::borrowed(&second)];
        let write = SendOp::RdmaWrite {
            remote_addr: b.mr.addr() + 3000,
            rkey: b.mr.rkey(),
        };
        a.qp.post_send(&[
            SendRequest::new(1, write, &sg_write).with_flags(SendFlags::INLINE),
            SendRequest::new(2, SendOp::Send, &sg_send)
                .with_flags(SendFlags::INLINE | SendFlags::SIGNALED),
        ])
        .unwrap();
    }
    first.fill(0);
    second.fill(0);
    assert_eq!(poll_ok(&a.cq).wr_id, 2);
    let r = poll_ok(&b.cq);
    assert_eq!((r.wr_id, r.byte_len as usize), (7, len));
    assert_eq!(&b.mr.to_vec()[..len], &expected_first[..]);
    assert_eq!(&b.mr.to_vec()[3000..3008], b"borrowed");
    let bytes = [1u8; 8];
    let sg = [ScatterGather::borrowed(&bytes)];
    let err =
        a.qp.post_send(&[SendRequest::new(3, SendOp::Send, &sg)])
            .unwrap_err();
    assert!(err.to_string().contains("INLINE"), "{err}");
    let err =
        b.qp.post_recv(&[RecvRequest {
            wr_id: 4,
            sg_list: &sg,
        }])
        .unwrap_err();
    assert!(err.to_string().contains("borrowed"), "{err}");
    assert_empty(&a.cq);
    assert_empty(&b.cq);
    p.disconnect();
}

/// With `sq_sig_all`, requests posted unsignaled complete all the same, in order.
pub(crate) fn sq_sig_all_signals_every_request(dut: &Dut) {
    let p = dut.pair_with(PairOptions {
        sq_sig_all: true,
        ..Default::default()
    });
    let (a, b) = (&p.a, &p.b);
    assert!(a.qp.sq_sig_all());
    let sg = [a.mr.slice(0, 8).unwrap()];
    let op = SendOp::RdmaWrite {
        remote_addr: b.mr.addr(),
        rkey: b.mr.rkey(),
    };
    let wrs: Vec<_> = (1..=3)
        .map(|i| SendRequest::new(i, op, &sg).with_flags(SendFlags::empty()))
        .collect();
    a.qp.post_send(&wrs).unwrap();
    for i in 1..=3 {
        assert_eq!(poll_ok(&a.cq).wr_id, i);
    }
    assert_empty(&a.cq);
    p.disconnect();
}
