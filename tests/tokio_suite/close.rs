//! Ends of `RdmaStream`s: half-close, a peer that dies, drops that must not block the
//! runtime, timeouts and cancelled connects that must leave nothing behind.

use super::{current_thread, fds_settle, socket_support, Fixture};
use rdmasock::tokio::RdmaStream;
use rdmasock::{RdmaSocket, SocketOptions};
use std::future::Future;
use std::io::{ErrorKind, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `shutdown().await` is a half-close: the client's end-of-stream reaches the server after
/// its request, the server still answers, and the client reads the answer to its end.
pub(crate) fn half_close_client_first(f: &Fixture) {
    current_thread(async {
        let (mut server, mut client) = f.pair().await;
        client.write_all(b"request").await.unwrap();
        client.shutdown().await.expect("half-close");
        let e = client
            .write_all(b"late")
            .await
            .expect_err("writing after shutdown");
        assert_eq!(e.kind(), ErrorKind::BrokenPipe, "{e}");
        let mut request = Vec::new();
        server.read_to_end(&mut request).await.unwrap();
        assert_eq!(request, b"request");
        server.write_all(b"answer after your EOF").await.unwrap();
        server.shutdown().await.unwrap();
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"answer after your EOF");
    });
}

/// The server half-closes first; the client still sends after reading the end.
pub(crate) fn half_close_server_first(f: &Fixture) {
    current_thread(async {
        let (mut server, mut client) = f.pair().await;
        server.write_all(b"greeting").await.unwrap();
        server.shutdown().await.unwrap();
        let mut greeting = Vec::new();
        client.read_to_end(&mut greeting).await.unwrap();
        assert_eq!(greeting, b"greeting");
        client.write_all(b"reply").await.unwrap();
        client.shutdown().await.unwrap();
        let mut reply = Vec::new();
        server.read_to_end(&mut reply).await.unwrap();
        assert_eq!(reply, b"reply");
    });
}

/// A peer that drops its socket (no shutdown first): the stream reads what it sent, then
/// the end.
pub(crate) fn a_peer_that_drops_its_socket_reads_as_the_end(f: &Fixture) {
    current_thread(async {
        let (mut server, client) = f.pair().await;
        let mut client = client.into_std().unwrap();
        client.set_nonblocking(false).unwrap();
        tokio::task::spawn_blocking(move || {
            client.write_all(b"last words").unwrap();
            drop(client);
        })
        .await
        .unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), server.read_to_end(&mut got))
            .await
            .expect("the end comes")
            .expect("read");
        assert_eq!(got, b"last words");
    });
}

const VANISH_ADDR: &str = "RDMASOCK_TOKIO_VANISH_ADDR";

/// A peer process killed mid-connection: a stream with a keepalive reads an error or the
/// end within 30 s, and writes fail after.
pub(crate) fn a_killed_peer_ends_reads_under_tokio(f: &Fixture) {
    if let Ok(addr) = std::env::var(VANISH_ADDR) {
        vanishing_peer(&addr);
    }
    current_thread(async {
        let (l, addr) = f.listener().await;
        let name = f.test_name("a_killed_peer_ends_reads_under_tokio");
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--include-ignored", "--exact", &name, "--nocapture"])
            .env(VANISH_ADDR, addr.to_string())
            .spawn()
            .expect("spawn the child");
        let (mut s, _) = l.accept().await.expect("accept the child");
        s.set_keepalive(Some(Duration::from_millis(500))).unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await.unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        let start = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(60), s.read(&mut b))
            .await
            .expect("the read ends within 60 s");
        let waited = start.elapsed();
        eprintln!("after the peer was killed: {r:?} within {waited:?}");
        assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
        assert!(waited < Duration::from_secs(30), "{waited:?}");
        let w = async {
            s.write_all(b"more").await?;
            s.flush().await
        };
        let w = tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .expect("the write ends");
        assert!(w.is_err(), "writes fail once the peer is gone: {w:?}");
    });
}

/// The child of [`a_killed_peer_ends_reads_under_tokio`]: connects, says hello and waits
/// to be killed (it never returns, so it never counts as a test passed).
fn vanishing_peer(addr: &str) -> ! {
    let mut c = RdmaSocket::connect(addr).expect("the child connects");
    c.write_all(b"h").unwrap();
    std::thread::sleep(Duration::from_secs(600));
    panic!("the vanishing peer was not killed within 600 s");
}

/// Dropping a stream whose peer takes nothing (its ring is full, and nobody calls it) does
/// not hold up the runtime's thread: the graceful close, which waits up to the close
/// timeout (2 s here) for the peer to take the queued bytes, runs on the blocking pool,
/// while a timer on the same current-thread runtime fires on time.
pub(crate) fn dropping_a_stream_never_blocks_the_runtime(f: &Fixture) {
    // The peer's ring is small, the client's send ring large: most of what the client
    // writes waits in its ring for room at the peer.
    let opts = SocketOptions::builder()
        .close_timeout(Duration::from_secs(2))
        .send_ring(1 << 20)
        .build()
        .unwrap();
    let peer_opts = SocketOptions::builder()
        .recv_ring(16 << 10)
        .build()
        .unwrap();
    let blocking = rdmasock::RdmaListener::bind_with(SocketAddr::new(f.ip, 0), &peer_opts).unwrap();
    let addr = blocking.local_addr().unwrap();
    let accepted = std::thread::spawn(move || blocking.accept().expect("accept").0);
    current_thread(async {
        let mut client = RdmaStream::connect_with(addr, &opts)
            .await
            .expect("connect");
        // The peer is a blocking socket nobody calls: it answers nothing of the close.
        let peer = tokio::task::spawn_blocking(move || accepted.join().unwrap())
            .await
            .unwrap();
        // More than the peer's ring holds: the close has queued bytes the peer cannot take.
        let chunk = vec![7u8; 64 << 10];
        let mut queued = 0;
        while let Ok(written) =
            tokio::time::timeout(Duration::from_millis(200), client.write(&chunk)).await
        {
            queued += written.expect("write");
        }
        eprintln!("{queued} bytes written and not read");
        let start = Instant::now();
        drop(client);
        let dropped_in = start.elapsed();
        tokio::time::sleep(Duration::from_millis(10)).await;
        let timer_in = start.elapsed();
        eprintln!("drop returned in {dropped_in:?}; a 10 ms timer fired after {timer_in:?}");
        assert!(dropped_in < Duration::from_millis(500), "{dropped_in:?}");
        assert!(timer_in < Duration::from_millis(700), "{timer_in:?}");
        drop(peer);
    });
}

/// `tokio::time::timeout` around a read that has nothing to read elapses, and the stream
/// goes on (the bytes sent after arrive whole); around a connect to an address that never
/// answers it elapses too, no poll of the connect waited, and the connect's fds are gone.
pub(crate) fn timeouts_around_reads_and_connects(f: &Fixture) {
    current_thread(async {
        let (mut server, mut client) = f.pair().await;
        let mut b = [0u8; 16];
        let r = tokio::time::timeout(Duration::from_millis(50), server.read(&mut b)).await;
        assert!(r.is_err(), "a read with nothing to read timed out: {r:?}");
        client.write_all(b"after the timeout").await.unwrap();
        let mut got = [0u8; 17];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"after the timeout");

        // An address that never answers: the connect waits until the timeout cancels it.
        let (hole, _keep) = f.black_hole();
        let before = socket_support::open_fds();
        let opts = SocketOptions::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        // Each poll of the connect is timed: none may hold the runtime's thread waiting. What
        // a poll spends off the CPU is what it waited (setting up the queue pair and its rings
        // is work, on the CPU: tens of milliseconds in a debug build, more under the VM's
        // emulation; a wait would last the connect timeout).
        let start = Instant::now();
        let (r, longest_wait) = {
            let mut connect = std::pin::pin!(RdmaStream::connect_with(hole, &opts));
            let mut longest_wait = Duration::ZERO;
            let timed = std::future::poll_fn(|cx| {
                let (wall, cpu) = (Instant::now(), thread_cpu_time());
                let r = connect.as_mut().poll(cx);
                let waited = wall.elapsed().saturating_sub(thread_cpu_time() - cpu);
                longest_wait = longest_wait.max(waited);
                r
            });
            let r = tokio::time::timeout(Duration::from_millis(200), timed).await;
            // The connect is dropped here, half-way.
            (r.map(|_| ()), longest_wait)
        };
        let elapsed = start.elapsed();
        eprintln!(
            "the connect to {hole} timed out after {elapsed:?}; its polls waited at most \
             {longest_wait:?}"
        );
        assert!(r.is_err(), "the connect timed out: {r:?}");
        assert!(
            longest_wait < Duration::from_secs(1),
            "a poll of the connect held the runtime's thread waiting for {longest_wait:?}"
        );
        assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
        let after = fds_settle(before, Duration::from_secs(10)).await;
        assert!(
            after <= before,
            "fds before the connect {before}, after {after}"
        );
    });
}

/// Connects cancelled at random points, many times, leave nothing behind: the process's
/// fds come back to what they were, and the listener still accepts.
pub(crate) fn cancelled_connects_leave_nothing_behind(f: &Fixture) {
    current_thread(async {
        let (l, addr) = f.listener().await;
        let accepts = tokio::spawn(async move {
            loop {
                match l.accept().await {
                    Ok((s, _)) => drop(s),
                    Err(e) => panic!("accept: {e}"),
                }
            }
        });
        // One connection first: whatever a first connection sets up for good (the
        // readiness thread, the runtime's pools) is in the count.
        drop(RdmaStream::connect(addr).await.expect("connect"));
        let before = fds_settle(0, Duration::from_millis(200)).await;
        let mut rng = socket_support::Rng(5);
        let (mut finished, mut cancelled) = (0, 0);
        for _ in 0..50 {
            match super::cancellable(&mut rng, RdmaStream::connect(addr)).await {
                Some(s) => {
                    drop(s.expect("connect"));
                    finished += 1;
                }
                None => cancelled += 1,
            }
        }
        eprintln!("{finished} connects finished, {cancelled} were cancelled");
        assert!(cancelled > 0, "some connects were cancelled");
        let after = fds_settle(before, Duration::from_secs(20)).await;
        assert!(after <= before, "fds before {before}, after {after}");
        let s = RdmaStream::connect(addr)
            .await
            .expect("the listener still accepts");
        drop(s);
        accepts.abort();
    });
}

/// The CPU time this thread has used.
fn thread_cpu_time() -> Duration {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .expect("the thread's CPU clock");
    Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
}
