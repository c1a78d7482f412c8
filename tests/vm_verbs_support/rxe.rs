//! The device under test rxe0 (Soft-RoCE) in the VM: opened through the default registry,
//! two RC queue pairs on it connected to each other by hand (RESET→INIT→RTR→RTS with the
//! port's RoCE v2 GID).

use super::{pair_side_objects, Dut, Link, Outcome, Pair, PairOptions, RemoteErrors};
use rdmasock::verbs::qp_attr::{AddressVector, GlobalRoute};
use rdmasock::verbs::{
    AccessFlags, Context, DeviceList, Gid, GidType, InitAttributes, Psn, QueuePair, RtrAttributes,
    RtsAttributes, Transport, WcStatus,
};

/// The device.
pub(crate) const DEVICE: &str = "rxe0";

/// rxe0 as the conformance suite sees it.
pub(crate) const RXE: Dut = Dut {
    device: DEVICE,
    transport: Transport::InfiniBand,
    provider: expected_provider,
    open: open_rxe0,
    connect: pair,
    atomics: true,
    immediate: true,
    solicited_only_events: true,
    remote_errors: RemoteErrors {
        // The kernel's rxe leaves every completion's vendor error 0.
        bad_rkey_read: Outcome {
            status: WcStatus::RemoteAccessError,
            vendor_err: 0,
        },
        bad_rkey_write: Outcome {
            status: WcStatus::RemoteAccessError,
            vendor_err: 0,
        },
        denied_read: Outcome {
            status: WcStatus::RemoteAccessError,
            vendor_err: 0,
        },
        denied_write: Outcome {
            status: WcStatus::RemoteAccessError,
            vendor_err: 0,
        },
        denied_atomic: Outcome {
            status: WcStatus::RemoteAccessError,
            vendor_err: 0,
        },
        no_receive: Outcome {
            status: WcStatus::RnrRetryExceededError,
            vendor_err: 0,
        },
        terminates: false,
        read_error_flushes_responder: true,
    },
    connect_cycles: 10,
};

/// All access rights.
pub(crate) fn all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// Asserts that rxe0 exists, then opens it with the crate's default providers.
pub(crate) fn open_rxe0() -> Context {
    let sysfs = format!("/sys/class/infiniband/{DEVICE}");
    assert!(
        std::path::Path::new(&sysfs).is_dir(),
        "{sysfs} does not exist: these tests need the VM's Soft-RoCE device (run \
         tests/vm/run.sh, or tests/vm/run.sh -- '<test binary> --ignored')"
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
pub(crate) fn expected_provider() -> &'static str {
    let choice = rdmasock::ProviderChoice::from_env().expect("RDMASOCK_PROVIDER is malformed");
    match choice.for_device(DEVICE) {
        Some(rdmasock::ProviderKind::Ibverbs) => "ibverbs",
        _ => "rxe",
    }
}

/// The index of the port's RoCE v2 GID (the IPv4-mapped one when there is one) and the GID.
pub(crate) fn roce_v2_gid(context: &Context) -> (u8, Gid) {
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

/// Moves `qp` to RTS towards `peer` on this device.
pub(crate) fn connect(qp: &QueuePair, peer: &QueuePair, context: &Context, rnr_retry: u8) {
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

/// Two QPs on rxe0, each with its own PD, CQ (and channel) and region, connected by hand.
pub(crate) fn pair(options: &PairOptions) -> Pair {
    let context = open_rxe0();
    let a = pair_side_objects(&context, options, all_access());
    let b = pair_side_objects(&context, options, all_access());
    connect(&a.qp, &b.qp, &context, options.rnr_retry);
    connect(&b.qp, &a.qp, &context, options.rnr_retry);
    Pair {
        a,
        b,
        link: Link::Manual,
    }
}
