//! `rdma_client`: the twin of librdmacm's `rdma_client` example, on rdmasock's connection
//! manager and verbs with no librdmacm.
//!
//! Resolves the server (`-s`, default 127.0.0.1; port 7471, `-p`) with 2-second address and
//! route timeouts, creates a QP on the resolved device (1 send / 1 receive of 16 bytes, inline
//! sends when the device can), posts a receive, connects, sends 16 bytes, waits for that send
//! and for the server's message, disconnects. Prints `rdma_client: start` and
//! `rdma_client: end 0` (or the failing step and `end -1`, exit status 255), as the C example
//! does. Interoperates with rdma-core's `rdma_server` both ways.
//!
//! rdma_cm cannot reach 127.0.0.1 through rxe or siw: give the address of the netdev the soft
//! device sits on (`-s 10.99.0.2` in the test VM).
//!
//! ```text
//! rdma_client [-s server_address] [-p port_number]
//! ```

mod common;

use common::{parse_args, OptSpec};
use rdmasock::cm::{CmId, ConnectionParameters, EventChannel};
use rdmasock::verbs::{
    AccessFlags, CompletionChannel, CompletionQueue, Context, MemoryRegion, ProtectionDomain,
    QpCapabilities, QpInitAttributes, QueuePair, RecvRequest, SendFlags, SendOp, SendRequest,
    WcStatus, WorkCompletion,
};
use std::cell::RefCell;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

const PROGRAM: &str = "rdma_client";
/// The message size of the C example.
const MSG_LEN: usize = 16;
const RECV_WR_ID: u64 = 1;
const SEND_WR_ID: u64 = 2;
/// librdmacm's `rdma_create_ep` resolves with 2000 ms timeouts.
const RESOLVE_TIMEOUT: Duration = Duration::from_millis(2000);
/// The C example blocks without a time limit.
const FOREVER: Duration = Duration::MAX;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let specs = [
        OptSpec {
            short: 's',
            long: "server",
            takes_value: true,
        },
        OptSpec {
            short: 'p',
            long: "port",
            takes_value: true,
        },
    ];
    let options = parse_args(&args, &specs).and_then(|p| {
        let (mut server, mut port) = ("127.0.0.1".to_string(), 7471u16);
        for (name, v) in p.opts {
            let v = v.unwrap_or_default();
            match name {
                's' => server = v,
                _ => {
                    port = v
                        .parse()
                        .map_err(|_| format!("invalid port number '{v}'"))?
                }
            }
        }
        Ok((server, port))
    });
    let (server, port) = match options {
        Ok(o) => o,
        Err(e) => {
            println!("{PROGRAM}: {e}");
            println!("usage: {PROGRAM}");
            println!("\t[-s server_address]");
            println!("\t[-p port_number]");
            std::process::exit(1);
        }
    };
    println!("{PROGRAM}: start");
    let ret = match run(&server, port) {
        Ok(()) => 0,
        Err(e) => {
            println!("{e}");
            -1
        }
    };
    println!("{PROGRAM}: end {ret}");
    std::process::exit(ret);
}

fn run(server: &str, port: u16) -> Result<(), String> {
    let dst: SocketAddr = (server, port)
        .to_socket_addrs()
        .map_err(step("rdma_getaddrinfo"))?
        .next()
        .ok_or_else(|| format!("rdma_getaddrinfo: no address for {server}"))?;
    let channel = EventChannel::open().map_err(step("rdma_create_event_channel"))?;
    let id = CmId::new(&channel).map_err(step("rdma_create_id"))?;
    id.resolve(None, dst, RESOLVE_TIMEOUT)
        .map_err(step("rdma_create_ep"))?;
    let ep = Endpoint::new(&id)?;
    ep.post_recv()?;
    id.connect_blocking(Some(&ep.qp), &ConnectionParameters::default(), FOREVER)
        .map_err(step("rdma_connect"))?;
    let result = ep
        .post_send()
        .and_then(|()| ep.wait_for(SEND_WR_ID, "rdma_get_send_comp"))
        .and_then(|_| ep.wait_for(RECV_WR_ID, "rdma_get_recv_comp").map(drop));
    let _ = id.disconnect_qp(&ep.qp);
    result
}

/// `perror`-style: the librdmacm call's name, then our error.
fn step<E: std::fmt::Display>(name: &'static str) -> impl Fn(E) -> String {
    move |e| format!("{name}: {e}")
}

/// What `rdma_create_ep` + `rdma_reg_msgs` make: the QP and its resources on the id's device.
struct Endpoint {
    _context: Context,
    _pd: ProtectionDomain,
    channel: CompletionChannel,
    cq: CompletionQueue,
    qp: QueuePair,
    /// Receive buffer at 0, send buffer at `MSG_LEN`.
    mr: MemoryRegion,
    send_flags: SendFlags,
    /// Completions polled while waiting for another one.
    seen: RefCell<Vec<WorkCompletion>>,
}

impl Endpoint {
    fn new(id: &CmId) -> Result<Endpoint, String> {
        let device = id.device().map_err(step("rdma_create_qp"))?;
        let context = rdmasock::open_device(Some(&device.name)).map_err(step("ibv_open_device"))?;
        let pd = context.alloc_pd().map_err(step("ibv_alloc_pd"))?;
        let channel = context
            .create_comp_channel()
            .map_err(step("ibv_create_comp_channel"))?;
        let cq = context
            .create_cq(2, Some(&channel))
            .map_err(step("ibv_create_cq"))?;
        let init = QpInitAttributes {
            caps: QpCapabilities {
                max_send_wr: 1,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: MSG_LEN as u32,
            },
            sq_sig_all: true,
        };
        let qp = pd
            .create_qp(&init, &cq, &cq)
            .map_err(step("rdma_create_qp"))?;
        id.init_qp(&qp).map_err(step("rdma_create_qp"))?;
        let send_flags = if qp.caps().max_inline_data >= MSG_LEN as u32 {
            SendFlags::INLINE
        } else {
            println!("{PROGRAM}: device doesn't support IBV_SEND_INLINE, using sge sends");
            SendFlags::empty()
        };
        let mr = pd
            .register(2 * MSG_LEN, AccessFlags::LOCAL_WRITE)
            .map_err(step("rdma_reg_msgs"))?;
        Ok(Endpoint {
            _context: context,
            _pd: pd,
            channel,
            cq,
            qp,
            mr,
            send_flags,
            seen: RefCell::new(Vec::new()),
        })
    }

    fn post_recv(&self) -> Result<(), String> {
        let sg = [self.mr.slice(0, MSG_LEN).map_err(step("rdma_post_recv"))?];
        self.qp
            .post_recv(&[RecvRequest {
                wr_id: RECV_WR_ID,
                sg_list: &sg,
            }])
            .map_err(step("rdma_post_recv"))
    }

    /// Sends the (zeroed) 16-byte message, as the C example does.
    fn post_send(&self) -> Result<(), String> {
        let sg = [self
            .mr
            .slice(MSG_LEN, MSG_LEN)
            .map_err(step("rdma_post_send"))?];
        let wr = SendRequest::new(SEND_WR_ID, SendOp::Send, &sg)
            .with_flags(SendFlags::SIGNALED | self.send_flags);
        self.qp.post_send(&[wr]).map_err(step("rdma_post_send"))
    }

    fn take(&self, wr_id: u64) -> Result<Option<WorkCompletion>, String> {
        let mut wc = [WorkCompletion::default(), WorkCompletion::default()];
        let polled = self.cq.poll(&mut wc).map_err(step("ibv_poll_cq"))?;
        let mut seen = self.seen.borrow_mut();
        seen.extend_from_slice(polled);
        Ok(seen
            .iter()
            .position(|c| c.wr_id == wr_id)
            .map(|i| seen.remove(i)))
    }

    /// `rdma_get_{send,recv}_comp`: arm, poll, wait on the channel; checks the status.
    fn wait_for(&self, wr_id: u64, name: &'static str) -> Result<WorkCompletion, String> {
        let wc = loop {
            if let Some(wc) = self.take(wr_id)? {
                break wc;
            }
            self.cq.req_notify(false).map_err(step(name))?;
            if let Some(wc) = self.take(wr_id)? {
                break wc;
            }
            if self.channel.wait(None).map_err(step(name))?.is_some() {
                self.cq.ack_events(1);
            }
        };
        let status = WcStatus::from_raw(wc.status);
        if status != WcStatus::Success {
            return Err(format!(
                "{name}: work completion failed: {} (status {}, vendor error {:#x})",
                status.text(),
                wc.status,
                wc.vendor_err
            ));
        }
        Ok(wc)
    }
}
