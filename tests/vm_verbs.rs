//! Verbs conformance on rxe0 (Soft-RoCE) through the pure-Rust rxe provider: every opcode
//! between two QPs on one device, error statuses, event mode, load and leak checks.
//!
//! Runs only in the VM (`tests/vm/run.sh`, or `run-in-vm.sh '<binary> --ignored
//! --test-threads=1'`); on the host every test is ignored. Each test first asserts that
//! rxe0 exists, so none can pass without the device.

#[path = "vm_verbs_support/mod.rs"]
mod support;

use rdmasock::verbs::qp_attr::QpAttrMask;
use rdmasock::verbs::{
    Error, QpAttributes, QpState, RecvRequest, RemoteKey, SendFlags, SendOp, SendRequest, WcFlags,
    WcOpcode, WcStatus,
};
use support::*;

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn send_delivers_bytes() {
    let p = Pair::new(PairOptions::default());
    p.mr_a.write_at(0, b"hello, rxe").unwrap();
    let recv = [p.mr_b.slice(100, 64).unwrap()];
    p.qp_b
        .post_recv(&[RecvRequest {
            wr_id: 7,
            sg_list: &recv,
        }])
        .unwrap();
    let send = [p.mr_a.slice(0, 10).unwrap()];
    p.qp_a
        .post_send(&[SendRequest::new(1, SendOp::Send, &send)])
        .unwrap();
    let s = poll_ok(&p.cq_a);
    assert_eq!((s.wr_id, s.opcode()), (1, WcOpcode::Send));
    let r = poll_ok(&p.cq_b);
    assert_eq!((r.wr_id, r.opcode(), r.byte_len), (7, WcOpcode::Recv, 10));
    assert_eq!(r.imm(), None);
    assert_eq!(r.qp_num, p.qp_b.qp_num());
    let mut got = [0u8; 10];
    p.mr_b.read_at(100, &mut got).unwrap();
    assert_eq!(&got, b"hello, rxe");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn send_with_imm_carries_the_immediate() {
    let p = Pair::new(PairOptions::default());
    p.mr_a.write_at(0, &[0xab; 32]).unwrap();
    let recv = [p.mr_b.slice(0, 32).unwrap()];
    p.qp_b
        .post_recv(&[RecvRequest {
            wr_id: 2,
            sg_list: &recv,
        }])
        .unwrap();
    let send = [p.mr_a.slice(0, 32).unwrap()];
    let op = SendOp::SendWithImm(0x1234_5678);
    p.qp_a.post_send(&[SendRequest::new(3, op, &send)]).unwrap();
    poll_ok(&p.cq_a);
    let r = poll_ok(&p.cq_b);
    assert_eq!(r.opcode(), WcOpcode::Recv);
    assert!(r.flags().contains(WcFlags::WITH_IMM));
    assert_eq!(r.imm(), Some(0x1234_5678));
    assert_eq!(r.byte_len, 32);
    assert_eq!(&p.mr_b.as_slice()[..32], &[0xab; 32]);
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rdma_write_lands_without_a_receive() {
    let p = Pair::new(PairOptions::default());
    let data: Vec<u8> = (0..=255).cycle().take(3000).collect();
    p.mr_a.write_at(0, &data).unwrap();
    let sg = [p.mr_a.slice(0, 3000).unwrap()];
    let op = SendOp::RdmaWrite {
        remote_addr: p.mr_b.addr() + 512,
        rkey: p.mr_b.rkey(),
    };
    p.qp_a.post_send(&[SendRequest::new(4, op, &sg)]).unwrap();
    let s = poll_ok(&p.cq_a);
    assert_eq!((s.wr_id, s.opcode()), (4, WcOpcode::RdmaWrite));
    assert_eq!(&p.mr_b.as_slice()[512..3512], &data[..]);
    assert_empty(&p.cq_b);
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rdma_write_with_imm_consumes_a_receive() {
    let p = Pair::new(PairOptions::default());
    p.mr_a.write_at(0, b"written").unwrap();
    p.qp_b
        .post_recv(&[RecvRequest {
            wr_id: 9,
            sg_list: &[],
        }])
        .unwrap();
    let sg = [p.mr_a.slice(0, 7).unwrap()];
    let op = SendOp::RdmaWriteWithImm {
        remote_addr: p.mr_b.addr() + 8,
        rkey: p.mr_b.rkey(),
        imm: 0xcafe_f00d,
    };
    p.qp_a.post_send(&[SendRequest::new(5, op, &sg)]).unwrap();
    assert_eq!(poll_ok(&p.cq_a).opcode(), WcOpcode::RdmaWrite);
    let r = poll_ok(&p.cq_b);
    assert_eq!(r.wr_id, 9);
    assert_eq!(r.opcode(), WcOpcode::RecvRdmaWithImm);
    assert_eq!(r.imm(), Some(0xcafe_f00d));
    assert_eq!(r.byte_len, 7);
    assert_eq!(&p.mr_b.as_slice()[8..15], b"written");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rdma_read_fetches_remote_bytes() {
    let p = Pair::new(PairOptions::default());
    p.mr_b.write_at(4096, b"remote bytes to read").unwrap();
    let sg = [p.mr_a.slice(64, 20).unwrap()];
    let op = SendOp::RdmaRead {
        remote_addr: p.mr_b.addr() + 4096,
        rkey: p.mr_b.rkey(),
    };
    p.qp_a.post_send(&[SendRequest::new(6, op, &sg)]).unwrap();
    let s = poll_ok(&p.cq_a);
    assert_eq!((s.opcode(), s.byte_len), (WcOpcode::RdmaRead, 20));
    assert_eq!(&p.mr_a.as_slice()[64..84], b"remote bytes to read");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn atomic_compare_swap_and_fetch_add() {
    let p = Pair::new(PairOptions::default());
    let target = p.mr_b.addr() + 256;
    p.mr_b.write_at(256, &100u64.to_ne_bytes()).unwrap();
    let sg = [p.mr_a.slice(0, 8).unwrap()];
    let swap = SendOp::AtomicCompareSwap {
        remote_addr: target,
        rkey: p.mr_b.rkey(),
        compare: 100,
        swap: 0x1122_3344_5566_7788,
    };
    p.qp_a.post_send(&[SendRequest::new(7, swap, &sg)]).unwrap();
    assert_eq!(poll_ok(&p.cq_a).opcode(), WcOpcode::CompareSwap);
    assert_eq!(&p.mr_a.as_slice()[..8], &100u64.to_ne_bytes(), "old value");
    assert_eq!(
        &p.mr_b.as_slice()[256..264],
        &0x1122_3344_5566_7788u64.to_ne_bytes()
    );
    // A compare that does not match leaves the target alone.
    p.qp_a.post_send(&[SendRequest::new(8, swap, &sg)]).unwrap();
    poll_ok(&p.cq_a);
    assert_eq!(
        &p.mr_a.as_slice()[..8],
        &0x1122_3344_5566_7788u64.to_ne_bytes()
    );
    assert_eq!(
        &p.mr_b.as_slice()[256..264],
        &0x1122_3344_5566_7788u64.to_ne_bytes()
    );
    let add = SendOp::AtomicFetchAdd {
        remote_addr: target,
        rkey: p.mr_b.rkey(),
        add: 0x11,
    };
    p.qp_a.post_send(&[SendRequest::new(9, add, &sg)]).unwrap();
    assert_eq!(poll_ok(&p.cq_a).opcode(), WcOpcode::FetchAdd);
    assert_eq!(
        &p.mr_a.as_slice()[..8],
        &0x1122_3344_5566_7788u64.to_ne_bytes()
    );
    assert_eq!(
        &p.mr_b.as_slice()[256..264],
        &0x1122_3344_5566_7799u64.to_ne_bytes()
    );
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn chained_inline_multi_sge_and_selective_signaling() {
    let p = Pair::new(PairOptions::default());
    p.mr_a.write_at(0, b"abcdefgh").unwrap();
    p.mr_a.write_at(1000, b"XYZ").unwrap();
    let recvs: Vec<_> = (0..3)
        .map(|i| [p.mr_b.slice(i * 100, 100).unwrap()])
        .collect();
    let rr: Vec<_> = recvs
        .iter()
        .enumerate()
        .map(|(i, sg)| RecvRequest {
            wr_id: 100 + i as u64,
            sg_list: sg,
        })
        .collect();
    p.qp_b.post_recv(&rr).unwrap();
    let two = [p.mr_a.slice(0, 8).unwrap(), p.mr_a.slice(1000, 3).unwrap()];
    let one = [p.mr_a.slice(4, 4).unwrap()];
    let wrs = [
        SendRequest::new(1, SendOp::Send, &two).with_flags(SendFlags::empty()),
        SendRequest::new(2, SendOp::Send, &two).with_flags(SendFlags::INLINE),
        SendRequest::new(3, SendOp::Send, &one)
            .with_flags(SendFlags::INLINE | SendFlags::SIGNALED | SendFlags::SOLICITED),
    ];
    p.qp_a.post_send(&wrs).unwrap();
    // Inline data was copied at post time: changing the buffer now must not matter.
    p.mr_a.write_at(0, b"--------").unwrap();
    let s = poll_ok(&p.cq_a);
    assert_eq!(s.wr_id, 3, "only the signaled request completes");
    for (i, expect) in [&b"abcdefghXYZ"[..], b"abcdefghXYZ", b"efgh"]
        .iter()
        .enumerate()
    {
        let r = poll_ok(&p.cq_b);
        assert_eq!(r.wr_id, 100 + i as u64, "in order");
        assert_eq!(r.byte_len as usize, expect.len());
        assert_eq!(&p.mr_b.as_slice()[i * 100..i * 100 + expect.len()], *expect);
    }
    assert_empty(&p.cq_a);
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn sq_sig_all_signals_every_send() {
    let p = Pair::new(PairOptions {
        sq_sig_all: true,
        ..Default::default()
    });
    assert!(p.qp_a.sq_sig_all());
    let sg = [p.mr_a.slice(0, 8).unwrap()];
    let op = SendOp::RdmaWrite {
        remote_addr: p.mr_b.addr(),
        rkey: p.mr_b.rkey(),
    };
    let wrs = [
        SendRequest::new(1, op, &sg).with_flags(SendFlags::empty()),
        SendRequest::new(2, op, &sg).with_flags(SendFlags::empty()),
    ];
    p.qp_a.post_send(&wrs).unwrap();
    assert_eq!(poll_ok(&p.cq_a).wr_id, 1);
    assert_eq!(poll_ok(&p.cq_a).wr_id, 2);
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn wrong_rkey_is_a_remote_access_error() {
    let p = Pair::new(PairOptions::default());
    let sg = [p.mr_a.slice(0, 16).unwrap()];
    let op = SendOp::RdmaWrite {
        remote_addr: p.mr_b.addr(),
        rkey: RemoteKey(p.mr_b.rkey().0 ^ 0x5a00),
    };
    p.qp_a
        .post_send(&[SendRequest::new(0x77, op, &sg)])
        .unwrap();
    let wc = poll_one(&p.cq_a);
    assert_eq!(wc.status(), WcStatus::RemoteAccessError);
    let err = wc.ok().unwrap_err().to_string();
    assert!(err.contains("remote access error"), "{err}");
    assert!(err.contains("0x77"), "{err}");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn send_without_receive_exhausts_rnr_retries() {
    let p = Pair::new(PairOptions {
        rnr_retry: 1,
        ..Default::default()
    });
    let sg = [p.mr_a.slice(0, 16).unwrap()];
    p.qp_a
        .post_send(&[SendRequest::new(5, SendOp::Send, &sg)])
        .unwrap();
    let wc = poll_one(&p.cq_a);
    assert_eq!(wc.status(), WcStatus::RnrRetryExceededError, "{wc:?}");
    let err = wc.ok().unwrap_err().to_string();
    assert!(err.contains("RNR retry counter exceeded"), "{err}");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn event_mode_wakes_the_channel() {
    let p = Pair::new(PairOptions {
        with_channel: true,
        ..Default::default()
    });
    let channel = p.channel.as_ref().unwrap();
    assert_eq!(
        channel.try_get_event().unwrap(),
        None,
        "no event before arming"
    );
    for solicited_only in [false, true] {
        p.cq_b.req_notify(solicited_only).unwrap();
        let recv = [p.mr_b.slice(0, 64).unwrap()];
        p.qp_b
            .post_recv(&[RecvRequest {
                wr_id: 1,
                sg_list: &recv,
            }])
            .unwrap();
        let sg = [p.mr_a.slice(0, 8).unwrap()];
        let flags = SendFlags::SIGNALED | SendFlags::SOLICITED;
        p.qp_a
            .post_send(&[SendRequest::new(2, SendOp::Send, &sg).with_flags(flags)])
            .unwrap();
        let cookie = channel
            .wait(Some(COMPLETION_DEADLINE))
            .unwrap()
            .expect("a channel event for the receive CQ");
        assert_eq!(cookie, p.cq_b.cookie());
        p.cq_b.ack_events(1);
        assert_eq!(poll_ok(&p.cq_b).wr_id, 1);
        poll_ok(&p.cq_a);
    }
    // cq_a was never armed: its completions raised no event.
    assert_eq!(channel.try_get_event().unwrap(), None);
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn ten_thousand_post_poll_cycles() {
    let p = Pair::new(PairOptions::default());
    let recv = [p.mr_b.slice(0, 64).unwrap()];
    let send = [p.mr_a.slice(0, 8).unwrap()];
    for i in 0..10_000u64 {
        p.mr_a.write_at(0, &i.to_le_bytes()).unwrap();
        p.qp_b
            .post_recv(&[RecvRequest {
                wr_id: i,
                sg_list: &recv,
            }])
            .unwrap();
        p.qp_a
            .post_send(&[SendRequest::new(i, SendOp::Send, &send)
                .with_flags(SendFlags::SIGNALED | SendFlags::INLINE)])
            .unwrap();
        assert_eq!(poll_ok(&p.cq_a).wr_id, i);
        let r = poll_ok(&p.cq_b);
        assert_eq!(r.wr_id, i);
        assert_eq!(&p.mr_b.as_slice()[..8], &i.to_le_bytes());
    }
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
    let context = open_rxe0();
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
fn query_qp_reports_what_was_set() {
    let p = Pair::new(PairOptions::default());
    let a = p.qp_a.query(QpAttrMask::all()).unwrap();
    assert_eq!(a.qp_state, QpState::ReadyToSend);
    assert_eq!(a.dest_qp_num, p.qp_b.qp_num());
    assert_eq!(a.rnr_retry, 7);
    assert_eq!(a.max_rd_atomic, 4);
    assert!(a.ah_attr.grh.is_some(), "RoCE address vectors carry a GRH");
    assert!(
        a.cap.max_send_wr >= 64 && a.cap.max_inline_data >= 64,
        "{:?}",
        a.cap
    );
    p.qp_a.to_error().unwrap();
    assert_eq!(
        p.qp_a.query(QpAttrMask::STATE).unwrap().qp_state,
        QpState::Error
    );
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn transition_missing_attributes_names_them() {
    let context = open_rxe0();
    let pd = context.alloc_pd().unwrap();
    let cq = context.create_cq(8, None).unwrap();
    let qp = pd.create_qp(&Default::default(), &cq, &cq).unwrap();
    let init = rdmasock::verbs::InitAttributes {
        pkey_index: 0,
        port_num: 1,
        access: all_access(),
    };
    qp.to_init(&init).unwrap();
    let attr = QpAttributes {
        qp_state: QpState::ReadyToReceive,
        ..Default::default()
    };
    let err = qp
        .modify(
            &attr,
            QpAttrMask::STATE | QpAttrMask::AV | QpAttrMask::PATH_MTU,
        )
        .unwrap_err();
    match &err {
        Error::MissingAttributes {
            missing, from, to, ..
        } => {
            assert_eq!((*from, *to), ("INIT", "RTR"));
            assert_eq!(
                missing,
                "rq_psn, min_rnr_timer, max_dest_rd_atomic, dest_qp_num"
            );
        }
        other => panic!("expected MissingAttributes, got {other:?}"),
    }
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn post_time_limits_are_clear_errors() {
    let p = Pair::new(PairOptions::default());
    let caps = p.qp_a.caps();
    let sg: Vec<_> = (0..caps.max_send_sge as usize + 1)
        .map(|i| p.mr_a.slice(i * 8, 8).unwrap())
        .collect();
    let err = p
        .qp_a
        .post_send(&[SendRequest::new(1, SendOp::Send, &sg)])
        .unwrap_err();
    assert_eq!(err.index, 0);
    assert!(err.to_string().contains("max_send_sge"), "{err}");
    let big = [p.mr_a.slice(0, caps.max_inline_data as usize + 1).unwrap()];
    let wr = SendRequest::new(2, SendOp::Send, &big).with_flags(SendFlags::INLINE);
    let err = p.qp_a.post_send(&[wr]).unwrap_err();
    assert!(err.to_string().contains("max_inline_data"), "{err}");
    // The receive queue fills up when nothing arrives.
    let recv = [p.mr_b.slice(0, 8).unwrap()];
    let rr: Vec<_> = (0..=caps.max_recv_wr as u64)
        .map(|i| RecvRequest {
            wr_id: i,
            sg_list: &recv,
        })
        .collect();
    let err = p.qp_b.post_recv(&rr).unwrap_err();
    assert_eq!(err.index, caps.max_recv_wr as usize);
    assert!(matches!(err.error, Error::QueueFull { .. }), "{err}");
}

/// Set in the child process of [`memlock_limit_is_reported`].
const MEMLOCK_CHILD: &str = "RDMASOCK_VM_MEMLOCK_CHILD";

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn memlock_limit_is_reported() {
    use nix::sys::resource::{setrlimit, Resource};
    if std::env::var_os(MEMLOCK_CHILD).is_some() {
        // Child: a 64 KiB locked-memory limit and, as root, no CAP_IPC_LOCK (which would
        // ignore the limit): become nobody. /dev/infiniband/* is mode 0666 in the VM.
        // (The uverbs fd must be opened after the switch: the kernel refuses commands from
        // credentials other than the opener's.)
        setrlimit(Resource::RLIMIT_MEMLOCK, 65536, 65536).unwrap();
        if nix::unistd::geteuid().is_root() {
            nix::unistd::setuid(nix::unistd::Uid::from_raw(65534)).unwrap();
        }
        let context = open_rxe0();
        let pd = context.alloc_pd().unwrap();
        let err = pd.register(4 << 20, all_access()).unwrap_err();
        assert!(matches!(err, Error::MemlockLimit { .. }), "{err:?}");
        assert!(err.to_string().contains("ulimit -l"), "{err}");
        println!("memlock child: {err}");
        return;
    }
    let _ = open_rxe0();
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "memlock_limit_is_reported",
            "--nocapture",
        ])
        .env(MEMLOCK_CHILD, "1")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("memlock child: cannot register"), "{text}");
}
