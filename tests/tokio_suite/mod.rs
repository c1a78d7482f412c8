//! The tokio adapter's suite (`rdmasock::tokio`, cargo feature `tokio`): every case written
//! once, as a function taking a [`Fixture`], and run per provider by thin test files that
//! list the cases with [`tokio_tests!`]:
//!
//! - `tokio_uiwarp.rs` (the host, `cargo test --features tokio`): the userspace iWARP
//!   provider on loopback;
//! - `vm_tokio.rs` (the VM, `tests/vm/run.sh`): the kernel's rxe0 and siw0, and rxe0 again
//!   through the rdma-core bridge when the suite sets `RDMASOCK_PROVIDER=ibverbs`.
//!
//! Each case builds the runtime it needs (current-thread or multi-thread) and drives its
//! async body on it.
#![allow(dead_code)] // each test binary uses a different part

#[path = "../socket_support/mod.rs"]
pub(crate) mod socket_support;
#[path = "../vm_support/mod.rs"]
pub(crate) mod vm_support;

mod close;
mod data;
mod errors;
mod iomap;
mod zero_copy;

#[allow(unused_imports)]
pub(crate) use close::*;
#[allow(unused_imports)]
pub(crate) use data::*;
#[allow(unused_imports)]
pub(crate) use errors::*;
#[allow(unused_imports)]
pub(crate) use iomap::*;
#[allow(unused_imports)]
pub(crate) use zero_copy::*;

use rdmasock::tokio::{RdmaListener, RdmaStream};
use rdmasock::SocketOptions;
use socket_support::Rng;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Generates one `#[test]` per case listed, each calling the case of the same name with the
/// fixture; the names listed as not applicable must be cases of the suite (checked at
/// compile time).
macro_rules! tokio_tests {
    (
        fixture: $fixture:expr;
        attributes: $attributes:tt;
        cases: [$($case:ident),* $(,)?];
        not_applicable: [$($skipped:ident => $why:literal),* $(,)?];
    ) => {
        $(tokio_tests!(@one $fixture; $attributes; $case);)*
        $(
            const _: (fn(&crate::tokio_suite::Fixture), &str) =
                (crate::tokio_suite::$skipped, $why);
        )*
    };
    (@one $fixture:expr; [$($attribute:tt)*]; $case:ident) => {
        #[test]
        $($attribute)*
        fn $case() {
            let fixture = ($fixture).in_module(module_path!());
            crate::tokio_suite::$case(&fixture);
        }
    };
}

/// Which provider carries the connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Provider {
    /// The userspace iWARP provider over loopback TCP (the host).
    Uiwarp,
    /// The kernel's rxe0 (in the VM; through rdma-core when `RDMASOCK_PROVIDER=ibverbs`).
    Rxe,
    /// The kernel's siw0 (in the VM).
    Siw,
}

/// Where a provider runs the cases and how much they move there.
#[derive(Clone, Debug)]
pub(crate) struct Fixture {
    /// The provider under test.
    pub provider: Provider,
    /// The address listeners bind (port 0: the kernel picks one).
    pub ip: IpAddr,
    module: String,
}

impl Fixture {
    /// The userspace iWARP provider on 127.0.0.1.
    pub(crate) fn uiwarp() -> Fixture {
        assert!(
            !std::path::Path::new("/sys/class/infiniband").exists()
                || std::env::var("RDMASOCK_PROVIDER").as_deref() == Ok("uiwarp"),
            "this host has kernel RDMA devices: run with RDMASOCK_PROVIDER=uiwarp"
        );
        Fixture {
            provider: Provider::Uiwarp,
            ip: "127.0.0.1".parse().unwrap(),
            module: String::new(),
        }
    }

    /// The VM's rxe0; panics (loudly) outside the VM or without it.
    pub(crate) fn rxe() -> Fixture {
        Fixture {
            provider: Provider::Rxe,
            ip: vm_support::device_ip("rxe0"),
            module: String::new(),
        }
    }

    /// The VM's siw0; panics (loudly) outside the VM or without it.
    pub(crate) fn siw() -> Fixture {
        Fixture {
            provider: Provider::Siw,
            ip: vm_support::device_ip("siw0"),
            module: String::new(),
        }
    }

    /// The fixture for a test generated in module `module_path`.
    pub(crate) fn in_module(mut self, module_path: &str) -> Fixture {
        let path = module_path.split_once("::").map_or("", |(_, rest)| rest);
        self.module = path.to_string();
        self
    }

    /// The name libtest knows the test of `case` by in this binary (for a child process).
    pub(crate) fn test_name(&self, case: &str) -> String {
        match self.module.as_str() {
            "" => case.to_string(),
            module => format!("{module}::{case}"),
        }
    }

    /// Bytes each way of the large stream: 64 MiB.
    pub(crate) fn large_stream_bytes(&self) -> usize {
        64 << 20
    }

    /// The largest piece one write or read of the random-size streams asks for.
    pub(crate) fn max_piece(&self) -> usize {
        match self.provider {
            Provider::Uiwarp => 1 << 20,
            Provider::Rxe | Provider::Siw => 300_000,
        }
    }

    /// Concurrent connections of the echo case.
    pub(crate) fn concurrent_connections(&self) -> usize {
        256
    }

    /// A port of the provider's address nothing listens on.
    pub(crate) fn unused_port(&self) -> u16 {
        match self.provider {
            Provider::Rxe => 7311,
            Provider::Siw => 7315,
            Provider::Uiwarp => std::net::TcpListener::bind(SocketAddr::new(self.ip, 0))
                .and_then(|l| l.local_addr())
                .expect("a free TCP port on loopback")
                .port(),
        }
    }

    /// An address that never answers a connect, and what keeps it so while it lives. Kernel
    /// devices: an address of the device's subnet that no host has (address resolution gets
    /// no ARP answer). The userspace provider on loopback: a TCP listener whose accept queue
    /// is full, so that the kernel drops further SYNs.
    pub(crate) fn black_hole(&self) -> (SocketAddr, Box<dyn std::any::Any>) {
        match self.provider {
            Provider::Rxe => ("10.99.0.78:7314".parse().unwrap(), Box::new(())),
            Provider::Siw => ("10.99.1.78:7314".parse().unwrap(), Box::new(())),
            Provider::Uiwarp => socket_support::tcp_black_hole(self.ip),
        }
    }

    /// A listener on the provider's address with `opts`, and the address it got.
    pub(crate) async fn listener_with(&self, opts: &SocketOptions) -> (RdmaListener, SocketAddr) {
        let l = RdmaListener::bind_with(SocketAddr::new(self.ip, 0), opts)
            .await
            .unwrap_or_else(|e| panic!("bind on {} ({:?}): {e}", self.ip, self.provider));
        let addr = l.local_addr().expect("listener address");
        assert_ne!(addr.port(), 0);
        (l, addr)
    }

    /// A listener with the default options.
    pub(crate) async fn listener(&self) -> (RdmaListener, SocketAddr) {
        self.listener_with(&SocketOptions::default()).await
    }

    /// A connected pair (the accepted end, the client).
    pub(crate) async fn pair(&self) -> (RdmaStream, RdmaStream) {
        self.pair_with(&SocketOptions::default()).await
    }

    /// A connected pair with `opts` (the accepted end, the client).
    pub(crate) async fn pair_with(&self, opts: &SocketOptions) -> (RdmaStream, RdmaStream) {
        let (l, addr) = self.listener_with(opts).await;
        let (accepted, client) = tokio::join!(l.accept(), RdmaStream::connect_with(addr, opts));
        (accepted.expect("accept").0, client.expect("connect"))
    }
}

/// Runs `body` on a current-thread runtime.
pub(crate) fn current_thread<F: Future>(body: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime")
        .block_on(body)
}

/// Runs `body` on a multi-thread runtime of `workers` workers.
pub(crate) fn multi_thread<F: Future>(workers: usize, body: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("a multi-thread runtime")
        .block_on(body)
}

pub(crate) use socket_support::random_stream::fill;

/// Writes `total` pseudo-random bytes in pseudo-random pieces of at most `max_piece`, then
/// flushes and shuts down writing; returns their hash (the blocking
/// [`socket_support::send_random`]'s bytes and pieces).
pub(crate) async fn send_random(
    mut s: impl AsyncWrite + Unpin,
    total: usize,
    seed: u64,
    max_piece: usize,
) -> u64 {
    let mut source = socket_support::RandomSource::new(total, seed, max_piece);
    while let Some((_, piece)) = source.next_piece() {
        s.write_all(piece).await.expect("write");
    }
    s.flush().await.expect("flush");
    s.shutdown().await.expect("shutdown");
    source.hash()
}

/// Reads to end-of-stream in pseudo-random pieces of at most `max_piece`; (bytes, hash)
/// (the blocking [`socket_support::receive_random`]'s read sizes).
pub(crate) async fn receive_random(
    mut s: impl AsyncRead + Unpin,
    seed: u64,
    max_piece: usize,
) -> (usize, u64) {
    let mut sink = socket_support::RandomSink::new(seed, max_piece);
    loop {
        let (_, buf) = sink.next_buffer();
        let n = s.read(buf).await.expect("read");
        if !sink.took(n) {
            return sink.result();
        }
    }
}

/// Open file descriptors of this process, once they are back to `at_most` (a close that
/// runs on the blocking pool may still be finishing): waits up to `within`, then returns
/// what it sees.
pub(crate) async fn fds_settle(at_most: usize, within: Duration) -> usize {
    let end = Instant::now() + within;
    loop {
        let now = socket_support::open_fds();
        if now <= at_most || Instant::now() >= end {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `call` to its end, or cancels it (drops it) at a random point: after its first poll
/// when that did not finish it, or when a timeout of up to 2 ms runs out. `None`: cancelled
/// (and the task yields, so that the peer's task runs).
pub(crate) async fn cancellable<T>(
    rng: &mut Rng,
    call: impl std::future::Future<Output = T>,
) -> Option<T> {
    let mut call = std::pin::pin!(call);
    let finished = if rng.below(2) == 0 {
        match futures::poll!(call.as_mut()) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        }
    } else {
        let wait = Duration::from_micros(rng.below(2000) as u64);
        tokio::time::timeout(wait, call).await.ok()
    };
    if finished.is_none() {
        tokio::task::yield_now().await;
    }
    finished
}
