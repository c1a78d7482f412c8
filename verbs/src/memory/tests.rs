//! Tests of registered memory: allocation, bounds, atomics, huge pages, lending and
//! gathering sends.

use super::*;

#[test]
fn copies_span_pieces_byte_for_byte() {
    let m = RegisteredMemory::allocate(4 * COPY_PIECE + 100).unwrap();
    let data: Vec<u8> = (0..3 * COPY_PIECE + 77)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    m.write_at(13, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    m.read_at(13, &mut back).unwrap();
    assert!(back == data);
    assert_eq!(&m.to_vec()[13..13 + data.len()], &data[..]);
    assert!(m.to_vec()[..13].iter().all(|&b| b == 0));
    assert!(m.write_at(m.len() - 10, &data).is_err());
}

#[test]
fn allocate_read_write_bounds() {
    let mut m = RegisteredMemory::allocate(100).unwrap();
    assert_eq!(m.addr() % 4096, 0);
    m.write_at(10, b"hello").unwrap();
    let mut b = [0u8; 5];
    m.read_at(10, &mut b).unwrap();
    assert_eq!(&b, b"hello");
    assert!(m.write_at(98, b"abc").is_err());
    assert!(m.read_at(usize::MAX, &mut b).is_err());
    assert!(m.contains(m.addr() + 95, 5));
    assert!(!m.contains(m.addr() + 96, 5));
    assert!(!m.contains(m.addr() - 1, 1));
    m.as_mut_slice()[0] = 7;
    assert_eq!(m.to_vec()[0], 7);
    assert_eq!(m.load_u8(0).unwrap(), 7);
    assert_eq!(m.load_u8(14).unwrap(), b'o');
    m.write_at(99, &[0xa5]).unwrap();
    assert_eq!(m.load_u8(99).unwrap(), 0xa5);
    assert!(m.load_u8(100).is_err());
    assert!(m.load_u8(usize::MAX).is_err());
}

#[test]
fn atomics() {
    let m = RegisteredMemory::allocate(64).unwrap();
    assert_eq!(m.fetch_add_u64(8, 5).unwrap(), 0);
    assert_eq!(m.compare_swap_u64(8, 5, 9).unwrap(), 5);
    assert_eq!(m.compare_swap_u64(8, 5, 1).unwrap(), 9);
    assert!(m.fetch_add_u64(3, 1).is_err());
    assert!(m.fetch_add_u64(60, 1).is_err());
}

/// Free pages in the 2 MiB hugetlb pool.
fn free_huge_pages() -> usize {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
#[cfg_attr(miri, ignore = "mmap flags miri does not run")]
fn huge_pages_are_required_or_refused_with_what_to_do() {
    let len = HUGE_PAGE + 100;
    match RegisteredMemory::allocate_with(len, HugePages::Require) {
        Ok(m) => {
            assert_eq!(m.pages(), Pages::Huge2MiB);
            assert_eq!(m.page_size(), HUGE_PAGE);
            assert_eq!(m.len(), len, "the length is what was asked");
            assert_eq!(m.addr() % HUGE_PAGE as u64, 0);
            m.write_at(len - 5, b"tail!").unwrap();
            let mut back = [0u8; 5];
            m.read_at(len - 5, &mut back).unwrap();
            assert_eq!(&back, b"tail!");
            m.populate(0, len).unwrap();
        }
        Err(e) => {
            assert!(
                free_huge_pages() < 2,
                "the pool has {} free pages, yet: {e}",
                free_huge_pages()
            );
            let text = e.to_string();
            assert!(matches!(e, Error::HugePages { pages: 2, .. }), "{e:?}");
            for what in [
                "/proc/sys/vm/nr_hugepages",
                "hugeadm",
                "ulimit -l",
                "Prefer",
            ] {
                assert!(text.contains(what), "{what} missing from: {text}");
            }
        }
    }
}

#[test]
#[cfg_attr(miri, ignore = "mmap flags miri does not run")]
fn preferred_huge_pages_fall_back_to_base_pages() {
    let len = 2 * HUGE_PAGE;
    let pool_empty = free_huge_pages() == 0;
    let m = RegisteredMemory::allocate_with(len, HugePages::Prefer).unwrap();
    match m.pages() {
        Pages::Huge2MiB => {
            assert!(!pool_empty, "hugetlb pages from an empty pool");
            assert_eq!(m.page_size(), HUGE_PAGE)
        }
        Pages::TransparentHuge => {
            assert_eq!(m.addr() % HUGE_PAGE as u64, 0, "an aligned 2 MiB extent");
            assert_eq!(m.page_size(), crate::sys::memory::page_size());
        }
        Pages::Base => {
            assert_eq!(m.page_size(), crate::sys::memory::page_size());
        }
    }
    m.write_at(len - 1, &[9]).unwrap();
    assert_eq!(m.to_vec()[len - 1], 9);
    let plain = RegisteredMemory::allocate(len).unwrap();
    assert_eq!(plain.pages(), Pages::Base);
    assert_eq!(
        RegisteredMemory::allocate_with(len, HugePages::Never)
            .unwrap()
            .pages(),
        Pages::Base
    );
}

#[test]
fn zero_length_is_refused() {
    assert!(RegisteredMemory::allocate(0).is_err());
}

#[test]
fn lent_memory_reads_the_callers_bytes_and_refuses_writes() {
    let data = b"lent bytes".to_vec();
    let other = [7u8; 3];
    let seen = RegisteredMemory::lend([&data[..], &other[..]], |lent| {
        assert_eq!(lent.len(), 2);
        assert!(lent[0].is_lent());
        assert_eq!(lent[0].addr(), data.as_ptr() as u64);
        assert_eq!(lent[0].to_vec(), b"lent bytes");
        assert_eq!(lent[1].to_vec(), &other);
        assert!(lent[0].write_at(0, b"x").is_err());
        assert!(lent[0].fetch_add_u64(0, 1).is_err());
        // A clone dropped before the end is fine.
        let clone = lent[0].clone();
        let mut back = [0u8; 4];
        clone.read_at(5, &mut back).unwrap();
        back
    });
    assert_eq!(&seen, b"byte");
    assert_eq!(data, b"lent bytes");
    assert!(!RegisteredMemory::allocate(8).unwrap().is_lent());
}

#[test]
fn to_vec_is_a_copy_that_later_writes_do_not_change() {
    let m = RegisteredMemory::allocate(16).unwrap();
    m.write_at(0, b"before").unwrap();
    let copy = m.to_vec();
    m.write_at(0, b"after!").unwrap();
    assert_eq!(&copy[..6], b"before");
    assert_eq!(&m.to_vec()[..6], b"after!");
    assert_eq!(copy.len(), 16);
}

#[test]
#[cfg_attr(miri, ignore = "sendmsg(2) is a system call miri does not run")]
fn send_pieces_sends_bytes_and_memory_in_order() {
    use std::io::Read;
    use std::os::fd::AsFd;
    let (mut reader, writer) = std::os::unix::net::UnixStream::pair().unwrap();
    let m = RegisteredMemory::allocate(64).unwrap();
    m.write_at(10, b"memory").unwrap();
    let pieces = [
        SendPiece::Bytes(b"head-"),
        SendPiece::Memory {
            memory: &m,
            offset: 10,
            len: 6,
        },
        SendPiece::Bytes(b"-tail"),
    ];
    // Only the first two fit the bound.
    assert_eq!(send_pieces::<2>(writer.as_fd(), &pieces, 0).unwrap(), 11);
    assert_eq!(
        send_pieces::<4>(writer.as_fd(), &pieces[2..], 0).unwrap(),
        5
    );
    let mut got = [0u8; 16];
    reader.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"head-memory-tail");
    let mut copied = Vec::new();
    for piece in &pieces {
        piece.copy_to(&mut copied).unwrap();
    }
    assert_eq!(copied, b"head-memory-tail");
}

#[test]
#[cfg_attr(miri, ignore = "sendmsg(2) is a system call miri does not run")]
#[should_panic(expected = "outside raw memory of 64 bytes")]
fn send_pieces_refuses_a_range_outside_the_memory() {
    use std::os::fd::AsFd;
    let (_reader, writer) = std::os::unix::net::UnixStream::pair().unwrap();
    let m = RegisteredMemory::allocate(64).unwrap();
    let piece = SendPiece::Memory {
        memory: &m,
        offset: 60,
        len: 8,
    };
    let _ = send_pieces::<1>(writer.as_fd(), &[piece], 0);
}
