//! The pool over real registrations on the userspace provider's protection domain.
use super::*;
use crate::verbs::provider::Provider;
use crate::verbs::Context;

fn uiwarp_pd() -> ProtectionDomain {
    let device = rdmasock_uiwarp::device_info();
    let ops = rdmasock_uiwarp::UiwarpProvider::new()
        .open(&device)
        .expect("uiwarp opens");
    Context::from_ops(ops)
        .alloc_pd()
        .expect("a protection domain")
}

/// The default send area: a 16 KiB ring and the scratch after it.
const SEND_AREA: usize = 16 * KIB + 256;

#[test]
fn slices_of_many_connections_are_disjoint_and_hold_their_own_bytes() {
    let (pd, pool) = (uiwarp_pd(), LocalPool::default());
    let slices: Vec<LocalSlice> = (0..100)
        .map(|_| pool.carve(&pd, SEND_AREA, HugePages::Never).unwrap())
        .collect();
    assert!(pool.chunks() < 10, "a few chunks: {}", pool.chunks());
    let mut ranges: Vec<(u64, u64)> = slices
        .iter()
        .map(|s| (s.addr(), s.addr() + s.len() as u64))
        .collect();
    ranges.sort();
    for pair in ranges.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "{pair:?} overlap");
    }
    // Each slice's whole length, written with its own byte, reads back unchanged after all
    // were written.
    for (i, s) in slices.iter().enumerate() {
        s.write_at(0, &vec![i as u8; s.len()]).unwrap();
    }
    for (i, s) in slices.iter().enumerate() {
        let mut back = vec![0; s.len()];
        s.read_at(0, &mut back).unwrap();
        assert!(
            back.iter().all(|&b| b == i as u8),
            "slice {i} was overwritten"
        );
    }
}

#[test]
fn a_slice_refuses_ranges_past_its_end_though_its_chunk_goes_on() {
    let (pd, pool) = (uiwarp_pd(), LocalPool::default());
    let a = pool.carve(&pd, SEND_AREA, HugePages::Never).unwrap();
    let _b = pool.carve(&pd, SEND_AREA, HugePages::Never).unwrap();
    assert!(a.write_at(SEND_AREA - 4, &[1; 4]).is_ok());
    let e = a.write_at(SEND_AREA - 3, &[1; 4]).unwrap_err();
    assert!(
        e.to_string()
            .contains("outside the 16640-byte pooled send area"),
        "{e}"
    );
    assert!(a.slice(SEND_AREA, 1).is_err());
    assert!(a.slice(usize::MAX, 2).is_err());
    let sg = a.slice(16, 32).unwrap();
    assert_eq!(
        (sg.addr(), sg.length(), sg.lkey()),
        (a.addr() + 16, 32, a.lkey())
    );
}

#[test]
fn closing_every_slice_deregisters_every_chunk_and_empties_the_census() {
    let (pd, pool) = (uiwarp_pd(), LocalPool::default());
    let before = census::census();
    let slices: Vec<LocalSlice> = (0..40)
        .map(|_| pool.carve(&pd, SEND_AREA, HugePages::Never).unwrap())
        .collect();
    let held = census::census();
    let chunks = pool.chunks() as u64;
    assert!(held.regions >= before.regions + chunks, "{held:?}");
    drop(slices);
    assert_eq!(pool.chunks(), 0);
    // Other tests of this binary register too: the chunks' own counts are gone.
    assert!(census::census().regions <= held.regions - chunks);
}

#[test]
fn a_large_request_gets_a_chunk_of_its_own() {
    let (pd, pool) = (uiwarp_pd(), LocalPool::default());
    let small = pool.carve(&pd, SEND_AREA, HugePages::Never).unwrap();
    let large = pool.carve(&pd, (1 << 20) + 256, HugePages::Never).unwrap();
    assert_eq!(pool.chunks(), 2);
    assert!(!Arc::ptr_eq(&small.region, &large.region));
    assert_eq!(large.region.len(), (1 << 20) + 4096);
    drop(large);
    assert_eq!(pool.chunks(), 1, "the large chunk went with its slice");
}

#[test]
fn huge_page_slices_come_from_2_mib_chunks_apart_from_base_page_ones() {
    let (pd, pool) = (uiwarp_pd(), LocalPool::default());
    let base = pool.carve(&pd, SEND_AREA, HugePages::Never).unwrap();
    let huge: Vec<LocalSlice> = (0..8)
        .map(|_| pool.carve(&pd, SEND_AREA, HugePages::Prefer).unwrap())
        .collect();
    assert_eq!(pool.chunks(), 2, "one base chunk, one 2 MiB chunk");
    assert_eq!(huge[0].region.len(), 2 << 20);
    assert!(huge.iter().all(|s| Arc::ptr_eq(&s.region, &huge[0].region)));
    assert!(!Arc::ptr_eq(&base.region, &huge[0].region));
}

#[test]
fn a_returned_slice_is_carved_again_for_the_next_connection() {
    let (pd, pool) = (uiwarp_pd(), LocalPool::default());
    let keep = pool.carve(&pd, SEND_AREA, HugePages::Never).unwrap();
    let first = pool.carve(&pd, 8 * KIB, HugePages::Never).unwrap();
    let addr = first.addr();
    drop(first);
    let again = pool.carve(&pd, 8 * KIB, HugePages::Never).unwrap();
    assert_eq!(again.addr(), addr);
    assert_eq!(pool.chunks(), 1);
    drop(keep);
}
