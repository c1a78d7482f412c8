//! Reading devices from sysfs (`/sys/class/infiniband`, `/sys/class/infiniband_verbs`):
//! docs/kernel-abi.md#device-discovery-in-sysfs. Every function takes the sysfs root so the parsing
//! can be tested on a fake tree.
#![forbid(unsafe_code)]

use super::{DeviceInfo, GidEntry, GidTable, GidType, NodeType, PortInfo, Transport};
use crate::types::{Gid, PortState};
use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Where uverbs character devices live (not under the sysfs root: devtmpfs names them).
pub(crate) const DEV_DIR: &str = "/dev/infiniband";

/// One `/sys/class/infiniband_verbs/uverbsN` node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UverbsNode {
    /// `uverbsN`.
    pub name: String,
    /// Its sysfs directory.
    pub sysfs: PathBuf,
    /// The driver ABI version (`abi_version`).
    pub abi: Option<u32>,
}

/// Reads a sysfs attribute as trimmed text.
pub(crate) fn read_text(path: &Path) -> io::Result<String> {
    Ok(fs::read_to_string(path)?
        .trim_end_matches(['\n', '\0'])
        .to_string())
}

/// The leading integer of texts like `1: CA` or `4: ACTIVE`.
pub(crate) fn leading_number(text: &str) -> Option<u32> {
    text.split(':').next()?.trim().parse().ok()
}

/// Parses `0211:22ff:fe33:4455` (four 16-bit groups, most significant first).
pub(crate) fn parse_guid(text: &str) -> Option<u64> {
    let groups: Vec<&str> = text.trim().split(':').collect();
    if groups.len() != 4 {
        return None;
    }
    groups.iter().try_fold(0u64, |acc, g| {
        (g.len() == 4)
            .then(|| u16::from_str_radix(g, 16).ok())
            .flatten()
            .map(|v| (acc << 16) | u64::from(v))
    })
}

/// Parses a sysfs GID: eight 4-hex-digit groups separated by `:` (39 characters). Byte by
/// byte: discovery parses every slot of a GID table (rxe has 1024).
pub(crate) fn parse_gid(text: &str) -> Option<Gid> {
    let b = text.trim().as_bytes();
    if b.len() != 39 {
        return None;
    }
    let mut raw = [0u8; 16];
    for (i, pair) in raw.chunks_exact_mut(2).enumerate() {
        let at = i * 5;
        if i < 7 && b[at + 4] != b':' {
            return None;
        }
        let mut v = 0u16;
        for &c in &b[at..at + 4] {
            v = (v << 4) | (c as char).to_digit(16)? as u16;
        }
        pair.copy_from_slice(&v.to_be_bytes());
    }
    Some(Gid(raw))
}

/// Appends the decimal digits of `n` (a sysfs slot file name) without formatting machinery.
fn push_decimal(out: &mut Vec<u8>, mut n: u32) {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// The node type for `rdma_node_type` number `n`.
pub(crate) fn node_type_from_raw(n: u32) -> NodeType {
    match n {
        1 => NodeType::Ca,
        2 => NodeType::Switch,
        3 => NodeType::Router,
        4 => NodeType::Rnic,
        5 => NodeType::Usnic,
        6 => NodeType::UsnicUdp,
        _ => NodeType::Unspecified,
    }
}

/// The transport a node type implies (rdma-core's `ibv_get_transport_type` rule).
pub(crate) fn transport_of(node_type: NodeType) -> Transport {
    match node_type {
        NodeType::Ca | NodeType::Switch | NodeType::Router => Transport::InfiniBand,
        NodeType::Rnic => Transport::Iwarp,
        NodeType::Usnic | NodeType::UsnicUdp => Transport::Usnic,
        NodeType::Unspecified => Transport::Unknown,
    }
}

/// Sorted names of the entries of `dir` (empty when it does not exist).
fn entry_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

/// Numeric entry names of `dir` (ports, GID slots), in numeric order.
fn numeric_entries(dir: &Path) -> Vec<u32> {
    let mut v: Vec<u32> = entry_names(dir)
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

/// The uverbs nodes, keyed by the RDMA device name in their `ibdev` file.
pub(crate) fn uverbs_nodes(root: &Path) -> HashMap<String, UverbsNode> {
    let class = root.join("class/infiniband_verbs");
    let mut map = HashMap::new();
    for name in entry_names(&class) {
        if !name.starts_with("uverbs") {
            continue;
        }
        let dir = class.join(&name);
        let Ok(ibdev) = read_text(&dir.join("ibdev")) else {
            continue;
        };
        let abi = read_text(&dir.join("abi_version"))
            .ok()
            .and_then(|t| t.trim().parse().ok());
        map.insert(
            ibdev,
            UverbsNode {
                name,
                sysfs: dir,
                abi,
            },
        );
    }
    map
}

/// Reads one GID slot; `None` for an empty (all-zero) or unreadable slot.
pub(crate) fn read_gid(port_dir: &Path, index: u32) -> Option<GidEntry> {
    let gid = parse_gid(&read_text(&port_dir.join(format!("gids/{index}"))).ok()?)?;
    gid_entry(port_dir, index, gid)
}

/// The entry for slot `index` holding `gid`: `None` when the GID is zero or the kernel
/// refuses its type (the slot is not in use).
fn gid_entry(port_dir: &Path, index: u32, gid: Gid) -> Option<GidEntry> {
    if gid.is_zero() {
        return None;
    }
    let types = port_dir.join("gid_attrs/types");
    let gid_type = if types.is_dir() {
        // The kernel answers EINVAL for a slot that is not in use.
        match read_text(&types.join(index.to_string())).ok()?.as_str() {
            "RoCE v2" => GidType::RoceV2,
            _ => GidType::IbRoceV1,
        }
    } else {
        // Kernels without gid_attrs only had InfiniBand / RoCE v1 GIDs.
        GidType::IbRoceV1
    };
    let netdev = read_text(&port_dir.join(format!("gid_attrs/ndevs/{index}")))
        .ok()
        .filter(|n| !n.is_empty());
    Some(GidEntry {
        index,
        gid,
        gid_type,
        netdev,
    })
}

/// The most GID slots read per port (the kernel's tables hold at most a few thousand).
const MAX_GID_SLOTS: u32 = 1 << 16;

/// The populated slots of a port's GID table, in index order.
///
/// sysfs has one `gids/N` file for every slot of the table, N = 0 up to its length (rxe's
/// table has 1024 slots, nearly all empty), so the slots are read in order until one does
/// not exist: no directory listing, no allocation per slot (the path is rebuilt in one
/// byte buffer, the text read into a stack buffer and parsed in place). Only a populated slot reads its type and
/// netdev. A slot that cannot be read is skipped, as an empty one.
pub(crate) fn read_gids(port_dir: &Path) -> Vec<GidEntry> {
    use std::io::Read as _;
    use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
    let mut path = port_dir.join("gids").into_os_string().into_vec();
    path.push(b'/');
    let base = path.len();
    let mut text = [0u8; 64];
    let mut gids = Vec::new();
    for index in 0..MAX_GID_SLOTS {
        path.truncate(base);
        push_decimal(&mut path, index);
        let mut file = match fs::File::open(std::ffi::OsStr::from_bytes(&path)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => break,
            Err(_) => continue,
        };
        // A GID is 39 characters and a newline; sysfs hands the whole text to one read.
        let Ok(n) = file.read(&mut text) else {
            continue;
        };
        let Some(gid) = std::str::from_utf8(&text[..n]).ok().and_then(parse_gid) else {
            continue;
        };
        gids.extend(gid_entry(port_dir, index, gid));
    }
    gids
}

/// Reads one port directory.
fn read_port(port_dir: &Path, number: u8) -> PortInfo {
    let state = read_text(&port_dir.join("state"))
        .ok()
        .and_then(|t| leading_number(&t))
        .map(PortState::from_raw)
        .unwrap_or(PortState::Unknown(0));
    PortInfo {
        number,
        state,
        phys_state: read_text(&port_dir.join("phys_state")).unwrap_or_default(),
        link_layer: read_text(&port_dir.join("link_layer")).unwrap_or_default(),
        rate: read_text(&port_dir.join("rate")).unwrap_or_default(),
        gids: GidTable::lazy(port_dir.to_path_buf()),
    }
}

/// The netdev whose MAC address is the first six bytes of `gid` (how siw builds its GID).
fn netdev_by_mac(root: &Path, gid: &Gid) -> Option<String> {
    let mac: Vec<String> = gid.0[..6].iter().map(|b| format!("{b:02x}")).collect();
    let mac = mac.join(":");
    let class = root.join("class/net");
    entry_names(&class).into_iter().find(|n| {
        read_text(&class.join(n).join("address")).is_ok_and(|a| a.eq_ignore_ascii_case(&mac))
    })
}

/// The driver by the fallback heuristics of
/// docs/kernel-abi.md#driver-names-and-the-fallback (when netlink gave none):
/// rxe is a CA with an Ethernet port, no parent bus device and a `parent` file; siw is an
/// RNIC with no parent bus device and driver ABI 1.
pub(crate) fn guess_driver(dev_dir: &Path, info: &DeviceInfo) -> Option<String> {
    let has_bus_device = dev_dir.join("device").exists();
    if has_bus_device {
        return None;
    }
    let ethernet = info.ports.iter().any(|p| p.link_layer == "Ethernet");
    if info.node_type == NodeType::Ca && ethernet && dev_dir.join("parent").is_file() {
        return Some("rxe".into());
    }
    if info.node_type == NodeType::Rnic && info.uverbs_abi == Some(1) {
        return Some("siw".into());
    }
    None
}

/// Reads device `name`; `None` when it has no uverbs node (rdma-core skips those too) or its
/// node type cannot be read.
pub(crate) fn read_device(
    root: &Path,
    name: &str,
    uverbs: Option<&UverbsNode>,
) -> Option<DeviceInfo> {
    let uverbs = uverbs?;
    let dir = root.join("class/infiniband").join(name);
    let node_type = node_type_from_raw(leading_number(&read_text(&dir.join("node_type")).ok()?)?);
    let node_guid = read_text(&dir.join("node_guid"))
        .ok()
        .and_then(|t| parse_guid(&t))
        .unwrap_or(0);
    let ports_dir = dir.join("ports");
    let ports: Vec<PortInfo> = numeric_entries(&ports_dir)
        .into_iter()
        .filter_map(|p| u8::try_from(p).ok())
        .map(|p| read_port(&ports_dir.join(p.to_string()), p))
        .collect();
    let transport = transport_of(node_type);
    let parent_netdev = read_text(&dir.join("parent"))
        .ok()
        .filter(|p| !p.is_empty())
        .or_else(|| {
            ports
                .iter()
                .flat_map(|p| p.gids.iter())
                .find_map(|g| g.netdev.clone())
        })
        .or_else(|| {
            let first = ports.iter().flat_map(|p| p.gids.iter()).next()?;
            (transport == Transport::Iwarp)
                .then(|| netdev_by_mac(root, &first.gid))
                .flatten()
        });
    let mut info = DeviceInfo {
        name: name.to_string(),
        node_guid,
        node_type,
        transport,
        driver: None,
        driver_id: None,
        uverbs_path: Some(Path::new(DEV_DIR).join(&uverbs.name)),
        uverbs_sysfs: Some(uverbs.sysfs.clone()),
        uverbs_abi: uverbs.abi,
        sysfs: Some(dir.clone()),
        parent_netdev,
        fw_ver: read_text(&dir.join("fw_ver")).unwrap_or_default(),
        ports,
    };
    info.driver = guess_driver(&dir, &info);
    Some(info)
}

/// The names under `class/infiniband`, sorted.
pub(crate) fn device_names(root: &Path) -> Vec<String> {
    entry_names(&root.join("class/infiniband"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_guids_and_gids() {
        assert_eq!(
            parse_guid("0211:22ff:fe33:4455"),
            Some(0x0211_22ff_fe33_4455)
        );
        assert_eq!(parse_guid("0211:22ff:fe33"), None);
        assert_eq!(parse_guid("0211:22ff:fe33:44zz"), None);
        let g = parse_gid("fe80:0000:0000:0000:5054:00ff:fe12:3456").unwrap();
        assert_eq!(g.to_string(), "fe80::5054:ff:fe12:3456");
        assert_eq!(
            parse_gid("0000:0000:0000:0000:0000:ffff:0a63:0002")
                .unwrap()
                .to_string(),
            "::ffff:10.99.0.2"
        );
        assert_eq!(parse_gid("fe80::1"), None);
        assert_eq!(
            parse_gid("fe80-0000:0000:0000:5054:00ff:fe12:3456"),
            None,
            "a group not followed by ':'"
        );
        assert_eq!(
            parse_gid("fe80:0000:0000:0000:5054:00ff:fe12:345g"),
            None,
            "not hex"
        );
        assert_eq!(
            parse_gid("FE80:0000:0000:0000:5054:00FF:FE12:3456\n"),
            Some(g),
            "upper case and the trailing newline"
        );
        let mut text = Vec::new();
        for n in [0, 7, 10, 1023, 65535, u32::MAX] {
            text.clear();
            push_decimal(&mut text, n);
            assert_eq!(text, n.to_string().into_bytes());
        }
    }

    #[test]
    fn node_types_and_transports() {
        assert_eq!(leading_number("1: CA"), Some(1));
        assert_eq!(leading_number("4: RNIC"), Some(4));
        assert_eq!(leading_number("x"), None);
        assert_eq!(transport_of(node_type_from_raw(1)), Transport::InfiniBand);
        assert_eq!(transport_of(node_type_from_raw(4)), Transport::Iwarp);
        assert_eq!(transport_of(node_type_from_raw(6)), Transport::Usnic);
        assert_eq!(transport_of(node_type_from_raw(9)), Transport::Unknown);
    }
}
