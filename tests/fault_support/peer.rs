//! The peer process of a fault: this test binary run again for the one test, with
//! [`PEER_ENV`] saying what to do. It reports on stdout in lines that start with `peer: `;
//! [`Peer`] is the parent's handle on it.

use super::limits;
use rdmasock::RdmaSocket;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

/// The environment variable that makes a fault test's child process the peer: the role and
/// its arguments, separated by spaces (`reader ADDR`, `fds ADDR N`, `memlock-connect ADDR`,
/// `memlock-accept IP`).
pub(crate) const PEER_ENV: &str = "RDMASOCK_FAULT_PEER";

/// The stream's bytes: a function of their offset, so the reader checks them without a copy.
pub(crate) fn pattern(at: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        let x = at + i as u64;
        *b = (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8;
    }
}

/// Whether `buf` is the pattern at offset `at`.
pub(crate) fn is_pattern(at: u64, buf: &[u8]) -> bool {
    buf.iter().enumerate().all(|(i, b)| {
        let x = at + i as u64;
        *b == (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
    })
}

/// In the child (when [`PEER_ENV`] is set): plays the role and ends the process, so the
/// child never counts as a test passed. In the parent: returns at once.
pub(crate) fn serve_if_peer() {
    let Ok(role) = std::env::var(PEER_ENV) else {
        return;
    };
    let words: Vec<&str> = role.split(' ').collect();
    match words.as_slice() {
        ["reader", addr] => reader(addr),
        ["fds", addr, n] => limits::fds_peer(addr, n.parse().expect("a connection count")),
        ["memlock-connect", addr] => limits::memlock_connect_peer(addr),
        ["memlock-accept", ip] => limits::memlock_accept_peer(ip),
        _ => panic!("{PEER_ENV}={role:?}: no such role"),
    }
    std::process::exit(0);
}

/// Prints one report line.
pub(crate) fn report(line: &str) {
    println!("peer: {line}");
}

/// Connects to `addr` and reads to the end, checking every byte against [`pattern`];
/// reports `got N` after each read, then `end N`, `error TEXT` or `corrupt N`.
fn reader(addr: &str) {
    let mut s = RdmaSocket::connect(addr).expect("the peer connects");
    report("connected");
    let mut buf = vec![0u8; 64 << 10];
    let mut at = 0u64;
    loop {
        match s.read(&mut buf) {
            Ok(0) => return report(&format!("end {at}")),
            Ok(n) if !is_pattern(at, &buf[..n]) => return report(&format!("corrupt {at}")),
            Ok(n) => {
                at += n as u64;
                report(&format!("got {at}"));
            }
            Err(e) => return report(&format!("error {e}")),
        }
    }
}

/// The parent's handle on a peer process: its report lines, and the bytes it received
/// intact so far.
pub(crate) struct Peer {
    child: Child,
    lines: Receiver<String>,
    /// Bytes the peer has reported received and checked.
    pub got: u64,
    /// The reports other than `got N`, in order.
    pub said: Vec<String>,
}

impl Peer {
    /// Runs test `test_name` of this binary as the peer with `role` (see [`PEER_ENV`]),
    /// inside network namespace `namespace` when given.
    pub(crate) fn spawn(test_name: &str, role: &str, namespace: Option<&str>) -> Peer {
        let exe = std::env::current_exe().unwrap();
        let mut command = match namespace {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let mut child = command
            .args(["--include-ignored", "--exact", test_name, "--nocapture"])
            .env(PEER_ENV, role)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the peer");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Some(report) = line.strip_prefix("peer: ") {
                    if tx.send(report.to_string()).is_err() {
                        return;
                    }
                }
            }
        });
        Peer {
            child,
            lines,
            got: 0,
            said: Vec::new(),
        }
    }

    /// Takes the next report within `timeout`; `None` when none came (or the peer ended).
    pub(crate) fn next(&mut self, timeout: Duration) -> Option<String> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => {
                match line.strip_prefix("got ") {
                    Some(n) => self.got = n.parse().expect("a byte count"),
                    None => self.said.push(line.clone()),
                }
                Some(line)
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Waits up to `timeout` for a report that starts with `prefix` (taking the others);
    /// returns the rest of it.
    pub(crate) fn wait_for(&mut self, prefix: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.next(left)?;
            if let Some(rest) = line.strip_prefix(prefix) {
                return Some(rest.to_string());
            }
        }
    }

    /// Waits up to `timeout` until the peer has received `bytes`; whether it did.
    pub(crate) fn wait_got(&mut self, bytes: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.got < bytes {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.next(left).is_none() {
                break;
            }
        }
        self.got >= bytes
    }

    /// Sends signal `name` (`KILL`, `STOP`, `CONT`) to the peer, with kill(1).
    pub(crate) fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(
            status.success(),
            "kill -{name} {}: {status}",
            self.child.id()
        );
    }

    /// Waits up to `timeout` for the peer to end (killing it then), takes its last reports
    /// and returns the bytes it received intact.
    pub(crate) fn finish(mut self, timeout: Duration) -> (u64, Vec<String>) {
        let deadline = Instant::now() + timeout;
        while self.child.try_wait().expect("poll the peer").is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.wait();
        while self.next(Duration::from_secs(5)).is_some() {}
        (self.got, std::mem::take(&mut self.said))
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
