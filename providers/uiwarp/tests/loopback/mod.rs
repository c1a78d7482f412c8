//! Two QPs of uiwarp0 connected over loopback TCP through the userspace connection setup,
//! and the helpers the loopback tests share.
#![allow(dead_code)]

use rdmasock_uiwarp::{connect, device_info, UiwarpListener, UiwarpProvider};
use rdmasock_verbs::provider::Provider;
use rdmasock_verbs::{
    AccessFlags, CompletionChannel, CompletionQueue, Context, MemoryRegion, ProtectionDomain,
    QpCapabilities, QpInitAttributes, QpState, QueuePair, RecvRequest, WcStatus, WorkCompletion,
};
use std::time::{Duration, Instant};

pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) fn context() -> Context {
    let ops = UiwarpProvider::new()
        .open(&device_info())
        .expect("open uiwarp0");
    Context::from_ops(ops)
}

pub(crate) fn all() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
}

pub(crate) struct Side {
    pub qp: QueuePair,
    pub cq: CompletionQueue,
    pub channel: CompletionChannel,
    pub mr: MemoryRegion,
    _pd: ProtectionDomain,
}

impl Side {
    pub(crate) fn new(ctx: &Context, caps: QpCapabilities, sig_all: bool) -> Side {
        let pd = ctx.alloc_pd().unwrap();
        let channel = ctx.create_comp_channel().unwrap();
        let cq = ctx.create_cq(256, Some(&channel)).unwrap();
        let qp = pd
            .create_qp(
                &QpInitAttributes {
                    caps,
                    sq_sig_all: sig_all,
                },
                &cq,
                &cq,
            )
            .unwrap();
        let mr = pd.register(1 << 20, all()).unwrap();
        Side {
            qp,
            cq,
            channel,
            mr,
            _pd: pd,
        }
    }

    pub(crate) fn post_recv(&self, wr_id: u64, pieces: &[(usize, usize)]) {
        let sg: Vec<_> = pieces
            .iter()
            .map(|&(at, len)| self.mr.slice(at, len).unwrap())
            .collect();
        self.qp
            .post_recv(&[RecvRequest {
                wr_id,
                sg_list: &sg,
            }])
            .unwrap();
    }
}

pub(crate) fn caps() -> QpCapabilities {
    QpCapabilities {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 64,
    }
}

pub(crate) struct Pair {
    pub a: Side,
    pub b: Side,
}

pub(crate) fn init(qp: &QueuePair) {
    use rdmasock_verbs::qp_attr::{QpAttrMask, QpAttributes};
    qp.modify(
        &QpAttributes {
            qp_state: QpState::Init,
            port_num: 1,
            qp_access_flags: all(),
            ..QpAttributes::default()
        },
        QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .unwrap();
}

pub(crate) fn pair_with(
    caps: QpCapabilities,
    sig_all: bool,
    recvs_b: &[(u64, usize, usize)],
) -> Pair {
    let (a, b) = sides(caps, sig_all);
    for &(id, at, len) in recvs_b {
        b.post_recv(id, &[(at, len)]);
    }
    connect_sides(a, b)
}

/// Two sides on one context, their QPs in INIT, not connected.
pub(crate) fn sides(caps: QpCapabilities, sig_all: bool) -> (Side, Side) {
    let ctx = context();
    let a = Side::new(&ctx, caps, sig_all);
    let b = Side::new(&ctx, caps, sig_all);
    init(&a.qp);
    init(&b.qp);
    (a, b)
}

/// Connects `a` to `b` over loopback TCP (b accepts), checking both reach RTS.
pub(crate) fn connect_sides(a: Side, b: Side) -> Pair {
    let listener = UiwarpListener::bind("127.0.0.1:0".parse().unwrap(), 8).unwrap();
    let addr = listener.local_addr();
    std::thread::scope(|s| {
        let bq = &b.qp;
        let server = s.spawn(move || {
            let req = listener.get_request(Some(TIMEOUT)).unwrap();
            assert_eq!(req.private_data(), b"hello from a");
            req.accept(bq, b"welcome", TIMEOUT).unwrap();
        });
        let pd = connect(&a.qp, addr, b"hello from a", TIMEOUT).unwrap();
        assert_eq!(pd, b"welcome");
        server.join().unwrap();
    });
    assert_eq!(a.qp.state(), QpState::ReadyToSend);
    assert_eq!(b.qp.state(), QpState::ReadyToSend);
    Pair { a, b }
}

pub(crate) fn pair() -> Pair {
    pair_with(caps(), false, &[])
}

pub(crate) fn poll_one(cq: &CompletionQueue) -> WorkCompletion {
    let deadline = Instant::now() + TIMEOUT;
    let mut wc = [WorkCompletion::default()];
    loop {
        if let Some(c) = cq.poll(&mut wc).unwrap().first() {
            return *c;
        }
        assert!(
            Instant::now() < deadline,
            "no completion within {TIMEOUT:?}"
        );
        std::thread::yield_now();
    }
}

pub(crate) fn poll_ok(cq: &CompletionQueue) -> WorkCompletion {
    let c = poll_one(cq);
    assert_eq!(
        c.status(),
        WcStatus::Success,
        "wr {:#x}: {:?} (vendor {:#x})",
        c.wr_id,
        c.status(),
        c.vendor_err
    );
    c
}

pub(crate) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}
