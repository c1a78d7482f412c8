//! The tokio stream on the userspace iWARP provider reads its queue pair's TCP socket on the
//! task: the runtime's reactor watches the socket (the completion channel's input watch), so
//! that an arrival wakes the reading task directly, with no hop through the provider's
//! engine thread; and a read cancelled while the task takes the input loses no byte. Needs
//! the `tokio` feature (`cargo test --features tokio`).
#![cfg(feature = "tokio")]

#[allow(unused_macros)]
mod tokio_suite;

use std::sync::Mutex;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_suite::{cancellable, current_thread, multi_thread, socket_support::Rng, Fixture};

/// The engine's event count is the process's: the tests of this binary run one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const ROUND_TRIPS: u64 = 2000;

/// What the provider did during a ping-pong (see [`ping_pong`]).
struct Counts {
    /// Readiness events the engine thread handled.
    engine_events: u64,
    /// Socket reads that found nothing.
    empty_reads: u64,
}

/// `ROUND_TRIPS` 64 B request/response exchanges between two streams of the current runtime;
/// how many readiness events the provider's engine thread handled meanwhile.
async fn engine_events_of_a_ping_pong() -> u64 {
    ping_pong().await.engine_events
}

/// `ROUND_TRIPS` 64 B request/response exchanges between two streams of the current
/// runtime, and what the provider did meanwhile.
async fn ping_pong() -> Counts {
    let (mut server, mut client) = Fixture::uiwarp().pair().await;
    let echo = tokio::spawn(async move {
        let mut buf = [0u8; 64];
        for _ in 0..ROUND_TRIPS {
            server.read_exact(&mut buf).await.expect("server read");
            server.write_all(&buf).await.expect("server write");
        }
        server
    });
    // The connection's setup is behind: count from the first exchange on.
    let mut request = [7u8; 64];
    client.write_all(&request).await.expect("first write");
    client.read_exact(&mut request).await.expect("first read");
    let before = rdmasock_uiwarp::driver::engine_events_total();
    let empty_before = rdmasock_uiwarp::driver::empty_reads_total();
    for i in 1..ROUND_TRIPS {
        request[0] = i as u8;
        client.write_all(&request).await.expect("client write");
        let mut reply = [0u8; 64];
        client.read_exact(&mut reply).await.expect("client read");
        assert_eq!(reply, request, "exchange {i}");
    }
    let counts = Counts {
        engine_events: rdmasock_uiwarp::driver::engine_events_total() - before,
        empty_reads: rdmasock_uiwarp::driver::empty_reads_total() - empty_before,
    };
    drop(echo.await.expect("echo task"));
    counts
}

/// Asserts that the engine woke for few of a ping-pong's `2 * ROUND_TRIPS` arrivals: the
/// tasks read the socket themselves. Through the engine (the channel raised per arrival) it
/// wakes about once per arrival.
fn assert_few_engine_wakeups(woke: u64, runtime: &str) {
    eprintln!("{runtime}: the engine woke {woke} times in {ROUND_TRIPS} round trips");
    assert!(
        woke < ROUND_TRIPS / 10,
        "{runtime}: the engine thread woke {woke} times for {} arrivals",
        2 * ROUND_TRIPS
    );
}

#[test]
fn a_ping_pong_wakes_the_tasks_without_the_engine_on_a_current_thread_runtime() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let woke = current_thread(engine_events_of_a_ping_pong());
    assert_few_engine_wakeups(woke, "current-thread runtime");
}

#[test]
fn a_ping_pong_wakes_the_tasks_without_the_engine_on_a_multi_thread_runtime() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let woke = multi_thread(2, engine_events_of_a_ping_pong());
    assert_few_engine_wakeups(woke, "multi-thread runtime");
}

/// A task reads its socket when an edge of the watched input wakes it, until a read that
/// does not fill the buffer, and a read that finds the ring empty arms the queue without
/// reading the socket (the input's edges cover it): a ping-pong's `2 * ROUND_TRIPS`
/// arrivals cost few reads that find nothing. Reading until the socket would block, and
/// reading it again at each arming, cost about three per arrival.
#[test]
fn a_tokio_ping_pong_makes_few_reads_that_find_nothing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for (runtime, counts) in [
        ("current-thread runtime", current_thread(ping_pong())),
        ("multi-thread runtime", multi_thread(2, ping_pong())),
    ] {
        eprintln!(
            "{runtime}: {} empty reads in {ROUND_TRIPS} round trips",
            counts.empty_reads
        );
        assert!(
            counts.empty_reads < ROUND_TRIPS / 2,
            "{runtime}: {} reads found nothing for {} arrivals",
            counts.empty_reads,
            2 * ROUND_TRIPS
        );
    }
}

/// The writer sends numbered pieces with pauses; the reader cancels many of its reads (after
/// a first poll that found nothing, or on a short timeout), and now and then stops reading
/// for a few milliseconds with the stream's input watch held and bytes arriving (no task
/// polls the socket then: the provider's engine takes the input back and places the bytes).
/// Every byte arrives once, in order; the reads that completed also took input on the task.
#[test]
fn reads_cancelled_while_the_task_takes_the_input_lose_no_byte() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for workers in [0, 2] {
        let body = async {
            let (mut server, mut client) = Fixture::uiwarp().pair().await;
            let total = 1 << 20;
            let writer = tokio::spawn(async move {
                let mut rng = Rng(3);
                let mut sent = 0usize;
                let mut counter = 0u8;
                let mut piece = vec![0u8; 3000];
                while sent < total {
                    let n = (1 + rng.below(piece.len())).min(total - sent);
                    for b in &mut piece[..n] {
                        *b = counter;
                        counter = counter.wrapping_add(1);
                    }
                    client.write_all(&piece[..n]).await.expect("write");
                    sent += n;
                    match rng.below(8) {
                        0 => tokio::time::sleep(Duration::from_micros(300)).await,
                        1 => tokio::task::yield_now().await,
                        _ => {}
                    }
                }
                client.shutdown().await.expect("shutdown");
            });
            let mut rng = Rng(5);
            let mut expected = 0u8;
            let mut got = 0usize;
            let mut cancelled = 0;
            let mut buf = vec![0u8; 5000];
            loop {
                if rng.below(64) == 0 {
                    // Nobody reads: arrivals wake no task, and wait for the next read.
                    std::thread::sleep(Duration::from_millis(3));
                }
                let want = 1 + rng.below(buf.len());
                match cancellable(&mut rng, server.read(&mut buf[..want])).await {
                    Some(r) => {
                        let n = r.expect("read");
                        if n == 0 {
                            break;
                        }
                        for (i, b) in buf[..n].iter().enumerate() {
                            assert_eq!(*b, expected, "byte {} of the stream", got + i);
                            expected = expected.wrapping_add(1);
                        }
                        got += n;
                    }
                    None => cancelled += 1,
                }
            }
            writer.await.expect("writer");
            assert_eq!(got, total, "bytes read");
            assert!(cancelled > 10, "only {cancelled} reads were cancelled");
        };
        if workers == 0 {
            current_thread(body);
        } else {
            multi_thread(workers, body);
        }
    }
}
