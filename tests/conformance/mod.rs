//! The socket conformance suite: every `RdmaSocket` / `RdmaListener` case written once, as a
//! function taking a [`Fixture`], and run per provider by thin test files that list the cases
//! with [`conformance_tests!`]:
//!
//! - `uiwarp_socket.rs` (the host, `cargo test`): the userspace iWARP provider on loopback;
//! - `vm_socket.rs` (the VM, `tests/vm/run.sh`): the kernel's rxe0, and again through the
//!   rdma-core bridge when the suite sets `RDMASOCK_PROVIDER=ibverbs`;
//! - `vm_socket_siw.rs` (the VM): the kernel's siw0;
//! - `vm_socket_cycles.rs` (the VM): the connect/close cycles on rxe0 and siw0, in a binary of
//!   their own so that they have the suite's per-binary time limit to themselves;
//! - `uiwarp_socket_cycles.rs` (the host): the cycles on uiwarp, in a process of their own,
//!   since they measure the process's fds and RSS.
//!
//! A provider's list names the cases it runs, and those that do not apply there with the
//! reason (`not_applicable`: no test is generated, and the compiler checks that the name is a
//! case of the suite); `vm_socket_cycles.rs` lists its one case and says where the rest run.
//! A case never returns early for a provider: where providers differ, the fixture says what
//! that provider does and the case asserts it.
//!
//! ```ignore
//! #[macro_use]
//! mod conformance;
//! mod rxe {
//!     conformance_tests! {
//!         fixture: crate::conformance::Fixture::rxe();
//!         attributes: [#[ignore = "needs the VM: run tests/vm/run.sh"]];
//!         cases: [connect_accept_echo, half_close_client_first];
//!         not_applicable: [flush_on_a_nonblocking_socket_returns_ok => "the reason"];
//!     }
//! }
//! ```
#![allow(dead_code)] // each test binary uses a different part

#[path = "../socket_support/mod.rs"]
pub(crate) mod socket_support;
#[path = "../vm_support/mod.rs"]
pub(crate) mod vm_support;

mod close;
mod connect;
mod connect_start;
mod cycles;
mod data;
mod fd;
mod fork;
mod huge_pages;
mod iomap;
mod polling;
mod vanish;
mod waits;
mod zero_copy;
mod zero_copy_fd;

// Each binary runs some of the cases: the others' names are unused there.
#[allow(unused_imports)]
pub(crate) use close::*;
#[allow(unused_imports)]
pub(crate) use connect::*;
#[allow(unused_imports)]
pub(crate) use connect_start::*;
#[allow(unused_imports)]
pub(crate) use cycles::*;
#[allow(unused_imports)]
pub(crate) use data::*;
#[allow(unused_imports)]
pub(crate) use fd::*;
#[allow(unused_imports)]
pub(crate) use fork::*;
#[allow(unused_imports)]
pub(crate) use huge_pages::*;
#[allow(unused_imports)]
pub(crate) use iomap::*;
#[allow(unused_imports)]
pub(crate) use polling::*;
#[allow(unused_imports)]
pub(crate) use vanish::*;
#[allow(unused_imports)]
pub(crate) use waits::*;
#[allow(unused_imports)]
pub(crate) use zero_copy::*;
#[allow(unused_imports)]
pub(crate) use zero_copy_fd::*;

use rdmasock::{RdmaListener, RdmaSocket, SocketOptions};
use std::net::{IpAddr, SocketAddr};
use std::thread;

/// Generates one `#[test]` per case listed, each calling the case of the same name with the
/// fixture (made afresh per test), and checks at compile time that every case named not
/// applicable exists. The test's name is the case's, inside the module the macro is called in
/// (one module per provider: `rxe::half_close_client_first`).
macro_rules! conformance_tests {
    (
        fixture: $fixture:expr;
        attributes: $attributes:tt;
        cases: [$($case:ident),* $(,)?];
        not_applicable: [$($skipped:ident => $why:literal),* $(,)?];
    ) => {
        $(conformance_tests!(@one $fixture; $attributes; $case);)*
        $(
            const _: (fn(&crate::conformance::Fixture), &str) =
                (crate::conformance::$skipped, $why);
        )*
    };
    (@one $fixture:expr; [$($attribute:tt)*]; $case:ident) => {
        #[test]
        $($attribute)*
        fn $case() {
            let fixture = ($fixture).in_module(module_path!());
            crate::conformance::$case(&fixture);
        }
    };
}

/// Which provider carries the connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Provider {
    /// The userspace iWARP provider over loopback TCP (the host, which has no kernel RDMA).
    Uiwarp,
    /// The kernel's soft-RoCE device rxe0 (in the VM; through rdma-core's libibverbs when
    /// `RDMASOCK_PROVIDER=ibverbs`).
    Rxe,
    /// The kernel's soft-iWARP device siw0 (in the VM).
    Siw,
}

impl Provider {
    /// The provider's name as the test names and messages use it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Provider::Uiwarp => "uiwarp",
            Provider::Rxe => "rxe",
            Provider::Siw => "siw",
        }
    }

    /// Whether a kernel RDMA device carries the connections (their memory registrations are
    /// the kernel's, counted in `VmPin` and listed by `rdma resource show mr`).
    pub(crate) fn is_kernel_device(self) -> bool {
        self != Provider::Uiwarp
    }
}

/// Where and how a provider runs the cases: the address to listen on, the IPv6 one, the
/// sizes its streams move (a debug build under the VM's emulation moves far less in the
/// same time than one on the host), and the name of the test running.
#[derive(Clone, Debug)]
pub(crate) struct Fixture {
    /// The provider under test.
    pub provider: Provider,
    /// The IPv4 address listeners bind (a port of 0: the kernel picks one).
    pub ip: IpAddr,
    ipv6: fn() -> IpAddr,
    module: String,
}

impl Fixture {
    /// The userspace iWARP provider on 127.0.0.1 and `[::1]`. Panics when this host has
    /// kernel RDMA devices and `RDMASOCK_PROVIDER` does not force uiwarp: the connections
    /// would not be uiwarp's then.
    pub(crate) fn uiwarp() -> Fixture {
        assert!(
            !std::path::Path::new("/sys/class/infiniband").exists()
                || std::env::var("RDMASOCK_PROVIDER").as_deref() == Ok("uiwarp"),
            "this host has kernel RDMA devices: run with RDMASOCK_PROVIDER=uiwarp"
        );
        Fixture {
            provider: Provider::Uiwarp,
            ip: "127.0.0.1".parse().unwrap(),
            ipv6: || "::1".parse().unwrap(),
            module: String::new(),
        }
    }

    /// The VM's rxe0 and its NIC's IPv6 address (`RDMA_VM_RXE_IP6`); panics (loudly) outside
    /// the VM or without rxe0.
    pub(crate) fn rxe() -> Fixture {
        Fixture {
            provider: Provider::Rxe,
            ip: vm_support::device_ip("rxe0"),
            ipv6: || vm_ip6("RDMA_VM_RXE_IP6"),
            module: String::new(),
        }
    }

    /// The VM's siw0 (`--both`, the suite's default) and its NIC's IPv6 address
    /// (`RDMA_VM_SIW_IP6`); panics (loudly) outside the VM or without siw0.
    pub(crate) fn siw() -> Fixture {
        Fixture {
            provider: Provider::Siw,
            ip: vm_support::device_ip("siw0"),
            ipv6: || vm_ip6("RDMA_VM_SIW_IP6"),
            module: String::new(),
        }
    }

    /// The other kernel device of the VM (rxe0's is siw0 and siw0's rxe0), for a case that
    /// uses two devices at once; `None` on the host, whose one device is the userspace one.
    pub(crate) fn other_device(&self) -> Option<Fixture> {
        let mut other = match self.provider {
            Provider::Uiwarp => return None,
            Provider::Rxe => Fixture::siw(),
            Provider::Siw => Fixture::rxe(),
        };
        other.module = self.module.clone();
        Some(other)
    }

    /// The fixture for a test generated in module `module_path` (what `module_path!()` says
    /// there: the crate's name, then the modules).
    pub(crate) fn in_module(mut self, module_path: &str) -> Fixture {
        let path = module_path.split_once("::").map_or("", |(_, rest)| rest);
        self.module = path.to_string();
        self
    }

    /// The name libtest knows the test of case `case` by in this binary (for a child process
    /// that runs one test: `--exact NAME`).
    pub(crate) fn test_name(&self, case: &str) -> String {
        match self.module.as_str() {
            "" => case.to_string(),
            module => format!("{module}::{case}"),
        }
    }

    /// The provider's IPv6 address; panics (loudly) when the VM did not set it.
    pub(crate) fn ipv6(&self) -> IpAddr {
        (self.ipv6)()
    }

    /// A listener on `ip` with `opts`, on an ephemeral port, and the address it got.
    pub(crate) fn listener_on(
        &self,
        ip: IpAddr,
        opts: &SocketOptions,
    ) -> (RdmaListener, SocketAddr) {
        let l = RdmaListener::bind_with(SocketAddr::new(ip, 0), opts)
            .unwrap_or_else(|e| panic!("bind on {ip} ({}): {e}", self.provider.name()));
        let addr = l.local_addr().expect("listener address");
        assert_ne!(addr.port(), 0, "an ephemeral port was chosen");
        (l, addr)
    }

    /// A listener on the provider's address with `opts`.
    pub(crate) fn listener_with(&self, opts: &SocketOptions) -> (RdmaListener, SocketAddr) {
        self.listener_on(self.ip, opts)
    }

    /// A listener on the provider's address with the default options.
    pub(crate) fn listener(&self) -> (RdmaListener, SocketAddr) {
        self.listener_with(&SocketOptions::default())
    }

    /// A connected pair on `ip` with `opts`: (the accepted end, the client).
    pub(crate) fn pair_on(&self, ip: IpAddr, opts: &SocketOptions) -> (RdmaSocket, RdmaSocket) {
        let (l, addr) = self.listener_on(ip, opts);
        let t = thread::spawn(move || l.accept().expect("accept").0);
        let c = RdmaSocket::connect_with(addr, opts).expect("connect");
        (t.join().expect("accept thread"), c)
    }

    /// A connected pair on the provider's address with `opts`.
    pub(crate) fn pair_with(&self, opts: &SocketOptions) -> (RdmaSocket, RdmaSocket) {
        self.pair_on(self.ip, opts)
    }

    /// A connected pair on the provider's address with the default options.
    pub(crate) fn pair(&self) -> (RdmaSocket, RdmaSocket) {
        self.pair_with(&SocketOptions::default())
    }

    /// The largest piece one write or read of the random-size streams asks for.
    pub(crate) fn max_piece(&self) -> usize {
        match self.provider {
            Provider::Uiwarp => 1 << 20,
            Provider::Rxe | Provider::Siw => 300_000,
        }
    }

    /// Bytes each way of the large stream: 1 GiB on the host (or `UIWARP_TEST_BYTES`: a debug
    /// build moves it slowly), 64 MiB in the VM.
    pub(crate) fn large_stream_bytes(&self) -> usize {
        match self.provider {
            Provider::Uiwarp => std::env::var("UIWARP_TEST_BYTES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1 << 30),
            Provider::Rxe | Provider::Siw => 64 << 20,
        }
    }

    /// Bytes each way of the vectored stream.
    pub(crate) fn vectored_stream_bytes(&self) -> usize {
        match self.provider {
            Provider::Uiwarp => self.large_stream_bytes() / 8,
            Provider::Rxe | Provider::Siw => 8 << 20,
        }
    }

    /// Bytes each way through small rings and queues.
    pub(crate) fn small_rings_bytes(&self) -> usize {
        match self.provider {
            Provider::Uiwarp => 4 << 20,
            Provider::Rxe | Provider::Siw => 1 << 20,
        }
    }

    /// Bytes each way in pieces of at most 300 bytes.
    pub(crate) fn small_pieces_bytes(&self) -> usize {
        match self.provider {
            Provider::Uiwarp => 2 << 20,
            Provider::Rxe | Provider::Siw => 1 << 20,
        }
    }

    /// A port of the provider's address that nothing listens on. In the VM a fixed one per
    /// device (no other program runs there); on the host, where other programs run, a port
    /// the kernel just gave a TCP listener, which is closed again.
    pub(crate) fn unused_port(&self) -> u16 {
        match self.provider {
            Provider::Rxe => 7301,
            Provider::Siw => 7305,
            Provider::Uiwarp => std::net::TcpListener::bind(SocketAddr::new(self.ip, 0))
                .and_then(|l| l.local_addr())
                .expect("a free TCP port on loopback")
                .port(),
        }
    }

    /// What a refused connect to `addr` says: the kernel devices answer in the same words on
    /// IB/RoCE (a REJ) and iWARP (ECONNREFUSED from the kernel's iWARP connection manager);
    /// the userspace provider reports its own TCP connect's failure.
    pub(crate) fn refused_words(&self, addr: SocketAddr) -> String {
        match self.provider {
            Provider::Rxe | Provider::Siw => format!(
                "connection to {addr} refused: nothing listens on port {}",
                addr.port()
            ),
            Provider::Uiwarp => format!(
                "TCP connect to {addr} failed: Connection refused (os error 111): nothing \
                 listens on that TCP port"
            ),
        }
    }
}

/// The address in `var` (which the VM sets), asserted to be IPv6.
fn vm_ip6(var: &str) -> IpAddr {
    let ip = vm_support::env_ip(var);
    assert!(ip.is_ipv6(), "{var}={ip} is not IPv6");
    ip
}

/// The kernel's connection manager alone, without the default's fallback to the userspace
/// provider. The one place the suite names a connection manager type.
pub(crate) fn kernel_cm() -> &'static dyn rdmasock::socket::ConnectionManager {
    &rdmasock::cm::KernelCm
}
