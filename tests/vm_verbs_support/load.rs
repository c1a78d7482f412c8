//! Conformance bodies: event mode, post-time limits, load, and leak cycles.

use super::{
    assert_empty, open_fds, poll_ok, post_recv, rss_kib, Dut, Pair, PairOptions,
    COMPLETION_DEADLINE,
};
use rdmasock::verbs::{Context, Error, RecvRequest, SendFlags, SendOp, SendRequest};
use std::time::{Duration, Instant};

/// Sends 8 bytes from `p.a` into a receive `wr_id` posted on `p.b` and polls both sides.
fn exchange(p: &Pair, wr_id: u64, flags: SendFlags) {
    post_recv(&p.b, wr_id, &[(0, 64)]);
    let sg = [p.a.mr.slice(0, 8).unwrap()];
    p.a.qp
        .post_send(&[SendRequest::new(wr_id, SendOp::Send, &sg).with_flags(flags)])
        .unwrap();
    assert_eq!(poll_ok(&p.a.cq).wr_id, wr_id);
    assert_eq!(poll_ok(&p.b.cq).wr_id, wr_id);
}

/// An armed CQ wakes its channel once (with its cookie) and is disarmed by that; a
/// solicited-only arm ignores unsolicited completions; an unarmed CQ raises nothing.
pub(crate) fn event_mode_wakes_the_channel_and_disarms(dut: &Dut) {
    let p = dut.pair_with(PairOptions {
        with_channel: true,
        ..Default::default()
    });
    let (a, b) = (&p.a, &p.b);
    let channel = b.channel.as_ref().unwrap();
    assert_eq!(
        channel.try_get_event().unwrap(),
        None,
        "no event before arming"
    );
    for (round, solicited_only) in [false, true, false].into_iter().enumerate() {
        let round = round as u64;
        b.cq.req_notify(solicited_only).unwrap();
        if solicited_only && dut.solicited_only_events {
            exchange(&p, 100 + round, SendFlags::SIGNALED);
            assert_eq!(
                channel.try_get_event().unwrap(),
                None,
                "an unsolicited completion woke a solicited-only arm"
            );
        } else if solicited_only {
            // The arm was widened to every completion: the unsolicited one wakes it.
            exchange(&p, 100 + round, SendFlags::SIGNALED);
            let cookie = channel.wait(Some(COMPLETION_DEADLINE)).unwrap();
            assert_eq!(cookie, Some(b.cq.cookie()), "the widened arm did not fire");
            b.cq.ack_events(1);
            b.cq.req_notify(true).unwrap();
        }
        post_recv(b, round, &[(0, 64)]);
        let sg = [a.mr.slice(0, 8).unwrap()];
        let flags = if solicited_only {
            SendFlags::SIGNALED | SendFlags::SOLICITED
        } else {
            SendFlags::SIGNALED
        };
        a.qp.post_send(&[SendRequest::new(2, SendOp::Send, &sg).with_flags(flags)])
            .unwrap();
        let cookie = channel
            .wait(Some(COMPLETION_DEADLINE))
            .unwrap()
            .expect("a channel event for the receive CQ");
        assert_eq!(cookie, b.cq.cookie());
        b.cq.ack_events(1);
        assert_eq!(poll_ok(&b.cq).wr_id, round);
        poll_ok(&a.cq);
    }
    // Not re-armed: a further completion raises no event.
    exchange(&p, 9, SendFlags::SIGNALED);
    assert_eq!(channel.try_get_event().unwrap(), None);
    // The requester's CQ was never armed: its completions raised no event on its channel.
    assert_eq!(a.channel.as_ref().unwrap().try_get_event().unwrap(), None);
    p.disconnect();
}

/// A channel made blocking (rdma-core's mode, kernel devices only) waits in one read(2) and
/// still never blocks `try_get_event`; other providers refuse the mode with a clear error.
pub(crate) fn blocking_channel_waits_in_read(dut: &Dut) {
    let p = dut.pair_with(PairOptions {
        with_channel: true,
        ..Default::default()
    });
    let channel = p.b.channel.as_ref().unwrap().clone();
    let kernel = matches!((dut.provider)(), "rxe" | "siw");
    match channel.set_blocking(true) {
        Ok(()) => assert!(kernel, "{} accepted a blocking channel", (dut.provider)()),
        Err(e) => {
            assert!(
                !kernel,
                "{} refused a blocking channel: {e}",
                (dut.provider)()
            );
            assert!(e.to_string().contains("cannot block"), "{e}");
            p.disconnect();
            return;
        }
    }
    // Nothing queued: the non-blocking take answers at once on the blocking fd.
    assert_eq!(channel.try_get_event().unwrap(), None);
    for round in 0..3u64 {
        p.b.cq.req_notify(false).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = channel.clone();
        std::thread::spawn(move || {
            let _ = tx.send(waiter.wait(None));
        });
        post_recv(&p.b, round, &[(0, 64)]);
        let sg = [p.a.mr.slice(0, 8).unwrap()];
        p.a.qp
            .post_send(&[SendRequest::new(round, SendOp::Send, &sg)])
            .unwrap();
        let cookie = rx
            .recv_timeout(COMPLETION_DEADLINE)
            .expect("the blocking wait did not return the event")
            .unwrap();
        assert_eq!(cookie, Some(p.b.cq.cookie()));
        p.b.cq.ack_events(1);
        assert_eq!(poll_ok(&p.b.cq).wr_id, round);
        poll_ok(&p.a.cq);
        assert_eq!(channel.try_get_event().unwrap(), None, "one event per arm");
    }
    channel.set_blocking(false).unwrap();
    assert_eq!(channel.try_get_event().unwrap(), None);
    p.disconnect();
}

/// 10 000 SEND/receive round trips, each polled to completion, every byte checked: the
/// rings wrap many times, and leave the fd count unchanged and resident memory (nearly) so
/// (counted from the 100th round trip, once every ring page has been touched).
pub(crate) fn ten_thousand_post_poll_cycles_leak_nothing(dut: &Dut) {
    let p = dut.pair();
    let (a, b) = (&p.a, &p.b);
    let recv = [b.mr.slice(0, 64).unwrap()];
    let send = [a.mr.slice(0, 8).unwrap()];
    let round_trip = |i: u64| {
        a.mr.write_at(0, &i.to_le_bytes()).unwrap();
        b.qp.post_recv(&[RecvRequest {
            wr_id: i,
            sg_list: &recv,
        }])
        .unwrap();
        a.qp.post_send(&[SendRequest::new(i, SendOp::Send, &send)
            .with_flags(SendFlags::SIGNALED | SendFlags::INLINE)])
            .unwrap();
        assert_eq!(poll_ok(&a.cq).wr_id, i);
        let r = poll_ok(&b.cq);
        assert_eq!((r.wr_id, r.byte_len), (i, 8));
        assert_eq!(&b.mr.to_vec()[..8], &i.to_le_bytes());
    };
    (0..100).for_each(round_trip);
    let fds = open_fds();
    let rss = rss_kib();
    (100..10_000).for_each(round_trip);
    assert_fds_back_to(fds, "9900 post/poll round trips");
    assert_rss_bounded(rss, "9900 post/poll round trips");
    assert_empty(&a.cq);
    assert_empty(&b.cq);
    p.disconnect();
}

/// Too many gather entries, too much inline data and a full receive queue are refused at
/// post time with errors that name the limit; nothing refused is queued.
pub(crate) fn post_time_limits_are_clear_errors(dut: &Dut) {
    let p = dut.pair();
    let (a, b) = (&p.a, &p.b);
    let caps = a.qp.caps();
    let sg: Vec<_> = (0..caps.max_send_sge as usize + 1)
        .map(|i| a.mr.slice(i * 8, 8).unwrap())
        .collect();
    let err =
        a.qp.post_send(&[SendRequest::new(1, SendOp::Send, &sg)])
            .unwrap_err();
    assert_eq!(err.index, 0);
    assert!(err.to_string().contains("max_send_sge"), "{err}");
    let big = [a.mr.slice(0, caps.max_inline_data as usize + 1).unwrap()];
    let wr = SendRequest::new(2, SendOp::Send, &big).with_flags(SendFlags::INLINE);
    let err = a.qp.post_send(&[wr]).unwrap_err();
    assert!(err.to_string().contains("max_inline_data"), "{err}");
    // Slices of a region are bounds-checked: up to its last byte, not one past it, and no
    // range that wraps around the address space.
    let len = a.mr.len();
    let s = a.mr.slice(16, len - 16).unwrap();
    assert_eq!(
        (s.addr(), s.length(), s.lkey()),
        (a.mr.addr() + 16, (len - 16) as u32, a.mr.lkey())
    );
    assert!(a.mr.slice(len, 0).is_ok(), "an empty slice at the end");
    for (offset, n) in [(len - 7, 8), (len + 1, 0), (1, usize::MAX), (usize::MAX, 2)] {
        let err = a.mr.slice(offset, n).unwrap_err();
        assert!(err.to_string().contains("outside"), "{offset}+{n}: {err}");
    }
    assert_empty(&a.cq);
    // The receive queue fills up when nothing arrives (siw's ring may be deeper than asked).
    let recv = [b.mr.slice(0, 8).unwrap()];
    let rr: Vec<_> = (0..=u64::from(caps.max_recv_wr).max(1024))
        .map(|i| RecvRequest {
            wr_id: i,
            sg_list: &recv,
        })
        .collect();
    let err = b.qp.post_recv(&rr).unwrap_err();
    assert!(err.index >= caps.max_recv_wr as usize, "{err}");
    assert!(matches!(err.error, Error::QueueFull { .. }), "{err}");
    println!("{err}");
    p.disconnect();
}

fn create_destroy_cycle(dut: &Dut, context: &Context) {
    let pd = context.alloc_pd().unwrap();
    let mr = pd.register(8192, dut.access()).unwrap();
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

/// Asserts that this process has no more open file descriptors than `fds` (it may have
/// fewer: the userspace provider closes torn-down connections' sockets, those of earlier
/// tests too, on its progress thread just after `disconnect` returns; the count is awaited,
/// bounded). A leak of one descriptor per cycle would stand out by hundreds.
fn assert_fds_back_to(fds: usize, what: &str) {
    let deadline = Instant::now() + COMPLETION_DEADLINE;
    while open_fds() > fds && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let now = open_fds();
    assert!(
        now <= fds,
        "file descriptors leaked: {fds} before {what}, {now} after"
    );
}

/// Asserts that resident memory grew by less than 4 MiB since `rss` (KiB).
fn assert_rss_bounded(rss: u64, what: &str) {
    let grown = rss_kib().saturating_sub(rss);
    assert!(
        grown < 4096,
        "resident memory grew by {grown} KiB over {what}"
    );
}

/// 1000 cycles of PD, region, channel, CQ and QP creation and destruction leave the fd
/// count unchanged and resident memory (nearly) so.
pub(crate) fn create_destroy_cycles_leak_nothing(dut: &Dut) {
    let context = (dut.open)();
    for _ in 0..100 {
        create_destroy_cycle(dut, &context);
    }
    let fds = open_fds();
    let rss = rss_kib();
    for _ in 0..1000 {
        create_destroy_cycle(dut, &context);
    }
    assert_fds_back_to(fds, "1000 create/destroy cycles");
    assert_rss_bounded(rss, "1000 create/destroy cycles");
}

/// 1000 device contexts opened (each asked for its port) and dropped leave the fd count
/// unchanged and resident memory (nearly) so: every uverbs and async-event fd is closed.
pub(crate) fn context_open_close_cycles_leak_nothing(dut: &Dut) {
    let cycle = || {
        let context = (dut.open)();
        assert!(context.query_port(1).is_ok(), "port 1 of {}", dut.device);
        drop(context);
    };
    (0..10).for_each(|_| cycle());
    let fds = open_fds();
    let rss = rss_kib();
    let start = Instant::now();
    (0..CONTEXT_CYCLES).for_each(|_| cycle());
    println!(
        "{CONTEXT_CYCLES} contexts opened and closed in {:?}",
        start.elapsed()
    );
    let what = format!("{CONTEXT_CYCLES} context open/close cycles");
    assert_fds_back_to(fds, &what);
    assert_rss_bounded(rss, &what);
}

/// Contexts opened and dropped by [`context_open_close_cycles_leak_nothing`].
const CONTEXT_CYCLES: usize = 1000;

/// Connections made, used once and torn down leave the fd count unchanged and resident
/// memory (nearly) so.
pub(crate) fn connect_disconnect_cycles_leak_nothing(dut: &Dut) {
    for _ in 0..2 {
        let p = dut.pair();
        exchange(&p, 1, SendFlags::SIGNALED);
        p.disconnect();
    }
    let fds = open_fds();
    let rss = rss_kib();
    for i in 0..dut.connect_cycles {
        let p = dut.pair();
        exchange(&p, i as u64, SendFlags::SIGNALED);
        p.disconnect();
    }
    let cycles = dut.connect_cycles;
    assert_fds_back_to(fds, &format!("{cycles} connections"));
    assert_rss_bounded(rss, &format!("{cycles} connections"));
}
