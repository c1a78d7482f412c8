//! mio_echo: an echo server on a mio event loop serving many RDMA clients at once.
//!
//! ```text
//! mio_echo server ADDRESS:PORT             serve until killed
//! mio_echo clients ADDRESS:PORT N BYTES    N concurrent clients, each echoes BYTES and checks
//! mio_echo local [N] [BYTES]               both in this process on the first RDMA device
//!                                          (on loopback over uiwarp where the kernel has none)
//! ```
//!
//! RdmaSocket events come flagged readable whichever direction became possible, so the
//! server tries reads and writes on every event of a token until both would block.
#[path = "common/address.rs"]
#[allow(dead_code)]
mod address;
#[path = "common/echo_main.rs"]
#[allow(dead_code)]
mod echo_main;

use mio::{Events, Interest, Poll, Token};
use rdmasock::{RdmaListener, RdmaSocket};
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Instant;

const LISTENER: Token = Token(0);

struct Client {
    socket: RdmaSocket,
    /// Received and not yet echoed.
    pending: Vec<u8>,
    read_closed: bool,
}

/// Reads what is there and writes back what it can; true when the client is finished.
fn service(c: &mut Client) -> std::io::Result<bool> {
    let mut buf = [0u8; 65536];
    loop {
        let mut progress = false;
        if !c.read_closed && c.pending.len() < 1 << 20 {
            match c.socket.read(&mut buf) {
                Ok(0) => {
                    c.read_closed = true;
                    progress = true;
                }
                Ok(n) => {
                    c.pending.extend_from_slice(&buf[..n]);
                    progress = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        if !c.pending.is_empty() {
            match c.socket.write(&c.pending) {
                Ok(n) => {
                    c.pending.drain(..n);
                    progress = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        if c.read_closed && c.pending.is_empty() {
            return Ok(true);
        }
        if !progress {
            return Ok(false);
        }
    }
}

/// Serves until `stop_after` clients have finished (forever with `None`).
pub(crate) fn serve(mut listener: RdmaListener, stop_after: Option<usize>) -> std::io::Result<()> {
    let mut poll = Poll::new()?;
    listener.set_nonblocking(true)?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let mut clients: HashMap<Token, Client> = HashMap::new();
    let mut next = 1;
    let mut finished = 0;
    let mut events = Events::with_capacity(256);
    while stop_after.is_none_or(|n| finished < n) {
        poll.poll(&mut events, None)?;
        for ev in events.iter() {
            if ev.token() == LISTENER {
                loop {
                    match listener.accept() {
                        Ok((mut socket, _)) => {
                            socket.set_nonblocking(true)?;
                            let token = Token(next);
                            next += 1;
                            poll.registry().register(
                                &mut socket,
                                token,
                                Interest::READABLE | Interest::WRITABLE,
                            )?;
                            clients.insert(
                                token,
                                Client {
                                    socket,
                                    pending: Vec::new(),
                                    read_closed: false,
                                },
                            );
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                }
                continue;
            }
            let Some(c) = clients.get_mut(&ev.token()) else {
                continue;
            };
            let done = match service(c) {
                Ok(done) => done,
                Err(e) => {
                    eprintln!("client {:?}: {e}", ev.token());
                    true
                }
            };
            if done {
                let mut c = clients.remove(&ev.token()).expect("present");
                poll.registry().deregister(&mut c.socket)?;
                finished += 1;
            }
        }
    }
    Ok(())
}

/// `n` blocking clients at once: all connect first (one after the other, so the handshakes
/// do not race each other's timeouts), then each sends `bytes` from one thread while reading
/// the echo on another, and checks it.
pub(crate) fn clients(addr: SocketAddr, n: usize, bytes: usize) -> Result<(), String> {
    let start = Instant::now();
    let mut sockets = Vec::with_capacity(n);
    for i in 0..n {
        sockets.push(RdmaSocket::connect(addr).map_err(|e| format!("client {i}: {e}"))?);
    }
    let connected = start.elapsed();
    let threads: Vec<_> = sockets
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            std::thread::spawn(move || -> Result<(), String> {
                let data: Vec<u8> = (0..bytes).map(|b| (b * 7 + i) as u8).collect();
                let writer = s.try_clone().map_err(|e| e.to_string())?;
                let sent = data.clone();
                let w = std::thread::spawn(move || {
                    (&writer).write_all(&sent)?;
                    writer.shutdown(std::net::Shutdown::Write)
                });
                let mut back = Vec::with_capacity(bytes);
                (&s).read_to_end(&mut back)
                    .map_err(|e| format!("client {i}: {e}"))?;
                w.join()
                    .map_err(|_| "writer panicked".to_string())?
                    .map_err(|e| format!("client {i} write: {e}"))?;
                if back != data {
                    return Err(format!("client {i}: the echo differs"));
                }
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().map_err(|_| "a client panicked".to_string())??;
    }
    println!(
        "{n} clients connected in {:.2} s and echoed {bytes} bytes each in {:.2} s",
        connected.as_secs_f64(),
        (start.elapsed() - connected).as_secs_f64()
    );
    Ok(())
}

#[allow(dead_code)] // also compiled into the socket tests (tests/conformance/polling.rs), which have their own main
fn main() -> ExitCode {
    echo_main::main("mio_echo", serve, clients)
}
