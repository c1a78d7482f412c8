//! pingpong: ibv_rc_pingpong's measurement over an [`RdmaSocket`] (connection set up by
//! rdma_cm, data moved by rsocket's stream protocol).
//!
//! ```text
//! pingpong [-p port] [-d device] [-s size] [-n iters] [-e]          server
//! pingpong [-p port] [-d device] [-s size] [-n iters] [-e] HOST     client
//! pingpong --local [-d device] [-s size] [-n iters] [-e]             both ends, one process
//! ```
//!
//! The client sends `size` bytes, the server reads them and sends them back, `iters` times;
//! both print ibv_rc_pingpong's closing lines (`8192000 bytes in 0.62 seconds = 106.00
//! Mbit/sec`, `1000 iters in 0.62 seconds = 621.30 usec/iter`). `--local` runs the server in a
//! thread on the device's address and the client against it.
//!
//! `-d` picks the device: the server listens on its address, and a client refuses a host it
//! would not reach through it (the route to the host must leave from the device's address).
//! Each end reports on stderr how its waits went (`  client waits: 212 (channel sleeps 209,
//! naps 0)`): with `-e` they sleep on the completion channel, without they mostly spin.
use rdmasock::{RdmaListener, RdmaSocket, SocketOptions};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::process::ExitCode;
use std::time::{Duration, Instant};

mod common;
use common::address::{device_address, served_address};
use common::{c_long, parse_args, OptSpec};

const SPECS: &[OptSpec] = &[
    OptSpec {
        short: 'p',
        long: "port",
        takes_value: true,
    },
    OptSpec {
        short: 'd',
        long: "ib-dev",
        takes_value: true,
    },
    OptSpec {
        short: 's',
        long: "size",
        takes_value: true,
    },
    OptSpec {
        short: 'n',
        long: "iters",
        takes_value: true,
    },
    OptSpec {
        short: 'e',
        long: "events",
        takes_value: false,
    },
    OptSpec {
        short: 'l',
        long: "local",
        takes_value: false,
    },
    OptSpec {
        short: 'h',
        long: "help",
        takes_value: false,
    },
];

#[derive(Clone)]
struct Config {
    port: u16,
    device: Option<String>,
    size: usize,
    iters: u32,
    events: bool,
    local: bool,
    host: Option<String>,
}

fn usage() {
    println!("Usage:");
    println!("  pingpong            start a server and wait for connection");
    println!("  pingpong <host>     connect to server at <host>");
    println!("  pingpong --local    run both ends in this process");
    println!();
    println!("Options:");
    println!("  -p, --port=<port>      listen on/connect to port <port> (default 18515)");
    println!("  -d, --ib-dev=<dev>     use device <dev>: listen on its address, or connect only");
    println!("                         through it (default: the first / the route's)");
    println!("  -s, --size=<size>      size of message to exchange (default 4096)");
    println!("  -n, --iters=<iters>    number of exchanges (default 1000)");
    println!("  -e, --events           sleep on CQ events (default poll)");
    println!("  -l, --local            server and client in one process");
}

fn config() -> Result<Config, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = parse_args(&args, SPECS)?;
    let mut c = Config {
        port: 18515,
        device: None,
        size: 4096,
        iters: 1000,
        events: false,
        local: false,
        host: parsed.free.first().cloned(),
    };
    for (opt, value) in parsed.opts {
        let v = value.unwrap_or_default();
        match opt {
            'p' => c.port = u16::try_from(c_long(&v)).map_err(|_| format!("bad port {v}"))?,
            'd' => c.device = Some(v),
            's' => {
                c.size = usize::try_from(c_long(&v))
                    .ok()
                    .filter(|&s| s > 0)
                    .ok_or(format!("bad size {v}"))?
            }
            'n' => {
                c.iters = u32::try_from(c_long(&v))
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or(format!("bad iteration count {v}"))?
            }
            'e' => c.events = true,
            'l' => c.local = true,
            _ => {
                usage();
                std::process::exit(0);
            }
        }
    }
    Ok(c)
}

fn options(c: &Config) -> SocketOptions {
    let b = SocketOptions::builder();
    // Polling mode is the library's default, an adaptive busy-poll (a fixed 20 µs spin was
    // shorter than one round trip of a soft device under qemu: every wait slept).
    let b = if c.events { b.event_mode() } else { b };
    b.build().expect("valid options")
}

fn report(c: &Config, elapsed: Duration) {
    let usec = elapsed.as_micros() as f64;
    let bytes = c.size as u64 * u64::from(c.iters) * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        c.iters,
        usec / 1e6,
        usec / f64::from(c.iters)
    );
}

fn serve(c: &Config, listener: RdmaListener) -> Result<(), String> {
    let (mut s, peer) = listener.accept().map_err(|e| format!("accept: {e}"))?;
    eprintln!("  connection from {peer}");
    let mut buf = vec![0u8; c.size];
    let start = Instant::now();
    for i in 0..c.iters {
        s.read_exact(&mut buf)
            .map_err(|e| format!("server read, iteration {i}: {e}"))?;
        s.write_all(&buf)
            .map_err(|e| format!("server write, iteration {i}: {e}"))?;
    }
    report(c, start.elapsed());
    report_waits("server", &s);
    Ok(())
}

/// Tells how `s`'s blocking calls waited: event mode sleeps on the completion channel in
/// (nearly) every wait and never naps; polling mostly spins.
fn report_waits(end: &str, s: &RdmaSocket) {
    let w = s.wait_stats();
    // One write: stderr is unbuffered, and with --local both ends print at once.
    let line = format!(
        "  {end} waits: {} (channel sleeps {}, naps {})\n",
        w.waits, w.channel_sleeps, w.naps
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Checks that `addr` is reached through `device`: the route to it must leave from the
/// device's address, which rdma_cm then picks the device by (as the server binds to it).
fn check_route(device: &str, addr: SocketAddr) -> Result<(), String> {
    let ip = device_address(Some(device))?;
    let any: SocketAddr = match addr {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    // Connecting a UDP socket sends nothing: it only asks the kernel for the route.
    let source = UdpSocket::bind(any)
        .and_then(|u| u.connect(addr).and_then(|()| u.local_addr()))
        .map_err(|e| format!("no route to {addr}: {e}"))?
        .ip();
    if source == ip {
        Ok(())
    } else {
        Err(format!(
            "{addr} is not reached through {device} ({ip}): the route to it leaves from {source}"
        ))
    }
}

fn client(c: &Config, addr: SocketAddr) -> Result<(), String> {
    let mut s = RdmaSocket::connect_with(addr, &options(c))
        .map_err(|e| format!("connect to {addr}: {e}"))?;
    let out: Vec<u8> = (0..c.size).map(|i| i as u8).collect();
    let mut back = vec![0u8; c.size];
    let start = Instant::now();
    for i in 0..c.iters {
        s.write_all(&out)
            .map_err(|e| format!("client write, iteration {i}: {e}"))?;
        s.read_exact(&mut back)
            .map_err(|e| format!("client read, iteration {i}: {e}"))?;
    }
    let elapsed = start.elapsed();
    if back != out {
        return Err("the echoed bytes differ from the sent ones".into());
    }
    report(c, elapsed);
    report_waits("client", &s);
    Ok(())
}

fn run(c: Config) -> Result<(), String> {
    if c.local {
        let ip = match &c.device {
            Some(d) => device_address(Some(d))?,
            // The first device that the provider RDMASOCK_PROVIDER forces (if any) drives.
            None => served_address()?,
        };
        let listener = RdmaListener::bind_with(SocketAddr::new(ip, 0), &options(&c))
            .map_err(|e| format!("bind on {ip}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        eprintln!("  local mode: server on {addr}");
        let server = {
            let c = c.clone();
            std::thread::spawn(move || serve(&c, listener))
        };
        // A client that fails ends the run with its error at once: the server thread may
        // wait in accept for a connection that never comes, and it ends with the process.
        client(&c, addr)?;
        // The client finished, so the server has its last bytes or failed: it ends too.
        return server
            .join()
            .map_err(|_| "the server thread panicked".to_string())?;
    }
    match &c.host {
        Some(host) => {
            let addr = (host.as_str(), c.port)
                .to_socket_addrs_first()
                .map_err(|e| format!("resolving {host}: {e}"))?;
            if let Some(d) = &c.device {
                check_route(d, addr)?;
            }
            client(&c, addr)
        }
        None => {
            let ip = match &c.device {
                Some(d) => device_address(Some(d))?,
                None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            };
            let listener = RdmaListener::bind_with(SocketAddr::new(ip, c.port), &options(&c))
                .map_err(|e| format!("bind on {ip}:{}: {e}", c.port))?;
            serve(&c, listener)
        }
    }
}

trait FirstAddr {
    fn to_socket_addrs_first(&self) -> std::io::Result<SocketAddr>;
}

impl FirstAddr for (&str, u16) {
    fn to_socket_addrs_first(&self) -> std::io::Result<SocketAddr> {
        std::net::ToSocketAddrs::to_socket_addrs(self)?
            .next()
            .ok_or_else(|| std::io::Error::other("no address"))
    }
}

fn main() -> ExitCode {
    let c = match config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pingpong: {e}");
            usage();
            return ExitCode::FAILURE;
        }
    };
    match run(c) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pingpong: {e}");
            ExitCode::FAILURE
        }
    }
}
