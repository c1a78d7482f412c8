//! Rings on 2 MiB huge pages (`SocketOptions::huge_pages`, docs/MEMORY.md#huge-pages): where
//! the hugetlb pool has pages (the VM reserves 16) the rings take them and a stream passes
//! its hash check; where it has none, `Require` fails the connect with what to reserve and
//! `Prefer` falls back to base pages.

use super::socket_support::both_ways;
use super::Fixture;
use rdmasock::verbs::HugePages;
use rdmasock::SocketOptions;
use std::io::ErrorKind;

/// A hugetlb pool counter (/sys/kernel/mm/hugepages/hugepages-2048kB/`name`); 0 where the
/// kernel has no 2 MiB pool.
fn pool(name: &str) -> usize {
    std::fs::read_to_string(format!("/sys/kernel/mm/hugepages/hugepages-2048kB/{name}"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// 2 MiB pages taken from the pool: in use, or reserved by a mapping for its first touch.
fn pool_taken() -> usize {
    (pool("nr_hugepages") - pool("free_hugepages")) + pool("resv_hugepages")
}

/// 1 MiB rings (each end's send ring, with its control area, and its receive ring: two 2 MiB
/// pages an end) with `huge`.
fn options(huge: HugePages) -> SocketOptions {
    SocketOptions::builder()
        .send_ring(1 << 20)
        .recv_ring(1 << 20)
        .huge_pages(huge)
        .build()
        .expect("valid options")
}

/// With `Require`: where the pool has the four pages a connected pair needs, both ends' rings
/// take them while the pair lives (and give them back when it is dropped) and a stream each
/// way passes its hash check; where it has fewer, the connect fails with an error that says
/// how to reserve them. With `Prefer` a stream passes either way.
pub(crate) fn huge_page_rings_carry_a_checked_stream_or_say_what_to_reserve(f: &Fixture) {
    let bytes = f.small_rings_bytes();
    let required = options(HugePages::Require);
    let before = pool_taken();
    if pool("free_hugepages") >= 4 {
        let (server, client) = f.pair_with(&required);
        let taken = pool_taken() - before;
        assert!(taken >= 4, "the pair's rings took {taken} huge pages");
        both_ways(server, client, bytes, f.max_piece());
        assert_eq!(pool_taken(), before, "the closed pair gave its pages back");
    } else {
        let (_listener, addr) = f.listener();
        let e = rdmasock::RdmaSocket::connect_with(addr, &required)
            .expect_err("no huge pages to put the rings on");
        assert_eq!(e.kind(), ErrorKind::OutOfMemory, "{e}");
        let text = e.to_string();
        for what in [
            "2 MiB huge pages",
            "/proc/sys/vm/nr_hugepages",
            "HugePages::Prefer",
        ] {
            assert!(text.contains(what), "{what} missing from: {text}");
        }
    }
    let (server, client) = f.pair_with(&options(HugePages::Prefer));
    both_ways(server, client, bytes, f.max_piece());
}
