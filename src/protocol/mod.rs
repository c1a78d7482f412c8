//! The protocol engine: librdmacm rsocket's SOCK_STREAM wire protocol, sans-IO (the socket
//! type that drives it is [`RdmaSocket`](crate::RdmaSocket), in [`crate::socket`]).
//!
//! [`StreamEngine`] holds one connection's protocol state and nothing else: no verbs objects,
//! no sockets, no clock, no memory. The socket layer (the *driver*) glues it to a queue pair,
//! its completion queue and the connection manager:
//!
//! 1. Register a send ring ([`StreamConfig::send_ring_min`] bytes +
//!    [`StreamConfig::control_area_len`]), a remotely writable receive ring
//!    ([`StreamConfig::recv_ring_min`] bytes), a remotely writable, zeroed 32-byte
//!    target list (followed by the iomap table when one is configured:
//!    [`StreamConfig::target_area_len`] bytes in all; where [`StreamConfig::placement_fence`]
//!    is on, also remotely readable, with a few bytes after it for the sink of our own
//!    fences' READs, [`FENCE_READ_LEN`]), and in write+send mode a message area
//!    ([`StreamConfig::message_area_len`]). Create an RC queue pair with the configured depths
//!    (two send SGEs, the inline threshold, a completion queue of send + receive depth), and
//!    without `sq_sig_all` when the signal interval is above 1. Connect like rsocket:
//!    `flow_control = 1`, `retry_count = 7`, `rnr_retry_count = 7` (infinite receiver-not-ready
//!    retries carry control messages past a momentarily empty receive queue), and
//!    `initiator_depth = 1` on iWARP.
//! 2. [`StreamEngine::new`], post the queued [`Op::PostRecv`]s, put
//!    [`StreamEngine::hello`]`.to_bytes()` into the connect (or accept) private data.
//! 3. Parse the peer's private data with [`Hello::parse`] (reject the connection on error) and
//!    call [`StreamEngine::on_connected`]: on the active side when the connect response
//!    arrives; on the passive side before accepting, as rsocket does, because the peer may
//!    write as soon as it has our reply. Post the ops it queues once the queue pair can send.
//! 4. `write`/`read`/`peek` copy through [`CopySpan`]s (or a small write goes out at once
//!    as the [`InlineWrite`] that [`StreamEngine::write_inline`] returns, or a zero-copy
//!    write's messages carry [`Payload::Registered`] pieces of the caller's registered buffer,
//!    [`StreamEngine::write_registered`], to post from it); after every call
//!    and every completion, carry out all [`StreamEngine::pop_op`] ops in order, each as it
//!    is popped, and report [`StreamEngine::readiness`]. Receive reposts ([`Op::PostRecv`])
//!    are the exception: they may go after the sends queued with them, and up to
//!    [`RECV_DEFER_MAX`] of them may wait for the next call when nothing else is queued
//!    ([`StreamEngine::only_receives_queued`]).
//! 5. When [`StreamEngine::ring_change_pending`], after posting, carry out each
//!    [`StreamEngine::ring_change`] (register the ring asked for and install it, or refuse
//!    it); call [`StreamEngine::on_idle_tick`] on a timer while a ring is above its smallest
//!    size (see `rings.rs` for the rules that keep a plain rsocket peer's writes inside
//!    memory we still hold).
//! 6. Feed every completion: [`StreamEngine::on_send_completion`],
//!    [`StreamEngine::on_receive`] (with a snapshot of the target list) or
//!    [`StreamEngine::on_receive_failed`]; and the CM's DISCONNECTED event. After a receive,
//!    hand each iomap slot [`StreamEngine::take_iomap_update`] names to
//!    [`StreamEngine::on_iomap_entry`] (rsocket's `riomap`/`riowrite`: `iomap.rs`).
//!
//! Wire compatibility: the 40-byte hello, `op << 29 | value` messages as immediate data,
//! RDMA WRITE WITH IMM into the peer's advertised ring halves, credits and buffer updates
//! written into the peer's target list in the peer's byte order, SHUTDOWN / DISCONNECT control
//! messages, zero-length-write keepalives, and write+send mode for iWARP. Local improvements
//! that need no negotiation: configurable (bigger) rings and transfers, selective signalling,
//! credits returned from every read and completion rather than only when the application
//! calls in. Hello flag bit 7 announces rdmasock to a peer for future extensions; plain rsocket
//! ignores it.
#![forbid(unsafe_code)]

mod config;
mod control;
mod engine;
mod error;
// The fuzz targets' entry points: built only for `cargo fuzz` (which sets `--cfg fuzzing`)
// and for the seeded smoke test that `tests/run.sh` builds the same way.
#[cfg(fuzzing)]
pub mod fuzzing;
#[cfg(fuzzing)]
pub mod fuzzing_iomap;
mod hello;
mod inline_write;
mod iomap;
mod msg;
mod op;
mod op_queue;
mod recv;
mod registered_write;
mod rings;

pub use config::{
    ConfigError, ProgressMode, StreamConfig, StreamConfigBuilder, CONTROL_SLOTS, DEFAULT_MAX_SPIN,
    MAX_QUEUE_DEPTH, MIN_ADAPTIVE_SPIN, MIN_QUEUE_DEPTH, RECV_DEFER_MAX, RECV_RESERVE,
    RSOCKET_MAX_TRANSFER, SEND_LOW_WATER,
};
pub use engine::{StreamEngine, TARGET_ENTRIES, TARGET_LIST_LEN};
pub use error::StreamError;
pub use hello::{
    Hello, HelloError, FENCE_READ_LEN, FLAG_ANSWERS_FENCE, FLAG_BIG_ENDIAN, FLAG_IOMAP,
    FLAG_RDMASOCK, HELLO_LEN, HELLO_VERSION,
};
pub use inline_write::{InlineIowrite, InlineMessage, InlineWrite};
pub use iomap::{
    iomap_scale, iomap_size_from_scale, IomapEntry, IOMAP_ENTRY_LEN, MAX_IOMAP_ENTRIES,
};
pub use msg::{ByteOrder, Control, Message, RemoteSge, DATA_MASK, MESSAGE_WORD_LEN, SGE_LEN};
pub use op::{CopySpan, LocalRegions, Op, Payload, Readiness, Received, RingSpan, WrId};
pub use registered_write::RegisteredWrite;
pub use rings::RingChange;
