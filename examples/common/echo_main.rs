//! The command line of the echo examples (`mio_echo`, `poll_echo`): `server`, `clients` and
//! `local` around the example's own server loop and clients.

use super::address;
use rdmasock::RdmaListener;
use std::net::SocketAddr;
use std::process::ExitCode;

/// An example's server: serves `listener` until killed, or until `stop_after` clients finished.
pub(crate) type Serve = fn(RdmaListener, Option<usize>) -> std::io::Result<()>;

/// An example's clients: `n` at once to `addr`, each echoing `bytes` bytes and checking them.
pub(crate) type Clients = fn(SocketAddr, usize, usize) -> Result<(), String>;

/// Runs the example `name` on this process's arguments; prints an error prefixed with `name`.
pub(crate) fn main(name: &str, serve: Serve, clients: Clients) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args, name, serve, clients) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String], name: &str, serve: Serve, clients: Clients) -> Result<(), String> {
    let num = |i: usize, default: usize| -> Result<usize, String> {
        args.get(i)
            .map_or(Ok(default), |v| v.parse().map_err(|e| format!("{v}: {e}")))
    };
    match args.first().map(String::as_str) {
        Some("server") => {
            let addr = args.get(1).ok_or("server needs ADDRESS:PORT")?;
            let l = RdmaListener::bind(addr.as_str()).map_err(|e| e.to_string())?;
            println!("serving on {}", l.local_addr().map_err(|e| e.to_string())?);
            serve(l, None).map_err(|e| e.to_string())
        }
        Some("clients") => {
            let addr: SocketAddr = args
                .get(1)
                .ok_or("clients needs ADDRESS:PORT")?
                .parse()
                .map_err(|e| format!("address: {e}"))?;
            clients(addr, num(2, 8)?, num(3, 65536)?)
        }
        Some("local") => {
            let (n, bytes) = (num(1, 16)?, num(2, 65536)?);
            let ip = address::device_address(None)?;
            let l = RdmaListener::bind(SocketAddr::new(ip, 0)).map_err(|e| e.to_string())?;
            let addr = l.local_addr().map_err(|e| e.to_string())?;
            let server = std::thread::spawn(move || serve(l, Some(n)));
            clients(addr, n, bytes)?;
            server
                .join()
                .map_err(|_| "the server panicked".to_string())?
                .map_err(|e| e.to_string())
        }
        _ => Err(format!(
            "usage: {name} server ADDR:PORT | clients ADDR:PORT N BYTES | local [N] [BYTES]"
        )),
    }
}
