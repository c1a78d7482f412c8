//! Verbs conformance on rxe0 (Soft-RoCE) through the pure-Rust rxe provider (and, run again
//! by tests/vm/suite.sh with RDMASOCK_PROVIDER=ibverbs, through the rdma-core bridge): the
//! shared conformance suite (tests/vm_verbs_support/: every opcode byte for byte, error
//! statuses with their text, event mode, load and leak checks) on two QPs connected by hand,
//! and the tests only a by-hand-connected device has (QP attributes, transitions, memlock).
//!
//! Runs only in the VM (`tests/vm/run.sh`, or `run-in-vm.sh '<binary> --ignored
//! --test-threads=1'`); on the host every test is ignored. Each test first asserts that
//! rxe0 exists, so none can pass without the device.

#[macro_use]
#[path = "vm_verbs_support/mod.rs"]
mod support;

use rdmasock::verbs::qp_attr::QpAttrMask;
use rdmasock::verbs::{Error, QpAttributes, QpState};
use support::rxe::{all_access, open_rxe0, RXE};

conformance_suite!(vm, RXE);

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn query_qp_reports_what_was_set() {
    let p = RXE.pair();
    let a = p.a.qp.query(QpAttrMask::all()).unwrap();
    assert_eq!(a.qp_state, QpState::ReadyToSend);
    assert_eq!(a.dest_qp_num, p.b.qp.qp_num());
    assert_eq!(a.rnr_retry, 7);
    assert_eq!(a.max_rd_atomic, 4);
    assert!(a.ah_attr.grh.is_some(), "RoCE address vectors carry a GRH");
    assert!(
        a.cap.max_send_wr >= 64 && a.cap.max_inline_data >= 64,
        "{:?}",
        a.cap
    );
    p.a.qp.to_error().unwrap();
    assert_eq!(
        p.a.qp.query(QpAttrMask::STATE).unwrap().qp_state,
        QpState::Error
    );
}

/// EX_QUERY_DEVICE's 64-bit flags carry QUERY_DEVICE's 32 in their low half (the kernel
/// fills both from one mask), so a zero there means the extended query did not run (ours,
/// or through the rdma-core bridge the provider's `query_device_ex`).
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn the_extended_device_query_agrees_with_the_legacy_one() {
    let context = open_rxe0();
    let a = context.query_device().expect("query rxe0");
    let ex = a.extended.device_cap_flags_ex;
    assert_ne!(ex, 0, "EX_QUERY_DEVICE gave no flags: {a:?}");
    assert_eq!(ex as u32, a.device_cap_flags, "{ex:#x} against {a:?}");
    let p = context.query_port(1).expect("query port 1");
    assert_eq!(p.state, rdmasock::verbs::PortState::Active, "{p:?}");
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

/// Set in the child process of [`memlock_limit_is_reported`].
const MEMLOCK_CHILD: &str = "RDMASOCK_VM_MEMLOCK_CHILD";

/// The bytes [`memlock_limit_is_reported`] asks to register (4 MiB) under its 64 KiB limit.
const MEMLOCK_ASKED: usize = 4 << 20;

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
        let err = pd.register(MEMLOCK_ASKED, all_access()).unwrap_err();
        match &err {
            Error::MemlockLimit { requested, limit } => {
                assert_eq!((*requested, limit.as_str()), (MEMLOCK_ASKED, "65536 bytes"));
            }
            other => panic!("expected MemlockLimit, got {other:?}"),
        }
        let text = err.to_string();
        assert!(
            text.starts_with(
                "cannot register 4194304 bytes: RLIMIT_MEMLOCK is 65536 bytes (locked-memory \
                 limit too small)"
            ),
            "{text}"
        );
        assert!(text.contains("Fix: `ulimit -l unlimited`"), "{text}");
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
    assert!(
        text.contains(
            "memlock child: cannot register 4194304 bytes: RLIMIT_MEMLOCK is 65536 bytes"
        ),
        "{text}"
    );
}
