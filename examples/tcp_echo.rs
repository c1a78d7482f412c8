//! A plain TCP echo pair using only std, for trying programs under
//! `LD_PRELOAD=librspreload.so` (rdma-core's rsocket preload library):
//!
//! ```text
//! tcp_echo server PORT              echo every connection's bytes back until it closes
//! tcp_echo client ADDR:PORT BYTES   send BYTES counting bytes, check the echo, print a line
//! ```
//!
//! Beware: std creates its sockets with `socket(…, SOCK_STREAM | SOCK_CLOEXEC, 0)`, and
//! rsocket accepts only a plain `SOCK_STREAM` type, so librspreload hands these sockets
//! back to the kernel: under the preload this program still talks kernel TCP (rxe0's
//! hw_counters stay still; tests/vm_rsocket.rs shows it). Programs that pass plain
//! `SOCK_STREAM` (rdma-core's `rstream -T s`) are the ones the preload turns into rsockets.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::ExitCode;
use std::thread;

fn usage() -> ExitCode {
    eprintln!("usage: tcp_echo server PORT | tcp_echo client ADDR:PORT BYTES");
    ExitCode::from(2)
}

fn serve(port: &str) -> Result<(), String> {
    let listener = TcpListener::bind(format!("0.0.0.0:{port}"))
        .map_err(|e| format!("bind 0.0.0.0:{port}: {e} (is the port free?)"))?;
    println!(
        "listening on {}",
        listener.local_addr().map_err(|e| e.to_string())?
    );
    for conn in listener.incoming() {
        let mut conn = conn.map_err(|e| format!("accept: {e}"))?;
        thread::spawn(move || {
            let mut buf = [0u8; 64 * 1024];
            loop {
                match conn.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if let Err(e) = conn.write_all(&buf[..n]) {
                            eprintln!("tcp_echo server: write: {e}");
                            break;
                        }
                    }
                    Err(e) => {
                        eprintln!("tcp_echo server: read: {e}");
                        break;
                    }
                }
            }
        });
    }
    Ok(())
}

fn client(addr: &str, bytes: &str) -> Result<(), String> {
    let total: usize = bytes
        .parse()
        .map_err(|e| format!("BYTES {bytes:?} is not a count: {e}"))?;
    let stream = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    let mut reader = stream
        .try_clone()
        .map_err(|e| format!("clone the socket: {e}"))?;
    // Write from a thread so a large echo never deadlocks on full buffers.
    let mut writer = stream;
    let sender = thread::spawn(move || -> Result<(), String> {
        let chunk: Vec<u8> = (0..64 * 1024).map(|i| i as u8).collect();
        let mut sent = 0;
        while sent < total {
            let n = chunk.len().min(total - sent);
            // Each chunk starts at a multiple of 64 KiB, so the pattern stays `offset as u8`.
            writer
                .write_all(&chunk[..n])
                .map_err(|e| format!("write after {sent} bytes: {e}"))?;
            sent += n;
        }
        writer
            .shutdown(Shutdown::Write)
            .map_err(|e| format!("shutdown: {e}"))
    });
    let mut got = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = reader
            .read(&mut buf)
            .map_err(|e| format!("read after {got} bytes: {e}"))?;
        if n == 0 {
            break;
        }
        for (i, &b) in buf[..n].iter().enumerate() {
            if b != (got + i) as u8 {
                return Err(format!(
                    "echoed byte {} is {b}, not {}",
                    got + i,
                    (got + i) as u8
                ));
            }
        }
        got += n;
    }
    sender.join().map_err(|_| "the writer thread panicked")??;
    if got != total {
        return Err(format!("echo ended after {got} of {total} bytes"));
    }
    println!("echoed {got} bytes");
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [mode, port] if mode == "server" => serve(port),
        [mode, addr, bytes] if mode == "client" => client(addr, bytes),
        _ => return usage(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tcp_echo: {e}");
            ExitCode::FAILURE
        }
    }
}
