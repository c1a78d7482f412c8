//! Fixtures of the verbs conformance tests: rxe0 opened through the default registry, two
//! RC queue pairs on it connected to each other by hand (RESET→INIT→RTR→RTS with the
//! port's RoCE v2 GID), registered buffers, and polling with a deadline.

use rdmasock::verbs::qp_attr::{AddressVector, GlobalRoute};
use rdmasock::verbs::{
    AccessFlags, CompletionChannel, CompletionQueue, Context, DeviceList, Gid, GidType,
    InitAttributes, MemoryRegion, ProtectionDomain, Psn, QpCapabilities, QpInitAttributes,
    QueuePair, RtrAttributes, RtsAttributes, WorkCompletion,
};
use std::time::{Duration, Instant};

/// The device every test runs on.
pub const DEVICE: &str = "rxe0";

/// How long a completion may take under the emulated VM before a test fails.
pub const COMPLETION_DEADLINE: Duration = Duration::from_secs(20);

/// All access rights.
pub fn all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// Asserts that rxe0 exists, then opens it with the crate's default providers.
pub fn open_rxe0() -> Context {
    let sysfs = format!("/sys/class/infiniband/{DEVICE}");
    assert!(
        std::path::Path::new(&sysfs).is_dir(),
        "{sysfs} does not exist: these tests need the VM's Soft-RoCE device (run \
         tests/vm/run.sh, or /work/shared/vm/run-in-vm.sh '<test binary> --ignored')"
    );
    let context = rdmasock::open_device(Some(DEVICE)).expect("opening rxe0");
    assert_eq!(
        context.provider_name(),
        expected_provider(),
        "rxe0 is driven by the wrong provider (RDMASOCK_PROVIDER={:?})",
        std::env::var(rdmasock::PROVIDER_ENV).ok()
    );
    context
}

/// The provider every test must run on: the rdma-core bridge when `RDMASOCK_PROVIDER`
/// forces it for rxe0 (tests/vm/suite.sh runs this suite a second time so), else the
/// pure-Rust rxe provider.
pub fn expected_provider() -> &'static str {
    let choice = rdmasock::ProviderChoice::from_env().expect("RDMASOCK_PROVIDER is malformed");
    match choice.for_device(DEVICE) {
        Some(rdmasock::ProviderKind::Ibverbs) => "ibverbs",
        _ => "rxe",
    }
}

/// The index of the port's RoCE v2 GID (the IPv4-mapped one when there is one) and the GID.
pub fn roce_v2_gid(context: &Context) -> (u8, Gid) {
    let list = DeviceList::discover().expect("device discovery");
    let device = list.pick(Some(DEVICE)).expect("rxe0 in the device list");
    let port = device.port(1).expect("rxe0 has port 1");
    let v2: Vec<_> = port
        .gids
        .iter()
        .filter(|g| g.gid_type == GidType::RoceV2)
        .collect();
    let entry = v2
        .iter()
        .find(|g| g.gid.0[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff])
        .or(v2.first())
        .unwrap_or_else(|| panic!("{DEVICE} has no RoCE v2 GID: {:?}", port.gids));
    assert_eq!(context.device().name, DEVICE);
    (entry.index as u8, entry.gid)
}

/// How a [`Pair`] is built.
#[derive(Clone, Copy, Debug)]
pub struct PairOptions {
    /// Queue sizes.
    pub caps: QpCapabilities,
    /// Every send completes.
    pub sq_sig_all: bool,
    /// RNR retries of both QPs (7 = infinite).
    pub rnr_retry: u8,
    /// CQs report to a completion channel.
    pub with_channel: bool,
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
        }
    }
}

/// Two connected RC QPs on rxe0, each with its own CQ and a 64 KiB region.
#[allow(missing_docs, dead_code)] // some fields are only held to show they outlive the QPs
pub struct Pair {
    pub context: Context,
    pub pd: ProtectionDomain,
    pub channel: Option<CompletionChannel>,
    pub cq_a: CompletionQueue,
    pub cq_b: CompletionQueue,
    pub qp_a: QueuePair,
    pub qp_b: QueuePair,
    pub mr_a: MemoryRegion,
    pub mr_b: MemoryRegion,
}

/// Moves `qp` to RTS towards `peer` on this device.
pub fn connect(qp: &QueuePair, peer: &QueuePair, context: &Context, rnr_retry: u8) {
    let (sgid_index, gid) = roce_v2_gid(context);
    let port = context.query_port(1).expect("QUERY_PORT");
    qp.to_init(&InitAttributes {
        pkey_index: 0,
        port_num: 1,
        access: all_access(),
    })
    .expect("RESET -> INIT");
    qp.to_rtr(&RtrAttributes {
        path_mtu: port.active_mtu().expect("active MTU"),
        dest_qp_num: peer.qp_num(),
        rq_psn: Psn(peer.qp_num().0 & 0xff_ffff),
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        ah_attr: AddressVector {
            grh: Some(GlobalRoute {
                dgid: gid,
                flow_label: 0,
                sgid_index,
                hop_limit: 64,
                traffic_class: 0,
            }),
            port_num: 1,
            ..Default::default()
        },
    })
    .expect("INIT -> RTR");
    qp.to_rts(&RtsAttributes {
        sq_psn: Psn(qp.qp_num().0 & 0xff_ffff),
        timeout: 14,
        retry_cnt: 7,
        rnr_retry,
        max_rd_atomic: 4,
    })
    .expect("RTR -> RTS");
}

impl Pair {
    /// Builds and connects the pair.
    pub fn new(options: PairOptions) -> Pair {
        let context = open_rxe0();
        let pd = context.alloc_pd().expect("ALLOC_PD");
        let channel = options
            .with_channel
            .then(|| context.create_comp_channel().expect("CREATE_COMP_CHANNEL"));
        let cq_a = context.create_cq(256, channel.as_ref()).expect("CREATE_CQ");
        let cq_b = context.create_cq(256, channel.as_ref()).expect("CREATE_CQ");
        let init = QpInitAttributes {
            caps: options.caps,
            sq_sig_all: options.sq_sig_all,
        };
        let qp_a = pd.create_qp(&init, &cq_a, &cq_a).expect("CREATE_QP a");
        let qp_b = pd.create_qp(&init, &cq_b, &cq_b).expect("CREATE_QP b");
        connect(&qp_a, &qp_b, &context, options.rnr_retry);
        connect(&qp_b, &qp_a, &context, options.rnr_retry);
        let mr_a = pd.register(65536, all_access()).expect("REG_MR a");
        let mr_b = pd.register(65536, all_access()).expect("REG_MR b");
        Pair {
            context,
            pd,
            channel,
            cq_a,
            cq_b,
            qp_a,
            qp_b,
            mr_a,
            mr_b,
        }
    }
}

/// Polls `cq` until one completion arrives; panics after [`COMPLETION_DEADLINE`].
pub fn poll_one(cq: &CompletionQueue) -> WorkCompletion {
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
pub fn poll_ok(cq: &CompletionQueue) -> WorkCompletion {
    let wc = poll_one(cq);
    wc.ok().unwrap_or_else(|e| panic!("completion failed: {e}"));
    wc
}

/// Asserts that `cq` holds no completion right now.
pub fn assert_empty(cq: &CompletionQueue) {
    let mut out = [WorkCompletion::default(); 4];
    let got = cq.poll(&mut out).expect("polling the CQ");
    assert!(got.is_empty(), "unexpected completions: {got:?}");
}

/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

/// Resident set size in KiB.
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}
