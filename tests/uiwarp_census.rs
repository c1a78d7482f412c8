//! `rdmasock::census` counts an iomap window as one registered region of its length, from
//! `iomap` until its connection closes (the window stays registered after an unmap, since a
//! write the peer posted before it may still land), on this host's userspace provider. A
//! binary of its own: the census is process-wide.
use rdmasock::{census, RdmaListener, RdmaSocket, SocketOptions};
use std::time::{Duration, Instant};

const WINDOW: usize = 64 * 1024;

#[test]
fn an_iomap_window_counts_as_a_region_until_its_connection_closes() {
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
