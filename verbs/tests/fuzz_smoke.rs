//! The `verbs_parsers` fuzz target's entry point (`device::fuzzing::parsers`, run by
//! cargo-fuzz in `fuzz/`) on seeded inputs, so that a stable `cargo test` exercises it:
//! netlink datagrams built well-formed and then cut and mutated, and sysfs texts (GIDs,
//! GUIDs, `4: ACTIVE`) with random edits.

use rdmasock_verbs::device::fuzzing::parsers;

/// xorshift64*: a seeded, dependency-free generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One netlink attribute, padded to 4 bytes.
fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    a.extend_from_slice(&kind.to_ne_bytes());
    a.extend_from_slice(value);
    while a.len() % 4 != 0 {
        a.push(0);
    }
    a
}

/// One netlink message of `kind` around `body`.
fn message(kind: u16, seq: u32, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&0u16.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(body);
    m
}

/// A dump reply (index, name), a chardev reply (driver id, name, ABI), an error and DONE.
fn datagram(rng: &mut Rng) -> Vec<u8> {
    let mut d = Vec::new();
    for i in 0..1 + rng.below(3) as u32 {
        let mut body = attr(1, &i.to_ne_bytes());
        body.extend(attr(2, b"rxe0\0"));
        body.extend(attr(70, b"uverbs0\0"));
        body.extend(attr(71, &1u64.to_ne_bytes()));
        body.extend(attr(74, &(rng.below(20) as u32).to_ne_bytes()));
        d.extend(message(0x1401, i, &body));
    }
    d.extend(message(2, 9, &(-22i32).to_ne_bytes()));
    d.extend(message(3, 10, &[]));
    d
}

#[test]
fn parsers_on_mutated_netlink_and_sysfs_text() {
    let mut rng = Rng(0x7e4b_5eed);
    let (mut devices, mut texts) = (0, 0);
    for _ in 0..20_000 {
        let mut d = datagram(&mut rng);
        let mut whole = d.clone();
        whole.insert(0, 0);
        assert!(parsers(&whole) >= 1, "an unmutated dump names its devices");
        for _ in 0..rng.below(4) {
            let at = rng.below(d.len() as u64) as usize;
            d[at] = rng.next() as u8;
        }
        d.truncate(rng.below(d.len() as u64 + 1) as usize);
        d.insert(0, 0);
        devices += parsers(&d);

        let mut text = match rng.below(3) {
            0 => b"fe80:0000:0000:0000:0211:22ff:fe33:4455\n".to_vec(),
            1 => b"0211:22ff:fe33:4455".to_vec(),
            _ => b"4: ACTIVE".to_vec(),
        };
        for _ in 0..rng.below(3) {
            let at = rng.below(text.len() as u64) as usize;
            text[at] = rng.next() as u8;
        }
        text.insert(0, 1);
        texts += parsers(&text);
    }
    // Some mutated inputs must still parse, or the test has lost its aim.
    assert!(
        devices > 5_000 && texts > 5_000,
        "{devices} devices, {texts} texts parsed"
    );
}
