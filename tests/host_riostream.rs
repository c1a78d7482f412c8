//! The `riostream` twin (`examples/riostream.rs`, rsocket's iomap benchmark on
//! `RdmaSocket::iomap`/`iowrite`) on this host: a server and a client over the userspace
//! provider run riostream's custom test with `-T v` (each checks the byte counts the other
//! wrote into its window), in the default (nonblocking) mode and with `-T b`, and both print
//! riostream's result line. The twin against rdma-core's riostream is `tests/vm_iomap.rs`.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

#[path = "example_support/mod.rs"]
mod example_support;
use example_support::{example, output_within};

const LIMIT: Duration = Duration::from_secs(120);

fn spawn(args: &[String]) -> Child {
    Command::new(example("riostream"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the riostream example")
}

/// Waits up to `LIMIT` for `child`; returns its stdout (after `first`, a line already
/// read) and fails the test if it did not exit successfully.
fn finish(child: Child, first: String, what: &str) -> String {
    let out = output_within(child, LIMIT, what);
    let stdout = first + &String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what} failed ({}): stdout {stdout:?} stderr {:?}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn pair(mode: &str) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("an ephemeral port")
        .port()
        .to_string();
    let args = |role: &str| -> Vec<String> {
        [
            role,
            "127.0.0.1",
            "-p",
            &port,
            "-S",
            "4096",
            "-C",
            "10",
            "-I",
            "10",
        ]
        .into_iter()
        .chain(["-T", "v", "-T", mode])
        .map(String::from)
        .collect()
    };
    let mut server = spawn(&args("-b"));
    // The header comes once the server listens.
    let mut out = BufReader::new(server.stdout.take().expect("piped stdout"));
    let mut header = String::new();
    out.read_line(&mut header).expect("the server's header");
    assert!(header.starts_with("name"), "{header:?}");
    let rest = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        text
    });
    let client = finish(spawn(&args("-s")), String::new(), "the client");
    let server = finish(server, header, "the server") + &rest.join().unwrap();
    for out in [client, server] {
        assert!(
            out.lines()
                .any(|l| l.starts_with("custom    4k      10      10")),
            "{out:?}"
        );
    }
}

#[test]
fn riostream_twins_exchange_verified_windows_nonblocking() {
    pair("n");
}

#[test]
fn riostream_twins_exchange_verified_windows_blocking() {
    pair("b");
}
