//! An RDMA READ whose source the responder's application writes while the response is sent:
//! legal (the reader gets some mix of old and new bytes), so the responder's MPA CRC must
//! match the bytes it sends, and the reader must never see a bad CRC (which would end the
//! connection with a TERMINATE).

mod loopback;

use loopback::*;
use rdmasock_uiwarp::driver::endpoint;
use rdmasock_verbs::{SendFlags, SendOp, SendRequest, WcStatus};
use std::sync::atomic::{AtomicBool, Ordering};

/// Bytes per READ: several FPDUs, each framed from the source.
const READ_LEN: usize = 256 * 1024;
/// READs while the source is written.
const READS: u64 = 400;

#[test]
fn a_read_whose_source_is_written_meanwhile_completes_without_terminate() {
    assert_ne!(
        std::env::var("RDMASOCK_UIWARP_CRC").as_deref(),
        Ok("0"),
        "this case needs MPA CRC"
    );
    let p = pair();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // The responder's application writes its READ source over and over.
        let writer = s.spawn(|| {
            let mut round = 0u8;
            let mut other = pattern(READ_LEN, 0);
            while !stop.load(Ordering::Relaxed) {
                round = round.wrapping_add(1);
                other.iter_mut().for_each(|b| *b = b.wrapping_add(round));
                p.b.mr.write_at(0, &other).unwrap();
            }
        });
        let sg = [p.a.mr.slice(0, READ_LEN).unwrap()];
        let read = SendOp::RdmaRead {
            remote_addr: p.b.mr.addr(),
            rkey: p.b.mr.rkey(),
        };
        for i in 0..READS {
            p.a.qp
                .post_send(&[SendRequest::new(i, read, &sg).with_flags(SendFlags::SIGNALED)])
                .unwrap();
            let c = poll_one(&p.a.cq);
            if c.status() != WcStatus::Success {
                stop.store(true, Ordering::Relaxed);
                let why = endpoint(&p.a.qp).unwrap().end_reason();
                panic!(
                    "READ {i} of {READS}: {:?}; the connection ended: {why:?}",
                    c.status()
                );
            }
            assert_eq!(c.wr_id, i);
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
    });
}
