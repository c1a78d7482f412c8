//! The block `ibv_devinfo -v` prints from `ibv_query_device_ex` (rdma-core v44's format),
//! between `local_ca_ack_delay` and `num_comp_vectors`.

use rdmasock::verbs::{
    CqModerationCaps, ExtendedDeviceAttributes, PacketPacingCaps, RssCaps, TagMatchingCaps, TsoCaps,
};
use std::fmt::Write as _;

/// `IBV_ODP_SUPPORT`, `IBV_ODP_SUPPORT_IMPLICIT`.
const ODP_GENERAL: [(u64, &str); 2] = [(1, "ODP_SUPPORT"), (1 << 1, "ODP_SUPPORT_IMPLICIT")];

/// `IBV_ODP_SUPPORT_{SEND,RECV,WRITE,READ,ATOMIC,SRQ_RECV}`.
const ODP_TRANSPORT: [(u64, &str); 6] = [
    (1, "SUPPORT_SEND"),
    (1 << 1, "SUPPORT_RECV"),
    (1 << 2, "SUPPORT_WRITE"),
    (1 << 3, "SUPPORT_READ"),
    (1 << 4, "SUPPORT_ATOMIC"),
    (1 << 5, "SUPPORT_SRQ"),
];

/// The named bits of the upper half of `device_cap_flags_ex`.
const DEVICE_FLAGS_EX: [(u64, &str); 2] = [
    (1 << 34, "RAW_SCATTER_FCS"),
    (1 << 36, "PCI_WRITE_END_PADDING"),
];

/// `IBV_RAW_PACKET_CAP_*`.
const RAW_PACKET: [(u32, &str); 4] = [
    (1, "C-VLAN stripping offload"),
    (1 << 1, "Scatter FCS offload"),
    (1 << 2, "IP csum offload"),
    (1 << 3, "Delay drop"),
];

/// `IBV_QPT_UD`, `IBV_QPT_RAW_PACKET`: the QP types of the `supported_qpts` masks.
const QPT_UD: u32 = 4;
const QPT_RAW_PACKET: u32 = 8;

/// The named bits of a `supported_qpts` mask, in rdma-core's order.
const SUPPORTED_QPTS: [(u64, &str); 2] = [
    (1 << QPT_RAW_PACKET, "SUPPORT_RAW_PACKET"),
    (1 << QPT_UD, "SUPPORT_UD"),
];

/// `IBV_TM_CAP_RC`.
const TM_CAP_RC: u32 = 1;

/// One capability line, indented as rdma-core indents them.
fn cap(out: &mut String, name: &str) {
    let _ = writeln!(out, "\t\t\t\t\t{name}");
}

/// Prints the whole block.
pub(crate) fn print(out: &mut String, e: &ExtendedDeviceAttributes) {
    odp(out, e);
    if e.completion_timestamp_mask != 0 {
        let _ = writeln!(
            out,
            "\tcompletion timestamp_mask:\t\t\t0x{:016x}",
            e.completion_timestamp_mask
        );
    } else {
        let _ = writeln!(out, "\tcompletion_timestamp_mask not supported");
    }
    if e.hca_core_clock != 0 {
        let _ = writeln!(out, "\thca_core_clock:\t\t\t{}kHZ", e.hca_core_clock);
    } else {
        let _ = writeln!(out, "\tcore clock not supported");
    }
    if e.raw_packet_caps != 0 {
        let _ = writeln!(out, "\traw packet caps:");
        for (bit, name) in RAW_PACKET {
            if e.raw_packet_caps & bit != 0 {
                cap(out, name);
            }
        }
    }
    let _ = writeln!(
        out,
        "\tdevice_cap_flags_ex:\t\t0x{:X}",
        e.device_cap_flags_ex
    );
    let upper = e.device_cap_flags_ex & 0xffff_ffff_0000_0000;
    named_bits(out, upper, &DEVICE_FLAGS_EX);
    tso(out, &e.tso_caps);
    rss(out, &e.rss_caps);
    let _ = writeln!(out, "\tmax_wq_type_rq:\t\t\t{}", e.max_wq_type_rq);
    packet_pacing(out, &e.packet_pacing_caps);
    tag_matching(out, &e.tm_caps);
    cq_moderation(out, &e.cq_mod_caps);
    if e.max_dm_size != 0 {
        let _ = writeln!(
            out,
            "\tmaximum available device memory:\t{}Bytes\n",
            e.max_dm_size
        );
    }
}

/// The names of the set bits of `flags` that `names` knows, then the rest as unknown.
fn named_bits(out: &mut String, flags: u64, names: &[(u64, &str)]) {
    let mut known = 0;
    for &(bit, name) in names {
        known |= bit;
        if flags & bit != 0 {
            cap(out, name);
        }
    }
    if flags & !known != 0 {
        cap(out, &format!("Unknown flags: 0x{:X}", flags & !known));
    }
}

fn odp(out: &mut String, e: &ExtendedDeviceAttributes) {
    let _ = writeln!(out, "\tgeneral_odp_caps:");
    named_bits(out, e.odp_caps.general_caps, &ODP_GENERAL);
    for (name, caps) in [
        ("rc", e.odp_caps.rc_odp_caps),
        ("uc", e.odp_caps.uc_odp_caps),
        ("ud", e.odp_caps.ud_odp_caps),
        ("xrc", e.xrc_odp_caps),
    ] {
        let _ = writeln!(out, "\t{name}_odp_caps:");
        if caps == 0 {
            cap(out, "NO SUPPORT");
        } else {
            named_bits(out, caps.into(), &ODP_TRANSPORT);
        }
    }
}

/// The `supported_qp:` list of a TSO, RSS or pacing mask.
fn supported_qpts(out: &mut String, qpts: u32) {
    let _ = writeln!(out, "\t\tsupported_qp:");
    named_bits(out, qpts.into(), &SUPPORTED_QPTS);
}

fn tso(out: &mut String, t: &TsoCaps) {
    let _ = writeln!(out, "\ttso_caps:");
    let _ = writeln!(out, "\t\tmax_tso:\t\t\t{}", t.max_tso as i32);
    if t.max_tso != 0 {
        supported_qpts(out, t.supported_qpts);
    }
}

fn packet_pacing(out: &mut String, p: &PacketPacingCaps) {
    let _ = writeln!(out, "\tpacket_pacing_caps:");
    let _ = writeln!(out, "\t\tqp_rate_limit_min:\t{}kbps", p.qp_rate_limit_min);
    let _ = writeln!(out, "\t\tqp_rate_limit_max:\t{}kbps", p.qp_rate_limit_max);
    if p.qp_rate_limit_max != 0 {
        supported_qpts(out, p.supported_qpts);
    }
}

fn rss(out: &mut String, r: &RssCaps) {
    let _ = writeln!(out, "\trss_caps:");
    let _ = writeln!(
        out,
        "\t\tmax_rwq_indirection_tables:\t\t\t{}",
        r.max_rwq_indirection_tables
    );
    let _ = writeln!(
        out,
        "\t\tmax_rwq_indirection_table_size:\t\t\t{}",
        r.max_rwq_indirection_table_size
    );
    let _ = writeln!(
        out,
        "\t\trx_hash_function:\t\t\t\t0x{:x}",
        r.rx_hash_function
    );
    let _ = writeln!(
        out,
        "\t\trx_hash_fields_mask:\t\t\t\t0x{:X}",
        r.rx_hash_fields_mask
    );
    if r.supported_qpts != 0 {
        supported_qpts(out, r.supported_qpts);
    }
}

fn tag_matching(out: &mut String, t: &TagMatchingCaps) {
    if t.max_num_tags == 0 {
        let _ = writeln!(out, "\ttag matching not supported");
        return;
    }
    let _ = writeln!(out, "\tmax_rndv_hdr_size:\t\t{}", t.max_rndv_hdr_size);
    let _ = writeln!(out, "\tmax_num_tags:\t\t\t{}", t.max_num_tags);
    let _ = writeln!(out, "\tmax_ops:\t\t\t{}", t.max_ops);
    let _ = writeln!(out, "\tmax_sge:\t\t\t{}", t.max_sge);
    let _ = writeln!(out, "\tflags:");
    if t.flags & TM_CAP_RC != 0 {
        cap(out, "IBV_TM_CAP_RC");
    }
}

fn cq_moderation(out: &mut String, c: &CqModerationCaps) {
    if c.max_cq_count == 0 || c.max_cq_period == 0 {
        return;
    }
    let _ = writeln!(out, "\n\tcq moderation caps:");
    let _ = writeln!(out, "\t\tmax_cq_count:\t{}", c.max_cq_count);
    let _ = writeln!(out, "\t\tmax_cq_period:\t{} us\n", c.max_cq_period);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device with no extended capabilities (rxe and siw on 6.1) prints what ibv_devinfo
    /// prints for it.
    #[test]
    fn nothing_extended() {
        let mut out = String::new();
        print(&mut out, &ExtendedDeviceAttributes::default());
        let want = "\tgeneral_odp_caps:\n\trc_odp_caps:\n\t\t\t\t\tNO SUPPORT\n\
            \tuc_odp_caps:\n\t\t\t\t\tNO SUPPORT\n\tud_odp_caps:\n\t\t\t\t\tNO SUPPORT\n\
            \txrc_odp_caps:\n\t\t\t\t\tNO SUPPORT\n\
            \tcompletion_timestamp_mask not supported\n\tcore clock not supported\n\
            \tdevice_cap_flags_ex:\t\t0x0\n\ttso_caps:\n\t\tmax_tso:\t\t\t0\n\
            \trss_caps:\n\t\tmax_rwq_indirection_tables:\t\t\t0\n\
            \t\tmax_rwq_indirection_table_size:\t\t\t0\n\
            \t\trx_hash_function:\t\t\t\t0x0\n\t\trx_hash_fields_mask:\t\t\t\t0x0\n\
            \tmax_wq_type_rq:\t\t\t0\n\tpacket_pacing_caps:\n\
            \t\tqp_rate_limit_min:\t0kbps\n\t\tqp_rate_limit_max:\t0kbps\n\
            \ttag matching not supported\n";
        assert_eq!(out, want);
    }

    #[test]
    fn named_and_unknown_bits() {
        let mut e = ExtendedDeviceAttributes::default();
        e.odp_caps.general_caps = 1 | 1 << 7;
        e.odp_caps.rc_odp_caps = 1 << 3 | 1 << 9;
        e.device_cap_flags_ex = 0x1_0000_0000 | 1 << 34 | 0x1234;
        e.raw_packet_caps = 1 << 2;
        e.rss_caps.supported_qpts = 1 << QPT_UD;
        e.tso_caps = TsoCaps {
            max_tso: 262_144,
            supported_qpts: 1 << QPT_RAW_PACKET,
        };
        e.packet_pacing_caps = PacketPacingCaps {
            qp_rate_limit_min: 1,
            qp_rate_limit_max: 100_000_000,
            supported_qpts: 1 << QPT_RAW_PACKET | 1 << 2,
        };
        e.cq_mod_caps = CqModerationCaps {
            max_cq_count: 65535,
            max_cq_period: 4095,
        };
        let mut out = String::new();
        print(&mut out, &e);
        for line in [
            "\tgeneral_odp_caps:\n\t\t\t\t\tODP_SUPPORT\n\t\t\t\t\tUnknown flags: 0x80\n",
            "\trc_odp_caps:\n\t\t\t\t\tSUPPORT_READ\n\t\t\t\t\tUnknown flags: 0x200\n",
            "\traw packet caps:\n\t\t\t\t\tIP csum offload\n",
            "\tdevice_cap_flags_ex:\t\t0x500001234\n\t\t\t\t\tRAW_SCATTER_FCS\n\
             \t\t\t\t\tUnknown flags: 0x100000000\n",
            "\t\tsupported_qp:\n\t\t\t\t\tSUPPORT_UD\n",
            "\ttso_caps:\n\t\tmax_tso:\t\t\t262144\n\t\tsupported_qp:\n\t\t\t\t\tSUPPORT_RAW_PACKET\n",
            "\t\tqp_rate_limit_max:\t100000000kbps\n\t\tsupported_qp:\n\
             \t\t\t\t\tSUPPORT_RAW_PACKET\n\t\t\t\t\tUnknown flags: 0x4\n",
            "\n\tcq moderation caps:\n\t\tmax_cq_count:\t65535\n\t\tmax_cq_period:\t4095 us\n\n",
        ] {
            assert!(out.contains(line), "{line:?} not in\n{out}");
        }
    }
}
