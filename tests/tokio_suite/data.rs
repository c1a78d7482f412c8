//! Bytes through `RdmaStream`: many connections on one thread, large streams, codecs, a
//! blocking peer, readiness calls, splitting, and cancelled reads and writes.

use super::{current_thread, multi_thread, receive_random, send_random, Fixture};
use futures::{SinkExt, StreamExt};
use rdmasock::tokio::RdmaStream;
use rdmasock::{RdmaListener as BlockingListener, RdmaSocket};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::sync::Barrier;
use tokio_util::codec::{Framed, LinesCodec};

/// An echo server and 256 clients, all at once on one current-thread runtime: each client
/// writes its own message, the server echoes it, the client reads it back.
pub(crate) fn echo_256_concurrent_connections_on_a_current_thread_runtime(f: &Fixture) {
    let connections = f.concurrent_connections();
    // Every connect starts at once: the listen backlog holds them all, and the connect
    // timeout leaves room for one thread setting up both ends of them all (under the VM's
    // emulation each end's queue pair and rings take tens of milliseconds).
    let opts = rdmasock::SocketOptions::builder()
        .backlog(2 * connections as u32)
        .connect_timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    current_thread(async {
        let (l, addr) = f.listener_with(&opts).await;
        let threads_before = threads();
        let server = tokio::spawn(async move {
            let mut echoes = Vec::new();
            for _ in 0..connections {
                let (mut s, _) = l.accept().await.expect("accept");
                echoes.push(tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    loop {
                        let n = s.read(&mut buf).await.expect("server read");
                        if n == 0 {
                            break;
                        }
                        s.write_all(&buf[..n]).await.expect("server write");
                    }
                    s.shutdown().await.expect("server shutdown");
                }));
            }
            for e in echoes {
                e.await.expect("echo task");
            }
        });
        // The clients start their exchanges once all are connected, so that the threads
        // are counted with every stream open and none closing.
        let connected = Arc::new(Barrier::new(connections + 1));
        let go = Arc::new(Barrier::new(connections + 1));
        let clients: Vec<_> = (0..connections)
            .map(|i| {
                let opts = opts.clone();
                let (connected, go) = (connected.clone(), go.clone());
                tokio::spawn(async move {
                    let mut c = RdmaStream::connect_with(addr, &opts)
                        .await
                        .expect("connect");
                    connected.wait().await;
                    go.wait().await;
                    let message = format!("message {i} of many, {}", "x".repeat(i * 7));
                    c.write_all(message.as_bytes()).await.expect("client write");
                    c.shutdown().await.expect("client shutdown");
                    let mut back = String::new();
                    c.read_to_string(&mut back).await.expect("client read");
                    assert_eq!(back, message, "connection {i} got its own bytes back");
                })
            })
            .collect();
        connected.wait().await;
        // No thread per stream: the ones there are this runtime's, the readiness thread
        // and the provider's own (the userspace provider's engine).
        let threads_open = threads();
        eprintln!("threads: {threads_before} before, {threads_open} with {connections} streams");
        assert!(
            threads_open <= threads_before + 4,
            "{threads_open} threads with {connections} streams (before: {threads_before})"
        );
        go.wait().await;
        for c in clients {
            c.await.expect("client task");
        }
        server.await.expect("server task");
    });
}

/// 64 MiB each way at once, in random write and read sizes, checked by hash: each end's
/// owned halves in two tasks of a two-worker runtime.
pub(crate) fn sixty_four_mib_each_way_random_sizes_checked_by_hash(f: &Fixture) {
    let total = f.large_stream_bytes();
    let piece = f.max_piece();
    multi_thread(2, async {
        let (server, client) = f.pair().await;
        let start = Instant::now();
        let run = |s: RdmaStream, seed: u64| async move {
            let (r, w) = s.into_split();
            let writer = tokio::spawn(send_random(w, total, seed, piece));
            let (n, hash) = tokio::spawn(receive_random(r, seed * 31, piece))
                .await
                .expect("reader task");
            (writer.await.expect("writer task"), n, hash)
        };
        let (s, c) = tokio::join!(tokio::spawn(run(server, 1)), run(client, 2));
        let (s_sent, s_got, s_hash) = s.expect("server task");
        let (c_sent, c_got, c_hash) = c;
        let secs = start.elapsed().as_secs_f64();
        eprintln!("{total} bytes each way in {secs:.2} s");
        assert_eq!((s_got, c_got), (total, total), "every byte arrived");
        assert_eq!(c_hash, s_sent, "the client received what the server sent");
        assert_eq!(s_hash, c_sent, "the server received what the client sent");
    });
}

/// tokio_util's `Framed` with `LinesCodec` both ways.
pub(crate) fn framed_lines_both_ways(f: &Fixture) {
    current_thread(async {
        let (server, client) = f.pair().await;
        let server = tokio::spawn(async move {
            let mut lines = Framed::new(server, LinesCodec::new());
            while let Some(line) = lines.next().await {
                let line = line.expect("a line");
                lines.send(format!("echo: {line}")).await.expect("send");
            }
        });
        let mut lines = Framed::new(client, LinesCodec::new());
        for i in 0..100 {
            lines.send(format!("line {i}")).await.expect("send");
            let back = lines.next().await.expect("an answer").expect("a line");
            assert_eq!(back, format!("echo: line {i}"));
        }
        let mut client = lines.into_inner();
        client.shutdown().await.expect("shutdown");
        let mut rest = Vec::new();
        client
            .read_to_end(&mut rest)
            .await
            .expect("read to the end");
        assert!(rest.is_empty(), "{rest:?}");
        server.await.expect("server task");
    });
}

/// A tokio client against a blocking server, and a blocking client against a tokio
/// listener: the same protocol either way.
pub(crate) fn a_tokio_peer_against_a_blocking_socket(f: &Fixture) {
    let blocking = BlockingListener::bind(SocketAddr::new(f.ip, 0)).expect("bind");
    let addr = blocking.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = blocking.accept().expect("accept");
        let mut request = Vec::new();
        s.read_to_end(&mut request).expect("read");
        s.write_all(&request).expect("echo");
        s.write_all(b" (blocking)").expect("write");
    });
    current_thread(async {
        let mut c = RdmaStream::connect(addr).await.expect("connect");
        c.write_all(b"from tokio").await.unwrap();
        c.shutdown().await.unwrap();
        let mut back = String::new();
        c.read_to_string(&mut back).await.unwrap();
        assert_eq!(back, "from tokio (blocking)");
    });
    server.join().expect("blocking server");

    current_thread(async {
        let (l, addr) = f.listener().await;
        let client = std::thread::spawn(move || {
            let mut c = RdmaSocket::connect(addr).expect("blocking connect");
            c.write_all(b"from a thread").unwrap();
            c.shutdown(std::net::Shutdown::Write).unwrap();
            let mut back = String::new();
            c.read_to_string(&mut back).unwrap();
            back
        });
        let (mut s, peer) = l.accept().await.expect("accept");
        assert_eq!(peer, s.peer_addr().unwrap());
        let mut request = Vec::new();
        s.read_to_end(&mut request).await.unwrap();
        s.write_all(&request).await.unwrap();
        s.write_all(b" (tokio)").await.unwrap();
        s.shutdown().await.unwrap();
        let back = tokio::task::spawn_blocking(move || client.join().expect("blocking client"))
            .await
            .unwrap();
        assert_eq!(back, "from a thread (tokio)");
    });
}

/// `readable`, `try_read`, `peek`, `ready`, `writable`, `try_write`, and readiness that
/// follows a `WouldBlock`.
pub(crate) fn readiness_calls_peek_and_try_io(f: &Fixture) {
    current_thread(async {
        let (server, client) = f.pair().await;
        let mut buf = [0u8; 64];
        let e = server.try_read(&mut buf).expect_err("nothing was written");
        assert_eq!(e.kind(), ErrorKind::WouldBlock);
        // Readiness for the read that blocked must not come before the bytes do.
        let early = tokio::time::timeout(Duration::from_millis(100), server.readable()).await;
        assert!(early.is_err(), "readable before any byte came: {early:?}");
        client.writable().await.expect("writable");
        let ready = client.ready(Interest::WRITABLE).await.expect("ready");
        assert!(ready.is_writable(), "{ready:?}");
        assert_eq!(client.try_write(b"hello").expect("try_write"), 5);
        server.readable().await.expect("readable");
        let n = server.peek(&mut buf).await.expect("peek");
        assert_eq!(&buf[..n], &b"hello"[..n]);
        let mut got = Vec::new();
        while got.len() < 5 {
            server.readable().await.unwrap();
            match server.try_read(&mut buf) {
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
                Err(e) => panic!("try_read: {e}"),
            }
        }
        assert_eq!(got, b"hello");
        assert_eq!(server.local_addr().unwrap(), client.peer_addr().unwrap());
        assert_eq!(server.peer_addr().unwrap(), client.local_addr().unwrap());
    });
}

/// `split` in one task, `into_split` across two and `reunite`; `from_std`/`into_std`
/// round trips with the blocking socket.
pub(crate) fn split_into_split_reunite_and_std_round_trips(f: &Fixture) {
    multi_thread(2, async {
        let (mut server, client) = f.pair().await;
        let (mut r, mut w) = server.split();
        let (cr, mut cw) = client.into_split();
        w.write_all(b"split").await.unwrap();
        cw.write_all(b"owned").await.unwrap();
        let reader = tokio::spawn(async move {
            let mut cr = cr;
            let mut b = [0u8; 5];
            cr.read_exact(&mut b).await.unwrap();
            assert_eq!(&b, b"split");
            cr
        });
        let mut b = [0u8; 5];
        r.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"owned");
        let cr = reader.await.unwrap();
        let (other_r, other_w) = f.pair().await.1.into_split();
        let err = cr
            .reunite(other_w)
            .expect_err("halves of different streams");
        let (cr, _) = (err.0, err.1);
        drop(other_r);
        let client = cr.reunite(cw).expect("the same stream's halves");
        // Through the blocking socket and back.
        let socket = client.into_std().expect("into_std");
        let t = tokio::task::spawn_blocking(move || {
            socket.set_nonblocking(false).unwrap();
            let mut s = &socket;
            s.write_all(b"blocking").unwrap();
            socket
        });
        let socket = t.await.unwrap();
        let mut b = [0u8; 8];
        server.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"blocking");
        let mut client = RdmaStream::from_std(socket).expect("from_std");
        client.write_all(b"again").await.unwrap();
        let mut b = [0u8; 5];
        server.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"again");
    });
}

/// Reads and writes cancelled at random points (timeouts of a few microseconds up) lose no
/// byte: a write that did not complete wrote nothing, a read that did not complete took
/// nothing. The sum of what completed on each side is checked byte for byte.
pub(crate) fn cancelled_reads_and_writes_lose_no_byte(f: &Fixture) {
    // Small rings: writes wait for room often, and can be cancelled then.
    let opts = rdmasock::SocketOptions::builder()
        .send_ring(16 << 10)
        .recv_ring(16 << 10)
        .build()
        .unwrap();
    current_thread(async {
        let (server, client) = f.pair_with(&opts).await;
        let total = 4 << 20;
        let writer = tokio::spawn(async move {
            let mut client = client;
            let mut data = super::socket_support::Rng(7);
            let mut rng = super::socket_support::Rng(11);
            let mut sent = Vec::with_capacity(total);
            let mut buf = vec![0u8; 20_000];
            let mut cancelled = 0;
            while sent.len() < total {
                // Now and then the reader catches up, and reads wait (and are cancelled).
                if rng.below(4) == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let n = (1 + rng.below(buf.len())).min(total - sent.len());
                super::fill(&mut data, &mut buf[..n]);
                // Not written when cancelled: the same bytes are not sent again (the next
                // piece is new data), so a lost or doubled byte shows in the comparison.
                match super::cancellable(&mut rng, client.write(&buf[..n])).await {
                    Some(r) => {
                        let n = r.expect("write");
                        sent.extend_from_slice(&buf[..n]);
                    }
                    None => cancelled += 1,
                }
            }
            client.shutdown().await.expect("shutdown");
            (sent, cancelled)
        });
        let mut server = server;
        let mut rng = super::socket_support::Rng(13);
        let mut got = Vec::new();
        let mut buf = vec![0u8; 15_000];
        let mut cancelled = 0;
        loop {
            // Now and then the writer fills the ring, and writes wait (and are cancelled).
            if rng.below(16) == 0 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let want = 1 + rng.below(buf.len());
            match super::cancellable(&mut rng, server.read(&mut buf[..want])).await {
                Some(r) => {
                    let n = r.expect("read");
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                None => cancelled += 1,
            }
        }
        let (sent, w_cancelled) = writer.await.expect("writer");
        eprintln!(
            "{} bytes; {w_cancelled} writes and {cancelled} reads cancelled",
            sent.len()
        );
        assert!(
            cancelled > 0,
            "some reads were cancelled (the case means nothing otherwise)"
        );
        assert!(
            w_cancelled > 0,
            "some writes were cancelled (the case means nothing otherwise)"
        );
        assert_eq!(got.len(), sent.len(), "as many bytes read as written");
        assert!(
            got == sent,
            "the bytes read are the bytes written, in order"
        );
    });
}

/// This process's threads.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}
