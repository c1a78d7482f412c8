//! tcp_swap: one small program written against `std::net::TcpStream`/`TcpListener`, compiled
//! twice: once with the std types and once with `RdmaSocket`/`RdmaListener` swapped in. The
//! program text is the same macro body; only the two type names differ.
//!
//! ```text
//! tcp_swap [ADDRESS]        RDMA: on ADDRESS (default: the first RDMA device's IPv4 address,
//!                           or 127.0.0.1 over the userspace provider where the kernel has none)
//! tcp_swap --tcp [ADDRESS]  the same program over TCP (default 127.0.0.1)
//! ```
use std::net::{IpAddr, Ipv4Addr};
use std::process::ExitCode;

mod common;

/// The program, written for TCP. `$Listener` and `$Stream` are the only names that change.
macro_rules! line_shouter {
    ($Listener:ty, $Stream:ty) => {
        use std::io::{BufRead, BufReader, Write};
        use std::net::{Shutdown, SocketAddr};
        use std::time::Duration;

        /// Upper-cases every line a client sends, until it closes its side.
        fn serve(listener: $Listener) -> std::io::Result<()> {
            let (stream, peer) = listener.accept()?;
            println!("server: connection from {peer}");
            let mut out = stream.try_clone()?;
            for line in BufReader::new(stream).lines() {
                writeln!(out, "{}", line?.to_uppercase())?;
            }
            out.flush()?;
            Ok(())
        }

        /// Sends some lines, half-closes, and reads the answers to the end.
        pub(crate) fn run(ip: std::net::IpAddr) -> std::io::Result<()> {
            let listener = <$Listener>::bind(SocketAddr::new(ip, 0))?;
            let addr = listener.local_addr()?;
            let server = std::thread::spawn(move || serve(listener));
            let mut stream = <$Stream>::connect_timeout(&addr, Duration::from_secs(5))?;
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            println!(
                "client: {} -> {}",
                stream.local_addr()?,
                stream.peer_addr()?
            );
            let lines = ["hello", "rdma says hi", "bye"];
            for l in lines {
                writeln!(stream, "{l}")?;
            }
            stream.flush()?;
            stream.shutdown(Shutdown::Write)?;
            let answers: Vec<String> = BufReader::new(&stream).lines().collect::<Result<_, _>>()?;
            for a in &answers {
                println!("client: got {a:?}");
            }
            server.join().expect("server thread")?;
            let expected: Vec<String> = lines.iter().map(|l| l.to_uppercase()).collect();
            if answers != expected {
                return Err(std::io::Error::other(format!(
                    "expected {expected:?}, got {answers:?}"
                )));
            }
            println!("ok: {} lines round-tripped", answers.len());
            Ok(())
        }
    };
}

mod over_tcp {
    line_shouter!(std::net::TcpListener, std::net::TcpStream);
}

mod over_rdma {
    line_shouter!(rdmasock::RdmaListener, rdmasock::RdmaSocket);
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tcp = args.iter().any(|a| a == "--tcp");
    let given = args.iter().find(|a| !a.starts_with("--"));
    let ip = match given.map(|a| a.parse::<IpAddr>()) {
        Some(Ok(ip)) => ip,
        Some(Err(e)) => {
            eprintln!("tcp_swap: bad address: {e}");
            return ExitCode::FAILURE;
        }
        None if tcp => IpAddr::V4(Ipv4Addr::LOCALHOST),
        None => match common::address::device_address(None) {
            Ok(ip) => ip,
            Err(e) => {
                eprintln!("tcp_swap: {e}; give an address");
                return ExitCode::FAILURE;
            }
        },
    };
    let result = if tcp {
        over_tcp::run(ip)
    } else {
        over_rdma::run(ip)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tcp_swap: {e}");
            ExitCode::FAILURE
        }
    }
}
