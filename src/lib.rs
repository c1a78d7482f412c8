//! # rdmasock
//!
//! RDMA with the face of a socket. [`RdmaSocket`] and [`RdmaListener`] stand where
//! `std::net::TcpStream` and `TcpListener` stand; underneath, the bytes move as RDMA writes
//! between registered rings, over a kernel RDMA device when one serves the address and over a
//! userspace iWARP provider (RDMA over an ordinary TCP socket) when none does. This crate
//! assembles the layers: the verbs objects ([`verbs`]), the connection manager ([`cm`]), the
//! providers, and the registry that picks a provider for each device; [`protocol`] is
//! rsocket's stream protocol engine (sans-IO), and [`socket`] drives it as [`RdmaSocket`] and
//! [`RdmaListener`].
//!
//! ## Quick start
//!
//! Swap the type names and keep the code. On a machine without RDMA (or on loopback, as here)
//! the userspace provider carries the connection, so this runs anywhere:
//!
//! ```
//! use rdmasock::{RdmaListener, RdmaSocket};
//! use std::io::{Read, Write};
//!
//! let listener = RdmaListener::bind("127.0.0.1:0")?;
//! let address = listener.local_addr()?;
//! let server = std::thread::spawn(move || -> std::io::Result<()> {
//!     let (mut socket, _peer) = listener.accept()?;
//!     let mut request = [0; 4];
//!     socket.read_exact(&mut request)?;
//!     socket.write_all(b"pong")?;
//!     Ok(())
//! });
//!
//! let mut client = RdmaSocket::connect(address)?;
//! client.write_all(b"ping")?;
//! let mut reply = [0; 4];
//! client.read_exact(&mut reply)?;
//! assert_eq!(&reply, b"pong");
//! server.join().unwrap()?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! [`RdmaSocket`] implements `Read` and `Write` (also on `&RdmaSocket`), `peek`,
//! `shutdown` with half-close, timeouts, `set_nonblocking` and `try_clone`. The stream speaks
//! librdmacm's rsocket protocol, so the peer may be an rsocket program (`rstream`) as well.
//!
//! ## Zero-copy writes
//!
//! A [`RegisteredBuf`] is memory the connection's device sends from without a copy:
//! [`RdmaSocket::write_registered`] writes it (the device writes its bytes into the peer's
//! receive ring, in stream order with the other writes) and returns once the device has read
//! it, so it may be refilled at once; [`RdmaSocket::submit_registered`] takes it by value and
//! hands it back later ([`RdmaSocket::completed_registered`]), for several writes in
//! flight. A [`BufferPool`] keeps a set of them registered. The peer sees an ordinary stream.
//!
//! ```
//! use rdmasock::{RdmaListener, RdmaSocket, RegisteredBuf};
//! use std::io::Read;
//!
//! let listener = RdmaListener::bind("127.0.0.1:0")?;
//! let address = listener.local_addr()?;
//! let server = std::thread::spawn(move || -> std::io::Result<Vec<u8>> {
//!     let (mut socket, _peer) = listener.accept()?;
//!     let mut got = vec![0; 8192];
//!     socket.read_exact(&mut got)?;
//!     Ok(got)
//! });
//! let client = RdmaSocket::connect(address)?;
//! let mut buf = RegisteredBuf::new(4096)?;
//! buf.fill(1);
//! client.write_registered(&buf)?;
//! buf.fill(2); // the device is done with it: the peer still gets the ones
//! client.write_registered(&buf)?;
//! let got = server.join().unwrap()?;
//! assert!(got[..4096].iter().all(|&b| b == 1) && got[4096..].iter().all(|&b| b == 2));
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! ## Choosing a provider
//!
//! A provider is the data path of one kind of device. The registry ([`default_registry`],
//! [`registry_for`]) picks one per device, in this order: the one the environment variable
//! [`PROVIDER_ENV`] (`RDMASOCK_PROVIDER`) names for it; else the pure-Rust provider of its
//! driver; else the bridge to the system's libibverbs, when it loads; else an error naming
//! the driver and what to install.
//!
//! | provider | devices | needs |
//! |---|---|---|
//! | `rxe` | Soft-RoCE (`rdma_rxe`) | the kernel module, a link (`rdma link add`), `rdma_ucm` |
//! | `siw` | soft-iWARP (`siw`) | the kernel module, a link, `rdma_ucm` |
//! | `ibverbs` | hardware NICs | rdma-core's `libibverbs.so.1` and the NIC's provider library, loaded at run time |
//! | `uiwarp` | none: iWARP over TCP | nothing |
//!
//! The sockets use the userspace provider when no kernel RDMA device serves the address, or
//! when `RDMASOCK_PROVIDER=uiwarp`. The variable takes a comma-separated list of `KIND` (every
//! device) or `DEVICE:KIND` entries: `RDMASOCK_PROVIDER=rxe0:ibverbs,siw0:siw`. The verbs
//! layer opens devices through the same registry:
//!
//! ```no_run
//! // Needs a kernel RDMA device (here the first one found).
//! let context = rdmasock::open_device(None)?;
//! println!("{} through the {} provider", context.device().name, context.provider_name());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Wait modes
//!
//! A blocking call that has to wait for the device waits in one of three ways, chosen with
//! [`SocketOptions::builder`]:
//!
//! | mode | builder method | behaviour |
//! |---|---|---|
//! | adaptive (the default, 1 ms) | [`adaptive`](socket::SocketOptionsBuilder::adaptive) | spins about as long as the connection's recent waits lasted, then sleeps |
//! | busy-poll | [`busy_poll`](socket::SocketOptionsBuilder::busy_poll) | spins up to a fixed budget, then sleeps |
//! | event | [`event_mode`](socket::SocketOptionsBuilder::event_mode) | sleeps on the completion channel at once |
//!
//! ```
//! use rdmasock::{RdmaListener, RdmaSocket, SocketOptions};
//! use std::time::Duration;
//!
//! let options = SocketOptions::builder()
//!     .busy_poll(Duration::from_micros(50))
//!     .connect_timeout(Duration::from_secs(5))
//!     .build()?;
//! let listener = RdmaListener::bind_with("127.0.0.1:0", &options)?;
//! let address = listener.local_addr()?;
//! // The listener answers a connection request from within `accept`.
//! let server = std::thread::spawn(move || listener.accept());
//! let client = RdmaSocket::connect_with(address, &options)?;
//! let (_server, _peer) = server.join().unwrap()?;
//! let stats = client.wait_stats();
//! println!("{} waits so far", stats.waits);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`RdmaSocket::wait_stats`] counts a connection's waits, naps and sleeps, for choosing
//! among the modes.
//!
//! ## mio
//!
//! [`RdmaSocket`] and [`RdmaListener`] implement [`mio::event::Source`]: register them with a
//! [`mio::Poll`] and drive them nonblocking, as a `mio::net::TcpStream`. Readiness is
//! edge-triggered, as mio's is: after a call returned `WouldBlock`, an event follows when
//! that direction can go on. A registration honours its interests: a socket registered for
//! `READABLE` alone gets no writable events.
//!
//! ## A file descriptor for any event loop
//!
//! [`RdmaSocket`] and [`RdmaListener`] implement [`AsFd`](std::os::fd::AsFd) and
//! [`AsRawFd`](std::os::fd::AsRawFd): one readiness fd per object, created with it, for
//! poll(2), epoll or any loop that watches fds. It is not the transport (the connection is a
//! queue pair) but an epoll instance the object owns: wait on it for readability (POLLIN)
//! only, never read, write or close it. Level-triggered:
//! * a socket's fd is readable while a read would not block (bytes, end of stream, or an
//!   error to report), and after a write returned `WouldBlock`, from when writing can go on
//!   until the next write call. One direction's `WouldBlock` never hides the other's
//!   readiness. So a loop that polls only POLLIN reads and writes on each wakeup until both
//!   would block; it must read bytes that wait (left unread, they keep the fd readable).
//!   With buffers submitted ([`RdmaSocket::submit_registered`]), it is also readable after
//!   [`RdmaSocket::completed_registered`] found none ready (or handed one back with more in
//!   flight), from when the next can be taken back until the next such call: call it until
//!   it returns `None` on each wakeup;
//! * a listener's fd is readable while `accept` may go on: a request waits and the backlog
//!   has room, a handshake moved on, or a handshake's bound passed.
//!
//! Readiness can be spurious (a clone took the bytes first): the call returns `WouldBlock`
//! and the fd goes quiet until that call can go on. With edge-triggered epoll (EPOLLET),
//! every call that returned `WouldBlock` gets an event once it can go on. Clones share their
//! original's fd. `examples/poll_echo.rs` serves many clients on one poll(2) loop.
//!
//! No thread is started per socket. A process has at most four threads of rdmasock's own:
//! the readiness thread `rdmasock-mio`, started by the first mio registration or the first
//! `as_fd` of a socket (a socket whose fd was asked for stays under it until dropped), which
//! waits on those sockets' completion channels and connection-manager fds, makes their
//! progress and sends their keepalives; `rdmasock-listen`, started by the first listener,
//! which answers every listener's connection requests as they come (up to each listener's
//! backlog, rejecting the rest at once: see [`RdmaListener::accept`]); `rdmasock-cm`,
//! started by the first connection on a kernel device, which reads the process's one rdma_cm
//! event channel and hands each event to its connection; and `uiwarp-engine`, the userspace
//! provider's progress thread, started when that provider is first used. Blocking calls
//! wait on the caller's thread, and `rdmasock::tokio`'s streams on the runtime's; the kernel
//! devices (rxe, siw) and the rdma-core bridge add no other thread of rdmasock's.
//!
//! ```
//! use mio::{Events, Interest, Poll, Token};
//! use rdmasock::RdmaListener;
//! use std::time::Duration;
//!
//! let mut listener = RdmaListener::bind("127.0.0.1:0")?;
//! listener.set_nonblocking(true)?;
//! let mut poll = Poll::new()?;
//! poll.registry().register(&mut listener, Token(0), Interest::READABLE)?;
//!
//! let address = listener.local_addr()?;
//! let client = std::thread::spawn(move || rdmasock::RdmaSocket::connect(address));
//! let mut events = Events::with_capacity(8);
//! let server = loop {
//!     poll.poll(&mut events, Some(Duration::from_secs(10)))?;
//!     match listener.accept() {
//!         Ok((socket, _peer)) => break socket,
//!         Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
//!         Err(e) => return Err(e.into()),
//!     }
//! };
//! let _client = client.join().unwrap()?;
//! drop(server);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]
// Every module forbids unsafe code but `buffers`, whose `sys` module alone holds it.
#![deny(unsafe_code)]

pub use rdmasock_cm as cm;
pub use rdmasock_verbs as verbs;

mod buffers;
pub mod protocol;
mod registry;
pub mod socket;
#[cfg(feature = "tokio")]
pub mod tokio;

pub use buffers::{BufferPool, PooledBuf, RegisteredBuf};
pub use registry::{
    connection_manager, connection_manager_for, default_registry, device_list, listed_devices,
    open_device, registry_for, ProviderChoice, ProviderKind, PROVIDER_ENV,
};
pub use socket::{
    census, Census, CompletedWrite, Connecting, MappedWindow, RdmaListener, RdmaSocket, Refused,
    SocketOptions,
};
