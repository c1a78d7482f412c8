//! Entry points for the `verbs_parsers` fuzz target in `fuzz/` (cargo-fuzz), also run on
//! seeded random input by the tests below: the netlink reply parser and the sysfs text
//! parsers of device discovery. What they parse comes from the kernel; whatever it is, they
//! must return an error or `None`, never panic, and what they accept must be in range.
#![forbid(unsafe_code)]

use super::netlink::{
    chardev_reply, dump_entry, parse_attrs, parse_messages, Message, NetlinkDevice,
};
use super::sysfs::{leading_number, parse_gid, parse_guid};

/// The first byte picks the parser (even: netlink, odd: sysfs text); the rest is its input.
/// Returns how many things parsed (devices named in a netlink dump; GUIDs, GIDs and numbers
/// in a text), so that a smoke test can tell its inputs still reach the parsers' insides.
pub fn parsers(data: &[u8]) -> usize {
    let Some((pick, rest)) = data.split_first() else {
        return 0;
    };
    if pick & 1 == 0 {
        netlink(rest)
    } else {
        sysfs_text(rest)
    }
}

/// A netlink datagram: every message of a well-formed walk lies inside the datagram, and
/// every attribute inside its message.
fn netlink(data: &[u8]) -> usize {
    let Ok(messages) = parse_messages(data) else {
        return 0;
    };
    let mut named = 0;
    for m in messages {
        if let Message::Data { attrs, .. } = m {
            assert!(attrs.len() <= data.len());
            for (_, value) in parse_attrs(attrs) {
                assert!(value.len() + 4 <= attrs.len());
            }
            named += usize::from(dump_entry(attrs).is_some());
            let mut dev = NetlinkDevice::default();
            chardev_reply(attrs, &mut dev);
        }
    }
    named
}

/// sysfs text: a GUID, a GID and a leading number, each parsed from the same text; what
/// parses as a GID has exactly the eight groups it was given.
fn sysfs_text(data: &[u8]) -> usize {
    let text = String::from_utf8_lossy(data);
    let number = leading_number(&text).is_some();
    let guid = parse_guid(&text).is_some();
    let gid = parse_gid(&text);
    if let Some(gid) = gid {
        let groups: Vec<String> = gid
            .0
            .chunks(2)
            .map(|p| format!("{:02x}{:02x}", p[0], p[1]))
            .collect();
        assert_eq!(groups.join(":"), text.trim().to_ascii_lowercase());
    }
    usize::from(number) + usize::from(guid) + usize::from(gid.is_some())
}

#[cfg(test)]
mod tests {
    use super::super::netlink::reply;
    use super::parsers;

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

    /// Dump replies (index, name, chardev name, ABI, driver id), an error and DONE.
    fn datagram(rng: &mut Rng) -> Vec<u8> {
        let mut d = Vec::new();
        for i in 0..1 + rng.below(3) as u32 {
            let driver = (rng.below(20) as u32).to_ne_bytes();
            let (index, abi) = (i.to_ne_bytes(), 1u64.to_ne_bytes());
            let attrs: [(u16, &[u8]); 5] = [
                (1, &index),        // RDMA_NLDEV_ATTR_DEV_INDEX
                (2, b"rxe0\0"),     // RDMA_NLDEV_ATTR_DEV_NAME
                (70, b"uverbs0\0"), // RDMA_NLDEV_ATTR_CHARDEV_NAME
                (71, &abi),         // RDMA_NLDEV_ATTR_CHARDEV_ABI
                (73, &driver),      // RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID
            ];
            d.extend(reply(0x1401, i, &attrs));
        }
        let mut error = reply(2, 9, &[]);
        error.extend_from_slice(&(-22i32).to_ne_bytes());
        let len = error.len() as u32;
        error[0..4].copy_from_slice(&len.to_ne_bytes());
        d.extend(error);
        d.extend(reply(3, 10, &[]));
        d
    }

    /// Well-formed netlink dumps cut and mutated, and sysfs texts (a GID, a GUID, `4:
    /// ACTIVE`) with random edits.
    #[test]
    fn parsers_on_mutated_netlink_and_sysfs_text() {
        let mut rng = Rng(0x7e4b_5eed);
        let (mut devices, mut texts) = (0, 0);
        // Under miri, which interprets every instruction, 1% of the cases (the same parsers).
        let cases = if cfg!(miri) { 200 } else { 20_000 };
        for _ in 0..cases {
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
            devices > cases / 4 && texts > cases / 4,
            "{devices} devices, {texts} texts parsed"
        );
    }
}
