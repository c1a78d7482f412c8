//! The connection manager against the real kernel rdma_cm on rxe0. Runs only in the VM
//! (`tests/vm/run.sh`, which runs these with `--ignored --test-threads=1`); each test panics
//! when rxe0 or the VM's address is missing.

mod vm_support;

use rdmasock::cm::{CmEvent, CmId, ConnectionParameters, Error, EventChannel, RejectReason};
use rdmasock::verbs::{
    AccessFlags, CompletionQueue, MemoryRegion, ProtectionDomain, QpInitAttributes, QpNumber,
    QpState, QueuePair, RecvRequest, SendOp, SendRequest, WcStatus, WorkCompletion,
};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};
use vm_support::{device_ip, sh};

const T: Duration = Duration::from_secs(10);

fn at(ip: IpAddr, port: u16) -> SocketAddr {
    SocketAddr::new(ip, port)
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn resolve_maps_to_rxe0() {
    let ip = device_ip("rxe0");
    let channel = EventChannel::open().expect("open rdma_cm");
    let id = CmId::new(&channel).expect("create id");
    let dst = at(ip, 7101);
    id.resolve(None, dst, T).expect("resolve addr and route");
    let info = id.query_addr().expect("query addr");
    assert_eq!(info.peer, Some(dst));
    assert_eq!(info.local.map(|a| a.ip()), Some(ip));
    assert_eq!(info.port_num, 1);
    let guid = info
        .node_guid
        .expect("bound to a device after ADDR_RESOLVED");
    let device = id.device().expect("device by node GUID");
    assert_eq!(device.name, "rxe0");
    assert_eq!(device.node_guid, guid);
    let route = id.query_route().expect("query route");
    assert!(route.num_paths >= 1, "{route:?}");
    assert_eq!(route.sgid.to_string(), format!("::ffff:{ip}"));
    assert_eq!(route.peer, Some(dst));
    // ADDR_RESOLVED and ROUTE_RESOLVED, counted on both sides of the ABI.
    assert_eq!(id.events_delivered(), 2);
    assert_eq!(id.destroy().expect("destroy"), 2);
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn channel_is_nonblocking_and_pollable() {
    let ip = device_ip("rxe0");
    let channel = EventChannel::open().expect("open rdma_cm");
    assert!(channel.try_get_event().expect("get event").is_none());
    let id = CmId::new(&channel).expect("create id");
    id.resolve_addr(None, at(ip, 7102), T)
        .expect("resolve addr");
    let mut fds = [nix::poll::PollFd::new(
        channel.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let n = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(10_000u16)).expect("poll");
    assert_eq!(n, 1, "the channel turns readable with ADDR_RESOLVED");
    let ev = channel
        .try_get_event()
        .expect("get event")
        .expect("an event");
    assert_eq!(ev.id, id.token());
    assert!(matches!(ev.event, CmEvent::AddrResolved), "{}", ev.event);
    assert!(channel.try_get_event().expect("get event").is_none());
    assert!(channel
        .get_event(Some(Duration::from_millis(50)))
        .expect("wait")
        .is_none());
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn loopback_address_is_on_no_rdma_device() {
    let ip = device_ip("rxe0");
    let channel = EventChannel::open().expect("open rdma_cm");
    let id = CmId::new(&channel).expect("create id");
    let err = id
        .resolve(None, "127.0.0.1:7103".parse().unwrap(), T)
        .expect_err("127.0.0.1 has no RDMA device");
    let text = err.to_string();
    eprintln!("error text: {text}");
    assert!(matches!(err, Error::NoRdmaDevice { .. }), "{text}");
    assert!(text.contains("127.0.0.1 is on no RDMA device"), "{text}");
    assert!(text.contains(&format!("rxe0 (netdev eth0: {ip}")), "{text}");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn dummy_netdev_address_is_on_no_rdma_device() {
    device_ip("rxe0");
    sh(
        "ip link show cmdummy0 >/dev/null 2>&1 || { ip link add cmdummy0 type dummy && \
        ip addr add 10.98.7.1/24 dev cmdummy0 && ip link set cmdummy0 up; }",
    );
    let channel = EventChannel::open().expect("open rdma_cm");
    let id = CmId::new(&channel).expect("create id");
    let err = id
        .resolve(None, "10.98.7.1:7104".parse().unwrap(), T)
        .expect_err("cmdummy0 has no RDMA device");
    let text = err.to_string();
    eprintln!("error text: {text}");
    assert!(matches!(err, Error::NoRdmaDevice { .. }), "{text}");
    assert!(text.contains("10.98.7.1 is on no RDMA device"), "{text}");
    assert!(
        text.contains("10.98.7.1 is on netdev cmdummy0, which has none"),
        "{text}"
    );
    assert!(text.contains("rxe0 (netdev eth0: "), "{text}");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn unanswered_address_times_out_with_the_address() {
    device_ip("rxe0");
    let channel = EventChannel::open().expect("open rdma_cm");
    let id = CmId::new(&channel).expect("create id");
    // On eth0's subnet, but nobody there answers ARP.
    let err = id
        .resolve(
            None,
            "10.99.0.77:7105".parse().unwrap(),
            Duration::from_millis(1500),
        )
        .expect_err("nobody has 10.99.0.77");
    let text = err.to_string();
    eprintln!("error text: {text}");
    assert!(text.contains("10.99.0.77"), "{text}");
    assert!(
        matches!(
            err,
            Error::AddressResolution { .. } | Error::TimedOut { .. }
        ),
        "{text}"
    );
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn connect_without_listener_is_refused() {
    let ip = device_ip("rxe0");
    let channel = EventChannel::open().expect("open rdma_cm");
    let id = CmId::new(&channel).expect("create id");
    let dst = at(ip, 7106);
    id.resolve(None, dst, T).expect("resolve");
    let err = id
        .connect_blocking(None, &ConnectionParameters::default(), T)
        .expect_err("nothing listens on 7106");
    let text = err.to_string();
    eprintln!("error text: {text}");
    match &err {
        Error::ConnectionRefused { addr, reason } => {
            assert_eq!(*addr, dst);
            assert!(reason.is_no_listener(), "{reason}");
        }
        other => panic!("expected ConnectionRefused, got {other}"),
    }
    assert!(
        text.contains("connection to 10.99.0.2:7106 refused"),
        "{text}"
    );
    assert!(std::io::Error::from(err).kind() == std::io::ErrorKind::ConnectionRefused);
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn private_data_over_56_bytes_is_refused_before_connect() {
    let ip = device_ip("rxe0");
    let channel = EventChannel::open().expect("open rdma_cm");
    let id = CmId::new(&channel).expect("create id");
    id.resolve(None, at(ip, 7107), T).expect("resolve");
    let param = ConnectionParameters {
        private_data: vec![1; 57],
        ..Default::default()
    };
    match id.connect(&param) {
        Err(Error::PrivateDataTooLong {
            len: 57, max: 56, ..
        }) => {}
        other => panic!("expected PrivateDataTooLong, got {other:?}"),
    }
}

/// A listener on `addr` in a thread: takes one request, hands its private data back, and
/// either accepts (replying with `reply`) and waits for DISCONNECTED, or rejects with `reply`.
fn serve_once(
    addr: SocketAddr,
    reply: &'static [u8],
    accept: bool,
) -> (mpsc::Receiver<()>, thread::JoinHandle<Vec<u8>>) {
    let (ready_tx, ready_rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let channel = EventChannel::open().expect("open rdma_cm");
        let listener = CmId::new(&channel).expect("create listener");
        listener.bind(addr).expect("bind");
        listener.listen(8).expect("listen");
        ready_tx.send(()).expect("test alive");
        let request = listener.get_request(T).expect("CONNECT_REQUEST");
        assert_eq!(request.id.local_addr().expect("query"), Some(addr));
        assert_eq!(request.id.device().expect("device").name, "rxe0");
        let got = request.param.private_data.clone();
        // Give the connection a channel of its own (MIGRATE_ID), as a server with one event
        // loop source per connection does; its events follow it there.
        let own = EventChannel::open().expect("open rdma_cm");
        let mut id = request.id;
        id.migrate(&own).expect("MIGRATE_ID");
        assert_eq!(channel.id_count(), 1, "only the listener stays");
        let request = rdmasock::cm::ConnectRequest {
            id,
            param: request.param,
        };
        if accept {
            let param = ConnectionParameters {
                private_data: reply.to_vec(),
                ..Default::default()
            };
            request
                .id
                .accept_blocking(None, &param, T)
                .expect("ESTABLISHED");
            request.id.wait_disconnected(None, T).expect("DISCONNECTED");
        } else {
            request.id.reject(reply).expect("reject");
        }
        got
    });
    (ready_rx, handle)
}

fn connect_round_trip(addr: SocketAddr) {
    let (ready, server) = serve_once(addr, b"server hello", true);
    ready.recv().expect("server listening");
    let channel = EventChannel::open().expect("open rdma_cm");
    let id = CmId::new(&channel).expect("create id");
    id.resolve(None, addr, T).expect("resolve");
    let param = ConnectionParameters {
        qp_num: QpNumber(0x00c0_0001),
        private_data: b"client hello".to_vec(),
        ..Default::default()
    };
    let reply = id.connect_blocking(None, &param, T).expect("connect");
    assert!(reply.private_data.starts_with(b"server hello"), "{reply:?}");
    assert_eq!(id.peer_addr().expect("query"), Some(addr));
    id.disconnect_blocking(None, T).expect("DISCONNECTED");
    let got = server.join().expect("server thread");
    // IB/RoCE: the REQ receiver always sees 56 bytes, zero padded.
    assert_eq!(got.len(), 56);
    assert!(got.starts_with(b"client hello"));
    assert!(got[12..].iter().all(|&b| b == 0));
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn listener_and_connector_establish_with_private_data_both_ways() {
    connect_round_trip(at(device_ip("rxe0"), 7108));
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn ipv6_listener_and_connector_establish() {
    device_ip("rxe0");
    let ip = vm_support::env_ip("RDMA_VM_RXE_IP6");
    assert!(ip.is_ipv6(), "{ip}");
    connect_round_trip(at(ip, 7109));
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn reject_carries_private_data() {
    let addr = at(device_ip("rxe0"), 7110);
    let (ready, server) = serve_once(addr, b"go away", false);
    ready.recv().expect("server listening");
    let channel = EventChannel::open().expect("open rdma_cm");
    let id = CmId::new(&channel).expect("create id");
    id.resolve(None, addr, T).expect("resolve");
    let err = id
        .connect_blocking(None, &ConnectionParameters::default(), T)
        .expect_err("the server rejects");
    match &err {
        Error::Rejected {
            addr: a,
            reason,
            private_data,
        } => {
            assert_eq!(*a, addr);
            assert_eq!(*reason, RejectReason::Ib(28), "consumer defined");
            assert!(private_data.starts_with(b"go away"), "{private_data:?}");
        }
        other => panic!("expected Rejected, got {other}"),
    }
    server.join().expect("server thread");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn thousand_create_destroy_cycles_leak_no_fd() {
    let ip = device_ip("rxe0");
    let before = open_fds();
    let shared = EventChannel::open().expect("open rdma_cm");
    for i in 0..1000u32 {
        let channel = EventChannel::open().expect("open rdma_cm");
        let id = CmId::new(&channel).expect("create id");
        id.bind(at(ip, 0)).expect("bind ephemeral");
        assert_eq!(id.destroy().expect("destroy"), 0, "cycle {i}");
        let id = CmId::new(&shared).expect("create id on the shared channel");
        drop(id);
    }
    assert_eq!(shared.id_count(), 0);
    drop(shared);
    assert_eq!(open_fds(), before, "fds leaked over 1000 cycles");
}

/// PD, MR, CQ and QP on the cm id's device.
struct Endpoint {
    _pd: ProtectionDomain,
    mr: MemoryRegion,
    cq: CompletionQueue,
    qp: QueuePair,
}

impl Endpoint {
    fn new(id: &CmId) -> Endpoint {
        let device = id.device().expect("device of the id");
        let context = rdmasock::open_device(Some(&device.name)).expect("open device");
        let pd = context.alloc_pd().expect("alloc PD");
        let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).expect("reg MR");
        let cq = context.create_cq(16, None).expect("create CQ");
        let qp = pd
            .create_qp(&QpInitAttributes::default(), &cq, &cq)
            .expect("create QP");
        id.init_qp(&qp).expect("INIT via INIT_QP_ATTR");
        assert_eq!(qp.state(), QpState::Init);
        let sg = [mr.slice(2048, 2048).expect("slice")];
        qp.post_recv(&[RecvRequest {
            wr_id: 2,
            sg_list: &sg,
        }])
        .expect("post recv");
        Endpoint {
            _pd: pd,
            mr,
            cq,
            qp,
        }
    }

    fn send(&self, msg: &[u8]) {
        self.mr.write_at(0, msg).expect("write");
        let sg = [self.mr.slice(0, msg.len()).expect("slice")];
        self.qp
            .post_send(&[SendRequest::new(1, SendOp::Send, &sg)])
            .expect("post send");
    }

    /// Waits for the send (wr 1) and receive (wr 2) completions; returns the message.
    fn complete(&self) -> Vec<u8> {
        let deadline = Instant::now() + T;
        let mut wc = [WorkCompletion::default(), WorkCompletion::default()];
        let (mut sent, mut received) = (false, None);
        while !(sent && received.is_some()) {
            assert!(Instant::now() < deadline, "no completions within {T:?}");
            for c in self.cq.poll(&mut wc).expect("poll CQ") {
                assert_eq!(WcStatus::from_raw(c.status), WcStatus::Success, "{c:?}");
                match c.wr_id {
                    1 => sent = true,
                    2 => received = Some(c.byte_len as usize),
                    other => panic!("unexpected wr_id {other}"),
                }
            }
        }
        let mut buf = vec![0; received.expect("received")];
        self.mr.read_at(2048, &mut buf).expect("read");
        buf
    }
}

/// A listener thread and a connector, each with a QP on `device`, connect through the CM
/// with private data both ways, exchange one message each way, and disconnect.
fn exchange_over_queue_pairs(addr: SocketAddr, device: &'static str) {
    let (ready_tx, ready_rx) = mpsc::channel();
    let server = thread::spawn(move || {
        let channel = EventChannel::open().expect("open rdma_cm");
        let listener = CmId::new(&channel).expect("create listener");
        listener.bind(addr).expect("bind");
        listener.listen(1).expect("listen");
        ready_tx.send(()).expect("test alive");
        let request = listener.get_request(T).expect("CONNECT_REQUEST");
        assert!(request.param.private_data.starts_with(b"client"));
        assert_eq!(request.id.device().expect("device").name, device);
        let ep = Endpoint::new(&request.id);
        let param = ConnectionParameters {
            private_data: b"server".to_vec(),
            ..Default::default()
        };
        request
            .id
            .accept_blocking(Some(&ep.qp), &param, T)
            .expect("ESTABLISHED");
        assert_eq!(ep.qp.state(), QpState::ReadyToSend);
        ep.send(b"message from the server");
        let got = ep.complete();
        request
            .id
            .wait_disconnected(Some(&ep.qp), T)
            .expect("DISCONNECTED");
        (got, request.param.private_data)
    });
    ready_rx.recv().expect("server listening");
    let channel = EventChannel::open().expect("open rdma_cm");
    let id = CmId::new(&channel).expect("create id");
    id.resolve(None, addr, T).expect("resolve");
    assert_eq!(id.device().expect("device").name, device);
    let ep = Endpoint::new(&id);
    let param = ConnectionParameters {
        private_data: b"client".to_vec(),
        ..Default::default()
    };
    let reply = id
        .connect_blocking(Some(&ep.qp), &param, T)
        .expect("connect");
    assert!(reply.private_data.starts_with(b"server"));
    assert_eq!(ep.qp.state(), QpState::ReadyToSend);
    ep.send(b"message from the client");
    assert_eq!(ep.complete(), b"message from the server");
    id.disconnect_blocking(Some(&ep.qp), T)
        .expect("DISCONNECTED");
    let (got, request_data) = server.join().expect("server thread");
    assert_eq!(got, b"message from the client");
    if device.starts_with("siw") {
        // iWARP (MPA) keeps private data lengths; IB/RoCE pads a REQ's to 56 bytes.
        assert_eq!(request_data, b"client");
        assert_eq!(reply.private_data, b"server");
    } else {
        assert_eq!(request_data.len(), 56);
    }
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn queue_pairs_connect_and_exchange_a_message_each_way() {
    exchange_over_queue_pairs(at(device_ip("rxe0"), 7111), "rxe0");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn iwarp_queue_pairs_connect_and_exchange_a_message_each_way() {
    exchange_over_queue_pairs(at(device_ip("siw0"), 7112), "siw0");
}

/// On rxe, a connection asked for with librdmacm's default retry count (7, which rxe takes
/// as "retry for ever") gets QPs that retry 6 times on both sides, so that a vanished peer
/// fails their sends (`RXE_MAX_RETRY_COUNT`); the RNR retry count keeps its 7 (infinite by
/// the IBA too).
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rxe_queue_pairs_retry_a_finite_number_of_times() {
    use rdmasock::verbs::qp_attr::QpAttrMask;
    let pair = vm_support::CmPair::connect(device_ip("rxe0"), &Default::default());
    for (side, qp) in [("active", &pair.active.qp), ("passive", &pair.passive.qp)] {
        let attr = qp
            .query(QpAttrMask::RETRY_CNT | QpAttrMask::RNR_RETRY)
            .expect("QUERY_QP");
        assert_eq!(
            attr.retry_cnt,
            rdmasock::cm::qp::RXE_MAX_RETRY_COUNT,
            "{side} QP's retry count"
        );
        assert_eq!(attr.rnr_retry, 7, "{side} QP's RNR retry count");
    }
    pair.disconnect();
}

/// Every error event a connect or resolve can meet becomes the error it means, naming the
/// peer's address (ADDR_ERROR, ROUTE_ERROR, UNREACHABLE, CONNECT_ERROR, REJECTED both ways,
/// DEVICE_REMOVAL) or the event that came instead of the one awaited. All but ROUTE_ERROR
/// also arrive for real elsewhere: UNREACHABLE, CONNECT_ERROR and an iWARP REJECTED from
/// TCP services that are not RDMA listeners on siw0 (vm_siw_services), the others in
/// vm_socket and vm_device_removal.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn error_events_become_errors_naming_the_address() {
    let ip = device_ip("rxe0");
    let channel = EventChannel::open().unwrap();
    let id = CmId::new(&channel).unwrap();
    let peer = at(ip, 7111);
    id.resolve(None, peer, T)
        .expect("resolve rxe0's own address");
    let addr = peer.to_string();
    let cases: Vec<(CmEvent, std::io::ErrorKind, &str)> = vec![
        (
            CmEvent::AddrError { status: -110 },
            std::io::ErrorKind::TimedOut,
            "address",
        ),
        (
            CmEvent::RouteError { status: -113 },
            std::io::ErrorKind::HostUnreachable,
            "route",
        ),
        (
            CmEvent::Unreachable { status: -110 },
            std::io::ErrorKind::TimedOut,
            "unreachable",
        ),
        (
            CmEvent::ConnectError { status: -22 },
            std::io::ErrorKind::ConnectionAborted,
            "connect",
        ),
        (
            CmEvent::Rejected {
                reason: RejectReason::Ib(8),
                private_data: Vec::new(),
            },
            std::io::ErrorKind::ConnectionRefused,
            "refused",
        ),
        (
            CmEvent::Rejected {
                reason: RejectReason::Ib(28),
                private_data: b"busy".to_vec(),
            },
            std::io::ErrorKind::ConnectionRefused,
            "busy",
        ),
    ];
    for (event, kind, word) in cases {
        let name = event.name();
        let err = id.event_error("CONNECT_RESPONSE", event);
        let text = err.to_string();
        eprintln!("{name}: {text}");
        assert!(text.contains(&addr), "{name}: the address is named: {text}");
        assert!(
            text.to_lowercase().contains(word),
            "{name}: says {word:?}: {text}"
        );
        assert_eq!(std::io::Error::from(err).kind(), kind, "{name}: {text}");
    }
    let err = id.event_error("CONNECT_RESPONSE", CmEvent::DeviceRemoval);
    assert!(matches!(err, Error::DeviceRemoved { .. }), "{err}");
    let err = id.event_error("CONNECT_RESPONSE", CmEvent::TimewaitExit);
    let text = err.to_string();
    assert!(matches!(err, Error::UnexpectedEvent { .. }), "{text}");
    assert!(
        text.contains("CONNECT_RESPONSE") && text.contains("TIMEWAIT_EXIT"),
        "{text}"
    );
}
