//! Entry point for the `socket_completions` fuzz target in `fuzz/` (cargo-fuzz), also run on
//! seeded input by `tests/stream_fuzz_smoke.rs`, so that a stable toolchain exercises it.
//!
//! It feeds arbitrary work completions, as a device or a peer could make them (any status,
//! opcode, length, immediate value and work request id, in any order, for receives that were
//! never posted and sends long retired), through the socket's own translation
//! ([`feed_engine`]) into a connected stream engine, with the message area and target list in
//! registered memory the peer writes at will. Nothing may panic or touch memory out of
//! bounds: what cannot be read is an error, and every op the engine asks for stays inside the
//! rings and queues it was configured with.
#![forbid(unsafe_code)]

use super::completions::{feed_engine, CompletionState};
use crate::protocol::fuzzing::{check_span, config, Driver, Input};
use crate::protocol::{LocalRegions, StreamEngine, WrId, TARGET_LIST_LEN};
use crate::verbs::{RegisteredMemory, WcStatus, WorkCompletion};
use std::net::Shutdown;

/// How far one [`completions`] run got: the smoke test checks that its scripts reach deep
/// states.
#[derive(Debug, Default, Clone, Copy)]
pub struct Reached {
    /// Receive completions that the engine took as messages.
    pub received: usize,
    /// Completions whose message word could not be read (an error, as it must be).
    pub unreadable: usize,
    /// Bytes the application read.
    pub bytes_read: usize,
    /// The engine failed (a protocol violation or a failed completion).
    pub failed: bool,
}

/// A work completion's work request id, picked by the input: the oldest posted receive or
/// send, one of the posted ones at random, or any value at all.
fn pick_wr_id(input: &mut Input, d: &Driver) -> u64 {
    match input.byte() % 5 {
        0 | 1 => d.receives.front().map(|w| w.0).unwrap_or(1 << 63),
        2 => d.sends.front().map(|w| w.0 .0).unwrap_or(0),
        3 => {
            let i = usize::from(input.byte());
            let all: Vec<u64> = d
                .receives
                .iter()
                .copied()
                .chain(d.sends.iter().map(|s| s.0))
                .map(|w| w.0)
                .collect();
            all.get(i % all.len().max(1)).copied().unwrap_or(0)
        }
        _ => u64::from_le_bytes(std::array::from_fn(|_| input.byte())),
    }
}

/// A work completion with fields from the input: mostly successes with a receive opcode,
/// now and then any status, opcode and flags.
fn work_completion(input: &mut Input, d: &Driver) -> WorkCompletion {
    let wr_id = pick_wr_id(input, d);
    let status = match input.byte() {
        0..=191 => 0,
        // 5: the flush error status.
        192..=223 => 5,
        b => u32::from(b & 0x1f),
    };
    let opcode = match input.byte() {
        0..=95 => 129,
        96..=159 => 128,
        b => u32::from(b),
    };
    WorkCompletion {
        wr_id,
        status,
        opcode,
        vendor_err: u32::from(input.byte()),
        byte_len: u32::from(input.u16()),
        imm_data: u32::from_le_bytes(input.bytes4()),
        wc_flags: u32::from(input.byte() & 0xf),
        ..WorkCompletion::default()
    }
}

/// Removes what a completion retires from the driver's lists: the receive it names (or,
/// for a receive never posted, the oldest, as a device that consumed one would), or the
/// send it names and every earlier one.
fn retire(d: &mut Driver, wr_id: WrId) {
    if wr_id.is_receive() {
        match d.receives.iter().position(|&w| w == wr_id) {
            Some(i) => {
                d.receives.remove(i);
            }
            None => {
                d.receives.pop_front();
            }
        }
    } else {
        d.sends.retain(|(w, _)| w.0 > wr_id.0);
    }
}

/// Drives a connected engine with arbitrary completions. The first byte picks the
/// configuration, the next two the peer's hello; the rest is a script of completions, peer
/// writes into the message area and the target list, reads, writes and shutdowns.
pub fn completions(data: &[u8]) -> Reached {
    let mut reached = Reached::default();
    let mut input = Input(data);
    let cfg = config(input.byte());
    let local = LocalRegions {
        recv_ring_addr: 0x10_0000,
        recv_ring_rkey: 0x11,
        target_list_addr: 0x20_0000,
        target_list_rkey: 0x22,
    };
    let message_area = (cfg.message_area_len() > 0)
        .then(|| RegisteredMemory::allocate(cfg.message_area_len()).expect("a small message area"));
    let target_list = RegisteredMemory::allocate(TARGET_LIST_LEN).expect("a target list");
    let mut e = StreamEngine::new(cfg.clone(), local);
    let mut d = Driver::new(cfg, &local);
    d.counts_written = false;
    let mut state = CompletionState::new();
    d.take_ops(&mut e);
    let mut peer = e.hello();
    peer.flags = input.byte();
    peer.credits = u16::from(input.byte()).max(1) * 4;
    if e.on_connected(&peer).is_err() {
        return reached;
    }
    d.advertise_hello(&peer);
    d.take_ops(&mut e);
    while !input.is_empty() {
        match input.byte() % 10 {
            0..=3 => {
                let wc = work_completion(&mut input, &d);
                let id = WrId(wc.wr_id);
                retire(&mut d, id);
                let status = wc.status();
                let mut list = [0; TARGET_LIST_LEN];
                target_list.read_at(0, &mut list).expect("the target list");
                d.advertise_targets(&list);
                let fed = feed_engine(
                    &mut e,
                    &mut state,
                    &wc,
                    |offset, word| match &message_area {
                        Some(area) => Ok(area.read_at(offset, word)?),
                        None => Ok(()),
                    },
                    |list| Ok(target_list.read_at(0, list)?),
                    || Some("fuzzed".into()),
                );
                match fed {
                    Ok(true) => reached.received += 1,
                    Ok(false) => {}
                    Err(_) => reached.unreadable += 1,
                }
                if !status.is_success() && status != WcStatus::WorkRequestFlushError {
                    assert!(state.wc_error.is_some(), "a failed {wc:?} went unrecorded");
                }
                if !status.is_success() && id.is_receive() {
                    assert!(!e.awaits_flush(), "a failed receive {wc:?} ends the wait");
                }
            }
            4 => {
                // The peer writes its message word into a slot (write+send mode).
                let at = usize::from(input.u16());
                let word = input.bytes4();
                if let Some(area) = &message_area {
                    let _ = area.write_at(at % area.len().max(1), &word);
                }
            }
            5 => {
                let at = usize::from(input.byte()) % TARGET_LIST_LEN;
                let n = usize::from(input.byte()) % (TARGET_LIST_LEN - at + 1);
                let bytes: Vec<u8> = (0..n).map(|_| input.byte()).collect();
                target_list
                    .write_at(at, &bytes)
                    .expect("inside the target list");
            }
            6 | 7 => {
                let len = usize::from(input.u16());
                let ring = if e.reads_old_recv_ring() {
                    e.old_ring.0
                } else {
                    e.recv_ring_len()
                };
                let mut total = 0;
                if let Ok(n) = e.read(len, |s| check_span(s, ring, len, &mut total)) {
                    assert!(n <= len && n == total, "read {n} of {len}, copied {total}");
                    reached.bytes_read += n;
                }
            }
            8 => {
                let len = usize::from(input.u16());
                let ring = e.send_ring_len();
                let mut total = 0;
                if let Ok(n) = e.write(len, |s| check_span(s, ring, len, &mut total)) {
                    assert!(n <= len && n == total, "wrote {n} of {len}, copied {total}");
                }
            }
            _ => match input.byte() % 4 {
                0 => e.shutdown(Shutdown::Write),
                1 => e.on_cm_disconnected(),
                2 => {
                    e.keepalive();
                }
                _ => {
                    let _ = e.flush();
                }
            },
        }
        d.take_ops(&mut e);
        if e.error().is_some() {
            let r = e.readiness();
            assert!(r.readable && r.writable, "an error reaches both directions");
        }
    }
    reached.failed = e.error().is_some();
    reached
}
