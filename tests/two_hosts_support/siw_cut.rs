//! siw0's wire cut across two hosts, for the fault table: the client cuts eth1 (siw0's NIC)
//! and says so over a TCP connection on eth0, which stays up; the server, its keepalive on,
//! writes and flushes after the cut and waits [`WINDOW`] for a call to fail; then the
//! client mends the wire, reads what was written and reports how much arrived intact (the
//! flush waits through the cut and returns once the mended wire carried the bytes). siw's
//! TCP socket is the kernel's: only TCP's retransmission limit (`net.ipv4.tcp_retries2`,
//! about 15 minutes) would end the connection, so nothing fails within the window, and the
//! bytes written meanwhile arrive once the wire is mended.

use super::{bounded, role, Role, WireCut, MEET, STALL};
use crate::vm_support;
use rdmasock::{RdmaListener, RdmaSocket, SocketOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

/// How long the server waits for a call to fail after the cut.
pub(crate) const WINDOW: Duration = Duration::from_secs(20);

/// Bytes the server writes after the cut.
const AFTER_CUT: usize = 64 << 10;

/// The stream's bytes: a function of their offset.
fn pattern(at: usize) -> u8 {
    ((at as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

/// Runs the role of this VM; the server writes the fault table's row to `row_file` (and on
/// stderr) before it asserts the row.
pub(crate) fn run(row_file: &str) {
    let siw_port = 7613;
    let control_port = 7614;
    match role() {
        Role::Server => {
            let addr = SocketAddr::new(vm_support::env_ip("RDMA_VM_SIW_IP"), siw_port);
            let control = SocketAddr::new(vm_support::env_ip("RDMA_VM_RXE_IP"), control_port);
            let control = TcpListener::bind(control).expect("bind the control port");
            let opts = SocketOptions::builder()
                .keepalive(Some(Duration::from_millis(500)))
                .build()
                .unwrap();
            let l =
                RdmaListener::bind_with(addr, &opts).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
            let (s, _) = l
                .accept()
                .unwrap_or_else(|e| panic!("accept on {addr}: {e}"));
            let mut s = bounded(s);
            let mut b = [0u8; 1];
            s.read_exact(&mut b).expect("the client's byte");
            s.write_all(&b).expect("echo");
            let (mut ctl, _) = control.accept().expect("the control connection");
            ctl.set_read_timeout(Some(STALL)).unwrap();
            ctl.read_exact(&mut b)
                .expect("the client's word that the wire is cut");
            let start = Instant::now();
            let writing = {
                let mut w = s.try_clone().expect("clone the connection");
                thread::spawn(move || {
                    let bytes: Vec<u8> = (0..AFTER_CUT).map(pattern).collect();
                    let flushed = w.write_all(&bytes).and_then(|_| w.flush());
                    (flushed, start.elapsed())
                })
            };
            s.set_read_timeout(Some(WINDOW)).unwrap();
            let read = s.read(&mut b);
            let waited = start.elapsed();
            eprintln!("after the cut: the read {read:?} after {waited:?}");
            ctl.write_all(b"m")
                .expect("ask the client to mend the wire");
            // The flush returns once the mended wire carried the bytes (or fails).
            let (flushed, flush_took) = writing.join().expect("the writer");
            eprintln!("the flush: {flushed:?} after {flush_took:?}");
            let mut count = [0u8; 8];
            ctl.read_exact(&mut count).expect("the client's count");
            let got = u64::from_le_bytes(count);
            let vouched = if flushed.is_ok() { AFTER_CUT as u64 } else { 0 };
            let lost = vouched.saturating_sub(got);
            let (detection, seen) = match &read {
                Err(e) if e.kind() == ErrorKind::TimedOut || e.kind() == ErrorKind::WouldBlock => (
                    format!("not detected within {:.1} s", WINDOW.as_secs_f64()),
                    format!(
                        "nothing: siw's TCP retransmits until `net.ipv4.tcp_retries2` \
                             gives up (about 15 min); the application's own timeout is the \
                             answer. Once the wire was mended, the {got} bytes written during \
                             the cut arrived"
                    ),
                ),
                Err(e) => (
                    format!("{:.1} s", waited.as_secs_f64()),
                    format!("{:?}: {e}", e.kind()),
                ),
                Ok(n) => panic!("the read returned Ok({n}), but the client sends nothing"),
            };
            let row = format!(
                "fault-table-row 33 | siw | wire cut (keepalive on) | {detection} | {} | {lost} |",
                seen.replace('|', "\\|")
            );
            eprintln!("{row}");
            std::fs::write(row_file, row + "\n").expect("write the fault table's row");
            assert_eq!(lost, 0, "a flush vouched for bytes that never arrived");
            assert!(
                matches!(&read, Err(e) if e.kind() == ErrorKind::TimedOut || e.kind() == ErrorKind::WouldBlock),
                "siw's keepalive found the cut within {WINDOW:?}, which only TCP's retransmission \
                 limit does (documented): {read:?}"
            );
        }
        Role::Client => {
            let addr = SocketAddr::new(vm_support::env_ip("RDMA_VM_PEER_SIW_IP"), siw_port);
            let control = SocketAddr::new(vm_support::env_ip("RDMA_VM_PEER_RXE_IP"), control_port);
            let end = Instant::now() + MEET;
            let mut c = loop {
                match RdmaSocket::connect(addr) {
                    Ok(c) => break bounded(c),
                    Err(_) if Instant::now() < end => thread::sleep(Duration::from_millis(200)),
                    Err(e) => panic!("connect to {addr} for {MEET:?}: {e}"),
                }
            };
            c.write_all(b"s").unwrap();
            let mut b = [0u8; 1];
            c.read_exact(&mut b).expect("the echo");
            let cut = WireCut::new("eth1");
            let mut ctl = TcpStream::connect(control).expect("the control connection");
            ctl.set_read_timeout(Some(STALL)).unwrap();
            ctl.write_all(b"c").expect("say the wire is cut");
            ctl.read_exact(&mut b)
                .expect("the server's word to mend the wire");
            drop(cut);
            let mut got = vec![0u8; AFTER_CUT];
            c.read_exact(&mut got)
                .expect("the bytes written during the cut");
            let intact = got
                .iter()
                .enumerate()
                .take_while(|(i, v)| **v == pattern(*i))
                .count() as u64;
            ctl.write_all(&intact.to_le_bytes())
                .expect("report the count");
            drop(c);
        }
    }
}
