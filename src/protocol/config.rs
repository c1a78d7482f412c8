//! The knobs of one stream connection, with rsocket's defaults.
#![forbid(unsafe_code)]

use super::msg::{ByteOrder, DATA_MASK, MESSAGE_WORD_LEN};
use std::time::Duration;

/// rsocket's send-ring low-water mark: a sender needs this much free send ring to start a
/// transfer (`RS_SNDLOWAT`).
pub const SEND_LOW_WATER: usize = 2048;
/// Send-queue entries reserved for control messages (`RS_QP_CTRL_SIZE`).
pub const CONTROL_SLOTS: u32 = 4;
/// Receives posted beyond the credits granted. The peer's control messages (credit and
/// receive-ring updates, SHUTDOWN, DISCONNECT) consume a receive each but no credit, and a
/// receive comes back only when the socket feeds its completion: with every credit used by
/// data and none of it fed yet, a control message would find no receive posted. On
/// InfiniBand and RoCE the sender's RNR retries hide that (rsocket posts exactly its credits
/// and relies on them); iWARP has no RNR, and the connection breaks. Between two feeds the
/// peer can send only a few: its updates answer what we sent meanwhile, which the credits
/// and ring halves we knew at the last feed bound (at most about three credit updates and
/// two ring halves, often merged), plus one SHUTDOWN and one DISCONNECT.
pub const RECV_RESERVE: u16 = 16;
/// Receive reposts a driver may leave queued after it fed their completions, to post them
/// behind its next send ([`StreamEngine::only_receives_queued`](super::StreamEngine::only_receives_queued)):
/// they come out of [`RECV_RESERVE`], whose other three quarters still cover the few control
/// messages the peer can send meanwhile, so neither the credits granted nor those messages
/// can find no receive posted, however long the socket goes uncalled.
pub const RECV_DEFER_MAX: usize = 4;
const _: () = assert!(RECV_DEFER_MAX * 4 <= RECV_RESERVE as usize);
/// Smallest queue depth rsocket accepts (`RS_QP_MIN_SIZE`).
pub const MIN_QUEUE_DEPTH: u16 = 16;
/// Largest queue depth the 16-bit credit arithmetic allows (`RS_QP_MAX_SIZE`).
pub const MAX_QUEUE_DEPTH: u16 = 0xFFFE;
/// rsocket's largest single transfer (`RS_MAX_TRANSFER`).
pub const RSOCKET_MAX_TRANSFER: u32 = 65536;

/// How the socket layer waits for completions. The engine itself never waits; the socket layer
/// reads this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// Arm the completion queue and sleep on its channel (mio readiness).
    Event,
    /// Poll the completion queue for up to `spin` before arming and sleeping (rsocket spins
    /// 10 µs by default).
    BusyPoll {
        /// The spin budget per wait.
        spin: Duration,
    },
    /// Busy-poll as long as this connection's recent waits lasted (twice their decaying
    /// maximum, at least [`MIN_ADAPTIVE_SPIN`]), but never longer than `max_spin`. Once waits
    /// run longer than `max_spin`: when they are all alike and under 20 ms (large messages
    /// on a slow device), sleep on a timer until shortly before the shortest recent wait
    /// would end, then poll for up to `max_spin`; when only an outlier ran longer, poll four
    /// times the shortest recent wait (up to `max_spin`); otherwise (an idle peer) poll only
    /// the minimum and sleep on the completion channel. The default: a ping-pong spins
    /// through its round trip, an idle connection sleeps at once.
    Adaptive {
        /// The longest spin per wait.
        max_spin: Duration,
    },
}

/// The spin an adaptive wait always allows (rsocket's default busy-poll time).
pub const MIN_ADAPTIVE_SPIN: Duration = Duration::from_micros(10);
/// The default cap of an adaptive spin: under it a round trip of a soft device in a slow
/// virtual machine (rxe under qemu TCG: 60-600 µs) still spins; above it a thread sleeps.
pub const DEFAULT_MAX_SPIN: Duration = Duration::from_millis(1);

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid stream configuration: {0}")]
pub struct ConfigError(pub String);

/// The configuration of one stream connection. Build it with [`StreamConfig::builder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamConfig {
    pub(crate) send_ring: usize,
    pub(crate) recv_ring: usize,
    pub(crate) send_ring_min: usize,
    pub(crate) recv_ring_min: usize,
    pub(crate) send_queue_depth: u16,
    pub(crate) recv_queue_depth: u16,
    pub(crate) inline_threshold: u32,
    pub(crate) signal_interval: u16,
    pub(crate) max_transfer: u32,
    pub(crate) write_with_send: bool,
    pub(crate) placement_fence: bool,
    pub(crate) progress: ProgressMode,
    pub(crate) byte_order: ByteOrder,
    pub(crate) iomap_size: u16,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            send_ring: 128 * 1024,
            recv_ring: 128 * 1024,
            send_ring_min: 128 * 1024,
            recv_ring_min: 128 * 1024,
            send_queue_depth: 384,
            recv_queue_depth: 384,
            inline_threshold: 64,
            signal_interval: 1,
            max_transfer: RSOCKET_MAX_TRANSFER,
            write_with_send: false,
            placement_fence: false,
            progress: ProgressMode::Adaptive {
                max_spin: DEFAULT_MAX_SPIN,
            },
            byte_order: ByteOrder::native(),
            iomap_size: 0,
        }
    }
}

impl StreamConfig {
    /// A builder starting from rsocket's defaults: 128 KiB rings, 384-deep queues, 64-byte
    /// inline, every send signalled, 64 KiB transfers; waits busy-poll adaptively
    /// ([`ProgressMode::Adaptive`], where rsocket spins a fixed 10 µs).
    pub fn builder() -> StreamConfigBuilder {
        StreamConfigBuilder(StreamConfig::default())
    }

    /// The send ring's largest size in bytes (a fixed ring's size). A connection starts
    /// with [`send_ring_min`](Self::send_ring_min) bytes (register that much, plus
    /// [`Self::control_area_len`]) and grows up to this while its writers find the ring
    /// full (see [`StreamEngine::ring_change`](super::StreamEngine::ring_change)).
    pub fn send_ring(&self) -> usize {
        self.send_ring
    }
    /// The receive ring's largest size in bytes (a fixed ring's size). A connection starts
    /// with [`recv_ring_min`](Self::recv_ring_min) bytes (register that much, remotely
    /// writable) and grows up to this while the peer keeps it full.
    pub fn recv_ring(&self) -> usize {
        self.recv_ring
    }
    /// The send ring's size at connect, and the size an idle connection's send ring shrinks
    /// back to; equal to [`send_ring`](Self::send_ring) for a fixed ring.
    pub fn send_ring_min(&self) -> usize {
        self.send_ring_min
    }
    /// The receive ring's size at connect, and the size an idle connection's receive ring
    /// shrinks back to; equal to [`recv_ring`](Self::recv_ring) for a fixed ring.
    pub fn recv_ring_min(&self) -> usize {
        self.recv_ring_min
    }
    /// Whether either ring may change size during the connection.
    pub fn rings_adapt(&self) -> bool {
        self.send_ring_min != self.send_ring || self.recv_ring_min != self.recv_ring
    }
    /// Send-queue depth to create the queue pair with.
    pub fn send_queue_depth(&self) -> u16 {
        self.send_queue_depth
    }
    /// Receive-queue depth to create the queue pair with (also the credits granted).
    pub fn recv_queue_depth(&self) -> u16 {
        self.recv_queue_depth
    }
    /// Largest payload posted inline.
    pub fn inline_threshold(&self) -> u32 {
        self.inline_threshold
    }
    /// One message in this many is signalled (1 = all, like rsocket; the queue pair must be
    /// created without `sq_sig_all` for it to count).
    pub fn signal_interval(&self) -> u16 {
        self.signal_interval
    }
    /// Largest single RDMA write of stream data.
    pub fn max_transfer(&self) -> u32 {
        self.max_transfer
    }
    /// Whether data goes as RDMA WRITE + 4-byte SEND (iWARP, which has no write-with-immediate).
    pub fn write_with_send(&self) -> bool {
        self.write_with_send
    }
    /// Whether a flush or close proves placement with a placement fence in write+send mode
    /// (see [`StreamEngine::proves_placement_by_read`](super::StreamEngine::proves_placement_by_read)).
    pub fn placement_fence(&self) -> bool {
        self.placement_fence
    }
    /// How the socket layer waits.
    pub fn progress(&self) -> ProgressMode {
        self.progress
    }
    /// The byte order announced in our hello, in which the peer writes our target list.
    pub fn byte_order(&self) -> ByteOrder {
        self.byte_order
    }
    /// Entries in our iomap table: windows the peer may map for us to write into with
    /// `iowrite` (rsocket's `RDMA_IOMAPSIZE`; 0, the default, offers none).
    pub fn iomap_size(&self) -> u16 {
        self.iomap_size
    }
    /// Bytes of the remotely writable target-list registration: the 32-byte target list
    /// and the iomap table after it.
    pub fn target_area_len(&self) -> usize {
        super::engine::TARGET_LIST_LEN
            + super::iomap::IOMAP_ENTRY_LEN * usize::from(self.iomap_size)
    }
    /// Bytes of control staging after the send ring: four 16-byte slots for buffer
    /// advertisements when the inline threshold is below 16 (rsocket's layout).
    pub fn control_area_len(&self) -> usize {
        if self.inline_threshold < 16 {
            16 * CONTROL_SLOTS as usize
        } else {
            0
        }
    }
    /// Receives posted, and the receive queue's size: the credits granted
    /// ([`recv_queue_depth`](Self::recv_queue_depth)) and [`RECV_RESERVE`] for the peer's
    /// control messages.
    pub fn recv_posted(&self) -> u32 {
        u32::from(self.recv_queue_depth) + u32::from(RECV_RESERVE)
    }
    /// Bytes of the message-slot area (write+send mode: one 4-byte slot per receive).
    pub fn message_area_len(&self) -> usize {
        if self.write_with_send {
            MESSAGE_WORD_LEN * self.recv_posted() as usize
        } else {
            0
        }
    }
}

/// Builds a [`StreamConfig`].
#[derive(Debug, Clone)]
pub struct StreamConfigBuilder(StreamConfig);

impl StreamConfigBuilder {
    /// A fixed send-ring size in bytes (at least 4 KiB; rsocket's `wmem_default`): sets both
    /// the largest and the smallest size.
    pub fn send_ring(mut self, bytes: usize) -> Self {
        self.0.send_ring = bytes;
        self.0.send_ring_min = bytes;
        self
    }
    /// A fixed receive-ring size in bytes: even, at least 4 KiB, each half below 512 MiB (the
    /// 29-bit message limit); rsocket's `mem_default`. Sets both the largest and the
    /// smallest size.
    pub fn recv_ring(mut self, bytes: usize) -> Self {
        self.0.recv_ring = bytes;
        self.0.recv_ring_min = bytes;
        self
    }
    /// A send ring that starts at `min` bytes, grows to `max` while writers
    /// find it full, and shrinks back to `min` when the connection is idle. Each size as for
    /// [`send_ring`](Self::send_ring); `min <= max`.
    pub fn send_ring_range(mut self, min: usize, max: usize) -> Self {
        self.0.send_ring_min = min;
        self.0.send_ring = max;
        self
    }
    /// A receive ring that starts at `min` bytes, grows to `max` while the peer
    /// keeps it full, and shrinks back to `min` when the connection is idle. Each size as for
    /// [`recv_ring`](Self::recv_ring); `min <= max`.
    pub fn recv_ring_range(mut self, min: usize, max: usize) -> Self {
        self.0.recv_ring_min = min;
        self.0.recv_ring = max;
        self
    }
    /// Send-queue depth (16…65534).
    pub fn send_queue_depth(mut self, depth: u16) -> Self {
        self.0.send_queue_depth = depth;
        self
    }
    /// Receive-queue depth (16…65534); it is also the number of credits granted.
    pub fn recv_queue_depth(mut self, depth: u16) -> Self {
        self.0.recv_queue_depth = depth;
        self
    }
    /// Largest payload posted inline.
    pub fn inline_threshold(mut self, bytes: u32) -> Self {
        self.0.inline_threshold = bytes;
        self
    }
    /// Signal one send in `n` (1 = every send, rsocket's behaviour).
    pub fn signal_interval(mut self, n: u16) -> Self {
        self.0.signal_interval = n;
        self
    }
    /// Largest single RDMA write of stream data (rsocket: 64 KiB; larger is compatible).
    pub fn max_transfer(mut self, bytes: u32) -> Self {
        self.0.max_transfer = bytes;
        self
    }
    /// Use write+send mode (set it for iWARP devices).
    pub fn write_with_send(mut self, on: bool) -> Self {
        self.0.write_with_send = on;
        self
    }
    /// In write+send mode, against an rdmasock peer that answers one, make a flush or close
    /// prove placement with a one-byte RDMA READ of the peer's target list after the data,
    /// and say in the hello that this end answers one (set it for iWARP devices, and register
    /// the target list with remote read access; see
    /// [`StreamEngine::proves_placement_by_read`](super::StreamEngine::proves_placement_by_read)).
    pub fn placement_fence(mut self, on: bool) -> Self {
        self.0.placement_fence = on;
        self
    }
    /// How the socket layer waits for completions.
    pub fn progress(mut self, mode: ProgressMode) -> Self {
        self.0.progress = mode;
        self
    }
    /// The byte order announced in the hello (default: this machine's). Any order works since
    /// the engine decodes target-list entries itself; this exists for interoperability tests.
    pub fn byte_order(mut self, order: ByteOrder) -> Self {
        self.0.byte_order = order;
        self
    }

    /// Entries in our iomap table, rounded as rsocket's `RDMA_IOMAPSIZE` rounds them (up
    /// to 128 as given, above that down to a multiple of 256, at most 32512): the windows
    /// the peer may map for us to write into. 0 (the default) offers none, and the hello
    /// then announces no iomap support.
    pub fn iomap_size(mut self, entries: u16) -> Self {
        self.0.iomap_size = super::iomap::iomap_size_from_scale(super::iomap::iomap_scale(entries));
        self
    }

    /// Checks the values and returns the configuration.
    pub fn build(self) -> Result<StreamConfig, ConfigError> {
        let c = self.0;
        let err = |s: String| Err(ConfigError(s));
        if c.send_ring < 4096 {
            return err(format!("send ring of {} bytes is below 4096", c.send_ring));
        }
        if c.recv_ring < 4096 || !c.recv_ring.is_multiple_of(2) {
            return err(format!(
                "receive ring of {} bytes must be even and at least 4096",
                c.recv_ring
            ));
        }
        if c.send_ring_min < 4096 || c.send_ring_min > c.send_ring {
            return err(format!(
                "smallest send ring of {} bytes must be between 4096 and the largest ({})",
                c.send_ring_min, c.send_ring
            ));
        }
        if c.recv_ring_min < 4096
            || !c.recv_ring_min.is_multiple_of(2)
            || c.recv_ring_min > c.recv_ring
        {
            return err(format!(
                "smallest receive ring of {} bytes must be even and between 4096 and the \
                 largest ({})",
                c.recv_ring_min, c.recv_ring
            ));
        }
        if c.recv_ring / 2 > DATA_MASK as usize {
            return err(format!(
                "receive ring of {} bytes: each half must stay below 512 MiB",
                c.recv_ring
            ));
        }
        for (name, d) in [
            ("send", c.send_queue_depth),
            ("receive", c.recv_queue_depth),
        ] {
            if !(MIN_QUEUE_DEPTH..=MAX_QUEUE_DEPTH).contains(&d) {
                return err(format!(
                    "{name} queue depth {d} is outside {MIN_QUEUE_DEPTH}..={MAX_QUEUE_DEPTH}"
                ));
            }
        }
        if c.signal_interval == 0 || c.signal_interval > c.send_queue_depth / 2 {
            return err(format!(
                "signal interval {} must be between 1 and half the send queue depth ({})",
                c.signal_interval,
                c.send_queue_depth / 2
            ));
        }
        if c.max_transfer == 0 || c.max_transfer > DATA_MASK {
            return err(format!(
                "max transfer {} must be between 1 and {DATA_MASK}",
                c.max_transfer
            ));
        }
        if c.write_with_send && (c.inline_threshold as usize) < MESSAGE_WORD_LEN {
            return err(format!(
                "write+send mode needs an inline threshold of at least 4 bytes (got {})",
                c.inline_threshold
            ));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_rsockets() {
        let c = StreamConfig::builder().build().unwrap();
        assert_eq!((c.send_ring(), c.recv_ring()), (131072, 131072));
        assert_eq!((c.send_queue_depth(), c.recv_queue_depth()), (384, 384));
        assert_eq!(c.inline_threshold(), 64);
        assert_eq!(c.control_area_len(), 0);
        assert_eq!(c.message_area_len(), 0);
    }

    #[test]
    fn rejects_bad_values() {
        assert!(StreamConfig::builder().recv_ring(4097).build().is_err());
        assert!(StreamConfig::builder().send_ring(100).build().is_err());
        assert!(StreamConfig::builder().recv_queue_depth(8).build().is_err());
        assert!(StreamConfig::builder().signal_interval(0).build().is_err());
        assert!(StreamConfig::builder()
            .recv_ring_range(8192, 4096)
            .build()
            .is_err());
        assert!(StreamConfig::builder()
            .recv_ring_range(8193, 16384)
            .build()
            .is_err());
        assert!(StreamConfig::builder()
            .send_ring_range(1024, 16384)
            .build()
            .is_err());
        let c = StreamConfig::builder()
            .recv_ring_range(16384, 1 << 20)
            .build()
            .unwrap();
        assert!(c.rings_adapt());
        assert_eq!((c.recv_ring_min(), c.recv_ring()), (16384, 1 << 20));
        assert!(StreamConfig::builder()
            .write_with_send(true)
            .inline_threshold(0)
            .build()
            .unwrap_err()
            .to_string()
            .contains("inline"));
        let c = StreamConfig::builder()
            .inline_threshold(0)
            .write_with_send(false);
        assert_eq!(c.build().unwrap().control_area_len(), 64);
    }
}
