//! Times RdmaSocket connect/echo/close cycles against an in-process listener.
//!
//! `connect_cycles [ADDR [N]]`: listens on ADDR (default 127.0.0.1:0; port 0 picks one), then
//! connects, echoes one byte and closes N times (default 20), printing each phase's time and
//! the mean. On loopback without kernel RDMA the connections use the userspace provider.
use rdmasock::{RdmaListener, RdmaSocket};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:0".to_string());
    let n: usize = match args.next().map(|v| v.parse()) {
        None => 20,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("connect_cycles: bad count: {e}\nusage: connect_cycles [ADDR [N]]");
            std::process::exit(2);
        }
    };
    let listener = match RdmaListener::bind(addr.as_str()) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("connect_cycles: bind on {addr}: {e}\nusage: connect_cycles [ADDR [N]]");
            std::process::exit(1);
        }
    };
    let addr = listener.local_addr().expect("local address");
    let server = std::thread::spawn(move || {
        for _ in 0..n {
            let (mut s, _) = listener.accept().expect("accept");
            let mut b = [0u8; 1];
            s.read_exact(&mut b).expect("one byte");
            s.write_all(&b).expect("echo it");
        }
    });
    let (mut total_connect, mut total_echo, mut total_close) =
        (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let start = Instant::now();
    for i in 0..n {
        let t0 = Instant::now();
        let mut c = RdmaSocket::connect(addr).expect("connect");
        let t1 = Instant::now();
        c.write_all(b"x").expect("write");
        let mut b = [0u8; 1];
        c.read_exact(&mut b).expect("read");
        let t2 = Instant::now();
        drop(c);
        let t3 = Instant::now();
        println!(
            "cycle {i}: connect {:?} echo {:?} close {:?}",
            t1 - t0,
            t2 - t1,
            t3 - t2
        );
        total_connect += t1 - t0;
        total_echo += t2 - t1;
        total_close += t3 - t2;
    }
    server.join().expect("server thread");
    let k = n.max(1) as u32;
    println!(
        "{n} cycles in {:.2} s: mean connect {:?} echo {:?} close {:?}",
        start.elapsed().as_secs_f64(),
        total_connect / k,
        total_echo / k,
        total_close / k
    );
}
