//! `riostream`: the twin of librdmacm's `riostream` (rsocket's iomap benchmark) on
//! [`RdmaSocket::iomap`] and [`RdmaSocket::iowrite`]; it interoperates with rdma-core's
//! tool both ways.
//!
//! Each side asks for an iomap table of one entry and maps a window of the transfer size at
//! offset 0; after a 16-byte sync over the stream (client first), the client iowrites
//! `count` transfers into the server's window, the last one ending in a marker byte the
//! server spins on, and the server answers the same way; `iters` times. With `-T v` the last
//! transfer of each turn carries a byte count (continuing across transfers, mod 256) that the
//! receiver checks. Without `-S`, `-C` or `-I` it runs riostream's size table twice: a
//! latency pass (one transfer a turn, inline up to `-i`) and a bandwidth pass (no inline),
//! each on a connection of its own. The output is riostream's: name, bytes, xfers, iters,
//! total, time, Gb/sec, usec/xfer.
//!
//! ```text
//! riostream [-s server_address] [-b bind_address] [-f address_format] [-B buffer_size]
//!           [-i inline_size] [-I iterations] [-C transfer_count] [-S transfer_size or all]
//!           [-p port_number] [-T test_option]
//! ```

mod common;

use common::{c_long, parse_args, OptSpec};
use rdmasock::{MappedWindow, RdmaListener, RdmaSocket, SocketOptions};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Instant;

const USAGE: &str = "usage: riostream
\t[-s server_address]
\t[-b bind_address]
\t[-f address_format]
\t    name, ip, ipv6, or gid
\t[-B buffer_size]
\t[-i inline_size]
\t[-I iterations]
\t[-C transfer_count]
\t[-S transfer_size or all]
\t[-p port_number]
\t[-T test_option]
\t    a|async - asynchronous operation (use poll)
\t    b|blocking - use blocking calls
\t    n|nonblocking - use nonblocking calls
\t    v|verify - verify data";

/// riostream's size table: (size, shown only with `-S all`).
const TEST_SIZES: [(usize, bool); 33] = {
    let mut t = [(64usize, false); 33];
    let mut i = 1;
    let mut shift = 7;
    while shift <= 22 {
        t[i] = (1 << shift, !matches!(shift, 12 | 16 | 20));
        t[i + 1] = ((1 << shift) + (1 << (shift - 1)), true);
        i += 2;
        shift += 1;
    }
    t
};

#[derive(Clone, Copy)]
struct Test {
    size: usize,
    count: usize,
    iters: usize,
}

struct Config {
    dst: Option<String>,
    src: Option<String>,
    port: u16,
    buffer: Option<usize>,
    inline: u32,
    blocking: bool,
    verify: bool,
    all_sizes: bool,
    custom: Option<Test>,
}

/// The byte counters of riostream's `format_buf` and `verify_buf`.
#[derive(Default)]
struct Counters {
    format: u8,
    verify: u8,
    verified: u64,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = match parse(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("riostream: {e}");
            println!("{USAGE}");
            std::process::exit(1);
        }
    };
    if let Err(e) = run(&config) {
        eprintln!("riostream: {e}");
        std::process::exit(1);
    }
}

fn parse(args: &[String]) -> Result<Config, String> {
    let specs: Vec<OptSpec> = "sbfBiICSpT"
        .chars()
        .map(|short| OptSpec {
            short,
            long: "",
            takes_value: true,
        })
        .collect();
    let parsed = parse_args(args, &specs)?;
    let mut c = Config {
        dst: None,
        src: None,
        port: 7471,
        buffer: None,
        inline: 64,
        blocking: false,
        verify: false,
        all_sizes: false,
        custom: None,
    };
    let mut custom = Test {
        size: 1000,
        count: 1000,
        iters: 1,
    };
    let mut is_custom = false;
    for (opt, value) in parsed.opts {
        let v = value.unwrap_or_default();
        let number = || usize::try_from(c_long(&v)).unwrap_or(0);
        match opt {
            's' => c.dst = Some(v.clone()),
            'b' => c.src = Some(v.clone()),
            'f' => {} // names and numeric addresses both resolve; gid has no meaning here
            'B' => c.buffer = Some(number()),
            'i' => c.inline = number() as u32,
            'I' => (is_custom, custom.iters) = (true, number()),
            'C' => (is_custom, custom.count) = (true, number()),
            'S' if v.to_ascii_lowercase().starts_with("all") => c.all_sizes = true,
            'S' => (is_custom, custom.size) = (true, number()),
            'p' => c.port = v.parse().map_err(|_| format!("bad port {v}"))?,
            'T' => match v.to_ascii_lowercase().as_str() {
                "a" | "async" | "n" | "nonblock" | "nonblocking" => c.blocking = false,
                "b" | "block" | "blocking" => c.blocking = true,
                "v" | "verify" => c.verify = true,
                other => return Err(format!("unknown test option {other}")),
            },
            _ => unreachable!("only the listed options parse"),
        }
    }
    if is_custom {
        if custom.size < 2 || custom.count == 0 || custom.iters == 0 {
            return Err("a transfer needs at least 2 bytes, and count and iterations 1".into());
        }
        c.custom = Some(custom);
    }
    Ok(c)
}

fn size_to_count(size: usize) -> usize {
    match size {
        s if s >= 1 << 20 => 100,
        s if s >= 1 << 16 => 1000,
        s if s >= 1 << 10 => 10000,
        _ => 100000,
    }
}

fn options(c: &Config, inline: u32) -> Result<SocketOptions, String> {
    let ring = c.buffer.unwrap_or(1 << 19).max(4096) & !1;
    SocketOptions::builder()
        .iomap_size(1)
        .send_ring(ring)
        .recv_ring(ring)
        .inline_threshold(inline)
        .build()
        .map_err(|e| e.to_string())
}

fn run(c: &Config) -> Result<(), String> {
    let listener = match &c.dst {
        Some(_) => None,
        None => {
            let ip = c.src.as_deref().unwrap_or("0.0.0.0");
            let addr = resolve(ip, c.port)?;
            let opts = options(c, c.inline)?;
            let l = RdmaListener::bind_with(addr, &opts).map_err(|e| format!("rbind: {e}"))?;
            Some((l, addr))
        }
    };
    let connect = |inline: u32| -> Result<RdmaSocket, String> {
        let opts = options(c, inline)?;
        let s = match (&listener, &c.dst) {
            (Some((l, _)), _) => l.accept().map_err(|e| format!("raccept: {e}"))?.0,
            (None, Some(dst)) => RdmaSocket::connect_with(resolve(dst, c.port)?, &opts)
                .map_err(|e| format!("rconnect: {e}"))?,
            (None, None) => unreachable!("a client has an address"),
        };
        s.set_nonblocking(!c.blocking)
            .map_err(|e| format!("rfcntl: {e}"))?;
        Ok(s)
    };
    println!(
        "{:<10}{:<8}{:<8}{:<8}{:<8}{:>8} {:>10}{:>13}",
        "name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer"
    );
    let mut counters = Counters::default();
    if let Some(test) = c.custom {
        let mut s = connect(c.inline)?;
        return run_test(&mut s, c, test, "custom", &mut counters);
    }
    for latency in [true, false] {
        let mut s = connect(if latency { c.inline } else { 0 })?;
        for &(size, extra) in TEST_SIZES.iter() {
            if extra && !c.all_sizes {
                continue;
            }
            let (test, kind) = if latency {
                let t = Test {
                    size,
                    count: 1,
                    iters: size_to_count(size),
                };
                (t, "lat")
            } else {
                let t = Test {
                    size,
                    count: size_to_count(size),
                    iters: 1,
                };
                (t, "bw")
            };
            let name = format!("{}_{kind}", size_str(size as u64));
            run_test(&mut s, c, test, &name, &mut counters)?;
        }
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
    Ok(())
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("getaddrinfo: {e}"))?
        .next()
        .ok_or_else(|| format!("getaddrinfo: no address for {host}"))
}

/// Retries `f` while it would block (riostream's nonblocking calls without poll), at once,
/// as riostream does: no `pause` between tries (see [`recv_xfer`]).
fn retry<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            other => return other,
        }
    }
}

fn run_test(
    s: &mut RdmaSocket,
    c: &Config,
    t: Test,
    name: &str,
    counters: &mut Counters,
) -> Result<(), String> {
    let window = s
        .iomap(t.size, Some(0))
        .map_err(|e| format!("riomap: {e}"))?;
    window
        .write_at(t.size - 1, &[0xff])
        .map_err(|e| e.to_string())?;
    let client = c.dst.is_some();
    sync(s, client).map_err(|e| format!("sync: {e}"))?;
    let mut buf = vec![0u8; t.size];
    let mut marker = 0u8;
    let start = Instant::now();
    for _ in 0..t.iters {
        if !client {
            recv_xfer(&window, marker, c, counters)?;
            marker = marker.wrapping_add(1);
        }
        // The transfers before the last must not end in the marker the peer waits for.
        buf[t.size - 1] = marker ^ 0x80;
        for _ in 0..t.count - 1 {
            send_xfer(s, &buf)?;
        }
        buf[t.size - 1] = marker;
        marker = marker.wrapping_add(1);
        if c.verify {
            for b in &mut buf[..t.size - 1] {
                *b = counters.format;
                counters.format = counters.format.wrapping_add(1);
            }
        }
        send_xfer(s, &buf)?;
        if client {
            recv_xfer(&window, marker, c, counters)?;
            marker = marker.wrapping_add(1);
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    show_perf(name, t, usec);
    window.unmap().map_err(|e| format!("riounmap: {e}"))
}

fn sync(s: &mut RdmaSocket, client: bool) -> io::Result<()> {
    let mut msg = [0u8; 16];
    let send = |s: &mut RdmaSocket| {
        let out = [0u8; 16];
        let mut done = 0;
        while done < out.len() {
            done += retry(|| s.write(&out[done..]))?;
        }
        io::Result::Ok(())
    };
    let recv = |s: &mut RdmaSocket, msg: &mut [u8; 16]| {
        let mut done = 0;
        while done < msg.len() {
            match retry(|| s.read(&mut msg[done..]))? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => done += n,
            }
        }
        io::Result::Ok(())
    };
    if client {
        send(s)?;
        recv(s, &mut msg)
    } else {
        recv(s, &mut msg)?;
        send(s)
    }
}

fn send_xfer(s: &RdmaSocket, buf: &[u8]) -> Result<(), String> {
    let mut offset = 0;
    while offset < buf.len() {
        offset += retry(|| s.iowrite(&buf[offset..], offset as u64))
            .map_err(|e| format!("riowrite: {e}"))?;
    }
    Ok(())
}

/// Spins until the window's last byte is `marker` (the device, or the userspace provider's
/// progress thread, places the peer's writes without a call on the socket). The loop is
/// riostream's `while (*poll_byte != marker);`: a plain read and compare, with no `pause`
/// (`std::hint::spin_loop`), which under QEMU's TCG leaves the translated code on every
/// turn and lengthens rxe0's 64 B round trip.
fn recv_xfer(
    window: &MappedWindow,
    marker: u8,
    c: &Config,
    counters: &mut Counters,
) -> Result<(), String> {
    let last = window.len() - 1;
    // `byte_at` reads the byte anew each time (the peer writes it behind the compiler's back).
    while window.byte_at(last).map_err(|e| e.to_string())? != marker {}
    if c.verify {
        let mut got = vec![0u8; last];
        window.read_at(0, &mut got).map_err(|e| e.to_string())?;
        for &b in &got {
            if b != counters.verify {
                return Err(format!(
                    "data verification failed byte {}",
                    counters.verified
                ));
            }
            counters.verify = counters.verify.wrapping_add(1);
            counters.verified += 1;
        }
    }
    Ok(())
}

fn show_perf(name: &str, t: Test, usec: f64) {
    let bytes = (t.iters * t.count * t.size * 2) as u64;
    println!(
        "{:<10}{:<8}{:<8}{:<8}{:<8}{:>8.2}s{:>10.2}{:>11.2}",
        name,
        size_str(t.size as u64),
        cnt_str(t.count as u64),
        cnt_str(t.iters as u64),
        size_str(bytes),
        usec / 1e6,
        (bytes * 8) as f64 / (1000.0 * usec),
        usec / t.iters as f64 / (t.count * 2) as f64
    );
}

/// librdmacm's `size_str`: 1.5k, 64k, 4m (one decimal below 10 units).
fn size_str(size: u64) -> String {
    let (base, mag) = match size {
        s if s >= 1 << 30 => (1 << 30, "g"),
        s if s >= 1 << 20 => (1 << 20, "m"),
        s if s >= 1 << 10 => (1 << 10, "k"),
        _ => (1, ""),
    };
    let fraction = if size / base < 10 {
        (size % base) * 10 / base
    } else {
        0
    };
    if fraction != 0 {
        format!("{}.{fraction}{mag}", size / base)
    } else {
        format!("{}{mag}", size / base)
    }
}

/// librdmacm's `cnt_str`: 100k, 1m.
fn cnt_str(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{}b", n / 1_000_000_000),
        n if n >= 1_000_000 => format!("{}m", n / 1_000_000),
        n if n >= 1000 => format!("{}k", n / 1000),
        n => n.to_string(),
    }
}
