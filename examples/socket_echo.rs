//! `socket_echo`: an RdmaSocket echo server and a client that sends pseudo-random bytes in
//! random pieces and checks the echo, for interop runs between providers (the userspace
//! iWARP provider against the kernel's siw, say). The provider follows the usual choice
//! (`RDMASOCK_PROVIDER`, else the kernel when a kernel device serves the address).
//!
//! ```text
//! socket_echo server ADDR:PORT           echoes every connection until it closes (one at a time)
//! socket_echo client ADDR:PORT BYTES     prints "ok BYTES ..." (with the time) when the echo matched
//! ```

use rdmasock::{RdmaListener, RdmaSocket};
use std::io::{Read, Write};
use std::net::Shutdown;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || -> ! {
        eprintln!("usage: socket_echo server ADDR:PORT | client ADDR:PORT BYTES");
        std::process::exit(2)
    };
    match args.first().map(String::as_str) {
        Some("server") => {
            let addr = args.get(1).unwrap_or_else(|| usage());
            let l = RdmaListener::bind(addr.as_str()).unwrap_or_else(|e| {
                eprintln!("socket_echo: bind {addr}: {e}");
                std::process::exit(1)
            });
            println!("listening on {}", l.local_addr().unwrap());
            for s in l.incoming() {
                let mut s = s.expect("accept");
                let mut buf = vec![0u8; 1 << 16];
                loop {
                    let n = s.read(&mut buf).expect("server read");
                    if n == 0 {
                        break;
                    }
                    s.write_all(&buf[..n]).expect("server write");
                }
                println!("connection done");
            }
        }
        Some("client") => {
            let addr = args.get(1).unwrap_or_else(|| usage());
            let total: usize = args
                .get(2)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage());
            let s = RdmaSocket::connect(addr.as_str()).unwrap_or_else(|e| {
                eprintln!("socket_echo: connect {addr}: {e}");
                std::process::exit(1)
            });
            let data: Vec<u8> = (0..total).map(|i| (i * 131 + i / 7) as u8).collect();
            let reader = s.try_clone().expect("clone");
            let expect = data.clone();
            let r = std::thread::spawn(move || {
                let mut got = Vec::with_capacity(expect.len());
                (&reader).read_to_end(&mut got).expect("client read");
                got == expect
            });
            let start = std::time::Instant::now();
            let mut at = 0;
            let mut seed = 12345u64;
            while at < total {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let n = (1 + (seed % 70_000) as usize).min(total - at);
                (&s).write_all(&data[at..at + n]).expect("client write");
                at += n;
            }
            s.shutdown(Shutdown::Write).expect("shutdown");
            if r.join().expect("reader") {
                let secs = start.elapsed().as_secs_f64();
                println!(
                    "ok {total} echoed in {secs:.3} s ({:.1} MB/s each way)",
                    total as f64 / secs / 1e6
                );
            } else {
                println!("MISMATCH");
                std::process::exit(1);
            }
        }
        _ => usage(),
    }
}
