//! [`SocketOptions`]: what a user can set on a connection (ring sizes, inline threshold, queue
//! depths, event mode or busy-poll, signalling interval, keepalive, timeouts).
#![forbid(unsafe_code)]

use crate::protocol::{ConfigError, ProgressMode, StreamConfig, StreamConfigBuilder};
use crate::verbs::HugePages;
use std::time::Duration;

/// The options of one connection (or of every connection a listener accepts). Build them
/// with [`SocketOptions::builder`]; [`SocketOptions::default`] is rsocket's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketOptions {
    pub(crate) stream: StreamConfig,
    pub(crate) connect_timeout: Duration,
    pub(crate) close_timeout: Duration,
    pub(crate) keepalive: Option<Duration>,
    pub(crate) backlog: u32,
    /// The send ring's and the receive ring's sizes were chosen by the user (else a device
    /// whose registrations pin nothing gets [`UNPINNED_RING`]).
    pub(crate) rings_chosen: (bool, bool),
    /// The signalling interval was chosen by the user (else the userspace provider gets
    /// [`UNPINNED_SIGNAL_INTERVAL`]).
    pub(crate) interval_chosen: bool,
    /// Whether the send and receive rings go on 2 MiB huge pages.
    pub(crate) huge_pages: HugePages,
    /// Whether receives go on the device's shared receive queue where it has them (`None`:
    /// the default, see [`SocketOptionsBuilder::shared_receive_queue`]).
    pub(crate) shared_receive_queue: Option<bool>,
}

/// The default signalling interval on the userspace provider: one message in 8. There a send
/// completion says only that the bytes reached the kernel's TCP, and making, queueing and
/// feeding one per message costs ~300 instructions a message (callgrind, 4 KiB stream
/// writer: 6.27 K instructions a message with every message signalled, 5.98 K with one in
/// 8); the socket needs them only to reuse ring space. Kernel devices keep rsocket's 1.
pub const UNPINNED_SIGNAL_INTERVAL: u16 = 8;

/// The default ring size (each of send and receive) on a device whose memory registrations
/// pin nothing: the userspace provider's regions are ordinary memory, not counted against
/// RLIMIT_MEMLOCK, so its connections get the size that measured best instead of rsocket's
/// 128 KiB (bench_uiwarp, 1 MiB streams: 2191-2269 MB/s with 128 KiB rings against
/// 2716-2780 with 1 MiB, 7 rounds each, same run; 4 KiB streams about the same). Pages come
/// in only as data flows through them, as TCP's autotuned buffers (up to 4-6 MiB) do: the
/// socket brings each ring's pages in a window ahead of where bytes go next (growing with
/// use up to 64 KiB), with one `MADV_POPULATE_WRITE` per window, rather than one page fault
/// per page on the data path.
pub const UNPINNED_RING: usize = 1 << 20;

/// The size each ring starts at, and shrinks back to when idle, unless the user sized it:
/// a connection that moves little pins little (rsocket pins 128 KiB each way whatever the
/// traffic), and one that streams grows its rings to the largest size (128 KiB on a
/// kernel device, [`UNPINNED_RING`] on the userspace provider) while they are what holds it
/// back (see [`crate::protocol`]'s rings). 16 KiB holds a ping-pong of messages up to 8 KiB
/// without growth: the receive ring is advertised in halves, one message per half.
pub const DEFAULT_RING_MIN: usize = 16 * 1024;

/// How long a connection whose rings grew must see no data before its rings go back to
/// their smallest size.
pub const RING_IDLE: Duration = Duration::from_secs(1);

impl Default for SocketOptions {
    fn default() -> Self {
        let stream = StreamConfig::builder()
            .send_ring_range(DEFAULT_RING_MIN, 128 * 1024)
            .recv_ring_range(DEFAULT_RING_MIN, 128 * 1024)
            .build()
            .expect("the default rings are valid");
        SocketOptions {
            stream,
            connect_timeout: Duration::from_secs(10),
            close_timeout: Duration::from_secs(2),
            keepalive: None,
            backlog: 128,
            rings_chosen: (false, false),
            interval_chosen: false,
            huge_pages: HugePages::Never,
            shared_receive_queue: None,
        }
    }
}

impl SocketOptions {
    /// A builder starting from the defaults: rsocket's stream configuration (rings up to
    /// 128 KiB, or [`UNPINNED_RING`] on the userspace provider unless set, starting at
    /// [`DEFAULT_RING_MIN`] and growing while busy; 384-deep queues, 64-byte
    /// inline, every send signalled) with an adaptive busy-poll of at most 1 ms per wait
    /// (see [`adaptive`](SocketOptionsBuilder::adaptive)), a 10 s connect timeout, a 2 s
    /// bound on a graceful close, no keepalive, a backlog of 128.
    pub fn builder() -> SocketOptionsBuilder {
        SocketOptionsBuilder {
            stream: StreamConfig::builder()
                .send_ring_range(DEFAULT_RING_MIN, 128 * 1024)
                .recv_ring_range(DEFAULT_RING_MIN, 128 * 1024),
            rest: SocketOptions::default(),
        }
    }
    /// The stream engine's configuration.
    pub fn stream(&self) -> &StreamConfig {
        &self.stream
    }
    /// How long address/route resolution and the connection handshake may take.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }
    /// How long dropping a socket waits for its queued data and the disconnect handshake
    /// (on iWARP devices, for the peer's close).
    pub fn close_timeout(&self) -> Duration {
        self.close_timeout
    }
    /// The keepalive interval, if any.
    pub fn keepalive(&self) -> Option<Duration> {
        self.keepalive
    }
    /// The listen backlog.
    pub fn backlog(&self) -> u32 {
        self.backlog
    }
    /// Whether the send and receive rings go on 2 MiB huge pages.
    pub fn huge_pages(&self) -> HugePages {
        self.huge_pages
    }
    /// Whether the connection posts its receives on its device's shared receive queue, where
    /// the device has them, as chosen (`None`: not chosen, the default: off; see
    /// [`SocketOptionsBuilder::shared_receive_queue`]).
    pub fn shared_receive_queue(&self) -> Option<bool> {
        self.shared_receive_queue
    }

    /// Whether a connection posts its receives on its device's shared receive queue (where it
    /// has one).
    pub(crate) fn uses_shared_receive_queue(&self) -> bool {
        self.shared_receive_queue.unwrap_or(false)
    }

    /// Lets each ring the user did not size grow to [`UNPINNED_RING`] bytes, and the signalling
    /// interval [`UNPINNED_SIGNAL_INTERVAL`] unless the user chose one (a device whose
    /// registrations pin nothing: the userspace provider).
    pub(crate) fn unpinned_rings(&mut self) {
        if !self.rings_chosen.0 {
            self.stream.send_ring = UNPINNED_RING;
        }
        if !self.rings_chosen.1 {
            self.stream.recv_ring = UNPINNED_RING;
        }
        if !self.interval_chosen {
            // Valid with any queue depth: the smallest allowed (16) takes up to 8.
            self.stream.signal_interval = UNPINNED_SIGNAL_INTERVAL;
        }
    }
}

/// Builds [`SocketOptions`]; [`build`](Self::build) checks the values.
#[derive(Debug, Clone)]
pub struct SocketOptionsBuilder {
    stream: StreamConfigBuilder,
    rest: SocketOptions,
}

impl SocketOptionsBuilder {
    /// A fixed send-ring size in bytes (at least 4 KiB): the ring keeps this size. Default:
    /// from [`DEFAULT_RING_MIN`] growing up to 128 KiB, or up to [`UNPINNED_RING`] on a
    /// device whose registrations pin no memory (the userspace provider).
    pub fn send_ring(mut self, bytes: usize) -> Self {
        self.stream = self.stream.send_ring(bytes);
        self.rest.rings_chosen.0 = true;
        self
    }
    /// A fixed receive-ring size in bytes (even, at least 4 KiB, each half below 512 MiB).
    /// Default as for [`send_ring`](Self::send_ring).
    pub fn recv_ring(mut self, bytes: usize) -> Self {
        self.stream = self.stream.recv_ring(bytes);
        self.rest.rings_chosen.1 = true;
        self
    }
    /// A send ring that starts at `min` bytes, grows to `max` while writes find it
    /// full, and goes back to `min` after [`RING_IDLE`] without data.
    pub fn send_ring_range(mut self, min: usize, max: usize) -> Self {
        self.stream = self.stream.send_ring_range(min, max);
        self.rest.rings_chosen.0 = true;
        self
    }
    /// A receive ring that starts at `min` bytes, grows to `max` while the peer keeps
    /// it full, and goes back to `min` after [`RING_IDLE`] without data (once the peer has
    /// used the buffers it holds). Each size even.
    pub fn recv_ring_range(mut self, min: usize, max: usize) -> Self {
        self.stream = self.stream.recv_ring_range(min, max);
        self.rest.rings_chosen.1 = true;
        self
    }
    /// Send-queue depth (16…65534).
    pub fn send_queue_depth(mut self, depth: u16) -> Self {
        self.stream = self.stream.send_queue_depth(depth);
        self
    }
    /// Receive-queue depth (16…65534), also the credits granted to the peer.
    pub fn recv_queue_depth(mut self, depth: u16) -> Self {
        self.stream = self.stream.recv_queue_depth(depth);
        self
    }
    /// Largest payload posted inline.
    pub fn inline_threshold(mut self, bytes: u32) -> Self {
        self.stream = self.stream.inline_threshold(bytes);
        self
    }
    /// Signal one message in `n` (1: every message, like rsocket; control messages always).
    /// Default: 1, or [`UNPINNED_SIGNAL_INTERVAL`] on the userspace provider. On siw every
    /// work request is signalled whatever `n`: siw sends unsignalled ones from the ring's
    /// pages, and TCP may send them again after the ring was rewritten.
    pub fn signal_interval(mut self, n: u16) -> Self {
        self.stream = self.stream.signal_interval(n);
        self.rest.interval_chosen = true;
        self
    }
    /// Entries in this side's iomap table: how many windows the peer may map
    /// ([`RdmaSocket::iomap`](crate::RdmaSocket::iomap)) for this side's
    /// [`iowrite`](crate::RdmaSocket::iowrite) (rsocket's `RDMA_IOMAPSIZE`, rounded as it
    /// rounds; 0, the default, offers none). Both sides of an iomap ask: the writer for a
    /// table, the mapper by mapping into it.
    pub fn iomap_size(mut self, entries: u16) -> Self {
        self.stream = self.stream.iomap_size(entries);
        self
    }
    /// Largest single RDMA write of stream data.
    pub fn max_transfer(mut self, bytes: u32) -> Self {
        self.stream = self.stream.max_transfer(bytes);
        self
    }
    /// Event mode: arm the completion queue and sleep on its channel at once.
    pub fn event_mode(mut self) -> Self {
        self.stream = self.stream.progress(ProgressMode::Event);
        self
    }
    /// Busy-poll the completion queue for up to `spin` before sleeping.
    pub fn busy_poll(mut self, spin: Duration) -> Self {
        self.stream = self.stream.progress(ProgressMode::BusyPoll { spin });
        self
    }
    /// Busy-poll as long as this connection's recent waits lasted, up to `max_spin` per wait,
    /// and sleep when waits run longer (on a timer through most of a steady wait under 20 ms,
    /// then spin; on the completion channel otherwise); the default, with 1 ms. See
    /// [`ProgressMode::Adaptive`](crate::protocol::ProgressMode::Adaptive).
    pub fn adaptive(mut self, max_spin: Duration) -> Self {
        self.stream = self.stream.progress(ProgressMode::Adaptive { max_spin });
        self
    }
    /// How long resolution and the connection handshake may take (at least 1 ms).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.rest.connect_timeout = timeout;
        self
    }
    /// How long dropping a socket waits for queued data and the disconnect handshake.
    pub fn close_timeout(mut self, timeout: Duration) -> Self {
        self.rest.close_timeout = timeout;
        self
    }
    /// Send a keepalive (a zero-length RDMA WRITE) every `interval` while a blocking call
    /// waits or the socket is registered with mio; a dead peer then fails the connection
    /// (`None`: off, the default; see [`RdmaSocket::set_keepalive`](crate::RdmaSocket::set_keepalive)
    /// for how soon on each kind of device).
    pub fn keepalive(mut self, interval: Option<Duration>) -> Self {
        self.rest.keepalive = interval;
        self
    }
    /// The listen backlog (at least 1): how many connections a listener answers ahead of
    /// `accept` (handshakes under way included); a request beyond them is refused at once,
    /// as [`RdmaListener::accept`](crate::RdmaListener::accept) says.
    pub fn backlog(mut self, backlog: u32) -> Self {
        self.rest.backlog = backlog;
        self
    }
    /// Puts the send and receive rings on 2 MiB huge pages ([`HugePages::Prefer`]: where the
    /// hugetlb pool has them, else transparent huge pages; [`HugePages::Require`]: or the
    /// connection fails with what to reserve). Default [`HugePages::Never`]. It pays for large
    /// rings (`send_ring`/`recv_ring` of 1 MiB and up, and the userspace provider's 1 MiB
    /// default), whose pages then take a TLB entry each 2 MiB instead of each 4 KiB; a ring of
    /// the default 16..128 KiB would hold a whole 2 MiB page of the pool for a few KiB.
    /// docs/MEMORY.md#huge-pages.
    pub fn huge_pages(mut self, huge: HugePages) -> Self {
        self.rest.huge_pages = huge;
        self
    }

    /// Posts the connection's receives on a shared receive queue of its device (shared by the
    /// process's connections on it) instead of a receive queue of its queue pair's own, where
    /// the device has them (rxe and siw; the userspace provider and the rdma-core bridge have
    /// none and ignore this). The kernel then keeps no receive queue per connection, and on
    /// iWARP (siw) the message words land in one registration per queue instead of one per
    /// connection; the peer cannot tell. Off unless chosen: the queue must hold every
    /// connection's credits, so it saves little (docs/MEMORY.md#shared-receive-queues has the
    /// numbers), and a queue pair on it has no receives of its own to flush when it breaks,
    /// so a peer that vanishes without rsocket's DISCONNECT message is reported only when the
    /// close timeout ends, not at once.
    pub fn shared_receive_queue(mut self, on: bool) -> Self {
        self.rest.shared_receive_queue = Some(on);
        self
    }

    /// Checks every value and returns the options.
    pub fn build(self) -> Result<SocketOptions, ConfigError> {
        let stream = self.stream.build()?;
        let rest = self.rest;
        if rest.connect_timeout < Duration::from_millis(1) {
            return Err(ConfigError(format!(
                "a connect timeout of {:?} is below 1 ms",
                rest.connect_timeout
            )));
        }
        check_keepalive(rest.keepalive).map_err(ConfigError)?;
        if rest.backlog == 0 {
            return Err(ConfigError("a listen backlog of 0 accepts nothing".into()));
        }
        Ok(SocketOptions { stream, ..rest })
    }
}

/// A keepalive interval under 1 ms is refused (by the builder and by
/// `RdmaSocket::set_keepalive`), with the reason.
pub(crate) fn check_keepalive(interval: Option<Duration>) -> Result<(), String> {
    match interval {
        Some(k) if k < Duration::from_millis(1) => Err(format!(
            "a keepalive interval of {interval:?} is below 1 ms"
        )),
        _ => Ok(()),
    }
}

/// How long the transport may retry unacknowledged data once a keepalive `interval` is set:
/// three intervals, at least 2 s (so that a live peer's delayed ACK or a retransmission is
/// not taken for a vanished one) and at most 10 minutes (below TCP's own limit of about 15,
/// which a long interval must not stretch). Only uiwarp applies it (its liveness check of
/// the TCP connection); a vanished peer then fails the connection within about `interval`
/// plus this.
pub(crate) fn liveness_timeout(interval: Option<Duration>) -> Option<Duration> {
    interval.map(|k| {
        k.saturating_mul(3)
            .clamp(Duration::from_secs(2), Duration::from_secs(600))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsized_rings_grow_where_nothing_is_pinned() {
        let mut o = SocketOptions::default();
        o.unpinned_rings();
        assert_eq!(o.stream().send_ring(), UNPINNED_RING);
        assert_eq!(o.stream().recv_ring(), UNPINNED_RING);
        let mut o = SocketOptions::builder().recv_ring(8192).build().unwrap();
        o.unpinned_rings();
        assert_eq!(o.stream().send_ring(), UNPINNED_RING);
        assert_eq!(o.stream().recv_ring(), 8192, "a size the user chose stays");
        assert_eq!(o.stream().recv_ring_min(), 8192, "and is fixed");
        assert_eq!(o.stream().send_ring_min(), DEFAULT_RING_MIN);
    }

    #[test]
    fn the_signalling_interval_widens_where_nothing_is_pinned_unless_chosen() {
        let mut o = SocketOptions::default();
        assert_eq!(o.stream().signal_interval(), 1);
        o.unpinned_rings();
        assert_eq!(o.stream().signal_interval(), UNPINNED_SIGNAL_INTERVAL);
        let mut o = SocketOptions::builder()
            .send_queue_depth(16)
            .build()
            .unwrap();
        o.unpinned_rings();
        let c = o.stream();
        assert!(
            c.signal_interval() <= c.send_queue_depth() / 2,
            "valid with the smallest send queue"
        );
        let mut o = SocketOptions::builder().signal_interval(1).build().unwrap();
        o.unpinned_rings();
        assert_eq!(
            o.stream().signal_interval(),
            1,
            "an interval the user chose stays"
        );
    }

    #[test]
    fn defaults_are_rsockets() {
        let o = SocketOptions::default();
        assert_eq!(o.stream().send_ring(), 128 * 1024);
        assert_eq!(o.stream().send_ring_min(), DEFAULT_RING_MIN);
        assert_eq!(o.stream().recv_ring_min(), DEFAULT_RING_MIN);
        assert_eq!(o.stream().recv_queue_depth(), 384);
        assert_eq!(SocketOptions::builder().build().unwrap(), o);
    }

    #[test]
    fn builder_sets_and_checks_values() {
        let o = SocketOptions::builder()
            .send_ring(1 << 20)
            .recv_ring(1 << 20)
            .send_queue_depth(64)
            .recv_queue_depth(32)
            .inline_threshold(128)
            .signal_interval(8)
            .event_mode()
            .keepalive(Some(Duration::from_secs(1)))
            .backlog(4)
            .build()
            .unwrap();
        assert_eq!(o.stream().send_ring(), 1 << 20);
        assert_eq!(o.stream().recv_queue_depth(), 32);
        assert_eq!(o.stream().signal_interval(), 8);
        assert_eq!(o.stream().progress(), ProgressMode::Event);
        assert_eq!(o.keepalive(), Some(Duration::from_secs(1)));
        assert_eq!(o.backlog(), 4);
        assert_eq!(o.huge_pages(), HugePages::Never);
        let huge = SocketOptions::builder()
            .huge_pages(HugePages::Require)
            .build()
            .unwrap();
        assert_eq!(huge.huge_pages(), HugePages::Require);

        let e = SocketOptions::builder()
            .recv_ring(4097)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("even"), "{e}");
        let e = SocketOptions::builder().backlog(0).build().unwrap_err();
        assert!(e.to_string().contains("backlog"), "{e}");
        let e = SocketOptions::builder()
            .connect_timeout(Duration::ZERO)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("connect timeout"), "{e}");
        let e = SocketOptions::builder()
            .keepalive(Some(Duration::ZERO))
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("keepalive"), "{e}");
    }

    #[test]
    fn the_liveness_timeout_is_three_keepalives_within_two_seconds_and_ten_minutes() {
        let ms = Duration::from_millis;
        assert_eq!(liveness_timeout(None), None);
        assert_eq!(liveness_timeout(Some(ms(500))), Some(ms(2000)));
        assert_eq!(liveness_timeout(Some(ms(1000))), Some(ms(3000)));
        assert_eq!(liveness_timeout(Some(ms(60_000))), Some(ms(180_000)));
        assert_eq!(liveness_timeout(Some(ms(3_600_000))), Some(ms(600_000)));
        assert_eq!(
            liveness_timeout(Some(Duration::MAX)),
            Some(ms(600_000)),
            "no overflow"
        );
    }
}
