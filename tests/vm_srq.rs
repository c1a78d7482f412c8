//! Shared receive queues on rxe0 and siw0: one SRQ in one protection domain, two queue
//! pairs created on it and connected to two peers (by hand on rxe0, through rdma_cm on siw0),
//! messages to both. Each message takes the next receive posted on the SRQ, its completion
//! comes on the receiving QP's completion queue and names that QP, a QP on the SRQ refuses a
//! receive of its own, and the SRQ's limit fires one async event and disarms.
//!
//! Runs only in the VM (`tests/vm/run.sh`, or `run-in-vm.sh --both '<binary> --ignored
//! --test-threads=1'`); on the host every test is ignored. Each test first asserts that its
//! device exists, so none can pass without it.

#[path = "vm_verbs_support/mod.rs"]
#[allow(unused_imports, unused_macros)]
mod support;

use nix::poll::{PollFd, PollFlags, PollTimeout};
use rdmasock::cm::{CmId, ConnectionParameters, EventChannel};
use rdmasock::verbs::{
    AccessFlags, AsyncEventKind, CompletionQueue, Context, MemoryRegion, ProtectionDomain,
    QpInitAttributes, QueuePair, RecvRequest, SendFlags, SendOp, SendRequest, SharedReceiveQueue,
    SrqInitAttributes, WcOpcode, WcStatus,
};
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};
use support::cm_support::{device_ip, Side, SideOptions, CM_TIMEOUT};
use support::{assert_empty, poll_one, PairOptions};

/// Receives posted on the SRQ in each test.
const POSTED: u32 = 8;
/// Bytes of each receive buffer.
const SLOT: usize = 64;

/// The receiving side: one PD, one SRQ, one CQ, one region of receive buffers.
struct Receiver {
    context: Context,
    pd: ProtectionDomain,
    srq: SharedReceiveQueue,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

impl Receiver {
    fn new(context: Context) -> Receiver {
        let pd = context.alloc_pd().expect("ALLOC_PD");
        let srq = pd
            .create_srq(&SrqInitAttributes {
                max_wr: 32,
                max_sge: 1,
                limit: 0,
            })
            .expect("CREATE_SRQ");
        assert!(srq.caps().max_wr >= 32, "the SRQ got {:?}", srq.caps());
        let cq = context.create_cq(64, None).expect("CREATE_CQ");
        let mr = pd
            .register(
                SLOT * POSTED as usize,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            )
            .expect("REG_MR");
        Receiver {
            context,
            pd,
            srq,
            cq,
            mr,
        }
    }

    fn qp(&self) -> QueuePair {
        let init = QpInitAttributes {
            caps: PairOptions::default().caps,
            sq_sig_all: false,
        };
        self.pd
            .create_qp_with_srq(&init, &self.cq, &self.cq, &self.srq)
            .expect("CREATE_QP on the SRQ")
    }

    /// Posts [`POSTED`] receives, slot `i` of the region with wr_id `i`.
    fn post_all(&self) {
        for i in 0..POSTED as usize {
            let sg = [self.mr.slice(i * SLOT, SLOT).unwrap()];
            self.srq
                .post_recv(&[RecvRequest {
                    wr_id: i as u64,
                    sg_list: &sg,
                }])
                .expect("posting on the SRQ");
        }
    }
}

/// Sends `text` from `side` as a SEND out of its region.
fn send(side: &Side, text: &[u8]) {
    side.mr.write_at(0, text).unwrap();
    let sg = [side.mr.slice(0, text.len()).unwrap()];
    side.qp
        .post_send(&[SendRequest {
            wr_id: 1,
            op: SendOp::Send,
            flags: SendFlags::SIGNALED,
            sg_list: &sg,
        }])
        .expect("post_send");
    let wc = poll_one(&side.cq);
    assert_eq!(wc.status(), WcStatus::Success, "{wc:?}");
}

/// The body both devices run: `senders[i]` is connected to `receivers[i]`, both receiving
/// QPs on `rx.srq`. `limit_after_event` is what QUERY_SRQ reports once the limit fired: rxe
/// reports 0 (disarmed), siw (Linux 6.1) keeps reporting the value it was armed with.
fn exercise(rx: &Receiver, senders: &[Side], receivers: &[QueuePair], limit_after_event: u32) {
    // A QP on an SRQ has no receive queue of its own.
    let sg = [rx.mr.slice(0, SLOT).unwrap()];
    let refused = receivers[0].post_recv(&[RecvRequest {
        wr_id: 99,
        sg_list: &sg,
    }]);
    assert!(
        refused.is_err(),
        "a QP on a shared receive queue took a receive"
    );

    // Arm the limit at 2 while 8 are posted: nothing fires yet.
    rx.srq.set_limit(2).expect("MODIFY_SRQ of the limit");
    assert_eq!(rx.srq.limit().expect("QUERY_SRQ"), 2);
    assert!(no_srq_event(
        &rx.context,
        rx.srq.cookie(),
        Duration::from_millis(200)
    ));

    // Alternate senders; each message takes the next receive, in posting order, and its
    // completion names the QP it came in on.
    let mut seen = Vec::new();
    for n in 0..POSTED as usize {
        let who = n % senders.len();
        let text = format!("message {n} to QP {}", receivers[who].qp_num().0);
        send(&senders[who], text.as_bytes());
        let wc = poll_one(&rx.cq);
        assert_eq!(wc.status(), WcStatus::Success, "{wc:?}");
        assert_eq!(wc.opcode(), WcOpcode::Recv, "{wc:?}");
        assert_eq!(
            wc.wr_id, n as u64,
            "receives are taken in posting order: {wc:?}"
        );
        assert_eq!(
            wc.qp_num,
            receivers[who].qp_num(),
            "the completion names its QP"
        );
        assert_eq!(wc.byte_len as usize, text.len());
        let mut got = vec![0u8; text.len()];
        rx.mr.read_at(n * SLOT, &mut got).unwrap();
        assert_eq!(got, text.as_bytes());
        seen.push(wc.qp_num);
    }
    assert_empty(&rx.cq);
    assert!(seen.contains(&receivers[0].qp_num()) && seen.contains(&receivers[1].qp_num()));

    // All receives are taken: the limit fired once and disarmed.
    wait_srq_event(&rx.context, rx.srq.cookie());
    assert_eq!(rx.srq.limit().expect("QUERY_SRQ"), limit_after_event);
    // Disarmed: refilling and emptying the queue again raises no second event.
    rx.post_all();
    for n in 0..POSTED as usize {
        let who = n % senders.len();
        send(&senders[who], b"again");
        let wc = poll_one(&rx.cq);
        assert_eq!(wc.status(), WcStatus::Success, "{wc:?}");
        assert_eq!(wc.qp_num, receivers[who].qp_num());
    }
    assert!(
        no_srq_event(&rx.context, rx.srq.cookie(), Duration::from_millis(200)),
        "the limit fired twice for one arming"
    );
}

/// Whether no SRQ-limit event for `cookie` comes within `wait`.
fn no_srq_event(context: &Context, cookie: u64, wait: Duration) -> bool {
    next_srq_event(context, cookie, wait).is_none()
}

/// Waits for the SRQ-limit event about `cookie`.
fn wait_srq_event(context: &Context, cookie: u64) {
    assert!(
        next_srq_event(context, cookie, Duration::from_secs(20)).is_some(),
        "no SRQ limit event for the SRQ"
    );
}

fn next_srq_event(context: &Context, cookie: u64, wait: Duration) -> Option<()> {
    let deadline = Instant::now() + wait;
    loop {
        if let Some(ev) = context.read_async_event().expect("reading async events") {
            println!("async event: {ev:?}");
            if ev.kind == AsyncEventKind::SrqLimitReached && ev.element == cookie {
                return Some(());
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let fd = context.ops().async_fd();
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        nix::poll::poll(&mut fds, PollTimeout::from(ms)).expect("poll on the async event fd");
    }
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rxe_two_queue_pairs_share_one_receive_queue() {
    let context = support::rxe::open_rxe0();
    let rx = Receiver::new(context.clone());
    let receivers = [rx.qp(), rx.qp()];
    let options = PairOptions::default();
    let access = support::rxe::all_access();
    let senders: Vec<Side> = (0..2)
        .map(|_| support::pair_side_objects(&context, &options, access))
        .collect();
    for (s, r) in senders.iter().zip(&receivers) {
        support::rxe::connect(&s.qp, r, &context, 7);
        support::rxe::connect(r, &s.qp, &context, 7);
    }
    rx.post_all();
    exercise(&rx, &senders, &receivers, 0);
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn siw_two_queue_pairs_share_one_receive_queue() {
    let ip = device_ip(support::iwarp::SIW_DEVICE);
    let context = support::iwarp::open_siw0();
    let rx = Receiver::new(context);
    // iWARP has no RNR retry: the receives are posted before anyone can send.
    rx.post_all();
    let channel = EventChannel::open().expect("opening /dev/infiniband/rdma_cm");
    let listener = CmId::new(&channel).expect("CREATE_ID for the listener");
    listener
        .bind(SocketAddr::new(ip, 0))
        .expect("binding the listener");
    listener.listen(4).expect("LISTEN");
    let addr = listener.local_addr().unwrap().expect("a bound address");
    let param = ConnectionParameters {
        responder_resources: 4,
        initiator_depth: 4,
        ..Default::default()
    };
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let connector = {
            let param = param.clone();
            thread::spawn(move || {
                let channel = EventChannel::open().expect("opening /dev/infiniband/rdma_cm");
                let id = CmId::new(&channel).expect("CREATE_ID");
                id.resolve(None, addr, CM_TIMEOUT).expect("resolving");
                let side = Side::new(&id, &SideOptions::default());
                id.connect_blocking(Some(&side.qp), &param, CM_TIMEOUT)
                    .expect("CONNECT -> ESTABLISHED");
                (side, id, channel)
            })
        };
        let request = listener.get_request(CM_TIMEOUT).expect("CONNECT_REQUEST");
        let qp = rx.qp();
        request.id.init_qp(&qp).expect("RESET -> INIT");
        let accept_param = ConnectionParameters {
            srq: true,
            ..param.clone()
        };
        request
            .id
            .accept_blocking(Some(&qp), &accept_param, CM_TIMEOUT)
            .expect("ACCEPT -> ESTABLISHED");
        let (side, id, channel) = connector.join().expect("the connecting thread");
        senders.push(side);
        receivers.push(qp);
        ids.push((request.id, id, channel));
    }
    exercise(&rx, &senders, &receivers, 2);
}

/// Connections made in each socket test (both ends in this process: twice as many
/// connections on the device).
const SOCKETS: usize = 3;

/// `SOCKETS` connected socket pairs on `device`, with `srq` chosen as the
/// shared-receive-queue option of both ends; each pair echoes 64 KiB both ways (more messages than one
/// connection's receives, so every receive is reposted). Returns the census's regions while
/// they are open.
fn sockets_on(device: &str, srq: bool) -> u64 {
    use rdmasock::{RdmaListener, RdmaSocket, SocketOptions};
    use std::io::{Read, Write};
    let ip = device_ip(device);
    let opts = SocketOptions::builder()
        .shared_receive_queue(srq)
        .build()
        .unwrap();
    assert_eq!(opts.shared_receive_queue(), Some(srq));
    let before = rdmasock::census().regions;
    let listener = RdmaListener::bind_with(SocketAddr::new(ip, 0), &opts).expect("bind");
    let addr = listener.local_addr().expect("the listener's address");
    let mut pairs = Vec::new();
    for _ in 0..SOCKETS {
        let client = thread::spawn({
            let opts = opts.clone();
            move || RdmaSocket::connect_with(addr, &opts).expect("connect")
        });
        let (server, _) = listener.accept().expect("accept");
        pairs.push((client.join().unwrap(), server));
    }
    let regions = rdmasock::census().regions - before;
    let data = support::pattern(64 * 1024, 7);
    for (client, server) in &mut pairs {
        let echo = {
            let mut server = server.try_clone().unwrap();
            let len = data.len();
            thread::spawn(move || {
                let mut buf = vec![0u8; len];
                server.read_exact(&mut buf).unwrap();
                for chunk in buf.chunks(100) {
                    server.write_all(chunk).unwrap();
                }
                server.flush().unwrap();
            })
        };
        client.write_all(&data).unwrap();
        let mut back = vec![0u8; data.len()];
        client.read_exact(&mut back).unwrap();
        assert_eq!(back, data);
        echo.join().unwrap();
        // Every byte in the peer's memory before both ends close at once.
        client.flush().unwrap();
    }
    for (client, server) in pairs {
        let closed = |end: &str, r: std::io::Result<()>| {
            r.unwrap_or_else(|e| panic!("the {end}'s close on {device} (srq {srq}): {e}"))
        };
        if device == support::iwarp::SIW_DEVICE {
            // On iWARP a close waits for the peer's: both ends close at once.
            let server = thread::spawn(move || server.close());
            closed("client", client.close());
            closed("server", server.join().unwrap());
        } else {
            // The client closes first, then the server, the client's DISCONNECT unread.
            closed("client", client.close());
            closed("server", server.close());
        }
    }
    regions
}

/// On siw0 the message words of every connection land in one registration of the shared
/// receive queue: each connection end registers one region less (its message words), and
/// the queue adds one.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn siw_sockets_post_receives_on_the_shared_receive_queue() {
    let _ = support::iwarp::open_siw0();
    let with = sockets_on(support::iwarp::SIW_DEVICE, true);
    let without = sockets_on(support::iwarp::SIW_DEVICE, false);
    println!("siw0, {SOCKETS} pairs: {with} regions with the SRQ, {without} without");
    assert_eq!(with + 2 * SOCKETS as u64, without + 1);
    // The queue went with the last connection: a second round makes it again.
    let again = sockets_on(support::iwarp::SIW_DEVICE, true);
    assert_eq!(again, with);
}

/// On rxe0 (write-with-immediate mode: receives without a buffer) the connections work on
/// the shared receive queue, with the regions they hold without it.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rxe_sockets_post_receives_on_the_shared_receive_queue() {
    let _ = support::rxe::open_rxe0();
    let without = sockets_on(support::rxe::DEVICE, false);
    let with = sockets_on(support::rxe::DEVICE, true);
    assert_eq!(with, without);
}
