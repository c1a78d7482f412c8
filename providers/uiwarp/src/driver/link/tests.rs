//! The link's tests: writes to a shut or reset TCP socket, and one `sendmsg` for a large post.

use super::*;
use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};

/// Whether SIGPIPE is pending for this thread (`SigPnd` of /proc/thread-self/status).
fn sigpipe_pending() -> bool {
    let status = std::fs::read_to_string("/proc/thread-self/status").expect("proc status");
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigPnd:"))
        .map(|hex| u64::from_str_radix(hex.trim(), 16).expect("hex mask"))
        .expect("a SigPnd line");
    mask & (1 << (Signal::SIGPIPE as u64 - 1)) != 0
}

#[test]
fn a_write_to_a_shut_socket_fails_with_epipe_and_raises_no_sigpipe() {
    // Blocked, a SIGPIPE stays pending where the test can see it (the test harness
    // ignores it, and an ignored signal is dropped at once).
    let mut pipe = SigSet::empty();
    pipe.add(Signal::SIGPIPE);
    let mut old = SigSet::empty();
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&pipe), Some(&mut old)).unwrap();
    assert!(!sigpipe_pending(), "SIGPIPE pending before the test");

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (_server, _) = listener.accept().unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    let socket = TcpStream::from_std(client);
    let mut out = TxQueue::new();
    out.bytes().extend_from_slice(b"frames after the FIN");
    let result = write_pieces::<FEW_SLICES>(&socket, &mut out);
    let raised = sigpipe_pending();
    // Unblocked under the harness's SIG_IGN, a pending SIGPIPE is discarded.
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None).unwrap();

    let e = result.expect_err("a write after shutdown(Write) fails");
    assert_eq!(e.raw_os_error(), Some(libc::EPIPE), "{e}");
    assert!(!raised, "the failed write raised SIGPIPE");
}

/// A connection whose peer sent a message and closed before we wrote: our write is
/// reset (EPIPE) while the message still waits in our socket. The message must reach
/// its receive, as a successful completion, before the connection fails.
#[test]
fn a_write_reset_after_the_peers_last_message_still_delivers_it() {
    use crate::protocol::{
        connected_pair, Config, LocalSegment, RecvWork, RegionTable, Segments, SendOperation,
        SendWork, SmallPayload, WorkQueue,
    };
    use rdmasock_verbs::{AccessFlags, LocalKey, RegisteredMemory, WcStatus};
    use std::io::Write;
    use std::sync::Arc;

    let mut ours_table = RegionTable::new();
    let receive = Arc::new(RegisteredMemory::allocate(64).expect("64 B"));
    let key = ours_table.register_range(receive.clone(), 0, 64, AccessFlags::LOCAL_WRITE);
    let peer_table = RegionTable::new();
    let (mut ours, mut peer) = connected_pair(Config::default(), &ours_table, &peer_table);
    let mut segments = Segments::new();
    segments.push(LocalSegment {
        addr: receive.addr(),
        length: 64,
        lkey: LocalKey(key),
    });
    ours.post_recv(RecvWork { wr_id: 7, segments })
        .expect("a receive");
    let send = |wr_id: u64, bytes: &[u8]| SendWork {
        wr_id,
        op: SendOperation::Send {
            solicited: false,
            invalidate: None,
        },
        segments: Segments::new(),
        small: SmallPayload::new(bytes),
        signaled: true,
        fence: false,
    };
    let last_words = b"DISCONNECT";
    peer.post_send(send(1, last_words))
        .expect("the peer's send");
    let mut wire = Vec::new();
    peer.poll_transmit(&peer_table, &mut wire, usize::MAX);
    assert!(!wire.is_empty(), "the peer's SEND framed");

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    // The peer's last message and its FIN, then nothing: the socket is gone, and what
    // we write next is answered with a reset.
    server.write_all(&wire).unwrap();
    drop(server);
    drop(listener);
    client.set_nonblocking(true).unwrap();
    let mut link = Link::new(ours, TcpStream::from_std(client), Token(0));

    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wr_id = 100;
    while link.io_error.is_none() {
        assert!(Instant::now() < deadline, "no write failed within 10 s");
        link.conn.post_send(send(wr_id, b"late")).expect("our send");
        wr_id += 1;
        link.flush(&ours_table);
        std::thread::sleep(Duration::from_millis(5));
    }
    let e = link.io_error.as_ref().unwrap();
    assert!(
        matches!(e.raw_os_error(), Some(libc::EPIPE | libc::ECONNRESET)),
        "the write failed with {e}"
    );
    let mut received = None;
    while let Some(c) = link.conn.poll_completion() {
        if c.queue == WorkQueue::Receive {
            received.get_or_insert(c.completion);
        }
    }
    let received = received.expect("the receive completed");
    assert_eq!(received.wr_id, 7);
    assert_eq!(received.status(), WcStatus::Success, "{received:?}");
    assert_eq!(received.byte_len as usize, last_words.len());
    let mut got = [0u8; 10];
    receive.read_at(0, &mut got).unwrap();
    assert_eq!(&got, last_words);
}

/// A 512 KiB message from registered memory (what a stream's write posts at a time when
/// the reader frees half its ring) is framed whole and goes to TCP in one `sendmsg`: a
/// loopback socket's send buffer, autotuned for 64 KiB segments, has room for it.
#[test]
fn a_half_mebibyte_send_goes_to_tcp_in_one_write() {
    use crate::protocol::{
        connected_pair, Config, LocalSegment, RegionTable, Segments, SendOperation, SendWork,
    };
    use rdmasock_verbs::{AccessFlags, LocalKey, RegisteredMemory};

    const LEN: usize = 512 << 10;
    let mut ours_table = RegionTable::new();
    let payload = Arc::new(RegisteredMemory::allocate(LEN).expect("512 KiB"));
    let key = ours_table.register_range(payload.clone(), 0, LEN, AccessFlags::LOCAL_WRITE);
    let peer_table = RegionTable::new();
    // Loopback's MSS: FPDUs of up to 64 KiB, as a stream on loopback sends them.
    let config = Config {
        mulpdu: Config::mulpdu_for_mss(65483),
        ..Config::default()
    };
    let (mut ours, _peer) = connected_pair(config, &ours_table, &peer_table);
    let mut segments = Segments::new();
    segments.push(LocalSegment {
        addr: payload.addr(),
        length: LEN as u32,
        lkey: LocalKey(key),
    });
    ours.post_send(SendWork {
        wr_id: 1,
        op: SendOperation::Send {
            solicited: false,
            invalidate: None,
        },
        segments,
        small: None,
        signaled: true,
        fence: false,
    })
    .expect("a 512 KiB send");

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    client.set_nonblocking(true).unwrap();
    let mut link = Link::new(ours, TcpStream::from_std(client), Token(0));
    assert!(link.flush(&ours_table), "nothing written");
    assert!(
        link.out.is_empty(),
        "{} bytes left unwritten",
        link.out.len()
    );
    assert_eq!(link.writes, 1, "the frames took {} writes", link.writes);
    drop(server);
}
