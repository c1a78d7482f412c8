//! The fuzz targets' entry points on seeded random and mutated inputs, so that a stable
//! toolchain exercises them (cargo-fuzz needs nightly; see fuzz/README.md).
//!
//! The entry points exist only with `--cfg fuzzing`, as cargo-fuzz builds them; `tests/run.sh`
//! runs this file that way (`RUSTFLAGS="--cfg fuzzing" cargo test -p rdmasock-uiwarp --test
//! fuzz_smoke`, in a target directory of its own).
#![cfg(fuzzing)]

mod common;

use common::{frame, untagged, Rng};
use rdmasock_uiwarp::fuzzing;
use rdmasock_uiwarp::wire::ddp::{Opcode, Placement};
use rdmasock_uiwarp::wire::mpa::{FrameKind, IrdOrd, MpaRepr, RtrKinds};

/// Valid frames to mutate: requests, replies, and a few FPDUs.
fn seeds() -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for (kind, p2p) in [
        (FrameKind::Request, true),
        (FrameKind::Reply, false),
        (FrameKind::Request, false),
    ] {
        v.push(
            MpaRepr {
                kind,
                markers: false,
                crc: p2p,
                reject: false,
                revision: 2,
                enhanced: Some(IrdOrd {
                    ird: 4,
                    ord: 4,
                    peer_to_peer: p2p,
                    rtr: RtrKinds {
                        send: false,
                        write: p2p,
                        read: p2p,
                    },
                }),
                private_data: b"seed",
            }
            .to_vec(),
        );
    }
    v.push(frame(
        true,
        true,
        Opcode::Send,
        untagged(0, 1, 0),
        b"hello, world!",
    ));
    v.push(frame(
        true,
        true,
        Opcode::RdmaWrite,
        Placement::Tagged { stag: 1, offset: 0 },
        &[],
    ));
    v.push(frame(
        false,
        false,
        Opcode::ReadResponse,
        Placement::Tagged { stag: 5, offset: 9 },
        b"abc",
    ));
    v
}

fn mutate(rng: &mut Rng, mut data: Vec<u8>) -> Vec<u8> {
    for _ in 0..1 + rng.below(4) {
        match rng.below(4) {
            0 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] ^= 1 << rng.below(8);
            }
            1 if !data.is_empty() => {
                let i = rng.below(data.len());
                data.truncate(i);
            }
            2 => {
                let mut extra = vec![0u8; rng.below(40)];
                rng.fill(&mut extra);
                data.extend_from_slice(&extra);
            }
            _ if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] = rng.next() as u8;
            }
            _ => {}
        }
    }
    data
}

fn inputs(seed: u64, count: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(seed);
    let seeds = seeds();
    let mut all = Vec::new();
    for i in 0..count {
        let input = if i % 3 == 0 {
            let mut b = vec![0u8; rng.below(300)];
            rng.fill(&mut b);
            b
        } else {
            let s = seeds[rng.below(seeds.len())].clone();
            mutate(&mut rng, s)
        };
        all.push(input);
    }
    all
}

#[test]
fn mpa_frame_smoke() {
    for input in inputs(1, 20_000) {
        fuzzing::mpa_frame(&input);
    }
}

#[test]
fn ddp_rdmap_smoke() {
    for input in inputs(2, 20_000) {
        fuzzing::ddp_rdmap(&input);
        if input.len() > 2 {
            fuzzing::ddp_rdmap(&input[2..]);
        }
    }
}

#[test]
fn handshake_smoke() {
    let seeds = seeds();
    let mut rng = Rng::new(3);
    for input in inputs(3, 3_000) {
        fuzzing::handshake(&input);
        // A valid request (and RTR) followed by mutated FPDUs reaches the data path.
        let mut joined = vec![1 + rng.below(64) as u8];
        joined.extend_from_slice(&seeds[0]);
        if rng.below(2) == 0 {
            // The WRITE RTR, so the input lands in the established data path.
            joined.extend_from_slice(&seeds[4]);
        }
        joined.extend_from_slice(&input);
        fuzzing::handshake(&joined);
    }
}

/// FPDUs without CRC for a responder in RTS (`fuzzing::established`): SENDs into its
/// receive, WRITEs and READ requests at its region's STag (0x100, the table's first key),
/// a TERMINATE.
fn established_seeds() -> Vec<Vec<u8>> {
    let region = Placement::Tagged {
        stag: 0x100,
        offset: 0,
    };
    let mut read_request = Vec::new();
    rdmasock_uiwarp::wire::rdmap::ReadRequestRepr {
        sink_stag: 7,
        sink_offset: 0,
        size: 16,
        source_stag: 0x100,
        source_offset: 0,
    }
    .append(&mut read_request);
    vec![
        frame(
            false,
            true,
            Opcode::Send,
            untagged(0, 1, 0),
            b"hello, world!",
        ),
        frame(false, false, Opcode::Send, untagged(0, 1, 120), &[1; 12]),
        frame(false, true, Opcode::RdmaWrite, region, &[2; 32]),
        frame(
            false,
            true,
            Opcode::ReadRequest,
            untagged(1, 1, 0),
            &read_request,
        ),
        frame(false, true, Opcode::Terminate, untagged(2, 1, 0), &[0; 28]),
    ]
}

#[test]
fn established_smoke() {
    let seeds = established_seeds();
    let mut rng = Rng::new(4);
    for i in 0..3_000 {
        let mut input = vec![1 + rng.below(64) as u8];
        for _ in 0..1 + rng.below(3) {
            let s = seeds[rng.below(seeds.len())].clone();
            input.extend(if i % 4 == 0 { s } else { mutate(&mut rng, s) });
        }
        fuzzing::established(&input);
    }
}

/// `fuzzing::established_crc` records: the ULPDUs of the established seeds (mutated now and
/// then), framed with a valid checksum, a broken one, or sent raw.
#[test]
fn established_crc_smoke() {
    let seeds = established_seeds();
    let mut rng = Rng::new(5);
    let mut completed = 0;
    for i in 0..3_000 {
        let mut input = vec![1 + rng.below(64) as u8];
        for _ in 0..1 + rng.below(3) {
            let s = &seeds[rng.below(seeds.len())];
            let ulpdu = s[2..2 + usize::from(u16::from_be_bytes([s[0], s[1]]))].to_vec();
            let ulpdu = if i % 4 == 0 {
                ulpdu
            } else {
                mutate(&mut rng, ulpdu)
            };
            let control = if rng.below(8) == 0 {
                rng.below(4) as u8
            } else {
                0
            };
            input.push(control);
            input.extend((ulpdu.len() as u16).to_le_bytes());
            input.extend(ulpdu);
        }
        completed += usize::from(fuzzing::established_crc(&input) > 0);
    }
    // Valid checksums must let the unmutated SENDs through, or the test lost its aim.
    assert!(
        completed >= 300,
        "only {completed} inputs completed a receive"
    );
}

/// `fuzzing::transmit` scripts: configuration, then posts with lengths, offsets and wire
/// pieces mostly in range, now and then out of it.
#[test]
fn transmit_smoke() {
    let mut rng = Rng::new(6);
    let mut checked = 0;
    for i in 0..400 {
        let mut input = vec![rng.next() as u8];
        for _ in 0..rng.below(24) {
            let mut op = rng.below(4) as u8;
            if rng.below(16) == 0 {
                op |= 0xc0;
            }
            input.push(op);
            let len = if rng.below(4) == 0 {
                rng.below(8193)
            } else {
                rng.below(300)
            };
            for v in [len, rng.below(8192), rng.below(8192)] {
                input.extend((v as u16).to_le_bytes());
            }
            for _ in 0..2 {
                let piece = if rng.below(3) == 0 {
                    rng.below(65536)
                } else {
                    1 + rng.below(200)
                };
                input.extend((piece as u16).to_le_bytes());
            }
        }
        checked += fuzzing::transmit(&input);
        if i % 4 == 0 {
            let mut random = vec![0u8; rng.below(200)];
            rng.fill(&mut random);
            fuzzing::transmit(&random);
        }
    }
    // Most scripts stay in range: their requests must be checked against the model.
    assert!(checked >= 1000, "only {checked} requests checked");
}

/// `fuzzing::chunking` inputs: every mode, posts of random lengths, random piece sizes.
#[test]
fn chunking_smoke() {
    let mut rng = Rng::new(7);
    let mut compared = 0;
    for i in 0..1_500 {
        // Undisturbed (mode bits 1..=6 clear) a third of the time.
        let mode = if i % 3 == 0 {
            rng.next() as u8 & 0x81
        } else {
            rng.next() as u8
        };
        let mut input = vec![mode, 1 + rng.below(4) as u8];
        for _ in 0..4 {
            input.extend((rng.below(2049) as u16).to_le_bytes());
            input.push(rng.next() as u8);
        }
        let mut pieces = vec![0u8; 40 + rng.below(200)];
        rng.fill(&mut pieces);
        input.extend(pieces);
        compared += usize::from(fuzzing::chunking(&input));
    }
    assert!(compared >= 400, "only {compared} chunkings compared");
}
