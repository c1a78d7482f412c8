//! `rdmasock::census` counts an iomap window as one registered region of its length, from
//! `iomap` until its connection closes (the window stays registered after an unmap, since a
//! write the peer posted before it may still land), and the send-area pool's chunks once
//! each, however many connections share them, on this host's userspace provider. A binary
//! of its own, whose tests take turns: the census is process-wide.
use rdmasock::{census, RdmaListener, RdmaSocket, SocketOptions};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Held by each test: one at a time counts.
static TURN: Mutex<()> = Mutex::new(());

const WINDOW: usize = 64 * 1024;

#[test]
fn an_iomap_window_counts_as_a_region_until_its_connection_closes() {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let opts = SocketOptions::builder().iomap_size(4).build().unwrap();
    let listener = RdmaListener::bind_with("127.0.0.1:0", &opts).expect("bind on loopback");
    let addr = listener.local_addr().unwrap();
    let client = std::thread::spawn(move || RdmaSocket::connect_with(addr, &opts));
    let (server, _) = listener.accept().expect("accept");
    let client = client.join().unwrap().expect("connect");
    let before = census();
    assert_eq!(before.connections, 2, "{before:?}");

    let window = server.iomap(WINDOW, None).expect("iomap");
    let mapped = census();
    assert_eq!(mapped.regions, before.regions + 1, "{mapped:?}");
    assert_eq!(
        mapped.registered_bytes,
        before.registered_bytes + WINDOW as u64,
        "{mapped:?}"
    );

    window.unmap().expect("unmap");
    assert_eq!(census(), mapped, "still registered after the unmap");

    drop((server, client, listener));
    let end = Instant::now() + Duration::from_secs(30);
    while census() != rdmasock::Census::default() {
        assert!(Instant::now() < end, "left after the close: {:?}", census());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Connections held at once by the pool test (both ends in this process).
const PAIRS: usize = 16;

#[test]
fn send_areas_share_a_few_pool_chunks_which_go_with_the_last_connection() {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let listener = RdmaListener::bind("127.0.0.1:0").expect("bind on loopback");
    let addr = listener.local_addr().unwrap();
    let client = std::thread::spawn(move || {
        (0..PAIRS)
            .map(|_| RdmaSocket::connect(addr).expect("connect"))
            .collect::<Vec<_>>()
    });
    let servers: Vec<RdmaSocket> = (0..PAIRS)
        .map(|_| listener.accept().expect("accept").0)
        .collect();
    let clients = client.join().unwrap();
    let held = census();
    let connections = 2 * PAIRS as u64;
    assert_eq!(held.connections, connections, "{held:?}");
    // Each connection registers its receive ring, target list and (iWARP) message words;
    // the send areas are slices of the pool's chunks, each counted once.
    let chunks = held.regions - 3 * connections;
    assert!(
        (1..=8).contains(&chunks),
        "{chunks} regions besides the connections' own 3 each: {held:?}"
    );
    drop((servers, clients, listener));
    let end = Instant::now() + Duration::from_secs(30);
    while census() != rdmasock::Census::default() {
        assert!(Instant::now() < end, "left after the close: {:?}", census());
        std::thread::sleep(Duration::from_millis(10));
    }
}
