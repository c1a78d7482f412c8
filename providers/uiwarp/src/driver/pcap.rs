//! A capture of the iWARP traffic for tshark: with `RDMASOCK_PCAP=<path>` set, every uiwarp
//! connection of the process writes its MPA frames and FPDUs to one pcap file, each as a
//! synthetic Ethernet/IPv4 (or IPv6)/TCP frame with the connection's real addresses and
//! ports, valid checksums and running sequence numbers, one MPA frame or FPDU per TCP segment
//! (so tshark's iwarp-mpa/ddp/rdmap dissectors decode every one).
//!
//! A connection records what it sends, and what it receives unless the sender is a uiwarp
//! connection of the same process (which records it already).

use crate::wire::fpdu;
use crate::wire::mpa::HEADER_LEN;
use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// The environment variable naming the capture file.
pub const PCAP_ENV: &str = "RDMASOCK_PCAP";

/// The largest TCP payload of one synthetic frame (an IPv4 packet is at most 65535 bytes).
const MAX_SEGMENT: usize = 65_000;

#[derive(Debug)]
struct Writer {
    out: BufWriter<File>,
    flows: HashSet<(SocketAddr, SocketAddr)>,
}

static WRITER: OnceLock<Option<Arc<Mutex<Writer>>>> = OnceLock::new();

fn writer() -> Option<Arc<Mutex<Writer>>> {
    WRITER
        .get_or_init(|| {
            // Ignored in a process with elevated privileges: the caller may not choose where
            // it writes.
            let path = rdmasock_verbs::environment::path_variable(PCAP_ENV)?;
            let file = match File::create(&path) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!(
                        "rdmasock: cannot create the capture file {} ({PCAP_ENV}): {e}; not capturing",
                        std::path::Path::new(&path).display()
                    );
                    return None;
                }
            };
            let mut out = BufWriter::new(file);
            let mut header = Vec::with_capacity(24);
            header.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
            header.extend_from_slice(&2u16.to_le_bytes());
            header.extend_from_slice(&4u16.to_le_bytes());
            header.extend_from_slice(&[0; 8]);
            header.extend_from_slice(&262_144u32.to_le_bytes());
            header.extend_from_slice(&1u32.to_le_bytes()); // LINKTYPE_ETHERNET
            let _ = out.write_all(&header);
            let _ = out.flush();
            Some(Arc::new(Mutex::new(Writer {
                out,
                flows: HashSet::new(),
            })))
        })
        .clone()
}

/// Cuts a byte stream into the MPA request/reply and then FPDUs.
#[derive(Debug, Default)]
struct Splitter {
    buf: Vec<u8>,
    mpa_done: bool,
}

impl Splitter {
    fn feed(&mut self, data: &[u8], mut emit: impl FnMut(&[u8])) {
        self.buf.extend_from_slice(data);
        let mut at = 0;
        loop {
            let rest = &self.buf[at..];
            let need = if self.mpa_done {
                match fpdu::Fpdu::<&[u8]>::peek_len(rest) {
                    Some(n) => n,
                    None => break,
                }
            } else {
                if rest.len() < HEADER_LEN {
                    break;
                }
                HEADER_LEN + usize::from(u16::from_be_bytes([rest[18], rest[19]]))
            };
            if rest.len() < need {
                break;
            }
            emit(&rest[..need]);
            self.mpa_done = true;
            at += need;
        }
        self.buf.drain(..at);
    }
}

/// One connection's two directions in the capture.
#[derive(Debug)]
pub(crate) struct Flow {
    writer: Arc<Mutex<Writer>>,
    local: SocketAddr,
    peer: SocketAddr,
    seq: [u32; 2],
    out: Splitter,
    inb: Splitter,
}

impl Flow {
    /// A flow for the connection `local`–`peer`, if capturing.
    pub(crate) fn open(local: SocketAddr, peer: SocketAddr) -> Option<Flow> {
        let writer = writer()?;
        writer
            .lock()
            .expect("pcap lock")
            .flows
            .insert((local, peer));
        Some(Flow {
            writer,
            local,
            peer,
            seq: [1, 1],
            out: Splitter::default(),
            inb: Splitter::default(),
        })
    }

    /// Bytes we sent.
    pub(crate) fn outbound(&mut self, data: &[u8]) {
        let (writer, local, peer) = (self.writer.clone(), self.local, self.peer);
        let seq = &mut self.seq;
        self.out.feed(data, |unit| {
            let mut w = writer.lock().expect("pcap lock");
            let (s, a) = (seq[0], seq[1]);
            seq[0] = write_unit(&mut w, local, peer, s, a, unit);
        });
    }

    /// Bytes we received (skipped when the sender is ours and records them).
    pub(crate) fn inbound(&mut self, data: &[u8]) {
        let (writer, local, peer) = (self.writer.clone(), self.local, self.peer);
        if writer
            .lock()
            .expect("pcap lock")
            .flows
            .contains(&(peer, local))
        {
            return;
        }
        let seq = &mut self.seq;
        self.inb.feed(data, |unit| {
            let mut w = writer.lock().expect("pcap lock");
            let (s, a) = (seq[1], seq[0]);
            seq[1] = write_unit(&mut w, peer, local, s, a, unit);
        });
    }
}

impl Drop for Flow {
    fn drop(&mut self) {
        let mut w = self.writer.lock().expect("pcap lock");
        w.flows.remove(&(self.local, self.peer));
        let _ = w.out.flush();
    }
}

/// Writes `unit` as TCP segments from `src` to `dst`; returns the next sequence number.
fn write_unit(
    w: &mut Writer,
    src: SocketAddr,
    dst: SocketAddr,
    mut seq: u32,
    ack: u32,
    unit: &[u8],
) -> u32 {
    for piece in unit.chunks(MAX_SEGMENT) {
        let frame = frame(src, dst, seq, ack, piece);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut rec = Vec::with_capacity(16 + frame.len());
        rec.extend_from_slice(&(now.as_secs() as u32).to_le_bytes());
        rec.extend_from_slice(&now.subsec_micros().to_le_bytes());
        rec.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        rec.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        rec.extend_from_slice(&frame);
        let _ = w.out.write_all(&rec);
        seq = seq.wrapping_add(piece.len() as u32);
    }
    let _ = w.out.flush();
    seq
}

fn sum16(data: &[u8], mut sum: u32) -> u32 {
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// One Ethernet frame carrying a TCP segment (PSH+ACK) with `payload`.
pub(crate) fn frame(
    src: SocketAddr,
    dst: SocketAddr,
    seq: u32,
    ack: u32,
    payload: &[u8],
) -> Vec<u8> {
    let mut tcp = Vec::with_capacity(20 + payload.len());
    tcp.extend_from_slice(&src.port().to_be_bytes());
    tcp.extend_from_slice(&dst.port().to_be_bytes());
    tcp.extend_from_slice(&seq.to_be_bytes());
    tcp.extend_from_slice(&ack.to_be_bytes());
    tcp.extend_from_slice(&[0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    tcp.extend_from_slice(payload);
    let tcp_len = tcp.len() as u32;
    let mut eth = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut sum = sum16(&s.octets(), 0);
            sum = sum16(&d.octets(), sum);
            sum += 6 + tcp_len;
            let c = fold(sum16(&tcp, sum));
            tcp[16..18].copy_from_slice(&c.to_be_bytes());
            let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0];
            ip[2..4].copy_from_slice(&((20 + tcp_len) as u16).to_be_bytes());
            ip.extend_from_slice(&s.octets());
            ip.extend_from_slice(&d.octets());
            let c = fold(sum16(&ip, 0));
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            eth.extend_from_slice(&[0x08, 0x00]);
            eth.extend_from_slice(&ip);
        }
        (s, d) => {
            let s = match s {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            let d = match d {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            let mut sum = sum16(&s.octets(), 0);
            sum = sum16(&d.octets(), sum);
            sum += 6 + tcp_len;
            let c = fold(sum16(&tcp, sum));
            tcp[16..18].copy_from_slice(&c.to_be_bytes());
            let mut ip = vec![0x60, 0, 0, 0];
            ip.extend_from_slice(&(tcp_len as u16).to_be_bytes());
            ip.extend_from_slice(&[6, 64]);
            ip.extend_from_slice(&s.octets());
            ip.extend_from_slice(&d.octets());
            eth.extend_from_slice(&[0x86, 0xdd]);
            eth.extend_from_slice(&ip);
        }
    }
    eth.extend_from_slice(&tcp);
    eth
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitter_cuts_mpa_frame_then_fpdus_across_pieces() {
        let mut stream = Vec::new();
        let mut mpa = vec![0u8; HEADER_LEN];
        mpa[19] = 3;
        mpa.extend_from_slice(b"abc");
        stream.extend_from_slice(&mpa);
        for len in [10usize, 1, 300] {
            let mut f = (len as u16).to_be_bytes().to_vec();
            f.resize(fpdu::frame_len(len), 7);
            stream.extend_from_slice(&f);
        }
        let mut s = Splitter::default();
        let mut units = Vec::new();
        for piece in stream.chunks(7) {
            s.feed(piece, |u| units.push(u.len()));
        }
        assert_eq!(
            units,
            vec![
                HEADER_LEN + 3,
                fpdu::frame_len(10),
                fpdu::frame_len(1),
                fpdu::frame_len(300)
            ]
        );
    }

    #[test]
    fn ipv4_frame_checksums_verify() {
        let f = frame(
            "10.0.0.1:1000".parse().unwrap(),
            "10.0.0.2:2000".parse().unwrap(),
            5,
            9,
            b"hello",
        );
        let ip = &f[14..34];
        assert_eq!(fold(sum16(ip, 0)), 0);
        let tcp = &f[34..];
        let mut sum = sum16(&ip[12..20], 0);
        sum += 6 + tcp.len() as u32;
        assert_eq!(fold(sum16(tcp, sum)), 0);
    }
}
