//! Discovery on fake sysfs trees.

use super::*;
use std::fs;
use std::sync::atomic::{AtomicU32, Ordering};

/// A fake sysfs root in a fresh temporary directory, removed on drop.
struct FakeSysfs {
    root: PathBuf,
}

impl FakeSysfs {
    fn new() -> FakeSysfs {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let root = std::env::temp_dir().join(format!(
            "rdmasock-sysfs-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        FakeSysfs { root }
    }

    fn file(&self, rel: &str, text: &str) -> &Self {
        let p = self.root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, format!("{text}\n")).unwrap();
        self
    }

    /// A directory where a file is expected: reading it fails (like EINVAL on an empty slot).
    fn unreadable(&self, rel: &str) -> &Self {
        fs::create_dir_all(self.root.join(rel)).unwrap();
        self
    }

    /// Empty (all-zero) GID slots `slots` of port directory `port` of rxe0.
    fn zero_gids(&self, port: &str, slots: std::ops::Range<u32>) -> &Self {
        for slot in slots {
            self.dev(
                "rxe0",
                &format!("{port}/gids/{slot}"),
                "0000:0000:0000:0000:0000:0000:0000:0000",
            );
        }
        self
    }

    fn uverbs(&self, node: &str, ibdev: &str, abi: u32) -> &Self {
        self.file(&format!("class/infiniband_verbs/{node}/ibdev"), ibdev)
            .file(
                &format!("class/infiniband_verbs/{node}/abi_version"),
                &abi.to_string(),
            )
    }

    fn dev(&self, name: &str, rel: &str, text: &str) -> &Self {
        self.file(&format!("class/infiniband/{name}/{rel}"), text)
    }

    /// An rxe device on eth0 like the VM's: two RoCE v2 GIDs and 4 slots in all.
    fn rxe(&self) -> &Self {
        let p = "ports/1";
        self.file("class/infiniband_verbs/abi_version", "6")
            .uverbs("uverbs0", "rxe0", 2)
            .dev("rxe0", "node_type", "1: CA")
            .dev("rxe0", "node_guid", "5054:00ff:fe12:3456")
            .dev("rxe0", "fw_ver", "")
            .dev("rxe0", "parent", "eth0")
            .dev("rxe0", &format!("{p}/state"), "4: ACTIVE")
            .dev("rxe0", &format!("{p}/phys_state"), "5: LinkUp")
            .dev("rxe0", &format!("{p}/link_layer"), "Ethernet")
            .dev("rxe0", &format!("{p}/rate"), "2.5 Gb/sec (1X SDR)")
            .dev(
                "rxe0",
                &format!("{p}/gids/0"),
                "fe80:0000:0000:0000:5054:00ff:fe12:3456",
            )
            .dev("rxe0", &format!("{p}/gid_attrs/types/0"), "RoCE v2")
            .dev("rxe0", &format!("{p}/gid_attrs/ndevs/0"), "eth0")
            .dev(
                "rxe0",
                &format!("{p}/gids/1"),
                "0000:0000:0000:0000:0000:ffff:0a63:0002",
            )
            .dev("rxe0", &format!("{p}/gid_attrs/types/1"), "RoCE v2")
            .dev("rxe0", &format!("{p}/gid_attrs/ndevs/1"), "eth0")
            // Slot 2: all zero, and its attributes fail to read.
            .dev(
                "rxe0",
                &format!("{p}/gids/2"),
                "0000:0000:0000:0000:0000:0000:0000:0000",
            )
            .unreadable(&format!("class/infiniband/rxe0/{p}/gid_attrs/types/2"))
            .unreadable(&format!("class/infiniband/rxe0/{p}/gid_attrs/ndevs/2"))
            // Slots 3..=9: empty, as sysfs lists every slot of the table.
            .zero_gids(p, 3..10)
            // Slot 10: the GID itself fails to read.
            .unreadable(&format!("class/infiniband/rxe0/{p}/gids/10"))
            // Slot 11: a stale non-zero GID whose type the kernel refuses (not in use).
            .dev(
                "rxe0",
                &format!("{p}/gids/11"),
                "fe80:0000:0000:0000:0000:0000:0000:0099",
            )
            .unreadable(&format!("class/infiniband/rxe0/{p}/gid_attrs/types/11"))
    }

    /// A siw device on eth1: one MAC-based GID, no gid_attrs, no parent file.
    fn siw(&self) -> &Self {
        let p = "ports/1";
        self.uverbs("uverbs1", "siw0", 1)
            .dev("siw0", "node_type", "4: RNIC")
            .dev("siw0", "node_guid", "5254:0012:3457:0000")
            .dev("siw0", &format!("{p}/state"), "4: ACTIVE")
            .dev("siw0", &format!("{p}/phys_state"), "5: LinkUp")
            .dev("siw0", &format!("{p}/link_layer"), "Ethernet")
            .dev(
                "siw0",
                &format!("{p}/gids/0"),
                "5254:0012:3457:0000:0000:0000:0000:0000",
            )
            .dev(
                "siw0",
                &format!("{p}/gids/1"),
                "0000:0000:0000:0000:0000:0000:0000:0000",
            )
            .file("class/net/eth0/address", "52:54:00:12:34:56")
            .file("class/net/eth1/address", "52:54:00:12:34:57")
    }
}

impl Drop for FakeSysfs {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

#[test]
fn rxe_device_from_sysfs() {
    let fake = FakeSysfs::new();
    fake.rxe();
    let list = DeviceList::discover_in(&fake.root).unwrap();
    assert_eq!(list.devices.len(), 1);
    let d = list.pick(None).unwrap();
    assert_eq!(d.name, "rxe0");
    assert_eq!(d.node_guid, 0x5054_00ff_fe12_3456);
    assert_eq!(d.guid_hex(), "505400fffe123456");
    assert_eq!(d.guid_grouped(), "5054:00ff:fe12:3456");
    assert_eq!(d.node_type, NodeType::Ca);
    assert_eq!(d.transport, Transport::InfiniBand);
    assert_eq!(d.driver.as_deref(), Some("rxe"));
    assert_eq!(d.driver_id, None, "no netlink on a fake tree");
    assert_eq!(
        d.uverbs_path,
        Some(PathBuf::from("/dev/infiniband/uverbs0"))
    );
    assert_eq!(d.uverbs_abi, Some(2));
    assert_eq!(d.parent_netdev.as_deref(), Some("eth0"));
    assert_eq!(d.fw_ver, "");
    let port = d.port(1).unwrap();
    assert_eq!(port.state, PortState::Active);
    assert_eq!(port.phys_state, "5: LinkUp");
    assert_eq!(port.link_layer, "Ethernet");
    assert_eq!(port.rate, "2.5 Gb/sec (1X SDR)");
    assert!(
        !port.gids.is_loaded(),
        "discovery leaves the GID table unread (rxe's parent file names the netdev)"
    );
    // Read on first look: a slot written after discovery is seen, then the snapshot stays.
    fake.dev(
        "rxe0",
        "ports/1/gids/12",
        "fe80:0000:0000:0000:0000:0000:0000:0012",
    )
    .dev("rxe0", "ports/1/gid_attrs/types/12", "IB/RoCE v1");
    assert_eq!(port.gids.len(), 3);
    assert!(port.gids.is_loaded());
    fake.dev(
        "rxe0",
        "ports/1/gids/13",
        "fe80:0000:0000:0000:0000:0000:0000:0013",
    );
    assert_eq!(port.gids.len(), 3, "one snapshot per table");
    assert_eq!(port.gids[2].gid_type, GidType::IbRoceV1);
    let gids: Vec<(u32, String, GidType, Option<&str>)> = port
        .gids
        .iter()
        .map(|g| (g.index, g.gid.to_string(), g.gid_type, g.netdev.as_deref()))
        .collect();
    assert_eq!(
        gids,
        vec![
            (
                0,
                "fe80::5054:ff:fe12:3456".into(),
                GidType::RoceV2,
                Some("eth0")
            ),
            (1, "::ffff:10.99.0.2".into(), GidType::RoceV2, Some("eth0")),
            (12, "fe80::12".into(), GidType::IbRoceV1, None),
        ]
    );
    // A clone keeps the snapshot; a table given whole is loaded from the start.
    assert_eq!(d.clone().port(1).unwrap().gids, port.gids);
    assert!(GidTable::from(Vec::new()).is_loaded());
    let live = d.query_gid(1, 1).unwrap().unwrap();
    assert_eq!(live.gid.to_string(), "::ffff:10.99.0.2");
    assert_eq!(d.query_gid(1, 2).unwrap(), None);
    assert!(d.query_gid(2, 0).is_err());
}

#[test]
fn siw_device_from_sysfs() {
    let fake = FakeSysfs::new();
    fake.siw();
    let list = DeviceList::discover_in(&fake.root).unwrap();
    let d = list.pick(Some("siw0")).unwrap();
    assert_eq!(d.node_type, NodeType::Rnic);
    assert_eq!(d.transport, Transport::Iwarp);
    assert!(d.is_iwarp());
    assert_eq!(d.driver.as_deref(), Some("siw"));
    assert_eq!(d.uverbs_abi, Some(1));
    assert_eq!(
        d.parent_netdev.as_deref(),
        Some("eth1"),
        "found by the GID's MAC"
    );
    let port = d.port(1).unwrap();
    assert_eq!(port.gids.len(), 1);
    assert_eq!(port.gids[0].gid_type, GidType::IbRoceV1, "no gid_attrs: v1");
    assert_eq!(port.gids[0].netdev, None);
}

#[test]
fn both_devices_sorted_and_unknown_ones_undriven() {
    let fake = FakeSysfs::new();
    fake.siw().rxe();
    // A PCI device (has a `device/` link): no heuristic names its driver.
    fake.uverbs("uverbs2", "mlx5_0", 1)
        .dev("mlx5_0", "node_type", "1: CA")
        .dev("mlx5_0", "node_guid", "0002:c903:0001:0002")
        .dev("mlx5_0", "device/vendor", "0x15b3")
        .dev("mlx5_0", "ports/1/link_layer", "InfiniBand")
        .dev("mlx5_0", "ports/1/state", "1: DOWN");
    // A device with no uverbs node is not listed (rdma-core cannot open it either).
    fake.dev("orphan0", "node_type", "1: CA");
    let list = DeviceList::discover_in(&fake.root).unwrap();
    let names: Vec<&str> = list.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["mlx5_0", "rxe0", "siw0"]);
    let mlx = list.pick(Some("mlx5_0")).unwrap();
    assert_eq!(mlx.driver, None);
    assert_eq!(mlx.port(1).unwrap().state, PortState::Down);
    match list.pick(Some("nope0")) {
        Err(Error::DeviceNotFound { available, .. }) => {
            assert_eq!(available, "mlx5_0, rxe0, siw0")
        }
        other => panic!("expected DeviceNotFound, got {other:?}"),
    }
}

#[test]
fn no_device_is_an_error_that_says_how_to_make_one() {
    let fake = FakeSysfs::new();
    let err = DeviceList::discover_in(&fake.root).unwrap_err();
    assert!(matches!(err, Error::NoDevice));
    assert!(err.to_string().contains("rdma link add"));
    // A device without uverbs is no device either.
    fake.dev("rxe0", "node_type", "1: CA");
    assert!(matches!(
        DeviceList::discover_in(&fake.root),
        Err(Error::NoDevice)
    ));
}
