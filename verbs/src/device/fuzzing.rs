//! Entry points for the `verbs_parsers` fuzz target in `fuzz/` (cargo-fuzz), also run on
//! seeded random input by this crate's tests: the netlink reply parser and the sysfs text
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
