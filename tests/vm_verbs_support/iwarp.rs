//! The iWARP devices under test, whose QPs reach RTS only through a connection setup:
//! siw0 (soft-iWARP) in the VM through rdma_cm, and uiwarp0 (the userspace provider) on the
//! host through its own MPA exchange over loopback TCP.

use super::cm_support::{device_ip, CmPair, SideOptions};
use super::{
    pair_side_objects, CmIds, Dut, Link, Outcome, Pair, PairOptions, RemoteErrors,
    COMPLETION_DEADLINE,
};
use rdmasock::verbs::provider::Provider;
use rdmasock::verbs::qp_attr::{QpAttrMask, QpAttributes};
use rdmasock::verbs::{Context, QpState, QueuePair, Transport, WcStatus};
use rdmasock_uiwarp::{UiwarpListener, UiwarpProvider};

/// The kernel's soft-iWARP device in the VM.
pub(crate) const SIW_DEVICE: &str = "siw0";

/// siw0 as the conformance suite sees it: no atomics, no immediate data, no solicited-only
/// arming; a wrong rkey or a missing receive makes the responder TERMINATE the connection,
/// and a READ that got no response is flushed; a region without REMOTE_READ is read all the
/// same.
pub(crate) const SIW: Dut = Dut {
    device: SIW_DEVICE,
    transport: Transport::Iwarp,
    provider: || "siw",
    open: open_siw0,
    connect: siw_pair,
    atomics: false,
    immediate: false,
    solicited_only_events: false,
    remote_errors: RemoteErrors {
        // siw keeps its own status code in the vendor error: 4 is SIW_WC_WR_FLUSH_ERR.
        bad_rkey_read: Outcome {
            status: WcStatus::WorkRequestFlushError,
            vendor_err: 4,
        },
        bad_rkey_write: Outcome::SUCCESS,
        // siw (kernel 6.1, through our provider and rdma-core's libsiw alike) serves a READ
        // from a region registered without REMOTE_READ: its receive path queues the READ
        // response unchecked (siw_init_rresp) and its transmit path checks the source with no
        // access rights asked (siw_check_sgl_tx(pd, wqe, 0) in siw_qp_sq_proc_tx). A kernel
        // trait, not the provider's; the suite pins it so that a change shows.
        denied_read: Outcome::SUCCESS,
        denied_write: Outcome::SUCCESS,
        // iWARP has no atomics.
        denied_atomic: Outcome::SUCCESS,
        no_receive: Outcome::SUCCESS,
        terminates: true,
        read_error_flushes_responder: false,
    },
    connect_cycles: 10,
};

/// The userspace iWARP device as the conformance suite sees it: as siw, except that the
/// TERMINATE of a refused READ completes that READ with a remote access error.
pub(crate) const UIWARP: Dut = Dut {
    device: rdmasock_uiwarp::DEVICE_NAME,
    transport: Transport::Iwarp,
    provider: || rdmasock_uiwarp::DRIVER_NAME,
    open: open_uiwarp,
    connect: uiwarp_pair,
    atomics: false,
    immediate: false,
    solicited_only_events: true,
    remote_errors: RemoteErrors {
        // The TERMINATE's code, 1 << 24 | layer << 16 | error type << 8 | error code: RDMAP
        // (0), remote protection error (1), invalid STag (0).
        bad_rkey_read: Outcome {
            status: WcStatus::RemoteAccessError,
            vendor_err: 0x0100_0100,
        },
        bad_rkey_write: Outcome::SUCCESS,
        // RDMAP (0), remote protection error (1), access rights violation (2).
        denied_read: Outcome {
            status: WcStatus::RemoteAccessError,
            vendor_err: 0x0100_0102,
        },
        denied_write: Outcome::SUCCESS,
        // iWARP has no atomics.
        denied_atomic: Outcome::SUCCESS,
        no_receive: Outcome::SUCCESS,
        terminates: true,
        read_error_flushes_responder: true,
    },
    connect_cycles: 100,
};

/// Asserts that siw0 exists (and its address is known), then opens it.
pub(crate) fn open_siw0() -> Context {
    device_ip(SIW_DEVICE);
    rdmasock::open_device(Some(SIW_DEVICE)).expect("opening siw0")
}

/// Two QPs on siw0 connected through rdma_cm (a listener and a connector on siw0's address).
pub(crate) fn siw_pair(options: &PairOptions) -> Pair {
    let side_options = SideOptions {
        caps: options.caps,
        sq_sig_all: options.sq_sig_all,
        with_channel: options.with_channel,
        mr_len: options.mr_len,
        read_depth: 4,
    };
    let CmPair {
        active,
        passive,
        active_id,
        passive_id,
        listener,
    } = CmPair::connect(device_ip(SIW_DEVICE), &side_options);
    Pair {
        a: active,
        b: passive,
        link: Link::Cm(Box::new(CmIds {
            active_id,
            passive_id,
            listener,
        })),
    }
}

/// Opens uiwarp0 with the userspace provider directly (it needs no kernel device).
pub(crate) fn open_uiwarp() -> Context {
    let ops = UiwarpProvider::new()
        .open(&rdmasock_uiwarp::device_info())
        .expect("opening uiwarp0");
    Context::from_ops(ops)
}

/// Moves a fresh uiwarp QP to INIT (connection setup takes it from there).
fn uiwarp_init(qp: &QueuePair) {
    qp.modify(
        &QpAttributes {
            qp_state: QpState::Init,
            port_num: 1,
            qp_access_flags: UIWARP.access(),
            ..QpAttributes::default()
        },
        QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .expect("RESET -> INIT");
}

/// Two uiwarp0 QPs connected over loopback TCP: `b` accepts on an ephemeral port of
/// 127.0.0.1 in a thread while `a` connects to it, each exchanging private data.
pub(crate) fn uiwarp_pair(options: &PairOptions) -> Pair {
    let context = open_uiwarp();
    let a = pair_side_objects(&context, options, UIWARP.access());
    let b = pair_side_objects(&context, options, UIWARP.access());
    uiwarp_init(&a.qp);
    uiwarp_init(&b.qp);
    let listener =
        UiwarpListener::bind("127.0.0.1:0".parse().unwrap(), 8).expect("binding a listener");
    let addr = listener.local_addr();
    std::thread::scope(|s| {
        let passive_qp = &b.qp;
        let server = s.spawn(move || {
            let request = listener
                .get_request(Some(COMPLETION_DEADLINE))
                .expect("a connection request");
            assert_eq!(request.private_data(), b"conformance a");
            request
                .accept(passive_qp, b"conformance b", COMPLETION_DEADLINE)
                .expect("accepting the connection");
        });
        let reply = rdmasock_uiwarp::connect(&a.qp, addr, b"conformance a", COMPLETION_DEADLINE)
            .expect("connecting to the listener");
        assert_eq!(reply, b"conformance b");
        server.join().expect("the accepting thread");
    });
    assert_eq!(a.qp.state(), QpState::ReadyToSend);
    assert_eq!(b.qp.state(), QpState::ReadyToSend);
    Pair {
        a,
        b,
        link: Link::Uiwarp,
    }
}
