//! Verbs-level 64-byte SEND ping-pong between two uiwarp QPs on loopback, busy-polling the
//! completion queues: the provider's own round-trip time, without the socket layer.
//!
//! `verbs_pingpong [iterations]`

use rdmasock_uiwarp::{connect, device_info, UiwarpListener, UiwarpProvider};
use rdmasock_verbs::provider::Provider;
use rdmasock_verbs::qp_attr::{QpAttrMask, QpAttributes};
use rdmasock_verbs::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, QpCapabilities, QpInitAttributes, QpState,
    QueuePair, RecvRequest, SendFlags, SendOp, SendRequest, WcStatus, WorkCompletion,
};
use std::time::{Duration, Instant};

struct Side {
    qp: QueuePair,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

fn side(ctx: &Context) -> Side {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None).unwrap();
    let caps = QpCapabilities {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let qp = pd
        .create_qp(
            &QpInitAttributes {
                caps,
                sq_sig_all: true,
            },
            &cq,
            &cq,
        )
        .unwrap();
    qp.modify(
        &QpAttributes {
            qp_state: QpState::Init,
            port_num: 1,
            qp_access_flags: AccessFlags::LOCAL_WRITE,
            ..Default::default()
        },
        QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    Side { qp, cq, mr }
}

fn post_recv(s: &Side) {
    let sg = [s.mr.slice(0, 64).unwrap()];
    s.qp.post_recv(&[RecvRequest {
        wr_id: 1,
        sg_list: &sg,
    }])
    .unwrap();
}

fn send(s: &Side) {
    let sg = [s.mr.slice(64, 64).unwrap()];
    s.qp.post_send(&[SendRequest::new(2, SendOp::Send, &sg).with_flags(SendFlags::INLINE)])
        .unwrap();
}

/// Spins until a receive completes (send completions are skipped).
fn wait_recv(s: &Side) {
    let mut wc = [WorkCompletion::default(); 4];
    loop {
        for c in s.cq.poll(&mut wc).unwrap() {
            assert_eq!(c.status(), WcStatus::Success);
            if c.wr_id == 1 {
                return;
            }
        }
    }
}

fn main() {
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let ctx = Context::from_ops(UiwarpProvider::new().open(&device_info()).unwrap());
    let a = side(&ctx);
    let b = side(&ctx);
    post_recv(&b);
    let l = UiwarpListener::bind("127.0.0.1:0".parse().unwrap(), 1).unwrap();
    let addr = l.local_addr();
    std::thread::scope(|sc| {
        let bq = &b;
        sc.spawn(move || {
            let r = l.get_request(None).unwrap();
            r.accept(&bq.qp, b"", Duration::from_secs(5)).unwrap();
            for _ in 0..iters {
                wait_recv(bq);
                post_recv(bq);
                send(bq);
            }
        });
        connect(&a.qp, addr, b"", Duration::from_secs(5)).unwrap();
        let t = Instant::now();
        for _ in 0..iters {
            post_recv(&a);
            send(&a);
            wait_recv(&a);
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
        println!(
            "uiwarp verbs 64 B SEND ping-pong: {us:.1} us per round trip ({iters} iterations)"
        );
    });
}
