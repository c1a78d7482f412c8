//! `roundtrip_instructions`: a nonblocking 64-byte ping-pong of two `RdmaSocket`s on the
//! userspace iWARP provider, both ends driven by one thread, for counting instructions per
//! round trip with callgrind (a count a loaded host does not move, unlike a clock).
//!
//! ```text
//! roundtrip_instructions [--rounds N] [--delay]
//! ```
//! Runs `N` round trips (default 2000) after connecting and exits. The client writes 64
//! bytes, the server reads them (retrying on `WouldBlock`) and writes them back, the client
//! reads them. Both sockets are nonblocking and, unless `--delay` is given, set nodelay, so
//! every write goes to TCP before the call returns and no timer decides what happens.
//! Instructions per round trip are the difference of two runs' counts over the difference of
//! their rounds, which takes away connecting and tearing down:
//!
//! ```text
//! cargo build --release --example roundtrip_instructions
//! for n in 2000 6000; do
//!   RDMASOCK_UIWARP_CRC_METHOD=instruction valgrind --tool=callgrind --dump-instr=no \
//!     --callgrind-out-file=target/cg.$n target/release/examples/roundtrip_instructions --rounds $n
//! done
//! callgrind_annotate --inclusive=yes target/cg.6000   # and target/cg.2000, per function
//! ```
//! It prints how many reads found nothing (`WouldBlock`), since each such poll adds
//! instructions that are not the round trip's own work.

use rdmasock::{connection_manager_for, ProviderKind, RdmaListener, RdmaSocket, SocketOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::thread;

/// Reads exactly `buf.len()` bytes from a nonblocking socket; counts the reads that found
/// nothing into `empty`.
fn read_all(socket: &mut RdmaSocket, buf: &mut [u8], empty: &mut u64) {
    let mut got = 0;
    while got < buf.len() {
        match socket.read(&mut buf[got..]) {
            Ok(0) => panic!("peer closed during the ping-pong"),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => *empty += 1,
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// Writes all of `buf` to a nonblocking socket, retrying on `WouldBlock`.
fn write_all(socket: &mut RdmaSocket, buf: &[u8]) {
    let mut put = 0;
    while put < buf.len() {
        match socket.write(&buf[put..]) {
            Ok(n) => put += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => panic!("write: {e}"),
        }
    }
}

fn main() {
    let mut rounds = 2000u64;
    let mut nodelay = true;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--rounds" => {
                rounds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--rounds takes a number of round trips")
            }
            "--delay" => nodelay = false,
            other => panic!("unknown argument {other:?}: expected --rounds N or --delay"),
        }
    }
    let options = SocketOptions::builder().build().expect("socket options");
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let uiwarp = connection_manager_for(ProviderKind::Uiwarp);
    let listener = RdmaListener::bind_via(uiwarp, any, &options).expect("bind (uiwarp)");
    let address = listener.local_addr().expect("listener address");
    let accepting = thread::spawn(move || listener.accept().expect("accept").0);
    let mut client = RdmaSocket::connect_via(uiwarp, address, &options).expect("connect");
    let mut server = accepting.join().expect("accepting thread");
    for socket in [&client, &server] {
        socket.set_nodelay(nodelay).expect("nodelay");
        socket.set_nonblocking(true).expect("nonblocking");
    }
    let mut ping = [7u8; 64];
    let mut pong = [0u8; 64];
    let mut empty = 0u64;
    for round in 0..rounds {
        ping[0] = round as u8;
        write_all(&mut client, &ping);
        read_all(&mut server, &mut pong, &mut empty);
        write_all(&mut server, &pong);
        read_all(&mut client, &mut ping, &mut empty);
        assert_eq!(ping[0], round as u8, "the echo returned other bytes");
    }
    println!("{rounds} round trips, {empty} reads found nothing");
}
