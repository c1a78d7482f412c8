use super::*;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// Base pages: 4 KiB units, chunks from 32 KiB to 1 MiB.
const BASE: ChunkSizes = ChunkSizes {
    unit: 4 * KIB,
    min: 32 * KIB,
    max: MIB,
    grain: 4 * KIB,
};
/// Huge pages: 2 MiB chunks.
const HUGE: ChunkSizes = ChunkSizes {
    unit: 4 * KIB,
    min: 2 * MIB,
    max: 2 * MIB,
    grain: 2 * MIB,
};

/// Carves `len`, adding the chunk asked for when needed.
fn carve(carver: &mut Carver, len: usize) -> Carve {
    match carver.carve(len) {
        Ok(c) => c,
        Err(need) => {
            carver.add_chunk(need.len);
            carver.carve(len).expect("the new chunk holds it")
        }
    }
}

fn overlap(a: &Carve, b: &Carve) -> bool {
    a.chunk == b.chunk && a.offset < b.offset + b.len && b.offset < a.offset + a.len
}

#[test]
fn slices_are_whole_units_inside_their_chunk_and_never_overlap() {
    let mut carver = Carver::new(BASE);
    let lens = [
        16 * KIB + 256,
        1,
        4 * KIB,
        100 * KIB,
        16 * KIB + 256,
        7 * KIB,
    ];
    let slices: Vec<Carve> = (0..200)
        .map(|i| carve(&mut carver, lens[i % lens.len()]))
        .collect();
    for (i, a) in slices.iter().enumerate() {
        assert_eq!(a.offset % BASE.unit, 0, "{a:?} is unit-aligned");
        assert!(
            a.len >= lens[i % lens.len()] && a.len.is_multiple_of(BASE.unit),
            "{a:?}"
        );
        assert!(a.offset + a.len <= carver.chunk_len(a.chunk).unwrap());
        for b in &slices[i + 1..] {
            assert!(!overlap(a, b), "{a:?} and {b:?} overlap");
        }
    }
}

#[test]
fn chunks_grow_from_the_smallest_to_the_largest_regular_size() {
    let mut carver = Carver::new(BASE);
    let mut sizes = Vec::new();
    for _ in 0..200 {
        if let Err(need) = carver.carve(20 * KIB) {
            sizes.push(need.len);
            carver.add_chunk(need.len);
            carver.carve(20 * KIB).unwrap();
        }
    }
    assert_eq!(
        &sizes[..7],
        &[
            32 * KIB,
            32 * KIB,
            64 * KIB,
            128 * KIB,
            256 * KIB,
            512 * KIB,
            MIB
        ]
    );
    assert!(sizes[7..].iter().all(|&s| s == MIB), "{sizes:?}");
}

#[test]
fn a_slice_taken_back_is_carved_again() {
    let mut carver = Carver::new(BASE);
    let a = carve(&mut carver, 8 * KIB);
    let b = carve(&mut carver, 8 * KIB);
    assert!(carver.release(a).is_empty(), "b keeps the chunk");
    let c = carve(&mut carver, 8 * KIB);
    assert_eq!(c, a, "the freed range comes back");
    assert_eq!(carver.chunk_count(), 1);
    assert_ne!(b, c);
}

#[test]
fn free_neighbours_merge_into_room_for_a_larger_slice() {
    let mut carver = Carver::new(BASE);
    let parts: Vec<Carve> = (0..4).map(|_| carve(&mut carver, 8 * KIB)).collect();
    let _keep = carve(&mut carver, 8 * KIB);
    assert_eq!(carver.chunk_count(), 2, "the first 32 KiB chunk is full");
    for &p in parts.iter().rev() {
        carver.release(p);
    }
    // The four 8 KiB ranges of the first chunk merged back into one 32 KiB range.
    let whole = carver.carve(32 * KIB).expect("the merged range holds it");
    assert_eq!((whole.chunk, whole.offset), (parts[0].chunk, 0));
}

#[test]
fn an_emptied_chunk_goes_except_one_spare_while_others_are_in_use() {
    let mut carver = Carver::new(BASE);
    // Three chunks: 32 KiB (one 32 KiB slice), 32 KiB, 64 KiB.
    let a = carve(&mut carver, 32 * KIB);
    let b = carve(&mut carver, 32 * KIB);
    let c = carve(&mut carver, 64 * KIB);
    assert_eq!(carver.chunk_count(), 3);
    assert_eq!(
        carver.release(a),
        Vec::new(),
        "the first empty chunk is the spare"
    );
    assert_eq!(carver.release(b), vec![b.chunk], "a second empty one goes");
    assert_eq!(carver.chunk_count(), 2);
    // The last slice: nothing is in use, so the spare goes too.
    let mut gone = carver.release(c);
    gone.sort_by_key(|id| id.0);
    assert_eq!(gone, vec![a.chunk, c.chunk]);
    assert_eq!(
        carver.chunk_count(),
        0,
        "closing everything frees everything"
    );
}

#[test]
fn the_spare_is_used_before_a_chunk_is_added() {
    let mut carver = Carver::new(BASE);
    let a = carve(&mut carver, 32 * KIB);
    let _b = carve(&mut carver, 32 * KIB);
    carver.release(a);
    let again = carver.carve(16 * KIB).expect("the spare has room");
    assert_eq!(again.chunk, a.chunk);
}

#[test]
fn a_request_over_the_largest_chunk_gets_a_chunk_of_its_own_which_goes_with_it() {
    let mut carver = Carver::new(BASE);
    let small = carve(&mut carver, 16 * KIB);
    let need = carver.carve(MIB + 256).expect_err("no chunk holds it");
    assert_eq!(need.len, MIB + 4 * KIB, "its own length, in whole pages");
    assert_eq!(need.fallback, need.len);
    let large = carve(&mut carver, MIB + 256);
    assert_eq!(carver.chunk_count(), 2);
    assert_ne!(large.chunk, small.chunk);
    assert_eq!(
        carver.release(large),
        vec![large.chunk],
        "never kept as the spare"
    );
    assert!(carver.carve(MIB + 256).is_err(), "its room went with it");
}

#[test]
fn huge_page_chunks_are_whole_2_mib_pages() {
    let mut carver = Carver::new(HUGE);
    let need = carver.carve(16 * KIB + 256).expect_err("no chunk yet");
    assert_eq!(need.len, 2 * MIB);
    assert_eq!(need.fallback, 2 * MIB, "a huge page is the least chunk");
    carver.add_chunk(need.len);
    let _slices: Vec<Carve> = (0..100)
        .map(|_| carve(&mut carver, 16 * KIB + 256))
        .collect();
    assert_eq!(
        carver.chunk_count(),
        1,
        "one 2 MiB page holds 100 send areas"
    );
    let large = carver.carve(3 * MIB).expect_err("over a chunk");
    assert_eq!(large.len, 4 * MIB, "its own chunk, in whole huge pages");
}

#[test]
fn the_fallback_is_the_request_alone() {
    let mut carver = Carver::new(BASE);
    // Chunks of 32, 32, 64, 128 and 256 KiB hold 23 slices of 20 KiB.
    let _held: Vec<Carve> = (0..23).map(|_| carve(&mut carver, 20 * KIB)).collect();
    let need = carver.carve(20 * KIB).expect_err("every chunk is full");
    assert!(need.len > need.fallback, "{need:?}");
    assert_eq!(need.fallback, 20 * KIB);
    carver.add_chunk(need.fallback);
    let fits = carver.carve(20 * KIB).expect("the fallback chunk holds it");
    assert_eq!(fits.len, 20 * KIB);
}

#[test]
fn random_carving_and_releasing_keeps_slices_apart_and_frees_everything() {
    // A fixed xorshift sequence: mixed sizes, slices released in a scrambled order.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut carver = Carver::new(BASE);
    let mut live: Vec<Carve> = Vec::new();
    for _ in 0..5000 {
        if live.len() < 8 || next() % 3 != 0 {
            let len = 1 + (next() % (300 * 1024)) as usize;
            let c = carve(&mut carver, len);
            assert!(live.iter().all(|l| !overlap(l, &c)), "{c:?} overlaps");
            live.push(c);
        } else {
            let at = (next() % live.len() as u64) as usize;
            let gone = carver.release(live.swap_remove(at));
            for id in gone {
                assert!(live.iter().all(|l| l.chunk != id), "a chunk in use went");
            }
        }
        assert!(carver.chunk_count() <= 1 + live.len(), "at most one spare");
    }
    while let Some(c) = live.pop() {
        carver.release(c);
    }
    assert_eq!(carver.chunk_count(), 0);
}

#[test]
#[should_panic(expected = "a slice taken back once")]
fn a_slice_taken_back_twice_is_a_bug() {
    let mut carver = Carver::new(BASE);
    let a = carve(&mut carver, 4 * KIB);
    let _b = carve(&mut carver, 4 * KIB);
    carver.release(a);
    carver.release(a);
}
