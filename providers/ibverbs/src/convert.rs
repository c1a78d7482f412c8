//! Between the verbs layer's types and libibverbs' structs. Numbers are the kernel's in both except
//! the work completion flags (docs/kernel-abi.md#work-completion-flags) and the byte order of
//! immediate data (network order in libibverbs' structs, host order in ours).
#![forbid(unsafe_code)]

use crate::sys::abi::{
    IbvAhAttr, IbvDeviceAttr, IbvDeviceAttrEx, IbvGid, IbvGlobalRoute, IbvPortAttr, IbvQpAttr,
    IbvQpCap, IbvSendWr, IbvWc, IbvWr,
};
use rdmasock_verbs::qp_attr::{AddressVector, GlobalRoute};
use rdmasock_verbs::{
    AccessFlags, CqModerationCaps, DeviceAttributes, ExtendedDeviceAttributes, Gid, Mtu, OdpCaps,
    PacketPacingCaps, PortAttributes, PortState, Psn, QpAttributes, QpCapabilities, QpNumber,
    QpState, RssCaps, SendOp, SendRequest, TagMatchingCaps, TsoCaps, WcFlags, WorkCompletion,
};

/// libibverbs' `IBV_WC_IP_CSUM_OK` (the kernel's bit 3).
const IBV_WC_IP_CSUM_OK: u32 = 1 << 2;
/// libibverbs' `IBV_WC_WITH_INV` (the kernel's bit 2).
const IBV_WC_WITH_INV: u32 = 1 << 3;

/// How a libibverbs provider fills `ibv_wc.wc_flags`. The two encodings differ in bits 2
/// and 3: libibverbs' `enum ibv_wc_flags` has `IP_CSUM_OK` = 1 << 2 and `WITH_INV` = 1 << 3,
/// the kernel's `enum ib_wc_flags` the other way round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcFlagsEncoding {
    /// libibverbs' own encoding: providers that build each `ibv_wc` themselves (siw, mlx5,
    /// irdma, ...).
    Libibverbs,
    /// The kernel's encoding: rdma-core's rxe copies the completion the kernel wrote into
    /// the shared ring verbatim (the kernel's rxe sets `IB_WC_WITH_INVALIDATE` = 1 << 2).
    Kernel,
}

impl WcFlagsEncoding {
    /// The encoding the rdma-core provider for kernel driver `driver` uses.
    pub fn for_driver(driver: Option<&str>) -> WcFlagsEncoding {
        match driver {
            Some("rxe") => WcFlagsEncoding::Kernel,
            _ => WcFlagsEncoding::Libibverbs,
        }
    }
}

/// A provider's `wc_flags` in the kernel's encoding ([`WcFlags`]). In libibverbs' encoding
/// bits 2 and 3 trade places; GRH and WITH_IMM are the same everywhere; libibverbs-only
/// bits (tag matching) are dropped.
pub fn wc_flags_from_ibv(flags: u32, encoding: WcFlagsEncoding) -> WcFlags {
    if encoding == WcFlagsEncoding::Kernel {
        return WcFlags::from_bits_truncate(flags);
    }
    let mut out = WcFlags::from_bits_truncate(flags & 0b11);
    if flags & IBV_WC_IP_CSUM_OK != 0 {
        out |= WcFlags::IP_CSUM_OK;
    }
    if flags & IBV_WC_WITH_INV != 0 {
        out |= WcFlags::WITH_INVALIDATE;
    }
    out
}

/// One completion as the verbs layer reports it.
pub(crate) fn work_completion(wc: &IbvWc, encoding: WcFlagsEncoding) -> WorkCompletion {
    let flags = wc_flags_from_ibv(wc.wc_flags, encoding);
    WorkCompletion {
        wr_id: wc.wr_id,
        status: wc.status as u32,
        opcode: wc.opcode as u32,
        vendor_err: wc.vendor_err,
        byte_len: wc.byte_len,
        imm_data: if flags.contains(WcFlags::WITH_IMM) {
            u32::from_be(wc.imm_data)
        } else {
            wc.imm_data
        },
        qp_num: QpNumber(wc.qp_num),
        src_qp: QpNumber(wc.src_qp),
        wc_flags: flags.bits(),
        pkey_index: wc.pkey_index,
        slid: wc.slid,
        sl: wc.sl,
        dlid_path_bits: wc.dlid_path_bits,
    }
}

/// A send request without its scatter/gather list (the sys layer links it).
pub(crate) fn send_wr(wr: &SendRequest<'_>) -> IbvSendWr {
    let mut out = IbvSendWr {
        wr_id: wr.wr_id,
        num_sge: wr.sg_list.len() as i32,
        opcode: wr.op.opcode() as i32,
        send_flags: wr.flags.bits(),
        imm_data: wr.op.imm().map_or(0, u32::to_be),
        ..IbvSendWr::default()
    };
    out.wr = match wr.op {
        SendOp::AtomicCompareSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        } => IbvWr::atomic(remote_addr, compare, swap, rkey.0),
        SendOp::AtomicFetchAdd {
            remote_addr,
            rkey,
            add,
        } => IbvWr::atomic(remote_addr, add, 0, rkey.0),
        op => op
            .remote()
            .map_or(IbvWr::default(), |(addr, rkey)| IbvWr::rdma(addr, rkey.0)),
    };
    out
}

fn c_string(bytes: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = bytes
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn count(v: i32) -> u32 {
    v.max(0) as u32
}

/// `ibv_query_device`'s answer.
pub(crate) fn device_attributes(a: &IbvDeviceAttr) -> DeviceAttributes {
    DeviceAttributes {
        fw_ver: c_string(&a.fw_ver),
        node_guid: u64::from_be(a.node_guid),
        sys_image_guid: u64::from_be(a.sys_image_guid),
        max_mr_size: a.max_mr_size,
        page_size_cap: a.page_size_cap,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: a.hw_ver,
        max_qp: count(a.max_qp),
        max_qp_wr: count(a.max_qp_wr),
        device_cap_flags: a.device_cap_flags,
        max_sge: count(a.max_sge),
        max_sge_rd: count(a.max_sge_rd),
        max_cq: count(a.max_cq),
        max_cqe: count(a.max_cqe),
        max_mr: count(a.max_mr),
        max_pd: count(a.max_pd),
        max_qp_rd_atom: count(a.max_qp_rd_atom),
        max_ee_rd_atom: count(a.max_ee_rd_atom),
        max_res_rd_atom: count(a.max_res_rd_atom),
        max_qp_init_rd_atom: count(a.max_qp_init_rd_atom),
        max_ee_init_rd_atom: count(a.max_ee_init_rd_atom),
        atomic_cap: count(a.atomic_cap),
        max_ee: count(a.max_ee),
        max_rdd: count(a.max_rdd),
        max_mw: count(a.max_mw),
        max_raw_ipv6_qp: count(a.max_raw_ipv6_qp),
        max_raw_ethy_qp: count(a.max_raw_ethy_qp),
        max_mcast_grp: count(a.max_mcast_grp),
        max_mcast_qp_attach: count(a.max_mcast_qp_attach),
        max_total_mcast_qp_attach: count(a.max_total_mcast_qp_attach),
        max_ah: count(a.max_ah),
        max_fmr: count(a.max_fmr),
        max_map_per_fmr: count(a.max_map_per_fmr),
        max_srq: count(a.max_srq),
        max_srq_wr: count(a.max_srq_wr),
        max_srq_sge: count(a.max_srq_sge),
        max_pkeys: a.max_pkeys,
        local_ca_ack_delay: a.local_ca_ack_delay,
        phys_port_cnt: a.phys_port_cnt,
        extended: Default::default(),
    }
}

/// `ibv_query_device_ex`'s answer.
pub(crate) fn device_attributes_ex(a: &IbvDeviceAttrEx) -> DeviceAttributes {
    DeviceAttributes {
        extended: ExtendedDeviceAttributes {
            odp_caps: OdpCaps {
                general_caps: a.odp_caps.general_caps,
                rc_odp_caps: a.odp_caps.rc_odp_caps,
                uc_odp_caps: a.odp_caps.uc_odp_caps,
                ud_odp_caps: a.odp_caps.ud_odp_caps,
            },
            completion_timestamp_mask: a.completion_timestamp_mask,
            hca_core_clock: a.hca_core_clock,
            device_cap_flags_ex: a.device_cap_flags_ex,
            tso_caps: TsoCaps {
                max_tso: a.tso_caps.max_tso,
                supported_qpts: a.tso_caps.supported_qpts,
            },
            rss_caps: RssCaps {
                supported_qpts: a.rss_caps.supported_qpts,
                max_rwq_indirection_tables: a.rss_caps.max_rwq_indirection_tables,
                max_rwq_indirection_table_size: a.rss_caps.max_rwq_indirection_table_size,
                rx_hash_function: a.rss_caps.rx_hash_function.into(),
                rx_hash_fields_mask: a.rss_caps.rx_hash_fields_mask,
            },
            max_wq_type_rq: a.max_wq_type_rq,
            packet_pacing_caps: PacketPacingCaps {
                qp_rate_limit_min: a.packet_pacing_caps.qp_rate_limit_min,
                qp_rate_limit_max: a.packet_pacing_caps.qp_rate_limit_max,
                supported_qpts: a.packet_pacing_caps.supported_qpts,
            },
            raw_packet_caps: a.raw_packet_caps,
            tm_caps: TagMatchingCaps {
                max_rndv_hdr_size: a.tm_caps.max_rndv_hdr_size,
                max_num_tags: a.tm_caps.max_num_tags,
                flags: a.tm_caps.flags,
                max_ops: a.tm_caps.max_ops,
                max_sge: a.tm_caps.max_sge,
            },
            cq_mod_caps: CqModerationCaps {
                max_cq_count: a.cq_mod_caps.max_cq_count,
                max_cq_period: a.cq_mod_caps.max_cq_period,
            },
            max_dm_size: a.max_dm_size,
            xrc_odp_caps: a.xrc_odp_caps,
        },
        ..device_attributes(&a.orig_attr)
    }
}

/// `ibv_query_port`'s answer.
pub(crate) fn port_attributes(a: &IbvPortAttr) -> PortAttributes {
    PortAttributes {
        state: PortState::from_raw(count(a.state)),
        max_mtu_raw: a.max_mtu as u8,
        active_mtu_raw: a.active_mtu as u8,
        gid_tbl_len: count(a.gid_tbl_len),
        port_cap_flags: a.port_cap_flags,
        max_msg_sz: a.max_msg_sz,
        bad_pkey_cntr: a.bad_pkey_cntr,
        qkey_viol_cntr: a.qkey_viol_cntr,
        pkey_tbl_len: a.pkey_tbl_len,
        lid: a.lid,
        sm_lid: a.sm_lid,
        lmc: a.lmc,
        max_vl_num: a.max_vl_num,
        sm_sl: a.sm_sl,
        subnet_timeout: a.subnet_timeout,
        init_type_reply: a.init_type_reply,
        active_width: a.active_width,
        active_speed: a.active_speed,
        phys_state: a.phys_state,
        link_layer: a.link_layer,
        flags: a.flags,
        port_cap_flags2: a.port_cap_flags2,
        active_speed_ex: 0,
    }
}

/// The capabilities in libibverbs' struct.
pub(crate) fn ibv_cap(c: &QpCapabilities) -> IbvQpCap {
    IbvQpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// libibverbs' capabilities in ours.
pub(crate) fn capabilities(c: &IbvQpCap) -> QpCapabilities {
    QpCapabilities {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

fn ibv_ah(av: &AddressVector) -> IbvAhAttr {
    let grh = av.grh.unwrap_or_default();
    IbvAhAttr {
        grh: IbvGlobalRoute {
            dgid: IbvGid { raw: grh.dgid.0 },
            flow_label: grh.flow_label,
            sgid_index: grh.sgid_index,
            hop_limit: grh.hop_limit,
            traffic_class: grh.traffic_class,
        },
        dlid: av.dlid,
        sl: av.sl,
        src_path_bits: av.src_path_bits,
        static_rate: av.static_rate,
        is_global: u8::from(av.grh.is_some()),
        port_num: av.port_num,
    }
}

fn address_vector(a: &IbvAhAttr) -> AddressVector {
    AddressVector {
        grh: (a.is_global != 0).then_some(GlobalRoute {
            dgid: Gid(a.grh.dgid.raw),
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

/// Our attributes in libibverbs' `struct ibv_qp_attr` (the mask travels unchanged: the
/// `IBV_QP_*` bits are the kernel's).
pub(crate) fn ibv_qp_attr(a: &QpAttributes) -> IbvQpAttr {
    IbvQpAttr {
        qp_state: a.qp_state as i32,
        cur_qp_state: a.cur_qp_state as i32,
        path_mtu: a.path_mtu as i32,
        path_mig_state: i32::from(a.path_mig_state),
        qkey: a.qkey,
        rq_psn: a.rq_psn.0,
        sq_psn: a.sq_psn.0,
        dest_qp_num: a.dest_qp_num.0,
        qp_access_flags: a.qp_access_flags.bits(),
        cap: ibv_cap(&a.cap),
        ah_attr: ibv_ah(&a.ah_attr),
        alt_ah_attr: ibv_ah(&a.alt_ah_attr),
        pkey_index: a.pkey_index,
        alt_pkey_index: a.alt_pkey_index,
        en_sqd_async_notify: a.en_sqd_async_notify,
        sq_draining: a.sq_draining,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: a.alt_port_num,
        alt_timeout: a.alt_timeout,
        rate_limit: 0,
    }
}

/// libibverbs' `struct ibv_qp_attr` in ours; `cap` comes from the query's init attributes.
pub(crate) fn qp_attributes(a: &IbvQpAttr, cap: &IbvQpCap) -> QpAttributes {
    let state = |v: i32| QpState::from_raw(count(v)).unwrap_or(QpState::Error);
    QpAttributes {
        qp_state: state(a.qp_state),
        cur_qp_state: state(a.cur_qp_state),
        path_mtu: Mtu::from_raw(count(a.path_mtu)).unwrap_or(Mtu::Mtu1024),
        path_mig_state: a.path_mig_state as u8,
        qkey: a.qkey,
        rq_psn: Psn(a.rq_psn),
        sq_psn: Psn(a.sq_psn),
        dest_qp_num: QpNumber(a.dest_qp_num),
        qp_access_flags: AccessFlags::from_bits_retain(a.qp_access_flags),
        cap: capabilities(cap),
        ah_attr: address_vector(&a.ah_attr),
        alt_ah_attr: address_vector(&a.alt_ah_attr),
        pkey_index: a.pkey_index,
        alt_pkey_index: a.alt_pkey_index,
        en_sqd_async_notify: a.en_sqd_async_notify,
        sq_draining: a.sq_draining,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: a.alt_port_num,
        alt_timeout: a.alt_timeout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmasock_verbs::{RemoteKey, SendFlags};

    #[test]
    fn wc_flags_swap_bits_two_and_three_in_libibverbs_encoding() {
        let lib = WcFlagsEncoding::Libibverbs;
        assert_eq!(wc_flags_from_ibv(0, lib), WcFlags::empty());
        assert_eq!(
            wc_flags_from_ibv(0b11, lib),
            WcFlags::GRH | WcFlags::WITH_IMM
        );
        assert_eq!(wc_flags_from_ibv(1 << 2, lib), WcFlags::IP_CSUM_OK);
        assert_eq!(wc_flags_from_ibv(1 << 3, lib), WcFlags::WITH_INVALIDATE);
        // Tag-matching bits have no kernel meaning.
        assert_eq!(wc_flags_from_ibv(0b111_0000, lib), WcFlags::empty());
    }

    #[test]
    fn rdma_core_rxe_passes_the_kernel_encoding_through() {
        assert_eq!(
            WcFlagsEncoding::for_driver(Some("rxe")),
            WcFlagsEncoding::Kernel
        );
        for other in [Some("siw"), Some("mlx5"), None] {
            assert_eq!(
                WcFlagsEncoding::for_driver(other),
                WcFlagsEncoding::Libibverbs
            );
        }
        let kernel = WcFlagsEncoding::Kernel;
        // The kernel's rxe: GRH | WITH_INVALIDATE (bit 2) on a SEND_WITH_INV receive.
        assert_eq!(
            wc_flags_from_ibv(0b101, kernel),
            WcFlags::GRH | WcFlags::WITH_INVALIDATE
        );
        assert_eq!(wc_flags_from_ibv(1 << 3, kernel), WcFlags::IP_CSUM_OK);
        assert_eq!(
            wc_flags_from_ibv(0b11, kernel),
            WcFlags::GRH | WcFlags::WITH_IMM
        );
    }

    #[test]
    fn immediate_data_is_host_order_in_completions() {
        let wc = IbvWc {
            wr_id: 9,
            opcode: 129,
            imm_data: 0x1234_5678u32.to_be(),
            wc_flags: 1 << 1,
            qp_num: 17,
            byte_len: 5,
            ..Default::default()
        };
        let w = work_completion(&wc, WcFlagsEncoding::Libibverbs);
        assert_eq!(w.imm(), Some(0x1234_5678));
        assert_eq!(w.qp_num, QpNumber(17));
        assert_eq!((w.wr_id, w.opcode, w.byte_len), (9, 129, 5));
    }

    #[test]
    fn send_requests_fill_the_right_union_member() {
        let sg = [];
        let wr = SendRequest::new(
            3,
            SendOp::RdmaWriteWithImm {
                remote_addr: 0x1000,
                rkey: RemoteKey(0x42),
                imm: 0xaabbccdd,
            },
            &sg,
        )
        .with_flags(SendFlags::SIGNALED | SendFlags::INLINE);
        let w = send_wr(&wr);
        assert_eq!((w.wr_id, w.opcode, w.send_flags), (3, 1, 0b1010));
        assert_eq!(w.imm_data, 0xaabbccddu32.to_be());
        let bytes = wr_bytes(&w);
        assert_eq!(&bytes[40..48], &0x1000u64.to_ne_bytes());
        assert_eq!(&bytes[48..52], &0x42u32.to_ne_bytes());

        let wr = SendRequest::new(
            4,
            SendOp::AtomicCompareSwap {
                remote_addr: 0x2000,
                rkey: RemoteKey(7),
                compare: 5,
                swap: 6,
            },
            &sg,
        );
        let bytes = wr_bytes(&send_wr(&wr));
        assert_eq!(&bytes[40..48], &0x2000u64.to_ne_bytes());
        assert_eq!(&bytes[48..56], &5u64.to_ne_bytes());
        assert_eq!(&bytes[56..64], &6u64.to_ne_bytes());
        assert_eq!(&bytes[64..68], &7u32.to_ne_bytes());
    }

    /// The request's bytes 0..68 as C sees them.
    fn wr_bytes(w: &IbvSendWr) -> Vec<u8> {
        let mut b = vec![0u8; 68];
        b[0..8].copy_from_slice(&w.wr_id.to_ne_bytes());
        b[36..40].copy_from_slice(&w.imm_data.to_ne_bytes());
        b[40..48].copy_from_slice(&w.wr.remote_addr.to_ne_bytes());
        b[48..56].copy_from_slice(&w.wr.compare_add.to_ne_bytes());
        b[56..64].copy_from_slice(&w.wr.swap.to_ne_bytes());
        b[64..68].copy_from_slice(&w.wr.rkey.to_ne_bytes());
        b
    }

    #[test]
    fn qp_attributes_round_trip() {
        let a = QpAttributes {
            qp_state: QpState::ReadyToReceive,
            path_mtu: Mtu::Mtu4096,
            dest_qp_num: QpNumber(0x11),
            rq_psn: Psn(0x22),
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
            ah_attr: AddressVector {
                grh: Some(GlobalRoute {
                    dgid: Gid([0xfe; 16]),
                    flow_label: 0,
                    sgid_index: 1,
                    hop_limit: 1,
                    traffic_class: 0,
                }),
                port_num: 1,
                ..Default::default()
            },
            ..Default::default()
        };
        let i = ibv_qp_attr(&a);
        assert_eq!((i.qp_state, i.path_mtu, i.ah_attr.is_global), (2, 5, 1));
        assert_eq!(qp_attributes(&i, &ibv_cap(&a.cap)), a);
    }
}
