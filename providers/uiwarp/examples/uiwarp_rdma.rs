//! `uiwarp_rdma`: librdmacm's `rdma_server` / `rdma_client` examples on the userspace iWARP
//! provider (no kernel RDMA): one 16-byte SEND each way, then disconnect. Interoperates with
//! rdma-core's `rdma_server` / `rdma_client` on a kernel iWARP device (siw).
//!
//! ```text
//! uiwarp_rdma server [-p port]              listens on every address (default 7471)
//! uiwarp_rdma client [-s address] [-p port] (default 127.0.0.1:7471)
//! ```
//! Prints `rdma_server: start` ... `rdma_server: end 0` (or `end -1`, exit status 255) like
//! the C examples. `RDMASOCK_PCAP=file` captures the exchange.

use rdmasock_uiwarp::{connect, device_info, disconnect, UiwarpListener, UiwarpProvider};
use rdmasock_verbs::provider::Provider;
use rdmasock_verbs::qp_attr::{QpAttrMask, QpAttributes};
use rdmasock_verbs::{
    AccessFlags, CompletionChannel, CompletionQueue, Context, MemoryRegion, QpCapabilities,
    QpInitAttributes, QpState, QueuePair, RecvRequest, SendFlags, SendOp, SendRequest, WcStatus,
    WorkCompletion,
};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

const MSG_LEN: usize = 16;
const FOREVER: Duration = Duration::from_secs(3600);

struct Endpoint {
    _context: Context,
    channel: CompletionChannel,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
}

fn step<E: std::fmt::Display>(name: &'static str) -> impl Fn(E) -> String {
    move |e| format!("{name}: {e}")
}

impl Endpoint {
    fn new() -> Result<Endpoint, String> {
        let ops = UiwarpProvider::new()
            .open(&device_info())
            .map_err(step("ibv_open_device"))?;
        let context = Context::from_ops(ops);
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
        qp.modify(
            &QpAttributes {
                qp_state: QpState::Init,
                port_num: 1,
                qp_access_flags: AccessFlags::LOCAL_WRITE,
                ..Default::default()
            },
            QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
        )
        .map_err(step("rdma_create_qp"))?;
        let mr = pd
            .register(2 * MSG_LEN, AccessFlags::LOCAL_WRITE)
            .map_err(step("rdma_reg_msgs"))?;
        Ok(Endpoint {
            _context: context,
            channel,
            cq,
            qp,
            mr,
        })
    }

    fn post_recv(&self) -> Result<(), String> {
        let sg = [self.mr.slice(0, MSG_LEN).map_err(step("rdma_post_recv"))?];
        self.qp
            .post_recv(&[RecvRequest {
                wr_id: 1,
                sg_list: &sg,
            }])
            .map_err(step("rdma_post_recv"))
    }

    fn post_send(&self) -> Result<(), String> {
        let sg = [self
            .mr
            .slice(MSG_LEN, MSG_LEN)
            .map_err(step("rdma_post_send"))?];
        let wr = SendRequest::new(2, SendOp::Send, &sg)
            .with_flags(SendFlags::SIGNALED | SendFlags::INLINE);
        self.qp.post_send(&[wr]).map_err(step("rdma_post_send"))
    }

    /// Arms, polls, waits on the channel until `wr_id` completes; checks its status.
    fn wait_for(&self, wr_id: u64, name: &'static str) -> Result<(), String> {
        let mut wc = [WorkCompletion::default(); 2];
        loop {
            self.cq.req_notify(false).map_err(step(name))?;
            for c in self.cq.poll(&mut wc).map_err(step(name))? {
                if c.wr_id != wr_id {
                    continue;
                }
                if c.status() != WcStatus::Success {
                    return Err(format!(
                        "{name}: work completion failed: {} (vendor error {:#x})",
                        c.status().text(),
                        c.vendor_err
                    ));
                }
                return Ok(());
            }
            if self
                .channel
                .wait(Some(FOREVER))
                .map_err(step(name))?
                .is_some()
            {
                self.cq.ack_events(1);
            }
        }
    }
}

fn server(port: u16) -> Result<(), String> {
    let any = SocketAddr::from(([0, 0, 0, 0], port));
    let listener = UiwarpListener::bind(any, 0).map_err(step("rdma_listen"))?;
    let request = listener
        .get_request(None)
        .map_err(step("rdma_get_request"))?;
    let ep = Endpoint::new()?;
    ep.post_recv()?;
    request
        .accept(&ep.qp, &[], FOREVER)
        .map_err(step("rdma_accept"))?;
    let r = ep
        .wait_for(1, "rdma_get_recv_comp")
        .and_then(|()| ep.post_send())
        .and_then(|()| ep.wait_for(2, "rdma_get_send_comp"));
    let _ = disconnect(&ep.qp);
    r
}

fn client(server: &str, port: u16) -> Result<(), String> {
    let dst = (server, port)
        .to_socket_addrs()
        .map_err(step("rdma_getaddrinfo"))?
        .next()
        .ok_or_else(|| format!("rdma_getaddrinfo: no address for {server}"))?;
    let ep = Endpoint::new()?;
    ep.post_recv()?;
    connect(&ep.qp, dst, &[], Duration::from_secs(10)).map_err(step("rdma_connect"))?;
    let r = ep
        .post_send()
        .and_then(|()| ep.wait_for(2, "rdma_get_send_comp"))
        .and_then(|()| ep.wait_for(1, "rdma_get_recv_comp"));
    let _ = disconnect(&ep.qp);
    r
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or("");
    let (mut host, mut port) = ("127.0.0.1".to_string(), 7471u16);
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        match (a.as_str(), it.next()) {
            ("-s", Some(v)) => host = v.clone(),
            ("-p", Some(v)) => port = v.parse().unwrap_or(0),
            _ => {
                eprintln!("usage: uiwarp_rdma server [-p port] | client [-s address] [-p port]");
                std::process::exit(1);
            }
        }
    }
    let (program, result) = match mode {
        "server" => ("rdma_server", {
            println!("rdma_server: start");
            server(port)
        }),
        "client" => ("rdma_client", {
            println!("rdma_client: start");
            client(&host, port)
        }),
        _ => {
            eprintln!("usage: uiwarp_rdma server [-p port] | client [-s address] [-p port]");
            std::process::exit(1);
        }
    };
    let ret = match result {
        Ok(()) => 0,
        Err(e) => {
            println!("{e}");
            -1
        }
    };
    println!("{program}: end {ret}");
    std::process::exit(ret);
}
