//! `rc_pingpong`: the twin of rdma-core's `ibv_rc_pingpong`, and interoperable with it.
//!
//! Two processes exchange LID/QPN/PSN/GID over TCP, connect an RC queue pair by hand
//! (INIT → RTR → RTS) and bounce SEND messages back and forth:
//!
//! ```text
//! rc_pingpong [options]          start a server and wait for a connection
//! rc_pingpong [options] <host>   connect to the server at <host>
//!   -p, --port=<port>      listen on/connect to port <port> (default 18515)
//!   -d, --ib-dev=<dev>     use IB device <dev> (default first device found)
//!   -i, --ib-port=<port>   use port <port> of IB device (default 1)
//!   -s, --size=<size>      size of message to exchange (default 4096)
//!   -m, --mtu=<size>       path MTU (default 1024)
//!   -r, --rx-depth=<dep>   number of receives to post at a time (default 500)
//!   -n, --iters=<iters>    number of exchanges (default 1000)
//!   -l, --sl=<sl>          service level value
//!   -e, --events           sleep on CQ events (default poll)
//!   -g, --gid-idx=<gid index> local port gid index (needed on RoCE: -g 1 for IPv4)
//!   -c, --chk              validate received buffer
//!   -o, --odp              use on demand paging
//!   -O, --iodp             use implicit on demand paging
//!   -P, --prefetch         prefetch an ODP MR
//!   -t, --ts               get CQE with timestamp
//!   -j, --dm               use device memory
//!   -N, --new_send         use new post send WR API
//! ```
//!
//! `-o -O -P -t -j` need device capabilities: where the device lacks one, the twin says what
//! ibv_rc_pingpong says and exits as it does; where the device has it but rdmasock's verbs
//! layer cannot use it (all but `-o`), it says so and exits non-zero (see `features.rs`).
//! `-N` posts each send as the work-request builder would (one SEND of the whole buffer),
//! so nothing changes on the wire. iWARP devices cannot be connected this way (their QPs
//! move to RTS only through the connection manager): use the cm-based `pingpong` example
//! there.
#![forbid(unsafe_code)]

#[path = "../common/mod.rs"]
mod common;
mod features;
mod options;

use common::pingpong::{client_exchange, server_exchange, Destination};
use options::{parse_config, Config};
use rdmasock::verbs::qp_attr::{AddressVector, GlobalRoute};
use rdmasock::verbs::{
    AccessFlags, CompletionChannel, CompletionQueue, Context, DeviceList, Gid, InitAttributes,
    MemoryRegion, Psn, QpCapabilities, QpInitAttributes, QpNumber, QueuePair, RecvRequest,
    RtrAttributes, RtsAttributes, SendFlags, SendOp, SendRequest, WcStatus, WorkCompletion,
};
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// Receives posted per `post_recv` call when topping up the ring.
const RECV_BATCH: usize = 64;
/// The page size `-c` marks pages with (x86-64 and arm64 4 KiB pages).
const PAGE_SIZE: usize = 4096;

/// The verbs objects of one run (`struct pingpong_context`).
struct Pingpong {
    qp: QueuePair,
    cq: CompletionQueue,
    channel: Option<CompletionChannel>,
    mr: MemoryRegion,
    context: Context,
    size: usize,
    rx_depth: u32,
    send_flags: SendFlags,
    pending: u64,
}

/// Prints `what` and the error, and gives the exit code to return.
fn fail(what: &str, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("{what}: {e}");
    ExitCode::FAILURE
}

/// ibv_rc_pingpong's "No IB devices found", and where the userspace provider cannot help.
fn no_device(e: rdmasock::verbs::Error) -> ExitCode {
    let code = fail("No IB devices found", &e);
    if matches!(e, rdmasock::verbs::Error::NoDevice) {
        eprintln!(
            "rc_pingpong connects its QP by hand, which only InfiniBand and RoCE devices allow; \
             the userspace provider is iWARP. Without a kernel device, run the cm-based example: \
             `cargo run --release --example pingpong -- --local`"
        );
    }
    code
}

impl Pingpong {
    /// `pp_init_ctx`: buffer, PD, MR, CQ (rx_depth + 1), RC QP (1 send, rx_depth receives),
    /// INIT with no remote access. `access` adds to the buffer's registration (`-o`).
    fn new(context: Context, c: &Config, access: AccessFlags) -> Result<Pingpong, ExitCode> {
        let channel = if c.events {
            let channel = context
                .create_comp_channel()
                .map_err(|e| fail("Couldn't create completion channel", e))?;
            // rdma-core's channel fd blocks: its ibv_get_cq_event is one read(2). Ours is
            // non-blocking for poll/mio; this loop only waits on it, so block as rdma-core
            // does where the provider can (kernel devices). Elsewhere (or should the fcntl
            // fail) wait() keeps polling the fd first, which is as correct, one call dearer.
            let _ = channel.set_blocking(true);
            Some(channel)
        } else {
            None
        };
        let pd = context
            .alloc_pd()
            .map_err(|e| fail("Couldn't allocate PD", e))?;
        let mr = pd
            .register(c.size, AccessFlags::LOCAL_WRITE | access)
            .map_err(|e| fail("Couldn't register MR", e))?;
        mr.write_at(0, &vec![0x7b; c.size])
            .map_err(|e| fail("Couldn't allocate work buf", e))?;
        let cq = context
            .create_cq(c.rx_depth + 1, channel.as_ref())
            .map_err(|e| fail("Couldn't create CQ", e))?;
        let init = QpInitAttributes {
            caps: QpCapabilities {
                max_send_wr: 1,
                max_recv_wr: c.rx_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        };
        let qp = pd
            .create_qp(&init, &cq, &cq)
            .map_err(|e| fail("Couldn't create QP", e))?;
        let mut send_flags = SendFlags::SIGNALED;
        if qp.caps().max_inline_data as usize >= c.size {
            send_flags |= SendFlags::INLINE;
        }
        qp.to_init(&InitAttributes {
            pkey_index: 0,
            port_num: c.ib_port,
            access: AccessFlags::empty(),
        })
        .map_err(|e| fail("Failed to modify QP to INIT", e))?;
        Ok(Pingpong {
            qp,
            cq,
            channel,
            mr,
            context,
            size: c.size,
            rx_depth: c.rx_depth,
            send_flags,
            pending: 0,
        })
    }

    /// Posts up to `n` receives of the whole buffer; returns how many were posted. They go
    /// in lists of up to [`RECV_BATCH`] (one call, one lock, one index store per list).
    fn post_recv(&self, n: u32) -> u32 {
        let Ok(sge) = self.mr.slice(0, self.size) else {
            return 0;
        };
        let sg = [sge];
        let wrs = [RecvRequest {
            wr_id: RECV_WRID,
            sg_list: &sg,
        }; RECV_BATCH];
        let mut posted = 0;
        while posted < n {
            let batch = ((n - posted) as usize).min(RECV_BATCH);
            match self.qp.post_recv(&wrs[..batch]) {
                Ok(()) => posted += batch as u32,
                Err(e) => return posted + e.index as u32,
            }
        }
        posted
    }

    /// Posts one signaled SEND of the whole buffer. With `-N` ibv_rc_pingpong builds the
    /// same request through `ibv_wr_start`/`ibv_wr_send`/`ibv_wr_set_sge`/`ibv_wr_complete`;
    /// that API only changes how a program hands the request over, so the twin posts it the
    /// one way rdmasock's verbs layer has, and the peer sees the same SEND.
    fn post_send(&self) -> Result<(), String> {
        let sg = [self.mr.slice(0, self.size).map_err(|e| e.to_string())?];
        let wr = [SendRequest::new(SEND_WRID, SendOp::Send, &sg).with_flags(self.send_flags)];
        self.qp.post_send(&wr).map_err(|e| e.to_string())
    }

    /// `pp_connect_ctx`: RTR towards `remote` (with a GRH when its GID has an interface id),
    /// then RTS, with rdma-core's attribute values.
    fn connect(&self, c: &Config, my_psn: u32, remote: &Destination) -> Result<(), String> {
        let grh = (remote.gid.interface_id() != 0).then(|| GlobalRoute {
            dgid: remote.gid,
            flow_label: 0,
            sgid_index: c.gid_index.unwrap_or(0) as u8,
            hop_limit: 1,
            traffic_class: 0,
        });
        let rtr = RtrAttributes {
            path_mtu: c.mtu,
            dest_qp_num: QpNumber(remote.qpn),
            rq_psn: Psn(remote.psn),
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah_attr: AddressVector {
                grh,
                dlid: remote.lid,
                sl: c.sl,
                src_path_bits: 0,
                static_rate: 0,
                port_num: c.ib_port,
            },
        };
        self.qp
            .to_rtr(&rtr)
            .map_err(|e| format!("Failed to modify QP to RTR: {e}"))?;
        let rts = RtsAttributes {
            sq_psn: Psn(my_psn),
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
        };
        self.qp
            .to_rts(&rts)
            .map_err(|e| format!("Failed to modify QP to RTS: {e}"))
    }
}

/// The counters of the ping-pong loop.
struct Counters {
    scnt: u32,
    rcnt: u32,
    routs: u32,
    iters: u32,
}

/// `parse_single_wc`: checks the status, counts, re-posts receives when one is left, and
/// sends the next ping once both the last send and the last receive have completed.
#[inline]
fn handle_completion(
    pp: &mut Pingpong,
    n: &mut Counters,
    wc: &WorkCompletion,
) -> Result<(), String> {
    if wc.status != WcStatus::Success.to_raw() {
        return Err(failed_status(wc));
    }
    match wc.wr_id {
        SEND_WRID => n.scnt += 1,
        RECV_WRID => {
            n.routs -= 1;
            if n.routs <= 1 {
                n.routs += pp.post_recv(pp.rx_depth - n.routs);
                if n.routs < pp.rx_depth {
                    return Err(format!("Couldn't post receive ({})", n.routs));
                }
            }
            n.rcnt += 1;
        }
        other => return Err(format!("Completion for unknown wr_id {}", other as i32)),
    }
    pp.pending &= !wc.wr_id;
    if n.scnt < n.iters && pp.pending == 0 {
        pp.post_send()
            .map_err(|e| format!("Couldn't post send: {e}"))?;
        pp.pending = RECV_WRID | SEND_WRID;
    }
    Ok(())
}

/// rdma-core's message for a completion that failed.
#[cold]
fn failed_status(wc: &WorkCompletion) -> String {
    let status = WcStatus::from_raw(wc.status);
    format!(
        "Failed status {} ({}) for wr_id {}",
        status.text(),
        wc.status,
        wc.wr_id as i32
    )
}

/// The ping-pong loop: polls (or, with a channel, waits for an event and then polls) until
/// `iters` sends and receives have completed; returns the number of CQ events taken.
fn pingpong_loop(pp: &mut Pingpong, n: &mut Counters) -> Result<u32, ExitCode> {
    let mut num_cq_events = 0u32;
    let mut wc = [WorkCompletion::default(), WorkCompletion::default()];
    let events = pp.channel.is_some();
    while n.rcnt < n.iters || n.scnt < n.iters {
        if let Some(channel) = &pp.channel {
            let cookie = channel
                .wait(None)
                .map_err(|e| fail("Failed to get cq_event", e))?
                .ok_or_else(|| fail("Failed to get cq_event", "no event"))?;
            num_cq_events += 1;
            if cookie != pp.cq.cookie() {
                eprintln!("CQ event for unknown CQ {cookie:#x}");
                return Err(ExitCode::FAILURE);
            }
            pp.cq
                .req_notify(false)
                .map_err(|e| fail("Couldn't request CQ notification", e))?;
        }
        let done = loop {
            let polled = pp.cq.poll(&mut wc).map_err(|e| fail("poll CQ failed", e))?;
            if !polled.is_empty() || events {
                break polled.len();
            }
            // The spin-wait hint (`pause` on x86) between empty polls. Under QEMU's TCG it
            // also leaves the vCPU's translated-code loop, so rxe's kernel work on the other
            // vCPU is not slowed down by this one's polling (without the hint a 4 KiB
            // ping-pong there takes a few µs more an iteration per end).
            std::hint::spin_loop();
        };
        for w in &wc[..done] {
            if let Err(e) = handle_completion(pp, n, w) {
                eprintln!("{e}");
                eprintln!("parse WC failed {done}");
                return Err(ExitCode::FAILURE);
            }
        }
    }
    Ok(num_cq_events)
}

/// A PSN from the clock and the pid, like rdma-core's `lrand48()` seeded with both.
fn random_psn() -> u32 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x = nanos ^ (u64::from(std::process::id()) << 32) ^ 0x9e37_79b9_7f4a_7c15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x as u32) & 0x00ff_ffff
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

fn run(args: &[String]) -> Result<(), ExitCode> {
    let c = parse_config(args)?;
    let list = DeviceList::discover().map_err(no_device)?;
    let device = match &c.dev_name {
        None => list.pick(None).map_err(no_device)?,
        Some(name) => list
            .pick(Some(name))
            .map_err(|e| fail(&format!("IB device {name} not found"), e))?,
    };
    let context = Context::open(device, &rdmasock::default_registry())
        .map_err(|e| fail(&format!("Couldn't get context for {}", device.name), e))?;
    // ibv_rc_pingpong checks the capabilities its flags need before anything can fail on an
    // iWARP device, so a missing one is reported first there too.
    let access = features::check(&context, &c)?;
    if device.is_iwarp() {
        eprintln!(
            "{} is an iWARP device: iWARP queue pairs can only be connected through the \
             connection manager (rdma_cm), not by exchanging QP numbers over TCP as \
             rc_pingpong does. Use the cm-based example instead: \
             `cargo run --example pingpong` (server) and \
             `cargo run --example pingpong -- <server address>` (client).",
            device.name
        );
        return Err(ExitCode::FAILURE);
    }
    let mut pp = Pingpong::new(context, &c, access)?;

    let mut counters = Counters {
        scnt: 0,
        rcnt: 0,
        routs: pp.post_recv(pp.rx_depth),
        iters: c.iters,
    };
    if counters.routs < pp.rx_depth {
        eprintln!("Couldn't post receive ({})", counters.routs);
        return Err(ExitCode::FAILURE);
    }
    if c.events {
        pp.cq
            .req_notify(false)
            .map_err(|e| fail("Couldn't request CQ notification", e))?;
    }
    let portinfo = pp
        .context
        .query_port(c.ib_port)
        .map_err(|e| fail("Couldn't get port info", e))?;
    if !portinfo.is_ethernet() && portinfo.lid == 0 {
        eprintln!("Couldn't get local LID");
        return Err(ExitCode::FAILURE);
    }
    let gid = match c.gid_index {
        None => Gid::default(),
        Some(index) => match pp.context.device().query_gid(c.ib_port, index) {
            Ok(entry) => entry.map(|e| e.gid).unwrap_or_default(),
            Err(e) => return Err(fail(&format!("can't read sgid of index {index}"), e)),
        },
    };
    let mine = Destination {
        lid: portinfo.lid,
        qpn: pp.qp.qp_num().masked().0,
        psn: random_psn(),
        gid,
    };
    println!("  local address:  {}", mine.describe());

    let remote = match &c.server {
        Some(server) => client_exchange(server, c.tcp_port, &mine),
        None => server_exchange(c.tcp_port, &mine, |r| pp.connect(&c, mine.psn, r)),
    }
    .map_err(|e| fail("Address exchange failed", e))?;
    println!("  remote address: {}", remote.describe());
    if c.server.is_some() {
        pp.connect(&c, mine.psn, &remote)
            .map_err(|e| fail("Couldn't connect", e))?;
    }

    pp.pending = RECV_WRID;
    if c.server.is_some() {
        if c.validate {
            // rdma-core marks the first byte of each page with `i / page_size % sizeof(char)`,
            // which is 0: the receiver checks those bytes lost their 0x7b fill.
            for page in (0..c.size).step_by(PAGE_SIZE) {
                pp.mr
                    .write_at(page, &[0])
                    .map_err(|e| fail("Couldn't mark the buffer", e))?;
            }
        }
        pp.post_send().map_err(|e| fail("Couldn't post send", e))?;
        pp.pending |= SEND_WRID;
    }

    let start = Instant::now();
    let num_cq_events = pingpong_loop(&mut pp, &mut counters)?;
    let usec = start.elapsed().as_micros() as f32;
    let bytes = c.size as i64 * i64::from(c.iters) * 2;
    let usec64 = f64::from(usec);
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec64 / 1_000_000.0,
        bytes as f64 * 8.0 / usec64
    );
    println!(
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        c.iters,
        usec64 / 1_000_000.0,
        usec64 / f64::from(c.iters)
    );
    let mut invalid = false;
    if c.server.is_none() && c.validate {
        let mut byte = [0u8; 1];
        for page in (0..c.size).step_by(PAGE_SIZE) {
            pp.mr
                .read_at(page, &mut byte)
                .map_err(|e| fail("Couldn't read the buffer", e))?;
            if byte[0] != 0 {
                println!("invalid data in page {}", page / PAGE_SIZE);
                invalid = true;
            }
        }
    }
    pp.cq.ack_events(num_cq_events);
    // rdma-core only prints the bad pages; failing too lets scripts notice.
    if invalid {
        return Err(ExitCode::FAILURE);
    }
    Ok(())
}
