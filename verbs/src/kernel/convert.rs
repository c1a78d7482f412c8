//! Conversions between the verbs types and the kernel's structs: QP attributes both ways
//! (MODIFY_QP, QUERY_QP, rdma_cm's INIT_QP_ATTR), device and port attributes.
#![forbid(unsafe_code)]

use crate::attr::{
    CqModerationCaps, DeviceAttributes, OdpCaps, PortAttributes, RssCaps, TagMatchingCaps,
};
use crate::memory::AccessFlags;
use crate::qp_attr::{AddressVector, GlobalRoute, QpAttrMask, QpAttributes, QpCapabilities};
use crate::sys::abi::{QueryDeviceResponse, QueryPortResponse};
use crate::sys::abi_qp::{AhAttrDesc, ModifyQpRequest, QpAttrDesc, QpDest, QueryQpResponse};
use crate::sys::extended::{ExQueryDeviceResponse, QueryPortResponseEx};
use crate::types::{Gid, Mtu, PortState, Psn, QpNumber, QpState};
use std::mem::offset_of;

/// The attribute bits the legacy MODIFY_QP accepts (0..=20).
const LEGACY_MASK: u32 = 0x1f_ffff;

/// The MODIFY_QP request for `attr`/`mask` on QP `qp_handle`.
pub fn modify_request(qp_handle: u32, attr: &QpAttributes, mask: QpAttrMask) -> ModifyQpRequest {
    ModifyQpRequest {
        dest: dest_from_av(&attr.ah_attr),
        alt_dest: dest_from_av(&attr.alt_ah_attr),
        qp_handle,
        attr_mask: mask.bits() & LEGACY_MASK,
        qkey: attr.qkey,
        rq_psn: attr.rq_psn.masked().0,
        sq_psn: attr.sq_psn.masked().0,
        dest_qp_num: attr.dest_qp_num.masked().0,
        qp_access_flags: attr.qp_access_flags.bits(),
        pkey_index: attr.pkey_index,
        alt_pkey_index: attr.alt_pkey_index,
        qp_state: attr.qp_state as u8,
        cur_qp_state: attr.cur_qp_state as u8,
        path_mtu: attr.path_mtu as u8,
        path_mig_state: attr.path_mig_state,
        en_sqd_async_notify: attr.en_sqd_async_notify,
        max_rd_atomic: attr.max_rd_atomic,
        max_dest_rd_atomic: attr.max_dest_rd_atomic,
        min_rnr_timer: attr.min_rnr_timer,
        port_num: attr.port_num,
        timeout: attr.timeout,
        retry_cnt: attr.retry_cnt,
        rnr_retry: attr.rnr_retry,
        alt_port_num: attr.alt_port_num,
        alt_timeout: attr.alt_timeout,
        reserved: [0; 2],
    }
}

fn dest_from_av(av: &AddressVector) -> QpDest {
    let grh = av.grh.unwrap_or_default();
    QpDest {
        dgid: grh.dgid.0,
        flow_label: grh.flow_label,
        dlid: av.dlid,
        reserved: 0,
        sgid_index: grh.sgid_index,
        hop_limit: grh.hop_limit,
        traffic_class: grh.traffic_class,
        sl: av.sl,
        src_path_bits: av.src_path_bits,
        static_rate: av.static_rate,
        is_global: u8::from(av.grh.is_some()),
        port_num: av.port_num,
    }
}

fn av_from_dest(d: &QpDest) -> AddressVector {
    AddressVector {
        grh: (d.is_global != 0).then_some(GlobalRoute {
            dgid: Gid(d.dgid),
            flow_label: d.flow_label,
            sgid_index: d.sgid_index,
            hop_limit: d.hop_limit,
            traffic_class: d.traffic_class,
        }),
        dlid: d.dlid,
        sl: d.sl,
        src_path_bits: d.src_path_bits,
        static_rate: d.static_rate,
        port_num: d.port_num,
    }
}

fn av_from_ah(a: &AhAttrDesc) -> AddressVector {
    AddressVector {
        grh: (a.is_global != 0).then_some(GlobalRoute {
            dgid: Gid(a.grh.dgid),
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        }),
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        port_num: a.port_num,
    }
}

fn state(v: u32) -> QpState {
    QpState::from_raw(v).unwrap_or(QpState::Error)
}

fn mtu(v: u32) -> Mtu {
    Mtu::from_raw(v).unwrap_or(Mtu::Mtu1024)
}

/// The attributes QUERY_QP reported.
pub fn attributes_from_query(r: &QueryQpResponse) -> QpAttributes {
    QpAttributes {
        qp_state: state(r.qp_state.into()),
        cur_qp_state: state(r.cur_qp_state.into()),
        path_mtu: mtu(r.path_mtu.into()),
        path_mig_state: r.path_mig_state,
        qkey: r.qkey,
        rq_psn: Psn(r.rq_psn),
        sq_psn: Psn(r.sq_psn),
        dest_qp_num: QpNumber(r.dest_qp_num),
        qp_access_flags: AccessFlags::from_bits_retain(r.qp_access_flags),
        cap: QpCapabilities {
            max_send_wr: r.max_send_wr,
            max_recv_wr: r.max_recv_wr,
            max_send_sge: r.max_send_sge,
            max_recv_sge: r.max_recv_sge,
            max_inline_data: r.max_inline_data,
        },
        ah_attr: av_from_dest(&r.dest),
        alt_ah_attr: av_from_dest(&r.alt_dest),
        pkey_index: r.pkey_index,
        alt_pkey_index: r.alt_pkey_index,
        en_sqd_async_notify: 0,
        sq_draining: r.sq_draining,
        max_rd_atomic: r.max_rd_atomic,
        max_dest_rd_atomic: r.max_dest_rd_atomic,
        min_rnr_timer: r.min_rnr_timer,
        port_num: r.port_num,
        timeout: r.timeout,
        retry_cnt: r.retry_cnt,
        rnr_retry: r.rnr_retry,
        alt_port_num: r.alt_port_num,
        alt_timeout: r.alt_timeout,
    }
}

/// The attributes and mask of rdma_cm's INIT_QP_ATTR answer (`struct ib_uverbs_qp_attr`),
/// ready for [`crate::QueuePair::modify`]. The mask keeps only the bits the legacy
/// MODIFY_QP accepts (0..=20; old kernels set SMAC/VID bits on RoCE) and never `CAP`.
pub fn attributes_from_cm(d: &QpAttrDesc) -> (QpAttributes, QpAttrMask) {
    let attr = QpAttributes {
        qp_state: state(d.qp_state),
        cur_qp_state: state(d.cur_qp_state),
        path_mtu: mtu(d.path_mtu),
        path_mig_state: d.path_mig_state as u8,
        qkey: d.qkey,
        rq_psn: Psn(d.rq_psn),
        sq_psn: Psn(d.sq_psn),
        dest_qp_num: QpNumber(d.dest_qp_num),
        qp_access_flags: AccessFlags::from_bits_retain(d.qp_access_flags),
        cap: QpCapabilities {
            max_send_wr: d.max_send_wr,
            max_recv_wr: d.max_recv_wr,
            max_send_sge: d.max_send_sge,
            max_recv_sge: d.max_recv_sge,
            max_inline_data: d.max_inline_data,
        },
        ah_attr: av_from_ah(&d.ah_attr),
        alt_ah_attr: av_from_ah(&d.alt_ah_attr),
        pkey_index: d.pkey_index,
        alt_pkey_index: d.alt_pkey_index,
        en_sqd_async_notify: d.en_sqd_async_notify,
        sq_draining: d.sq_draining,
        max_rd_atomic: d.max_rd_atomic,
        max_dest_rd_atomic: d.max_dest_rd_atomic,
        min_rnr_timer: d.min_rnr_timer,
        port_num: d.port_num,
        timeout: d.timeout,
        retry_cnt: d.retry_cnt,
        rnr_retry: d.rnr_retry,
        alt_port_num: d.alt_port_num,
        alt_timeout: d.alt_timeout,
    };
    let mask = QpAttrMask::from_bits_truncate(d.qp_attr_mask & LEGACY_MASK) - QpAttrMask::CAP;
    (attr, mask)
}

/// QUERY_DEVICE's answer as [`DeviceAttributes`]; `fw_ver` is the sysfs text, or when that
/// is empty (rxe, siw) the raw value in rdma-core's rxe/siw form `major.minor.sub` (bits
/// 32..48, 16..32, 0..16), which `ibv_devinfo` prints as `0.0.0` for both.
pub(super) fn device_attributes(r: &QueryDeviceResponse, fw_ver: &str) -> DeviceAttributes {
    DeviceAttributes {
        fw_ver: if fw_ver.is_empty() {
            let raw = r.fw_ver;
            format!(
                "{}.{}.{}",
                (raw >> 32) & 0xffff,
                (raw >> 16) & 0xffff,
                raw & 0xffff
            )
        } else {
            fw_ver.to_string()
        },
        node_guid: u64::from_be(r.node_guid),
        sys_image_guid: u64::from_be(r.sys_image_guid),
        max_mr_size: r.max_mr_size,
        page_size_cap: r.page_size_cap,
        vendor_id: r.vendor_id,
        vendor_part_id: r.vendor_part_id,
        hw_ver: r.hw_ver,
        max_qp: r.max_qp,
        max_qp_wr: r.max_qp_wr,
        device_cap_flags: r.device_cap_flags,
        max_sge: r.max_sge,
        max_sge_rd: r.max_sge_rd,
        max_cq: r.max_cq,
        max_cqe: r.max_cqe,
        max_mr: r.max_mr,
        max_pd: r.max_pd,
        max_qp_rd_atom: r.max_qp_rd_atom,
        max_ee_rd_atom: r.max_ee_rd_atom,
        max_res_rd_atom: r.max_res_rd_atom,
        max_qp_init_rd_atom: r.max_qp_init_rd_atom,
        max_ee_init_rd_atom: r.max_ee_init_rd_atom,
        atomic_cap: r.atomic_cap,
        max_ee: r.max_ee,
        max_rdd: r.max_rdd,
        max_mw: r.max_mw,
        max_raw_ipv6_qp: r.max_raw_ipv6_qp,
        max_raw_ethy_qp: r.max_raw_ethy_qp,
        max_mcast_grp: r.max_mcast_grp,
        max_mcast_qp_attach: r.max_mcast_qp_attach,
        max_total_mcast_qp_attach: r.max_total_mcast_qp_attach,
        max_ah: r.max_ah,
        max_fmr: r.max_fmr,
        max_map_per_fmr: r.max_map_per_fmr,
        max_srq: r.max_srq,
        max_srq_wr: r.max_srq_wr,
        max_srq_sge: r.max_srq_sge,
        max_pkeys: r.max_pkeys,
        local_ca_ack_delay: r.local_ca_ack_delay,
        phys_port_cnt: r.phys_port_cnt,
        extended: Default::default(),
    }
}

/// EX_QUERY_DEVICE's answer: the legacy part as [`device_attributes`], then the fields the
/// kernel filled (`response_length`; the rest stay zero, as libibverbs leaves them).
pub(super) fn device_attributes_ex(r: &ExQueryDeviceResponse, fw_ver: &str) -> DeviceAttributes {
    let mut a = device_attributes(&r.base, fw_ver);
    let filled = r.response_length as usize;
    // A field counts once the kernel filled it whole, that is up to the next field's offset.
    let has = |end: usize| filled >= end;
    let e = &mut a.extended;
    if has(offset_of!(ExQueryDeviceResponse, timestamp_mask)) {
        e.odp_caps = OdpCaps {
            general_caps: r.odp_caps.general_caps,
            rc_odp_caps: r.odp_caps.rc_odp_caps,
            uc_odp_caps: r.odp_caps.uc_odp_caps,
            ud_odp_caps: r.odp_caps.ud_odp_caps,
        };
    }
    if has(offset_of!(ExQueryDeviceResponse, hca_core_clock)) {
        e.completion_timestamp_mask = r.timestamp_mask;
    }
    if has(offset_of!(ExQueryDeviceResponse, device_cap_flags_ex)) {
        e.hca_core_clock = r.hca_core_clock;
    }
    if has(offset_of!(ExQueryDeviceResponse, rss_caps)) {
        e.device_cap_flags_ex = r.device_cap_flags_ex;
    }
    if has(offset_of!(ExQueryDeviceResponse, max_wq_type_rq)) {
        e.rss_caps = RssCaps {
            supported_qpts: r.rss_caps.supported_qpts,
            max_rwq_indirection_tables: r.rss_caps.max_rwq_indirection_tables,
            max_rwq_indirection_table_size: r.rss_caps.max_rwq_indirection_table_size,
            ..Default::default()
        };
    }
    if has(offset_of!(ExQueryDeviceResponse, raw_packet_caps)) {
        e.max_wq_type_rq = r.max_wq_type_rq;
    }
    if has(offset_of!(ExQueryDeviceResponse, tm_caps)) {
        e.raw_packet_caps = r.raw_packet_caps;
    }
    if has(offset_of!(ExQueryDeviceResponse, cq_moderation_caps)) {
        e.tm_caps = TagMatchingCaps {
            max_rndv_hdr_size: r.tm_caps.max_rndv_hdr_size,
            max_num_tags: r.tm_caps.max_num_tags,
            flags: r.tm_caps.flags,
            max_ops: r.tm_caps.max_ops,
            max_sge: r.tm_caps.max_sge,
        };
    }
    if has(offset_of!(ExQueryDeviceResponse, max_dm_size)) {
        e.cq_mod_caps = CqModerationCaps {
            max_cq_count: r.cq_moderation_caps.max_cq_moderation_count,
            max_cq_period: r.cq_moderation_caps.max_cq_moderation_period,
        };
    }
    if has(offset_of!(ExQueryDeviceResponse, xrc_odp_caps)) {
        e.max_dm_size = r.max_dm_size;
    }
    if has(offset_of!(ExQueryDeviceResponse, reserved)) {
        e.xrc_odp_caps = r.xrc_odp_caps;
    }
    a
}

/// QUERY_PORT's answer as [`PortAttributes`].
pub(super) fn port_attributes(r: &QueryPortResponse) -> PortAttributes {
    PortAttributes {
        state: PortState::from_raw(r.state.into()),
        max_mtu_raw: r.max_mtu,
        active_mtu_raw: r.active_mtu,
        gid_tbl_len: r.gid_tbl_len,
        port_cap_flags: r.port_cap_flags,
        max_msg_sz: r.max_msg_sz,
        bad_pkey_cntr: r.bad_pkey_cntr,
        qkey_viol_cntr: r.qkey_viol_cntr,
        pkey_tbl_len: r.pkey_tbl_len,
        lid: r.lid,
        sm_lid: r.sm_lid,
        lmc: r.lmc,
        max_vl_num: r.max_vl_num,
        sm_sl: r.sm_sl,
        subnet_timeout: r.subnet_timeout,
        init_type_reply: r.init_type_reply,
        active_width: r.active_width,
        active_speed: r.active_speed,
        phys_state: r.phys_state,
        link_layer: r.link_layer,
        flags: r.flags,
        port_cap_flags2: 0,
        active_speed_ex: 0,
    }
}

/// The ioctl QUERY_PORT's answer: the legacy part, `port_cap_flags2` and `active_speed_ex`.
pub(super) fn port_attributes_ex(r: &QueryPortResponseEx) -> PortAttributes {
    PortAttributes {
        port_cap_flags2: r.port_cap_flags2,
        active_speed_ex: r.active_speed_ex,
        ..port_attributes(&r.legacy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only what the kernel says it filled is taken: a 5.x kernel that stops after
    /// `device_cap_flags_ex` leaves RSS and the rest zero.
    #[test]
    fn extended_attributes_stop_at_the_response_length() {
        let mut r = ExQueryDeviceResponse::default();
        r.base.device_cap_flags = 0x2000;
        r.odp_caps.general_caps = 1;
        r.hca_core_clock = 156_250;
        r.device_cap_flags_ex = 0x4_0000_2000;
        r.rss_caps.supported_qpts = 1 << 8;
        r.xrc_odp_caps = 3;
        r.response_length = std::mem::offset_of!(ExQueryDeviceResponse, rss_caps) as u32;
        let a = device_attributes_ex(&r, "1.2.3");
        assert_eq!(a.fw_ver, "1.2.3");
        assert_eq!(a.device_cap_flags, 0x2000);
        assert_eq!(a.extended.odp_caps.general_caps, 1);
        assert_eq!(a.extended.hca_core_clock, 156_250);
        assert_eq!(a.extended.device_cap_flags_ex, 0x4_0000_2000);
        assert_eq!(a.extended.rss_caps, RssCaps::default());
        assert_eq!(a.extended.xrc_odp_caps, 0);
        r.response_length = size_of::<ExQueryDeviceResponse>() as u32;
        let a = device_attributes_ex(&r, "");
        assert_eq!(a.extended.rss_caps.supported_qpts, 1 << 8);
        assert_eq!(a.extended.xrc_odp_caps, 3);
        // Before the ODP caps end, nothing extended is taken.
        r.response_length = 184;
        assert_eq!(device_attributes_ex(&r, "").extended, Default::default());
    }
    use crate::qp_attr::{RtrAttributes, RtsAttributes};

    fn rtr() -> RtrAttributes {
        RtrAttributes {
            path_mtu: Mtu::Mtu1024,
            dest_qp_num: QpNumber(0x12),
            rq_psn: Psn(0x0100_0abc),
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
            ah_attr: AddressVector {
                grh: Some(GlobalRoute {
                    dgid: Gid([0xfe; 16]),
                    flow_label: 7,
                    sgid_index: 1,
                    hop_limit: 64,
                    traffic_class: 3,
                }),
                port_num: 1,
                ..Default::default()
            },
        }
    }

    #[test]
    fn modify_request_packs_fields() {
        let (a, m) = rtr().to_modify();
        let r = modify_request(9, &a, m);
        assert_eq!(r.qp_handle, 9);
        assert_eq!(r.attr_mask, m.bits());
        assert_eq!(r.qp_state, 2);
        assert_eq!(r.path_mtu, 3);
        assert_eq!(r.dest_qp_num, 0x12);
        assert_eq!(r.rq_psn, 0xabc, "PSNs are masked to 24 bits");
        assert_eq!(r.max_dest_rd_atomic, 4);
        assert_eq!(r.min_rnr_timer, 12);
        assert_eq!(r.dest.dgid, [0xfe; 16]);
        assert_eq!(
            (
                r.dest.is_global,
                r.dest.sgid_index,
                r.dest.hop_limit,
                r.dest.port_num
            ),
            (1, 1, 64, 1)
        );
        assert_eq!((r.dest.flow_label, r.dest.traffic_class), (7, 3));
        let (a, m) = RtsAttributes::default().to_modify();
        let r = modify_request(9, &a, m);
        assert_eq!(
            (r.timeout, r.retry_cnt, r.rnr_retry, r.max_rd_atomic),
            (14, 7, 7, 1)
        );
        assert_eq!(r.dest.is_global, 0);
    }

    #[test]
    fn cm_attributes_round_trip_through_modify() {
        let (a, m) = rtr().to_modify();
        let r = modify_request(1, &a, m);
        let mut d = QpAttrDesc {
            qp_attr_mask: m.bits() | (1 << 21) | QpAttrMask::CAP.bits(),
            qp_state: 2,
            path_mtu: 3,
            rq_psn: 0xabc,
            dest_qp_num: 0x12,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
            ..Default::default()
        };
        d.ah_attr.grh.dgid = [0xfe; 16];
        d.ah_attr.grh.flow_label = 7;
        d.ah_attr.grh.sgid_index = 1;
        d.ah_attr.grh.hop_limit = 64;
        d.ah_attr.grh.traffic_class = 3;
        d.ah_attr.is_global = 1;
        d.ah_attr.port_num = 1;
        let (a2, m2) = attributes_from_cm(&d);
        assert_eq!(m2, m, "bits above 20 and CAP are dropped");
        assert_eq!(modify_request(1, &a2, m2), r);
    }

    #[test]
    fn query_response_decodes() {
        let r = QueryQpResponse {
            qp_state: 3,
            path_mtu: 5,
            dest_qp_num: 0x33,
            sq_psn: 77,
            max_send_wr: 127,
            timeout: 14,
            dest: QpDest {
                is_global: 1,
                sgid_index: 1,
                dgid: [1; 16],
                port_num: 1,
                ..Default::default()
            },
            ..Default::default()
        };
        let a = attributes_from_query(&r);
        assert_eq!(a.qp_state, QpState::ReadyToSend);
        assert_eq!(a.path_mtu, Mtu::Mtu4096);
        assert_eq!(a.dest_qp_num, QpNumber(0x33));
        assert_eq!(a.sq_psn, Psn(77));
        assert_eq!(a.cap.max_send_wr, 127);
        assert_eq!(a.timeout, 14);
        assert_eq!(a.ah_attr.grh.unwrap().dgid, Gid([1; 16]));
    }

    #[test]
    fn device_guid_is_big_endian() {
        let r = QueryDeviceResponse {
            node_guid: u64::from_be_bytes([0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x56]).to_be(),
            phys_port_cnt: 1,
            ..Default::default()
        };
        let d = device_attributes(&r, "");
        assert_eq!(d.node_guid, 0x5054_00ff_fe12_3456);
        assert_eq!(d.phys_port_cnt, 1);
        assert_eq!(d.fw_ver, "0.0.0");
        let r = QueryDeviceResponse {
            fw_ver: (2 << 32) | (7 << 16) | 9,
            ..Default::default()
        };
        assert_eq!(device_attributes(&r, "").fw_ver, "2.7.9");
        assert_eq!(device_attributes(&r, "16.35.2000").fw_ver, "16.35.2000");
    }
}
