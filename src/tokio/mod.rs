//! [`RdmaStream`] and [`RdmaListener`] for the [tokio] runtime (cargo feature `tokio`), shaped
//! like `tokio::net`'s `TcpStream` and `TcpListener`: swap the type names and keep the code.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! use rdmasock::tokio::{RdmaListener, RdmaStream};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! let listener = RdmaListener::bind("127.0.0.1:0").await?;
//! let address = listener.local_addr()?;
//! let server = tokio::spawn(async move {
//!     let (mut stream, _peer) = listener.accept().await?;
//!     let mut request = [0; 4];
//!     stream.read_exact(&mut request).await?;
//!     stream.write_all(b"pong").await?;
//!     stream.shutdown().await
//! });
//!
//! let mut client = RdmaStream::connect(address).await?;
//! client.write_all(b"ping").await?;
//! let mut reply = [0; 4];
//! client.read_exact(&mut reply).await?;
//! assert_eq!(&reply, b"pong");
//! server.await.unwrap()?;
//! # Ok(())
//! # }
//! ```
//!
//! ## How readiness reaches the runtime
//!
//! A stream is driven by the task that polls it. Its reads and writes watch the
//! connection's own notification fds with tokio's reactor (`AsyncFd`): the completion
//! channel (on the userspace provider, the fd its engine signals) and the connection
//! manager's event fd (a disconnect). A call that cannot go on leaves the completion queue
//! armed (and polls it once more after arming, as a blocking call does before it sleeps)
//! and returns `Pending`; the channel's next event wakes the task, whose next poll reaps the
//! completions, feeds them to the stream engine and posts what it queued, all on the task.
//! No thread stands between the device and the runtime.
//!
//! On the userspace provider the reactor also watches the queue pair's TCP socket (the
//! channel's input watch, which the stream holds): the provider's engine thread leaves the
//! socket's input to the stream, so that an arriving message wakes the task directly and
//! the task reads it, as a blocking call sleeping on the channel does. While no task reads
//! (none polls the stream), the engine takes the input back within a millisecond and moves
//! the bytes itself. A stream whose fd is handed out ([`AsFd`](std::os::fd::AsFd)) gives the
//! input back for good, so that the fd's waiters are woken at once.
//!
//! Each direction also watches one of the socket's readiness eventfds: when the reader of
//! a split stream takes the completion the writer waits on (or the reverse), its progress
//! raises the writer's eventfd, so that neither half waits for an event the other consumed.
//!
//! The blocking socket's per-process readiness thread (`rdmasock-mio`, the one [`mio`]
//! registrations and the handed-out fd use) is not in the path. A stream puts its socket
//! under it only to send keepalives (a stream with a keepalive interval set), or when the
//! application asks for the fd ([`AsFd`](std::os::fd::AsFd)); the thread then makes
//! progress too and raises the same eventfds, and the stream works the same. A socket moves
//! between the two freely: [`RdmaStream::from_std`] takes a blocking socket (even one
//! registered with mio) and [`RdmaStream::into_std`] gives it back; what drives its
//! progress is whoever calls or waits on it. A process with streams therefore has the
//! runtime's threads and the runtime's blocking pool for the one thing that must not run on
//! a worker: the graceful close of a dropped stream. No thread per stream.
//!
//! A connect is a [`Connecting`](crate::Connecting) whose fd the reactor watches, with a
//! timer for its deadline (the runtime needs its time driver, as `enable_all` gives it).
//!
//! A listener hands the reactor an epoll instance of its own (a [`mio::Poll`]) watching the
//! listening rdma_cm fd, the fds of the connections whose handshake still runs and a timer
//! for their bounds, and accepts nonblocking: a client that stalls its handshake holds up no
//! other.
//!
//! ## Where it differs from `tokio::net`
//!
//! * [`poll_flush`](::tokio::io::AsyncWrite::poll_flush) (`flush().await`) completes when
//!   every byte written was placed in the peer's memory, as the blocking socket's `flush`
//!   does; `TcpStream`'s completes at once.
//! * [`poll_shutdown`](::tokio::io::AsyncWrite::poll_shutdown) (`shutdown().await`) is a
//!   half-close: end-of-stream goes after the data already written, and it completes once
//!   all of it is in the peer's memory. Reading goes on.
//! * Dropping a stream never blocks the runtime: the graceful close (end-of-stream, the
//!   disconnect handshake, bounded by the options' close timeout) runs on the runtime's
//!   blocking pool (inline when no runtime is current). Call `shutdown().await` to know
//!   when the peer has the bytes.
//! * Errors carry the same text as [`RdmaSocket`](crate::RdmaSocket)'s.
//!
//! Cancellation safety is as tokio documents for `TcpStream`: `read`, `write`, `readable`,
//! `writable`, `ready`, `peek` and `accept` may be dropped at any await without losing
//! bytes or connections (a `write` that did not complete wrote nothing); `connect` dropped
//! half-way leaves nothing behind.
#![forbid(unsafe_code)]

mod connect;
mod events;
mod iomap;
mod listener;
mod split;
mod stream;
mod zero_copy;

pub use listener::RdmaListener;
pub use split::{OwnedReadHalf, OwnedWriteHalf, ReadHalf, ReuniteError, WriteHalf};
pub use stream::RdmaStream;
