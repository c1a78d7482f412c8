//! `devinfo`: the twin of rdma-core's `ibv_devinfo` (v44 output format).
//!
//! ```text
//! devinfo             print the attributes of every device
//!   -d, --ib-dev=DEV    only device DEV
//!   -i, --ib-port=PORT  only port PORT
//!   -l, --list          print only the device names
//!   -v, --verbose       print all the attributes
//! ```
//!
//! With `-v` it prints what `ibv_query_device_ex` adds (EX_QUERY_DEVICE: ODP, timestamp,
//! `device_cap_flags_ex`, RSS, tag matching; see [`extended`]) and each port's
//! `port_cap_flags2` (the ioctl QUERY_PORT), as `ibv_devinfo` does.
#![forbid(unsafe_code)]

#[path = "../common/mod.rs"]
mod common;
mod extended;

use common::{c_long, parse_args, OptSpec};
use rdmasock::verbs::{
    DeviceAttributes, DeviceInfo, GidType, PortAttributes, PortState, Transport,
};
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

const OPTIONS: &[OptSpec] = &[
    OptSpec {
        short: 'd',
        long: "ib-dev",
        takes_value: true,
    },
    OptSpec {
        short: 'i',
        long: "ib-port",
        takes_value: true,
    },
    OptSpec {
        short: 'l',
        long: "list",
        takes_value: false,
    },
    OptSpec {
        short: 'v',
        long: "verbose",
        takes_value: false,
    },
];

fn usage(argv0: &str) {
    println!("Usage: {argv0}             print the ca attributes");
    println!();
    println!("Options:");
    println!("  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)");
    println!("  -i, --ib-port=<port>   use port <port> of IB device (default all ports)");
    println!("  -l, --list             print only the IB devices names");
    println!("  -v, --verbose          print all the attributes of the IB device(s)");
}

/// C `return -1` from main.
fn exit_minus_one() -> ExitCode {
    ExitCode::from(255)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let argv0 = args.first().map(String::as_str).unwrap_or("devinfo");
    let parsed = match parse_args(&args[1..], OPTIONS) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{argv0}: {e}");
            usage(argv0);
            return exit_minus_one();
        }
    };
    let mut dev_name = None;
    let mut ib_port = 0u8;
    let mut verbose = false;
    for (opt, value) in parsed.opts {
        let value = value.unwrap_or_default();
        match opt {
            'd' => dev_name = Some(value),
            'i' => match u8::try_from(c_long(&value)) {
                Ok(p) if p > 0 => ib_port = p,
                _ => {
                    usage(argv0);
                    return ExitCode::from(1);
                }
            },
            'v' => verbose = true,
            // Like ibv_devinfo, -l prints the list as soon as it is seen and stops.
            'l' => return list(),
            _ => unreachable!("parse_args only returns known options"),
        }
    }

    let list = match rdmasock::listed_devices() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("No IB devices found: {e}");
            return exit_minus_one();
        }
    };
    let mut failed = false;
    match dev_name {
        Some(name) => match list.devices.iter().find(|d| d.name == name) {
            Some(d) => failed |= print_hca_cap(d, ib_port, verbose).is_err(),
            None => {
                eprintln!("IB device '{name}' wasn't found");
                return exit_minus_one();
            }
        },
        None => {
            for d in &list.devices {
                failed |= print_hca_cap(d, ib_port, verbose).is_err();
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn list() -> ExitCode {
    let devices = match rdmasock::listed_devices() {
        Ok(l) => l.devices,
        Err(rdmasock::verbs::Error::NoDevice) => Vec::new(),
        Err(e) => {
            eprintln!("Failed to get IB devices list: {e}");
            return exit_minus_one();
        }
    };
    let n = devices.len();
    println!("{n} HCA{} found:", if n != 1 { "s" } else { "" });
    for d in &devices {
        println!("\t{}", d.name);
    }
    println!();
    ExitCode::SUCCESS
}

/// Prints one device like `print_hca_cap`; errors are reported on stderr.
fn print_hca_cap(dev: &DeviceInfo, ib_port: u8, verbose: bool) -> Result<(), ()> {
    let ctx = rdmasock::open_device(Some(&dev.name)).map_err(|e| {
        eprintln!("Failed to open device: {e}");
    })?;
    let attr = ctx.query_device().map_err(|e| {
        eprintln!("Failed to query device props: {e}");
    })?;
    if ib_port > attr.phys_port_cnt {
        eprintln!("Invalid port requested for device");
        return Err(());
    }
    let mut out = String::new();
    device_section(&mut out, dev, &attr, verbose);
    if verbose {
        extended::print(&mut out, &attr.extended);
        if let Some(n) = ctx.ops().num_comp_vectors() {
            let _ = writeln!(out, "\tnum_comp_vectors:\t\t{}", n as i32);
        }
    }
    let mut result = Ok(());
    for port in 1..=attr.phys_port_cnt {
        if ib_port != 0 && port != ib_port {
            continue;
        }
        match ctx.query_port(port) {
            Ok(pa) => port_section(&mut out, dev, port, &pa, verbose),
            Err(e) => {
                eprintln!("Failed to query port {port} props: {e}");
                result = Err(());
                break;
            }
        }
    }
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(out.as_bytes());
    let _ = stdout.flush();
    result
}

fn device_section(out: &mut String, dev: &DeviceInfo, a: &DeviceAttributes, verbose: bool) {
    let (transport, code) = match dev.transport {
        Transport::InfiniBand => ("InfiniBand", 0),
        Transport::Iwarp => ("iWARP", 1),
        Transport::Usnic => ("usNIC", 2),
        Transport::Unknown => ("invalid transport", -1),
    };
    let guid = rdmasock::verbs::device::format_guid;
    let _ = writeln!(out, "hca_id:\t{}", dev.name);
    let _ = writeln!(out, "\ttransport:\t\t\t{transport} ({code})");
    if dev.uverbs_path.is_none() {
        // Not in rdma-core's output: a device of this process, with no kernel behind it.
        let _ = writeln!(out, "\tprovider:\t\t\tuserspace ({})", ctx_driver(dev));
    }
    if !a.fw_ver.is_empty() {
        let _ = writeln!(out, "\tfw_ver:\t\t\t\t{}", a.fw_ver);
    }
    let _ = writeln!(out, "\tnode_guid:\t\t\t{}", guid(a.node_guid));
    let _ = writeln!(out, "\tsys_image_guid:\t\t\t{}", guid(a.sys_image_guid));
    let _ = writeln!(out, "\tvendor_id:\t\t\t0x{:04x}", a.vendor_id);
    let _ = writeln!(out, "\tvendor_part_id:\t\t\t{}", a.vendor_part_id as i32);
    let _ = writeln!(out, "\thw_ver:\t\t\t\t0x{:X}", a.hw_ver);
    if let Some(board) = dev
        .sysfs
        .as_ref()
        .and_then(|d| std::fs::read_to_string(d.join("board_id")).ok())
        .map(|b| b.trim_end().to_string())
        .filter(|b| !b.is_empty())
    {
        let _ = writeln!(out, "\tboard_id:\t\t\t{board}");
    }
    let _ = writeln!(out, "\tphys_port_cnt:\t\t\t{}", a.phys_port_cnt);
    if !verbose {
        return;
    }
    let d = |v: u32| v as i32;
    let _ = writeln!(out, "\tmax_mr_size:\t\t\t0x{:x}", a.max_mr_size);
    let _ = writeln!(out, "\tpage_size_cap:\t\t\t0x{:x}", a.page_size_cap);
    let _ = writeln!(out, "\tmax_qp:\t\t\t\t{}", d(a.max_qp));
    let _ = writeln!(out, "\tmax_qp_wr:\t\t\t{}", d(a.max_qp_wr));
    let _ = writeln!(out, "\tdevice_cap_flags:\t\t0x{:08x}", a.device_cap_flags);
    device_cap_flags(out, a.device_cap_flags);
    let rows: [(&str, u32); 11] = [
        ("max_sge:\t\t\t", a.max_sge),
        ("max_sge_rd:\t\t\t", a.max_sge_rd),
        ("max_cq:\t\t\t\t", a.max_cq),
        ("max_cqe:\t\t\t", a.max_cqe),
        ("max_mr:\t\t\t\t", a.max_mr),
        ("max_pd:\t\t\t\t", a.max_pd),
        ("max_qp_rd_atom:\t\t\t", a.max_qp_rd_atom),
        ("max_ee_rd_atom:\t\t\t", a.max_ee_rd_atom),
        ("max_res_rd_atom:\t\t", a.max_res_rd_atom),
        ("max_qp_init_rd_atom:\t\t", a.max_qp_init_rd_atom),
        ("max_ee_init_rd_atom:\t\t", a.max_ee_init_rd_atom),
    ];
    for (label, v) in rows {
        let _ = writeln!(out, "\t{label}{}", d(v));
    }
    let atomic = match a.atomic_cap {
        0 => "ATOMIC_NONE",
        1 => "ATOMIC_HCA",
        2 => "ATOMIC_GLOB",
        _ => "invalid atomic capability",
    };
    let _ = writeln!(out, "\tatomic_cap:\t\t\t{atomic} ({})", a.atomic_cap);
    let rows: [(&str, u32); 10] = [
        ("max_ee:\t\t\t\t", a.max_ee),
        ("max_rdd:\t\t\t", a.max_rdd),
        ("max_mw:\t\t\t\t", a.max_mw),
        ("max_raw_ipv6_qp:\t\t", a.max_raw_ipv6_qp),
        ("max_raw_ethy_qp:\t\t", a.max_raw_ethy_qp),
        ("max_mcast_grp:\t\t\t", a.max_mcast_grp),
        ("max_mcast_qp_attach:\t\t", a.max_mcast_qp_attach),
        ("max_total_mcast_qp_attach:\t", a.max_total_mcast_qp_attach),
        ("max_ah:\t\t\t\t", a.max_ah),
        ("max_fmr:\t\t\t", a.max_fmr),
    ];
    for (label, v) in rows {
        let _ = writeln!(out, "\t{label}{}", d(v));
    }
    if a.max_fmr != 0 {
        let _ = writeln!(out, "\tmax_map_per_fmr:\t\t{}", d(a.max_map_per_fmr));
    }
    let _ = writeln!(out, "\tmax_srq:\t\t\t{}", d(a.max_srq));
    if a.max_srq != 0 {
        let _ = writeln!(out, "\tmax_srq_wr:\t\t\t{}", d(a.max_srq_wr));
        let _ = writeln!(out, "\tmax_srq_sge:\t\t\t{}", d(a.max_srq_sge));
    }
    let _ = writeln!(out, "\tmax_pkeys:\t\t\t{}", a.max_pkeys);
    let _ = writeln!(out, "\tlocal_ca_ack_delay:\t\t{}", a.local_ca_ack_delay);
}

/// `IBV_DEVICE_*` names in rdma-core's order.
const DEVICE_CAP_FLAGS: [(u32, &str); 24] = [
    (1, "RESIZE_MAX_WR"),
    (1 << 1, "BAD_PKEY_CNTR"),
    (1 << 2, "BAD_QKEY_CNTR"),
    (1 << 3, "RAW_MULTI"),
    (1 << 4, "AUTO_PATH_MIG"),
    (1 << 5, "CHANGE_PHY_PORT"),
    (1 << 6, "UD_AV_PORT_ENFORCE"),
    (1 << 7, "CURR_QP_STATE_MOD"),
    (1 << 8, "SHUTDOWN_PORT"),
    (1 << 9, "INIT_TYPE"),
    (1 << 10, "PORT_ACTIVE_EVENT"),
    (1 << 11, "SYS_IMAGE_GUID"),
    (1 << 12, "RC_RNR_NAK_GEN"),
    (1 << 13, "SRQ_RESIZE"),
    (1 << 14, "N_NOTIFY_CQ"),
    (1 << 17, "MEM_WINDOW"),
    (1 << 18, "UD_IP_CSUM"),
    (1 << 20, "XRC"),
    (1 << 21, "MEM_MGT_EXTENSIONS"),
    (1 << 23, "MEM_WINDOW_TYPE_2A"),
    (1 << 24, "MEM_WINDOW_TYPE_2B"),
    (1 << 25, "RC_IP_CSUM"),
    (1 << 26, "RAW_IP_CSUM"),
    (1 << 29, "MANAGED_FLOW_STEERING"),
];

fn device_cap_flags(out: &mut String, flags: u32) {
    let mut known = 0;
    for (bit, name) in DEVICE_CAP_FLAGS {
        known |= bit;
        if flags & bit != 0 {
            let _ = writeln!(out, "\t\t\t\t\t{name}");
        }
    }
    if flags & !known != 0 {
        let _ = writeln!(out, "\t\t\t\t\tUnknown flags: 0x{:X}", flags & !known);
    }
}

fn port_state_raw(s: PortState) -> u32 {
    match s {
        PortState::Nop => 0,
        PortState::Down => 1,
        PortState::Init => 2,
        PortState::Armed => 3,
        PortState::Active => 4,
        PortState::ActiveDefer => 5,
        PortState::Unknown(n) => n,
    }
}

fn port_state_str(s: PortState) -> &'static str {
    match s {
        PortState::Down => "PORT_DOWN",
        PortState::Init => "PORT_INIT",
        PortState::Armed => "PORT_ARMED",
        PortState::Active => "PORT_ACTIVE",
        _ => "invalid state",
    }
}

fn mtu_str(raw: u8) -> &'static str {
    match raw {
        1 => "256",
        2 => "512",
        3 => "1024",
        4 => "2048",
        5 => "4096",
        _ => "invalid MTU",
    }
}

fn width_str(w: u8) -> &'static str {
    match w {
        1 => "1",
        2 => "4",
        4 => "8",
        8 => "12",
        16 => "2",
        _ => "invalid width",
    }
}

fn speed_str(s: u8) -> &'static str {
    match s {
        1 => "2.5 Gbps",
        2 => "5.0 Gbps",
        4 | 8 => "10.0 Gbps",
        16 => "14.0 Gbps",
        32 => "25.0 Gbps",
        64 => "50.0 Gbps",
        128 => "100.0 Gbps",
        _ => "invalid speed",
    }
}

fn vl_str(v: u8) -> &'static str {
    match v {
        1 => "1",
        2 => "2",
        3 => "4",
        4 => "8",
        5 => "15",
        _ => "invalid value",
    }
}

fn phys_state_str(p: u8) -> &'static str {
    match p {
        1 => "SLEEP",
        2 => "POLLING",
        3 => "DISABLED",
        4 => "PORT_CONFIGURATION TRAINNING",
        5 => "LINK_UP",
        6 => "LINK_ERROR_RECOVERY",
        7 => "PHY TEST",
        _ => "invalid physical state",
    }
}

fn link_layer_str(l: u8) -> &'static str {
    match l {
        0 => "Unspecified",
        1 => "InfiniBand",
        2 => "Ethernet",
        _ => "Unknown",
    }
}

fn port_section(out: &mut String, dev: &DeviceInfo, port: u8, pa: &PortAttributes, verbose: bool) {
    let _ = writeln!(out, "\t\tport:\t{port}");
    let _ = writeln!(
        out,
        "\t\t\tstate:\t\t\t{} ({})",
        port_state_str(pa.state),
        port_state_raw(pa.state)
    );
    let _ = writeln!(
        out,
        "\t\t\tmax_mtu:\t\t{} ({})",
        mtu_str(pa.max_mtu_raw),
        pa.max_mtu_raw
    );
    let _ = writeln!(
        out,
        "\t\t\tactive_mtu:\t\t{} ({})",
        mtu_str(pa.active_mtu_raw),
        pa.active_mtu_raw
    );
    let _ = writeln!(out, "\t\t\tsm_lid:\t\t\t{}", pa.sm_lid);
    let _ = writeln!(out, "\t\t\tport_lid:\t\t{}", pa.lid);
    let _ = writeln!(out, "\t\t\tport_lmc:\t\t0x{:02x}", pa.lmc);
    let _ = writeln!(
        out,
        "\t\t\tlink_layer:\t\t{}",
        link_layer_str(pa.link_layer)
    );
    if verbose {
        let _ = writeln!(out, "\t\t\tmax_msg_sz:\t\t0x{:x}", pa.max_msg_sz);
        let _ = writeln!(out, "\t\t\tport_cap_flags:\t\t0x{:08x}", pa.port_cap_flags);
        let _ = writeln!(out, "\t\t\tport_cap_flags2:\t0x{:04x}", pa.port_cap_flags2);
        let _ = writeln!(
            out,
            "\t\t\tmax_vl_num:\t\t{} ({})",
            vl_str(pa.max_vl_num),
            pa.max_vl_num
        );
        let _ = writeln!(out, "\t\t\tbad_pkey_cntr:\t\t0x{:x}", pa.bad_pkey_cntr);
        let _ = writeln!(out, "\t\t\tqkey_viol_cntr:\t\t0x{:x}", pa.qkey_viol_cntr);
        let _ = writeln!(out, "\t\t\tsm_sl:\t\t\t{}", pa.sm_sl);
        let _ = writeln!(out, "\t\t\tpkey_tbl_len:\t\t{}", pa.pkey_tbl_len);
        let _ = writeln!(out, "\t\t\tgid_tbl_len:\t\t{}", pa.gid_tbl_len);
        let _ = writeln!(out, "\t\t\tsubnet_timeout:\t\t{}", pa.subnet_timeout);
        let _ = writeln!(out, "\t\t\tinit_type_reply:\t{}", pa.init_type_reply);
        let _ = writeln!(
            out,
            "\t\t\tactive_width:\t\t{}X ({})",
            width_str(pa.active_width),
            pa.active_width
        );
        let _ = writeln!(
            out,
            "\t\t\tactive_speed:\t\t{} ({})",
            speed_str(pa.active_speed),
            pa.active_speed
        );
        if dev.transport == Transport::InfiniBand {
            let _ = writeln!(
                out,
                "\t\t\tphys_state:\t\t{} ({})",
                phys_state_str(pa.phys_state),
                pa.phys_state
            );
        }
        port_gids(out, dev, port, pa);
    }
    let _ = writeln!(out);
}

/// The driver name of a userspace device.
fn ctx_driver(dev: &DeviceInfo) -> &str {
    dev.driver.as_deref().unwrap_or("unknown")
}

/// The GID table as sysfs shows it now. Like rdma-core, a GID whose interface id (last 8
/// bytes) is zero is not printed, nor one whose type the kernel does not report.
fn port_gids(out: &mut String, dev: &DeviceInfo, port: u8, pa: &PortAttributes) {
    if dev.sysfs.is_none() {
        // A userspace device has no GID table (it speaks TCP from this process).
        return;
    }
    let ethernet = pa.link_layer == 2;
    for index in 0..pa.gid_tbl_len {
        let entry = match dev.query_gid(port, index) {
            Ok(Some(e)) => e,
            Ok(None) => continue,
            Err(e) => {
                eprintln!("Failed to query gid to port {port}, index {index}: {e}");
                return;
            }
        };
        if entry.gid.interface_id() == 0 {
            continue;
        }
        let kind = match entry.gid_type {
            GidType::IbRoceV1 => "RoCE v1",
            GidType::RoceV2 => "RoCE v2",
        };
        let suffix = if ethernet {
            format!(", {kind}")
        } else {
            String::new()
        };
        let text = match entry.gid_type {
            GidType::IbRoceV1 => entry
                .gid
                .0
                .chunks(2)
                .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
                .collect::<Vec<_>>()
                .join(":"),
            GidType::RoceV2 => entry.gid.to_string(),
        };
        let _ = writeln!(out, "\t\t\tGID[{index:>3}]:\t\t{text}{suffix}");
    }
}
