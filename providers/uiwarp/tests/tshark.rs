//! An independent check of the wire format: a simulated exchange written as a pcap (hand-made
//! Ethernet/IPv4/TCP around the real MPA stream) and decoded by tshark, whose iWARP
//! dissectors verify the MPA CRC32c and decode DDP/RDMAP.
//!
//! Needs tshark (`apt-get install tshark`), so it is ignored by default:
//! `cargo test -p rdmasock-uiwarp --test tshark -- --ignored`.

mod common;

use common::*;
use rdmasock_uiwarp::protocol::{Config, SendOperation, WorkQueue};
use rdmasock_verbs::{AccessFlags, RemoteKey, WcStatus};
use std::io::Write;
use std::process::Command;

fn checksum(data: &[u8], mut sum: u32) -> u16 {
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

struct Pcap {
    out: Vec<u8>,
    seq: [u32; 2],
    time: u32,
}

impl Pcap {
    fn new() -> Pcap {
        let mut out = Vec::new();
        out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        out.extend_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(&4u16.to_le_bytes());
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&65535u32.to_le_bytes());
        out.extend_from_slice(&1u32.to_le_bytes());
        Pcap {
            out,
            seq: [1000, 5000],
            time: 0,
        }
    }

    /// One TCP segment from side `dir` (0 = client 10.99.0.1:40000, 1 = server
    /// 10.99.0.2:4791... any port works; the MPA dissector is heuristic).
    fn segment(&mut self, dir: usize, flags: u8, payload: &[u8]) {
        let ips = [[10u8, 99, 0, 1], [10, 99, 0, 2]];
        let ports = [40000u16, 7471];
        let (src, dst) = (dir, 1 - dir);
        let mut tcp = Vec::new();
        tcp.extend_from_slice(&ports[src].to_be_bytes());
        tcp.extend_from_slice(&ports[dst].to_be_bytes());
        tcp.extend_from_slice(&self.seq[src].to_be_bytes());
        let ack = if flags & 0x10 != 0 { self.seq[dst] } else { 0 };
        tcp.extend_from_slice(&ack.to_be_bytes());
        tcp.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        tcp.extend_from_slice(payload);
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&ips[src]);
        pseudo.extend_from_slice(&ips[dst]);
        pseudo.extend_from_slice(&[0, 6]);
        pseudo.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
        pseudo.extend_from_slice(&tcp);
        let c = checksum(&pseudo, 0);
        tcp[16..18].copy_from_slice(&c.to_be_bytes());
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0];
        ip[2..4].copy_from_slice(&((20 + tcp.len()) as u16).to_be_bytes());
        ip.extend_from_slice(&ips[src]);
        ip.extend_from_slice(&ips[dst]);
        let c = checksum(&ip, 0);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let mut frame = vec![
            2,
            0,
            0,
            0,
            0,
            dst as u8 + 1,
            2,
            0,
            0,
            0,
            0,
            src as u8 + 1,
            0x08,
            0x00,
        ];
        frame.extend_from_slice(&ip);
        frame.extend_from_slice(&tcp);
        self.time += 1;
        self.out.extend_from_slice(&0u32.to_le_bytes());
        self.out.extend_from_slice(&(self.time * 100).to_le_bytes());
        self.out
            .extend_from_slice(&(frame.len() as u32).to_le_bytes());
        self.out
            .extend_from_slice(&(frame.len() as u32).to_le_bytes());
        self.out.extend_from_slice(&frame);
        let advance = payload.len() as u32 + u32::from(flags & 0x02 != 0);
        self.seq[src] = self.seq[src].wrapping_add(advance);
    }
}

fn capture(config: Config) -> Vec<u8> {
    let mut sim = Sim::new(31, config.clone(), config, Delivery::Whole);
    sim.trace = Some(Vec::new());
    let (rk, raddr, _) = sim.b.region(8192, AccessFlags::LOCAL_WRITE);
    sim.b.recv(1, rk, raddr, 8192);
    let (wk, waddr, _) = sim
        .b
        .region(8192, AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ);
    let (ak, aaddr, amem) = sim
        .a
        .region(8192, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
    amem.write_at(0, &[0x5a; 8192]).unwrap();
    sim.connect();
    sim.a.send(
        1,
        SendOperation::Send {
            solicited: true,
            invalidate: None,
        },
        vec![segment(ak, aaddr, 3000)],
    );
    sim.a.send(
        2,
        SendOperation::RdmaWrite {
            remote_addr: waddr,
            rkey: RemoteKey(wk),
        },
        vec![segment(ak, aaddr, 2500)],
    );
    sim.a.send(
        3,
        SendOperation::RdmaRead {
            remote_addr: waddr,
            rkey: RemoteKey(wk),
        },
        vec![segment(ak, aaddr + 4096, 2000)],
    );
    sim.run();
    assert_eq!(
        sim.a
            .completions_of(WorkQueue::Send)
            .iter()
            .filter(|c| c.1 == WcStatus::Success)
            .count(),
        3
    );
    // And an error at the end: a WRITE outside the region draws a TERMINATE.
    sim.a.send(
        4,
        SendOperation::RdmaWrite {
            remote_addr: waddr + 8190,
            rkey: RemoteKey(wk),
        },
        vec![segment(ak, aaddr, 16)],
    );
    sim.run();
    assert!(sim.b.terminated().is_some());

    let mut pcap = Pcap::new();
    pcap.segment(0, 0x02, &[]);
    pcap.segment(1, 0x12, &[]);
    pcap.segment(0, 0x10, &[]);
    for (from_a, bytes) in sim.trace.take().unwrap() {
        for piece in bytes.chunks(1448) {
            pcap.segment(if from_a { 0 } else { 1 }, 0x18, piece);
        }
    }
    pcap.out
}

fn tshark(pcap: &[u8], name: &str, extra: &[&str]) -> String {
    let path = std::env::temp_dir().join(format!("uiwarp-{name}-{}.pcap", std::process::id()));
    std::fs::File::create(&path)
        .unwrap()
        .write_all(pcap)
        .unwrap();
    let out = Command::new("tshark")
        .args(["-r", path.to_str().unwrap()])
        .args([
            "--disable-heuristic",
            "rpcrdma_iwarp",
            "--disable-heuristic",
            "smb_direct_iwarp",
        ])
        .args(extra)
        .output()
        .expect("tshark must be installed for this test (apt-get install tshark)");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    if std::env::var_os("UIWARP_KEEP_PCAP").is_none() {
        let _ = std::fs::remove_file(&path);
    }
    String::from_utf8(out.stdout).unwrap()
}

#[test]
#[ignore = "needs tshark (apt-get install tshark)"]
fn tshark_decodes_the_stream_with_good_crcs() {
    for (name, crc) in [("crc", true), ("nocrc", false)] {
        let pcap = capture(Config {
            crc,
            ..Config::default()
        });
        let fields = tshark(
            &pcap,
            name,
            &[
                "-T",
                "fields",
                "-E",
                "separator=|",
                "-e",
                "iwarp_rdma.opcode",
                "-e",
                "_ws.malformed",
                "-e",
                "_ws.expert.message",
            ],
        );
        assert!(!fields.contains("Malformed"), "{fields}");
        // WRITE (0), READ request (1), READ response (2), SEND with SE (5), TERMINATE (7).
        for op in ["0x00", "0x01", "0x02", "0x05", "0x07"] {
            assert!(
                fields.contains(op),
                "opcode {op} missing from tshark's decode:\n{fields}"
            );
        }
        // tshark checks the CRC of every FPDU when C was negotiated.
        let tree = tshark(&pcap, name, &["-V"]);
        let checks: Vec<&str> = tree.lines().filter(|l| l.contains("CRC check:")).collect();
        assert!(
            checks.iter().all(|l| l.contains("(Good CRC32)")),
            "{checks:#?}"
        );
        if crc {
            assert!(
                checks.len() >= 10,
                "tshark checked only {} CRCs",
                checks.len()
            );
        } else {
            assert!(checks.is_empty());
        }
    }
}
