//! The stream engine's fuzz entry points (`rdmasock::protocol::fuzzing`, run by cargo-fuzz in
//! `fuzz/`) on seeded inputs, so that a stable toolchain exercises them: random bytes,
//! mutated valid hellos, and scripts whose peer messages are mostly well-formed, so that the
//! engine gets past the first protocol violation. (A well-behaved peer, which takes the
//! engine through every state, is `tests/stream_sim.rs`'s simulated fabric.)
//!
//! The entry points exist only with `--cfg fuzzing`, as cargo-fuzz builds them; `tests/run.sh`
//! runs this file that way (`RUSTFLAGS="--cfg fuzzing" cargo test --test stream_fuzz_smoke`,
//! in a target directory of its own).
#![cfg(fuzzing)]

#[path = "stream_sim/fabric.rs"]
mod fabric;

use fabric::Rng;
use rdmasock::protocol::fuzzing;
use rdmasock::protocol::{Control, Hello, Message, RemoteSge, FLAG_RDMASOCK};

/// The generator's byte: the low 8 bits of the next value.
fn byte(rng: &mut Rng) -> u8 {
    rng.next() as u8
}

/// A valid hello to mutate: 384 credits, a two-entry target list, a 64 KiB buffer.
fn valid_hello() -> [u8; 40] {
    Hello {
        flags: FLAG_RDMASOCK,
        credits: 384,
        target_iomap_size: 0,
        target_sgl: RemoteSge::new(0x2000, 7, 2),
        data_buf: RemoteSge::new(0x10_0000, 9, 65536),
    }
    .to_bytes()
}

#[test]
fn hello_on_random_and_mutated_bytes() {
    let mut rng = Rng(0x4e11_0001);
    let mut parsed = 0;
    for _ in 0..20_000 {
        let len = rng.below(60) as usize;
        let random: Vec<u8> = (0..len).map(|_| byte(&mut rng)).collect();
        fuzzing::hello(&random);
        let mut h = valid_hello().to_vec();
        for _ in 0..rng.below(3) {
            let at = rng.below(40) as usize;
            h[at] = byte(&mut rng);
        }
        if rng.below(4) == 0 {
            h.extend((0..rng.below(20)).map(|_| byte(&mut rng)));
        }
        if Hello::parse(&h).is_ok() {
            parsed += 1;
        }
        fuzzing::hello(&h);
    }
    assert!(
        parsed > 5_000,
        "too few mutated hellos parsed ({parsed}): the test lost its aim"
    );
}

/// A peer message word, mostly well-formed: data of a plausible length, credit updates,
/// controls, and now and then anything at all.
fn word(rng: &mut Rng) -> u32 {
    match rng.below(20) {
        0..=11 => Message::Data(rng.below(5000) as u32).encode(),
        12..=14 => Message::Sgl(rng.below(1 << 16) as u32).encode(),
        15 => Message::Control(Control::Shutdown).encode(),
        16 => Message::Control(Control::Keepalive).encode(),
        17 => Message::Control(Control::Disconnect).encode(),
        _ => rng.next() as u32,
    }
}

/// A script for `fuzzing::engine`: configuration, a well-formed hello (or now and then raw
/// bytes), then `steps` actions.
fn script(rng: &mut Rng, steps: usize) -> Vec<u8> {
    let pick = byte(rng);
    let big = pick & 2 != 0;
    let mut s = vec![pick];
    if rng.below(10) == 0 {
        s.push(0);
        let h = valid_hello();
        s.extend(
            h.iter()
                .map(|b| if rng.below(20) == 0 { byte(rng) } else { *b }),
        );
    } else {
        s.push(1);
        s.push(byte(rng));
        s.extend((16 + rng.below(400) as u16).to_le_bytes());
        s.extend((rng.below(70_000) as u16).to_le_bytes());
        s.extend((rng.below(1 << 16) as u16).to_le_bytes());
    }
    for _ in 0..steps {
        let action = rng.below(12) as u8;
        s.push(action);
        match action {
            0 | 1 => {
                let w = word(rng);
                // Immediates are fed little-endian; message words in our announced order.
                let bytes = if pick & 1 != 0 && big {
                    w.to_be_bytes()
                } else {
                    w.to_le_bytes()
                };
                s.extend(bytes);
            }
            2 => {
                let at = rng.below(32) as u8;
                let n = rng.below(u64::from(32 - at).min(16) + 1) as u8;
                s.extend([at, n]);
                // Now and then all ones: addresses at the top of the address space.
                let ones = rng.below(4) == 0;
                s.extend((0..n).map(|_| if ones { 0xff } else { byte(rng) }));
            }
            6 | 7 => {
                s.extend((rng.below(9000) as u16).to_le_bytes());
                s.push(byte(rng));
            }
            8 | 9 => s.extend((rng.below(9000) as u16).to_le_bytes()),
            10 | 11 => s.push(byte(rng)),
            _ => {}
        }
    }
    s
}

#[test]
fn engine_on_scripts_and_random_bytes() {
    let mut rng = Rng(0x5eed_f022);
    let (mut connected, mut read, mut wrote, mut completed) = (0, 0, 0, 0);
    for _ in 0..3_000 {
        let steps = rng.below(300) as usize;
        let r = fuzzing::engine(&script(&mut rng, steps));
        connected += usize::from(r.connected);
        read += usize::from(r.bytes_read > 0);
        wrote += usize::from(r.bytes_written > 0);
        completed += usize::from(r.sends_completed > 0);
        let len = rng.below(400) as usize;
        let random: Vec<u8> = (0..len).map(|_| byte(&mut rng)).collect();
        fuzzing::engine(&random);
    }
    eprintln!(
        "of 3000 scripts: {connected} connected, {read} read, {wrote} wrote, {completed} fed \
         send completions"
    );
    // The scripts must reach the states they exist for, or the test has lost its aim.
    for (what, n) in [
        ("connected", connected),
        ("read", read),
        ("wrote", wrote),
        ("fed send completions", completed),
    ] {
        assert!(n >= 1000, "only {n} scripts {what}");
    }
}

/// A script for `socket::fuzzing::completions`: configuration, hello, then `steps` actions,
/// most of them completions of posted work requests with a plausible message.
fn completion_script(rng: &mut Rng, steps: usize) -> Vec<u8> {
    let mut s = vec![byte(rng), byte(rng), 1 + rng.below(100) as u8];
    for _ in 0..steps {
        let action = rng.below(10) as u8;
        s.push(action);
        match action {
            0..=3 => {
                // Which work request, status, opcode, vendor error, length, immediate, flags.
                let kinds = if rng.below(8) == 0 { 5 } else { 3 };
                s.push(rng.below(kinds) as u8);
                s.push(if rng.below(10) == 0 { byte(rng) } else { 0 });
                s.push(if rng.below(10) == 0 { byte(rng) } else { 0 });
                s.push(byte(rng));
                s.extend((rng.below(5000) as u16).to_le_bytes());
                s.extend(word(rng).to_le_bytes());
                s.push(byte(rng));
            }
            4 => {
                s.extend((rng.below(2048) as u16 & !3).to_le_bytes());
                s.extend(word(rng).to_le_bytes());
            }
            5 => {
                let at = rng.below(32) as u8;
                let n = rng.below(u64::from(32 - at).min(16) + 1) as u8;
                s.extend([at, n]);
                s.extend((0..n).map(|_| byte(rng)));
            }
            6..=8 => s.extend((rng.below(9000) as u16).to_le_bytes()),
            _ => s.push(byte(rng)),
        }
    }
    s
}

#[test]
fn completions_on_scripts_and_random_bytes() {
    let mut rng = Rng(0xc0ff_ee01);
    let (mut received, mut read, mut unreadable) = (0, 0, 0);
    for _ in 0..3_000 {
        let steps = rng.below(300) as usize;
        let r = rdmasock::socket::fuzzing::completions(&completion_script(&mut rng, steps));
        received += usize::from(r.received > 10);
        read += usize::from(r.bytes_read > 0);
        unreadable += r.unreadable;
        let len = rng.below(400) as usize;
        let random: Vec<u8> = (0..len).map(|_| byte(&mut rng)).collect();
        rdmasock::socket::fuzzing::completions(&random);
    }
    eprintln!(
        "of 3000 scripts: {received} fed over 10 receives, {read} read; {unreadable} \
         completions unreadable"
    );
    for (what, n) in [("fed over 10 receives", received), ("read", read)] {
        assert!(n >= 1000, "only {n} scripts {what}");
    }
}

/// A script for `fuzzing_iomap::iomap`: a table of 1 to 4 entries (little-endian), a peer
/// table of a few entries, then actions that mostly write a well-formed entry, announce it,
/// iowrite near it, map, unmap and complete sends.
fn iomap_script(rng: &mut Rng, steps: usize) -> Vec<u8> {
    let pick = (rng.below(3) as u8) << 1 | if rng.below(2) == 0 { 0x40 } else { 0 };
    let mut s = vec![pick, 0, 1 + rng.below(4) as u8, 0];
    s.extend((rng.below(1 << 16) as u16).to_le_bytes());
    let size = [1usize, 2, 4][usize::from(pick >> 1 & 7)];
    for _ in 0..steps {
        let action = rng.below(8) as u8;
        s.push(action);
        match action {
            0 => {
                let slot = rng.below(size as u64) as usize;
                s.extend(((32 + 24 * slot) as u16).to_le_bytes());
                s.push(24);
                let offset = rng.below(1 << 15) << 4;
                let addr = rng.below(1 << 30) << 12;
                let len = if rng.below(10) == 0 {
                    0
                } else {
                    1 + rng.below(9000)
                };
                s.extend(offset.to_le_bytes());
                s.extend(addr.to_le_bytes());
                s.extend((rng.below(1000) as u32).to_le_bytes());
                s.extend((len as u32).to_le_bytes());
            }
            1 | 2 => {
                s.push(1 + rng.below(7) as u8);
                s.push(rng.below(size as u64) as u8);
            }
            3 => {
                s.extend((rng.below(9000) as u16).to_le_bytes());
                s.extend((rng.below(9200) as u16).to_le_bytes());
                s.push(1 + rng.below(3) as u8);
            }
            7 => s.extend((rng.below(1 << 16) as u16).to_le_bytes()),
            _ => {}
        }
    }
    s
}

#[test]
fn iomap_on_scripts_and_random_bytes() {
    let mut rng = Rng(0x1033_a901);
    let mut total = rdmasock::protocol::fuzzing_iomap::IomapReached::default();
    for _ in 0..3_000 {
        let steps = rng.below(200) as usize;
        let r = rdmasock::protocol::fuzzing_iomap::iomap(&iomap_script(&mut rng, steps));
        total.windows_adopted += r.windows_adopted;
        total.bytes_iowritten += usize::from(r.bytes_iowritten > 0);
        total.refused += usize::from(r.refused > 0);
        total.entries_sent += usize::from(r.entries_sent > 0);
        let len = rng.below(400) as usize;
        let random: Vec<u8> = (0..len).map(|_| byte(&mut rng)).collect();
        rdmasock::protocol::fuzzing_iomap::iomap(&random);
    }
    eprintln!("of 3000 iomap scripts: {total:?}");
    for (what, n) in [
        ("adopted a window", total.windows_adopted),
        ("iowrote", total.bytes_iowritten),
        ("were refused an iowrite", total.refused),
        ("sent an entry", total.entries_sent),
    ] {
        assert!(n >= 500, "only {n} scripts {what}");
    }
}
