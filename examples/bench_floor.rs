//! `bench_floor`: the floor under `RdmaSocket`'s ping-pong latency on a RoCE or InfiniBand
//! device: a raw verbs ping-pong that puts on the wire what `RdmaSocket` puts there (one
//! RDMA WRITE WITH IMMEDIATE a message into the peer's receive ring, at an offset that
//! moves on, the length in the immediate), run two ways:
//!
//! - `raw`: the transport alone: no copy, no lock (a small message goes inline from the
//!   caller's buffer, a larger one from a registered buffer that never changes);
//! - `socket`: `raw` plus the least any socket stream must do: a lock taken by every call
//!   (the socket is shared between threads), the received bytes copied out of the ring into
//!   the caller's buffer, and above the inline size the caller's bytes copied into a
//!   registered send ring (at most the inline size goes from the caller's buffer, as
//!   `RdmaSocket` sends it). No clock is read and nothing yields while polling.
//!
//! Anything that does what a stream socket must cannot be faster than `socket` on the same
//! transport: tests/vm/bench-socket.sh prints it beside `RdmaSocket`, `ib_send_lat` and
//! `rstream` in the same boot, so the ratios say which latency targets a socket can meet
//! there at all.
//!
//! ```text
//! bench_floor [--device NAME] [--sizes 64,4096,65536] [--iters N] [--ways raw,socket]
//! ```
//!
//! Both ends run in this process, as two threads, each with its own queue pair, completion
//! queue and 128 KiB receive ring (`RdmaSocket`'s default), connected to each other through
//! the device's first IPv4 RoCE v2 GID (or port 1's LID on InfiniBand). Every send is
//! signalled and every completion's status checked. For each way and size: `N` ping-pongs
//! after `N/10` warm-up ones, one-way time (half the round trip) per round trip, printed as
//!
//! ```text
//! RESULT floor raw 64 AVG_USEC MEDIAN_USEC
//! ```
use rdmasock::verbs::qp_attr::{AddressVector, GlobalRoute};
use rdmasock::verbs::{
    AccessFlags, CompletionQueue, Context, Gid, GidType, InitAttributes, MemoryRegion, Mtu, Psn,
    QpCapabilities, QpInitAttributes, QueuePair, RecvRequest, RemoteKey, RtrAttributes,
    RtsAttributes, ScatterGather, SendFlags, SendOp, SendRequest, Transport, WcOpcode,
    WorkCompletion,
};
use std::net::Ipv6Addr;
use std::process::ExitCode;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

#[path = "common/clock.rs"]
#[allow(dead_code)] // the percentiles are bench_socket's
mod clock;
use clock::RoundTrips;

/// Each side's receive ring (and send ring, for the copies of the `socket` way).
const RING: usize = 128 * 1024;
/// Receives kept posted, and the send queue's depth.
const DEPTH: u32 = 64;
/// The most bytes sent inline (`RdmaSocket`'s default inline threshold).
const INLINE: usize = 64;
/// How long a receive waits for the peer's message before it gives up (the peer failed).
const WAIT_LIMIT: Duration = Duration::from_secs(10);
/// The clock is read once in this many empty polls (only to bound the wait).
const POLLS_PER_CLOCK_READ: u32 = 4096;
const SEND_WRID: u64 = 1;
const RECV_WRID: u64 = 2;

type Result<T> = std::result::Result<T, String>;

/// What each message costs besides the transport.
#[derive(Clone, Copy, PartialEq)]
enum Way {
    Raw,
    Socket,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::Raw => "raw",
            Way::Socket => "socket",
        }
    }
}

struct Args {
    device: String,
    sizes: Vec<usize>,
    iters: usize,
    ways: Vec<Way>,
}

fn args() -> Result<Args> {
    let mut a = Args {
        device: "rxe0".into(),
        sizes: vec![64, 4096, 65536],
        iters: 200,
        ways: vec![Way::Raw, Way::Socket],
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--device" => a.device = value,
            "--sizes" => a.sizes = value.split(',').map(num).collect::<Result<_>>()?,
            "--iters" => a.iters = num(&value)?,
            "--ways" => {
                a.ways = value
                    .split(',')
                    .map(|w| match w {
                        "raw" => Ok(Way::Raw),
                        "socket" => Ok(Way::Socket),
                        _ => Err(format!("--ways {w}: expected raw or socket")),
                    })
                    .collect::<Result<_>>()?
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    if a.iters == 0 || a.sizes.is_empty() || a.ways.is_empty() {
        return Err("iterations, sizes and ways must not be empty or zero".into());
    }
    if let Some(s) = a.sizes.iter().find(|&&s| s == 0 || !RING.is_multiple_of(s)) {
        return Err(format!("size {s}: must divide the {RING}-byte ring"));
    }
    Ok(a)
}

/// One end: its queue pair and the rings the peer writes into and it sends from.
struct Side {
    qp: QueuePair,
    cq: CompletionQueue,
    recv_ring: MemoryRegion,
    send_ring: MemoryRegion,
}

/// Where the peer's receive ring is.
#[derive(Clone, Copy)]
struct Peer {
    addr: u64,
    rkey: RemoteKey,
}

/// How the two queue pairs reach each other through the device's port 1.
struct Route {
    grh: Option<GlobalRoute>,
    lid: u16,
    path_mtu: Mtu,
}

fn route(context: &Context) -> Result<Route> {
    let device = context.device();
    let kind = match device.transport {
        Transport::InfiniBand => None,
        Transport::Iwarp => Some("an iWARP"),
        Transport::Usnic => Some("a usNIC"),
        Transport::Unknown => Some("an unknown-transport"),
    };
    if let Some(kind) = kind {
        return Err(format!(
            "{} is {kind} device: bench_floor connects its queue pairs without the connection \
             manager, which only RoCE and InfiniBand allow (pick one with --device)",
            device.name
        ));
    }
    let port = context
        .query_port(1)
        .map_err(|e| format!("query port 1: {e}"))?;
    let path_mtu = port.active_mtu().ok_or("port 1 reports no active MTU")?;
    if !port.is_ethernet() {
        return Ok(Route {
            grh: None,
            lid: port.lid,
            path_mtu,
        });
    }
    let name = &device.name;
    let gids = &device.port(1).ok_or(format!("{name} has no port 1"))?.gids;
    let v4_mapped = |g: Gid| Ipv6Addr::from(g).to_ipv4_mapped().is_some();
    let entry = gids
        .iter()
        .find(|g| g.gid_type == GidType::RoceV2 && v4_mapped(g.gid))
        .ok_or(format!(
            "{name} has no IPv4 RoCE v2 GID: give its netdev an IPv4 address"
        ))?;
    Ok(Route {
        path_mtu,
        grh: Some(GlobalRoute {
            dgid: entry.gid,
            flow_label: 0,
            sgid_index: entry.index as u8,
            hop_limit: 64,
            traffic_class: 0,
        }),
        lid: 0,
    })
}

fn side(context: &Context) -> Result<Side> {
    let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let pd = context.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    let cq = context
        .create_cq(2 * DEPTH, None)
        .map_err(|e| format!("create_cq: {e}"))?;
    let init = QpInitAttributes {
        caps: QpCapabilities {
            max_send_wr: DEPTH,
            max_recv_wr: DEPTH,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: INLINE as u32,
        },
        sq_sig_all: false,
    };
    let qp = pd
        .create_qp(&init, &cq, &cq)
        .map_err(|e| format!("create_qp: {e}"))?;
    let recv_ring = pd
        .register(RING, remote)
        .map_err(|e| format!("register: {e}"))?;
    let send_ring = pd
        .register(RING, AccessFlags::LOCAL_WRITE)
        .map_err(|e| format!("register: {e}"))?;
    qp.to_init(&InitAttributes {
        pkey_index: 0,
        port_num: 1,
        access: remote,
    })
    .map_err(|e| format!("QP to INIT: {e}"))?;
    Ok(Side {
        qp,
        cq,
        recv_ring,
        send_ring,
    })
}

/// RTR towards `peer`'s queue pair, then RTS.
fn connect(qp: &QueuePair, peer: &QueuePair, route: &Route) -> Result<()> {
    let psn = |qp: &QueuePair| Psn(qp.qp_num().0 & 0xff_ffff);
    qp.to_rtr(&RtrAttributes {
        path_mtu: route.path_mtu,
        dest_qp_num: peer.qp_num(),
        rq_psn: psn(peer),
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: AddressVector {
            grh: route.grh,
            dlid: route.lid,
            port_num: 1,
            ..Default::default()
        },
    })
    .map_err(|e| format!("QP to RTR: {e}"))?;
    qp.to_rts(&RtsAttributes {
        sq_psn: psn(qp),
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
    })
    .map_err(|e| format!("QP to RTS: {e}"))
}

/// One end's ping-pong loop state.
struct End {
    side: Side,
    peer: Peer,
    way: Way,
    size: usize,
    /// Where the next message goes in the peer's ring (and in our send ring).
    send_at: usize,
    /// Where the next message lands in our receive ring.
    recv_at: usize,
    /// Taken by every call of the `socket` way.
    lock: Mutex<()>,
    wcs: [WorkCompletion; 8],
}

impl End {
    fn post_recvs(&self, n: u32) -> Result<()> {
        let wr = RecvRequest {
            wr_id: RECV_WRID,
            sg_list: &[],
        };
        for _ in 0..n {
            self.side
                .qp
                .post_recv(&[wr])
                .map_err(|e| format!("post_recv: {e}"))?;
        }
        Ok(())
    }

    /// Sends `data` (what the caller writes).
    fn send(&mut self, data: &[u8]) -> Result<()> {
        let _guard = (self.way == Way::Socket).then(|| self.lock.lock());
        let inline = data.len() <= INLINE;
        let sg = if inline {
            ScatterGather::borrowed(data)
        } else {
            if self.way == Way::Socket {
                self.side
                    .send_ring
                    .write_at(self.send_at, data)
                    .map_err(|e| e.to_string())?;
            }
            self.side
                .send_ring
                .slice(self.send_at, data.len())
                .map_err(|e| e.to_string())?
        };
        let op = SendOp::RdmaWriteWithImm {
            remote_addr: self.peer.addr + self.send_at as u64,
            rkey: self.peer.rkey,
            imm: data.len() as u32,
        };
        let mut flags = SendFlags::SIGNALED;
        if inline {
            flags |= SendFlags::INLINE;
        }
        let sgs = [sg];
        let wr = SendRequest::new(SEND_WRID, op, &sgs).with_flags(flags);
        self.side
            .qp
            .post_send(&[wr])
            .map_err(|e| format!("post_send: {e}"))?;
        self.send_at = (self.send_at + data.len()) % RING;
        Ok(())
    }

    /// Busy-polls until the peer's next message is in; copies it into `out` (`socket` way).
    fn receive(&mut self, out: &mut [u8]) -> Result<()> {
        let mut polls = 0u32;
        let mut started = None;
        loop {
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(POLLS_PER_CLOCK_READ) {
                let now = Instant::now();
                if now.duration_since(*started.get_or_insert(now)) > WAIT_LIMIT {
                    return Err(format!(
                        "no message from the other end within {WAIT_LIMIT:?} (it failed, or \
                         the device dropped the connection)"
                    ));
                }
            }
            let _guard = (self.way == Way::Socket).then(|| self.lock.lock());
            let n = self
                .side
                .cq
                .poll(&mut self.wcs)
                .map_err(|e| format!("poll_cq: {e}"))?
                .len();
            let mut received = None;
            for wc in &self.wcs[..n] {
                let status = wc.status();
                if !status.is_success() {
                    return Err(format!(
                        "work request {} completed with status {} ({status}, vendor error {:#x})",
                        wc.wr_id, wc.status, wc.vendor_err
                    ));
                }
                if wc.wr_id == RECV_WRID {
                    if wc.opcode() != WcOpcode::RecvRdmaWithImm || wc.imm_data as usize != self.size
                    {
                        return Err(format!(
                            "a receive completed as {:?} with immediate {}, not a {}-byte write",
                            wc.opcode(),
                            wc.imm_data,
                            self.size
                        ));
                    }
                    received = Some(wc.imm_data as usize);
                }
            }
            if let Some(len) = received {
                if self.way == Way::Socket {
                    self.side
                        .recv_ring
                        .read_at(self.recv_at, &mut out[..len])
                        .map_err(|e| e.to_string())?;
                }
                self.recv_at = (self.recv_at + len) % RING;
                return self.post_recvs(1);
            }
        }
    }
}

/// (average, median) one-way microseconds of `iters` round trips of `size` bytes.
fn pingpong(
    context: &Context,
    route: &Route,
    way: Way,
    size: usize,
    iters: usize,
) -> Result<(f64, f64)> {
    let (a, b) = (side(context)?, side(context)?);
    connect(&a.qp, &b.qp, route)?;
    connect(&b.qp, &a.qp, route)?;
    let peer = |s: &Side| Peer {
        addr: s.recv_ring.addr(),
        rkey: s.recv_ring.rkey(),
    };
    let end = |side: Side, peer: Peer| End {
        side,
        peer,
        way,
        size,
        send_at: 0,
        recv_at: 0,
        lock: Mutex::new(()),
        wcs: [WorkCompletion::default(); 8],
    };
    let (pa, pb) = (peer(&a), peer(&b));
    let mut client = end(a, pb);
    let mut server = end(b, pa);
    client.post_recvs(DEPTH)?;
    server.post_recvs(DEPTH)?;
    let warm = iters / 10;
    let echo = thread::spawn(move || -> Result<()> {
        let mut buf = vec![0u8; size];
        for _ in 0..iters + warm {
            server.receive(&mut buf)?;
            server.send(&buf)?;
        }
        Ok(())
    });
    let out: Vec<u8> = (0..size).map(|i| (i * 7) as u8).collect();
    let mut back = vec![0u8; size];
    let mut clock = RoundTrips::new(warm, iters);
    let mut run = || -> Result<()> {
        for _ in 0..iters + warm {
            clock.start();
            client.send(&out)?;
            client.receive(&mut back)?;
            if way == Way::Socket && back != out {
                return Err("the echo differs from what was sent".into());
            }
        }
        Ok(())
    };
    let ran = run();
    // Each end gives up WAIT_LIMIT after the other stops sending: both errors are told.
    let echoed = echo
        .join()
        .map_err(|_| "the echo thread panicked".to_string())?;
    match (ran, echoed) {
        (Ok(()), Ok(())) => {}
        (Err(e), Ok(())) => return Err(format!("client: {e}")),
        (Ok(()), Err(e)) => return Err(format!("echo: {e}")),
        (Err(a), Err(b)) => return Err(format!("client: {a}; echo: {b}")),
    }
    let samples = clock.finish(2.0);
    Ok((samples.average(), samples.median()))
}

fn main() -> ExitCode {
    let run = || -> Result<()> {
        let a = args()?;
        let context = rdmasock::open_device(Some(&a.device)).map_err(|e| e.to_string())?;
        let route = route(&context)?;
        for &way in &a.ways {
            for &size in &a.sizes {
                let (avg, median) = pingpong(&context, &route, way, size, a.iters)?;
                println!("RESULT floor {} {size} {avg:.2} {median:.2}", way.name());
            }
        }
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "bench_floor: {e}\nusage: bench_floor [--device NAME] [--sizes 64,4096,65536] [--iters N] [--ways raw,socket]"
            );
            ExitCode::FAILURE
        }
    }
}
