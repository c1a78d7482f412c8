//! rsocket's iomap in the seeded simulated fabric (`stream_sim/fabric.rs`): one side maps a
//! window into the other's table, the other iowrites random ranges of it and after each
//! turn a stream byte; when the owner reads that byte, its window must hold every iowrite
//! before it (iowrites are ordered with the stream), under random scheduling, small rings
//! that wrap and fill, selective signalling and write+send mode. Then the refusals and an
//! unmapping that the writer learns of through the stream.

#[path = "stream_sim/fabric.rs"]
mod fabric;

use fabric::{small_config, Fabric, Rng};
use rdmasock::protocol::{IomapEntry, RemoteSge, StreamConfig, StreamError};

const WINDOW_KEY: u32 = 0xC1;
const WINDOW_ADDR: u64 = 0x7000_0000_0000;
const WINDOW_OFFSET: u64 = 0x10_0000;

fn config(write_with_send: bool, signal: u16) -> StreamConfig {
    small_config()
        .iomap_size(2)
        .write_with_send(write_with_send)
        .signal_interval(signal)
        .build()
        .unwrap()
}

/// One random transport step: a side's posted requests executed, or its completions fed.
fn turn(f: &mut Fabric, rng: &mut Rng) {
    let s = rng.below(2) as usize;
    for _ in 0..1 + rng.below(6) {
        if rng.below(2) == 0 {
            f.execute(s);
        } else {
            f.sides[s].poll();
        }
    }
}

/// Side `owner` maps a zeroed window of `len` bytes at `WINDOW_OFFSET` into its peer's
/// table; returns the slot.
fn map(f: &mut Fabric, rng: &mut Rng, owner: usize, len: usize) -> u16 {
    f.sides[owner]
        .windows
        .push((WINDOW_KEY, WINDOW_ADDR, vec![0; len]));
    let slot = f.sides[owner].engine.iomap_reserve().expect("a free slot");
    let entry = IomapEntry {
        offset: WINDOW_OFFSET,
        window: RemoteSge::new(WINDOW_ADDR, WINDOW_KEY, len as u32),
    };
    let bytes = f.sides[owner].engine.iomap_entry_bytes(&entry);
    loop {
        let side = &mut f.sides[owner];
        let ring = &mut side.send_ring;
        let sent = side.engine.iomap_send(slot, |s| {
            ring[s.ring_offset..s.ring_offset + s.len]
                .copy_from_slice(&bytes[s.data_offset..s.data_offset + s.len])
        });
        match sent {
            Ok(()) => break,
            Err(StreamError::WouldBlock) => turn(f, rng),
            Err(e) => panic!("iomap_send: {e}"),
        }
    }
    f.sides[owner].drain_ops();
    slot
}

/// Side `from` iowrites `data` at `offset`, turning the fabric while it would block.
fn iowrite(f: &mut Fabric, rng: &mut Rng, from: usize, data: &[u8], offset: u64) {
    let mut done = 0;
    while done < data.len() {
        let side = &mut f.sides[from];
        let ring = &mut side.send_ring;
        let at = offset + done as u64;
        let rest = &data[done..];
        match side.engine.iowrite(at, rest.len(), |s| {
            ring[s.ring_offset..s.ring_offset + s.len]
                .copy_from_slice(&rest[s.data_offset..s.data_offset + s.len])
        }) {
            Ok(n) => {
                assert!(n > 0);
                done += n;
                f.sides[from].drain_ops();
            }
            Err(StreamError::WouldBlock) => turn(f, rng),
            Err(e) => panic!("iowrite of {} at {at:#x}: {e}", rest.len()),
        }
    }
}

/// Side `from` writes one stream byte; side `to` reads it (turning the fabric until then).
fn stream_byte(f: &mut Fabric, rng: &mut Rng, from: usize, to: usize, byte: u8) {
    loop {
        let side = &mut f.sides[from];
        let ring = &mut side.send_ring;
        match side.engine.write(1, |s| ring[s.ring_offset] = byte) {
            Ok(1) => break,
            Ok(n) => panic!("wrote {n}"),
            Err(StreamError::WouldBlock) => turn(f, rng),
            Err(e) => panic!("write: {e}"),
        }
    }
    f.sides[from].drain_ops();
    let mut got = None;
    while got.is_none() {
        let side = &mut f.sides[to];
        let ring = side.recv_ring.clone();
        let mut b = 0;
        match side.engine.read(1, |s| b = ring[s.ring_offset]) {
            Ok(1) => got = Some(b),
            Ok(n) => panic!("read {n}"),
            Err(StreamError::WouldBlock) => turn(f, rng),
            Err(e) => panic!("read: {e}"),
        }
        f.sides[to].drain_ops();
    }
    assert_eq!(got, Some(byte), "the stream byte");
}

fn run(seed: u64, write_with_send: bool, signal: u16) {
    let cfg = config(write_with_send, signal);
    let mut f = Fabric::connect([cfg.clone(), cfg], [0, 0], seed);
    f.no_rnr = write_with_send;
    f.pump();
    let mut rng = Rng(seed | 1);
    let len = 20_000;
    map(&mut f, &mut rng, 0, len);
    // A stream byte after the mapping: when the writer reads it, it has the entry.
    stream_byte(&mut f, &mut rng, 0, 1, 0xaa);
    let mut expected = vec![0u8; len];
    for round in 0..40u8 {
        for _ in 0..1 + rng.below(4) {
            let n = match rng.below(3) {
                0 => 1 + rng.below(64),
                1 => 1 + rng.below(4096),
                _ => 1 + rng.below(len as u64),
            } as usize;
            let at = rng.below((len - n + 1) as u64) as usize;
            let data: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            iowrite(&mut f, &mut rng, 1, &data, WINDOW_OFFSET + at as u64);
            expected[at..at + n].copy_from_slice(&data);
        }
        stream_byte(&mut f, &mut rng, 1, 0, round);
        assert!(
            f.sides[0].windows[0].2 == expected,
            "seed {seed}: after round {round}'s stream byte the window lacks an iowrite"
        );
        // Now and then the owner answers, so both directions carry messages.
        if rng.below(3) == 0 {
            stream_byte(&mut f, &mut rng, 0, 1, round);
        }
    }
    let writer = &mut f.sides[1].engine;
    let past = writer.iowrite(WINDOW_OFFSET + len as u64 - 4, 8, |_| {});
    assert!(matches!(past, Err(StreamError::Iomap(m)) if m.contains("runs past the end")));
    let below = writer.iowrite(WINDOW_OFFSET - 1, 1, |_| {});
    assert!(matches!(below, Err(StreamError::Iomap(m)) if m.contains("no window")));
    // The owner unmaps; the writer knows once the stream byte after it arrives.
    loop {
        let side = &mut f.sides[0];
        let ring = &mut side.send_ring;
        match side
            .engine
            .iomap_unmap(0, |s| ring[s.ring_offset..s.ring_offset + s.len].fill(0))
        {
            Ok(()) => break,
            Err(StreamError::WouldBlock) => turn(&mut f, &mut rng),
            Err(e) => panic!("unmap: {e}"),
        }
    }
    f.sides[0].drain_ops();
    stream_byte(&mut f, &mut rng, 0, 1, 0xee);
    let gone = f.sides[1].engine.iowrite(WINDOW_OFFSET, 1, |_| {});
    assert!(matches!(gone, Err(StreamError::Iomap(m)) if m.contains("no window")));
    for s in &f.sides {
        assert_eq!(s.engine.error(), None);
    }
}

#[test]
fn iowrites_are_in_the_window_before_the_stream_bytes_after_them() {
    for seed in 1..=12u64 {
        run(seed * 0x9e37_79b9, false, 1);
    }
}

#[test]
fn with_selective_signalling() {
    for seed in 1..=12u64 {
        run(seed * 0x51ed_2701, false, 4);
    }
}

#[test]
fn in_write_with_send_mode() {
    for seed in 1..=12u64 {
        run(seed * 0x2545_f491, true, 1);
    }
}
