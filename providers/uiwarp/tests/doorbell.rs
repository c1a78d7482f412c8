//! Doorbell coalescing on real TCP sockets over loopback: sends posted in quick succession
//! are held and go to TCP together, and nothing stays held: a poll of the sender's completion
//! queue writes them, and so does the engine's backstop when nobody polls there at all.

mod loopback;

use loopback::*;
use rdmasock_verbs::{SendFlags, SendOp, SendRequest, WcOpcode, WcStatus, WorkCompletion};

/// Sends posted back to back: enough that some come within the coalescing window of the
/// last write even on a loaded machine.
const BURST: u64 = 32;
const LEN: usize = 48;

/// Posts `BURST` sends of `LEN` bytes from `a` to `b`, each with its own bytes.
fn post_burst(p: &Pair, flags: SendFlags) {
    for i in 0..BURST {
        p.b.post_recv(i, &[(i as usize * 64, 64)]);
    }
    for i in 0..BURST {
        let at = 4096 + i as usize * 64;
        p.a.mr.write_at(at, &[i as u8 + 1; LEN]).unwrap();
        let sg = [p.a.mr.slice(at, LEN).unwrap()];
        p.a.qp
            .post_send(&[SendRequest::new(i, SendOp::Send, &sg).with_flags(flags)])
            .unwrap();
    }
}

/// Takes the burst at `b`, in order and byte for byte.
fn receive_burst(p: &Pair) {
    for i in 0..BURST {
        let r = poll_ok(&p.b.cq);
        assert_eq!(
            (r.wr_id, r.opcode(), r.byte_len),
            (i, WcOpcode::Recv, LEN as u32)
        );
        let mut got = [0u8; LEN];
        p.b.mr.read_at(i as usize * 64, &mut got).unwrap();
        assert_eq!(got, [i as u8 + 1; LEN], "message {i}");
    }
}

fn held_posts(p: &Pair) -> u64 {
    rdmasock_uiwarp::driver::endpoint(&p.a.qp)
        .unwrap()
        .held_posts()
}

/// [`post_burst`] for a test about held posts: fails when none was held (the test would
/// show nothing); returns how many were.
fn post_held_burst(p: &Pair, flags: SendFlags) -> u64 {
    post_burst(p, flags);
    let held = held_posts(p);
    assert!(held > 0, "no post of {BURST} back to back was held");
    held
}

#[test]
fn held_sends_arrive_though_the_sender_never_polls() {
    let p = pair();
    post_held_burst(&p, SendFlags::empty());
    // Only b polls, and b's queue has only b's QP: a's held sends need the backstop.
    receive_burst(&p);
}

#[test]
fn a_poll_of_the_senders_queue_writes_what_is_held() {
    let p = pair();
    let held = post_held_burst(&p, SendFlags::SIGNALED);
    // A held send completes once TCP takes it: one poll, right after the posts, must
    // write every held send and so find all of them complete.
    let mut wcs = [WorkCompletion::default(); BURST as usize];
    let got = p.a.cq.poll(&mut wcs).unwrap();
    assert_eq!(
        got.len(),
        BURST as usize,
        "one poll found {} of {BURST} completions ({held} posts held)",
        got.len()
    );
    for (i, wc) in got.iter().enumerate() {
        assert_eq!((wc.wr_id, wc.opcode()), (i as u64, WcOpcode::Send));
        assert_eq!(wc.status(), WcStatus::Success, "{wc:?}");
    }
    receive_burst(&p);
}

#[test]
fn with_coalescing_off_every_post_goes_out_at_once() {
    let p = pair();
    assert!(p.a.qp.set_send_coalescing(false), "uiwarp coalesces");
    post_burst(&p, SendFlags::SIGNALED);
    assert_eq!(held_posts(&p), 0);
    receive_burst(&p);
    for i in 0..BURST {
        let s = poll_ok(&p.a.cq);
        assert_eq!((s.wr_id, s.opcode()), (i, WcOpcode::Send));
    }
}

/// A disconnect right after a burst: held sends were handed over like any other post, so
/// they go out before the close, as the ones TCP already took do (only posts that TCP could
/// not take yet are flushed).
#[test]
fn held_sends_go_out_before_a_disconnect() {
    let p = pair();
    post_held_burst(&p, SendFlags::empty());
    rdmasock_uiwarp::disconnect(&p.a.qp).unwrap();
    receive_burst(&p);
}

/// The classic event loop arms its queue, polls, posts its answers and sleeps on the
/// channel: nothing it posts while the queue is armed is held (it would wait for the
/// backstop, a millisecond, while the loop sleeps), and the answers arrive.
#[test]
fn posts_to_an_armed_queue_are_not_held() {
    let p = pair();
    p.a.cq.req_notify(false).unwrap();
    post_burst(&p, SendFlags::empty());
    assert_eq!(held_posts(&p), 0, "posts were held with the queue armed");
    receive_burst(&p);
}
