//! The verbs conformance suite: one set of test bodies run on every device kind.
//!
//! A test binary describes its device under test in a [`Dut`] (how to open it, how to get
//! two connected RC queue pairs on it, what it can do and how it reports remote errors) and
//! instantiates the suite with [`conformance_suite!`]:
//!
//! * `tests/vm_verbs.rs`: rxe0 (Soft-RoCE) in the VM, QPs connected by hand
//!   (RESET→INIT→RTR→RTS with the port's RoCE v2 GID), see [`rxe`];
//! * `tests/vm_siw.rs`: siw0 (soft-iWARP) in the VM, QPs connected through rdma_cm, see
//!   [`iwarp::siw_pair`];
//! * `tests/uiwarp_verbs.rs`: the userspace iWARP provider on the host, QPs connected over
//!   loopback TCP through its own connection setup, see [`iwarp::uiwarp_pair`].
//!
//! Each binary includes this directory as `mod support` (`#[macro_use]`), and adds the tests
//! only its device has next to the suite.
#![allow(dead_code)] // each test binary uses a different part

#[path = "../vm_support/mod.rs"]
pub(crate) mod cm_support;
pub(crate) mod iwarp;
mod load;
mod opcodes;
mod remote_errors;
pub(crate) mod rxe;

pub(crate) use cm_support::{pattern, post_recv, Side};
pub(crate) use load::*;
pub(crate) use opcodes::*;
pub(crate) use remote_errors::*;

use rdmasock::cm::{CmEvent, CmId};
use rdmasock::verbs::qp_attr::QpAttrMask;
use rdmasock::verbs::{
    AccessFlags, CompletionQueue, Context, QpCapabilities, QpInitAttributes, QpState, Transport,
    WcStatus, WorkCompletion,
};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

/// How long a completion (or a connection's end) may take under the emulated VM before a
/// test fails.
pub(crate) const COMPLETION_DEADLINE: Duration = Duration::from_secs(20);

/// A device under test: what the suite needs to know to run on it.
pub(crate) struct Dut {
    /// The device's name (`rxe0`, `siw0`, `uiwarp0`).
    pub device: &'static str,
    /// Its transport.
    pub transport: Transport,
    /// The provider that must drive it (`Context::provider_name`).
    pub provider: fn() -> &'static str,
    /// Opens the device (asserting first that it exists).
    pub open: fn() -> Context,
    /// Builds two connected RC QPs on it.
    pub connect: fn(&PairOptions) -> Pair,
    /// Atomic compare-and-swap and fetch-and-add work; without, posting them is refused.
    pub atomics: bool,
    /// SEND and RDMA WRITE with immediate work; without, posting them is refused.
    pub immediate: bool,
    /// A CQ armed for solicited completions only ignores unsolicited ones; without, the
    /// provider widens such an arm to every completion (siw, whose kernel side treats every
    /// receive completion as unsolicited: a spurious wake-up rather than a missed one).
    pub solicited_only_events: bool,
    /// How the device reports what goes wrong at the responder.
    pub remote_errors: RemoteErrors,
    /// Connections made and torn down by the leak test.
    pub connect_cycles: usize,
}

/// How the requester's completion of a request the responder may refuse ends.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Outcome {
    /// Its status.
    pub status: WcStatus,
    /// Its vendor error: the provider's own detail (0 on success, and where the device gives
    /// none).
    pub vendor_err: u32,
}

impl Outcome {
    /// A request that completed successfully (vendor error 0).
    pub(crate) const SUCCESS: Outcome = Outcome {
        status: WcStatus::Success,
        vendor_err: 0,
    };
}

/// How a device reports the responder's refusals.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RemoteErrors {
    /// The requester's completion of an RDMA READ with a wrong rkey.
    pub bad_rkey_read: Outcome,
    /// The requester's completion of an RDMA WRITE with a wrong rkey (success on iWARP,
    /// where a WRITE completes once it is sent).
    pub bad_rkey_write: Outcome,
    /// The requester's completion of a SEND that finds no receive posted (RNR retries
    /// exceeded on InfiniBand transports; success on iWARP, which has no RNR).
    pub no_receive: Outcome,
    /// The requester's completion of an RDMA READ, under the right rkey, from a region
    /// registered without REMOTE_READ.
    pub denied_read: Outcome,
    /// The requester's completion of an RDMA WRITE, under the right rkey, to a region
    /// registered without REMOTE_WRITE (success on iWARP, where a WRITE completes once it is
    /// sent; the responder's TERMINATE shows the refusal).
    pub denied_write: Outcome,
    /// The requester's completion of an atomic, under the right rkey, on a region registered
    /// without REMOTE_ATOMIC (unused on devices without atomics).
    pub denied_atomic: Outcome,
    /// The responder ends the connection (iWARP's TERMINATE): both QPs go to the error state,
    /// the connection manager reports the disconnection, and the receives still posted are
    /// flushed. Without (InfiniBand transports: rxe), a refused READ, WRITE or atomic is the
    /// InfiniBand responder's class C error: it answers with a NAK and moves its own QP to
    /// the error state, the requester's QP goes there on the NAK, both flush the receives
    /// still posted, and nothing else tells either side (no async event on kernel 6.1).
    pub terminates: bool,
    /// After refusing a READ the responder's posted receives are flushed (siw on kernel 6.1
    /// leaves them unflushed after its TERMINATE, seen through our provider and through
    /// rdma-core's libsiw alike: a kernel trait, not the provider's).
    pub read_error_flushes_responder: bool,
}

impl Dut {
    /// The access rights of the test regions: every right the device has.
    pub(crate) fn access(&self) -> AccessFlags {
        let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        if self.atomics {
            all | AccessFlags::REMOTE_ATOMIC
        } else {
            all
        }
    }

    /// Two connected QPs built with the default options.
    pub(crate) fn pair(&self) -> Pair {
        (self.connect)(&PairOptions::default())
    }

    /// Two connected QPs built with `options`.
    pub(crate) fn pair_with(&self, options: PairOptions) -> Pair {
        (self.connect)(&options)
    }
}

/// How a [`Pair`] is built.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PairOptions {
    /// Queue sizes of both QPs.
    pub caps: QpCapabilities,
    /// Every send completes.
    pub sq_sig_all: bool,
    /// RNR retries of both QPs (7 = infinite); used where QPs are connected by hand.
    pub rnr_retry: u8,
    /// Each side's CQ reports to its own completion channel.
    pub with_channel: bool,
    /// Bytes of each side's memory region.
    pub mr_len: usize,
}

impl Default for PairOptions {
    fn default() -> Self {
        PairOptions {
            caps: QpCapabilities {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 64,
            },
            sq_sig_all: false,
            rnr_retry: 7,
            with_channel: false,
            mr_len: 65536,
        }
    }
}

/// What holds a [`Pair`]'s connection.
pub(crate) enum Link {
    /// QPs moved to RTS by hand: nothing to tear down.
    Manual,
    /// The connection manager's ids.
    Cm(Box<CmIds>),
    /// The userspace iWARP provider's own connection setup.
    Uiwarp,
}

/// The connection manager's ids of a [`Pair`].
pub(crate) struct CmIds {
    /// The connecting side's id.
    pub active_id: CmId,
    /// The accepted request's id.
    pub passive_id: CmId,
    /// The listener.
    pub listener: CmId,
}

/// Two connected RC QPs: `a` is the requester in the tests, `b` the responder.
pub(crate) struct Pair {
    /// The requesting (connecting) side.
    pub a: Side,
    /// The responding (accepting) side.
    pub b: Side,
    /// What connects them.
    pub link: Link,
}

impl Pair {
    /// Ends the connection in order (a no-op for QPs connected by hand).
    pub(crate) fn disconnect(self) {
        let Pair { a, b, link } = self;
        match link {
            Link::Manual => {}
            Link::Cm(ids) => {
                let CmIds {
                    active_id,
                    passive_id,
                    listener,
                } = *ids;
                let pair = cm_support::CmPair {
                    active: a,
                    passive: b,
                    active_id,
                    passive_id,
                    listener,
                };
                drop(pair.disconnect());
            }
            Link::Uiwarp => {
                rdmasock_uiwarp::disconnect(&a.qp).expect("uiwarp disconnect");
            }
        }
    }

    /// Waits until both QPs are in the error state.
    pub(crate) fn wait_error_state(&self, why: &str) {
        let deadline = Instant::now() + COMPLETION_DEADLINE;
        for (name, side) in [("requester", &self.a), ("responder", &self.b)] {
            loop {
                let state = side.qp.query(QpAttrMask::STATE).unwrap().qp_state;
                if state == QpState::Error {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the {name}'s QP is still {state:?}: {why}"
                );
                std::thread::yield_now();
            }
        }
    }

    /// Waits until the responder's TERMINATE has ended the connection: the connection
    /// manager reports DISCONNECTED on both ids, or both uiwarp QPs are in the error state.
    pub(crate) fn wait_terminated(&self) {
        match &self.link {
            Link::Manual => panic!("QPs connected by hand report remote errors in completions"),
            Link::Cm(ids) => {
                for id in [&ids.active_id, &ids.passive_id] {
                    let ev = id
                        .wait_event(COMPLETION_DEADLINE)
                        .expect("a connection-manager event after the TERMINATE");
                    println!("cm event: {ev}");
                    assert!(matches!(ev, CmEvent::Disconnected { .. }), "{ev}");
                }
            }
            Link::Uiwarp => self.wait_error_state("the TERMINATE never ended it"),
        }
    }
}

/// One side's objects on `context`: a PD, a CQ (reporting to its own channel when asked),
/// a QP in RESET and a region of `options.mr_len` bytes with `access`.
pub(crate) fn pair_side_objects(
    context: &Context,
    options: &PairOptions,
    access: AccessFlags,
) -> Side {
    let pd = context.alloc_pd().expect("ALLOC_PD");
    let channel = options
        .with_channel
        .then(|| context.create_comp_channel().expect("CREATE_COMP_CHANNEL"));
    let cq = context.create_cq(256, channel.as_ref()).expect("CREATE_CQ");
    let init = QpInitAttributes {
        caps: options.caps,
        sq_sig_all: options.sq_sig_all,
    };
    let qp = pd.create_qp(&init, &cq, &cq).expect("CREATE_QP");
    let mr = pd.register(options.mr_len, access).expect("REG_MR");
    Side {
        context: context.clone(),
        pd,
        channel,
        cq,
        qp,
        mr,
    }
}

/// Polls `cq` until one completion arrives; panics after [`COMPLETION_DEADLINE`].
pub(crate) fn poll_one(cq: &CompletionQueue) -> WorkCompletion {
    let deadline = Instant::now() + COMPLETION_DEADLINE;
    let mut out = [WorkCompletion::default(); 1];
    loop {
        let n = cq.poll(&mut out).expect("polling the CQ").len();
        if n == 1 {
            return out[0];
        }
        assert!(
            Instant::now() < deadline,
            "no completion within {COMPLETION_DEADLINE:?}"
        );
        std::thread::yield_now();
    }
}

/// Polls one completion and checks that it succeeded.
pub(crate) fn poll_ok(cq: &CompletionQueue) -> WorkCompletion {
    let wc = poll_one(cq);
    wc.ok().unwrap_or_else(|e| panic!("completion failed: {e}"));
    wc
}

/// Asserts that `cq` holds no completion right now.
pub(crate) fn assert_empty(cq: &CompletionQueue) {
    let mut out = [WorkCompletion::default(); 4];
    let got = cq.poll(&mut out).expect("polling the CQ");
    assert!(got.is_empty(), "unexpected completions: {got:?}");
}

/// Open file descriptors of this process.
pub(crate) fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

/// Resident set size in KiB.
pub(crate) fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// Held by a running conformance test: shared by most, exclusive for the leak tests, whose
/// process-wide fd and RSS counts other tests running in parallel (on the host) would move.
pub(crate) enum TestLock {
    /// A test that may run beside others.
    Shared(RwLockReadGuard<'static, ()>),
    /// A leak test: runs alone.
    Exclusive(RwLockWriteGuard<'static, ()>),
}

/// Takes the [`TestLock`] for the test `name`.
pub(crate) fn test_lock(name: &str) -> TestLock {
    static LOCK: RwLock<()> = RwLock::new(());
    if name.contains("leak") {
        TestLock::Exclusive(LOCK.write().unwrap_or_else(|e| e.into_inner()))
    } else {
        TestLock::Shared(LOCK.read().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Instantiates the conformance suite for a [`Dut`] constant: one `#[test]` per body, named
/// as the body. `vm` marks every test `#[ignore]` (they run in the VM: tests/vm/run.sh runs
/// ignored tests); `host` runs them in a plain `cargo test`. Needs `#[macro_use] mod support;`.
macro_rules! conformance_suite {
    ($mode:ident, $dut:path) => {
        conformance_suite!(@each $mode, $dut;
            device_reports_its_provider_and_capabilities,
            send_gathers_and_scatters_byte_for_byte_both_ways,
            send_with_imm_carries_the_immediate,
            rdma_write_lands_without_a_receive,
            rdma_write_with_imm_consumes_a_receive,
            rdma_read_fetches_remote_bytes,
            atomic_compare_swap_and_fetch_add,
            chained_inline_fence_and_selective_signaling,
            borrowed_inline_sends_need_no_registration,
            sq_sig_all_signals_every_request,
            wrong_rkey_read_is_reported_with_its_status,
            wrong_rkey_write_is_reported_with_its_status,
            region_without_remote_write_refuses_a_write,
            region_without_remote_read_refuses_a_read,
            region_without_remote_atomic_refuses_an_atomic,
            send_without_receive_is_reported,
            event_mode_wakes_the_channel_and_disarms,
            blocking_channel_waits_in_read,
            ten_thousand_post_poll_cycles_leak_nothing,
            post_time_limits_are_clear_errors,
            create_destroy_cycles_leak_nothing,
            context_open_close_cycles_leak_nothing,
            connect_disconnect_cycles_leak_nothing
        );
    };
    (@each $mode:ident, $dut:path; ) => {};
    (@each vm, $dut:path; $name:ident $(, $rest:ident)*) => {
        #[test]
        #[ignore = "needs the VM: run tests/vm/run.sh"]
        fn $name() {
            let _lock = $crate::support::test_lock(stringify!($name));
            $crate::support::$name(&$dut);
        }
        conformance_suite!(@each vm, $dut; $($rest),*);
    };
    (@each host, $dut:path; $name:ident $(, $rest:ident)*) => {
        #[test]
        fn $name() {
            let _lock = $crate::support::test_lock(stringify!($name));
            $crate::support::$name(&$dut);
        }
        conformance_suite!(@each host, $dut; $($rest),*);
    };
}
