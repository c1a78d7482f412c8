//! Device and port attributes, as QUERY_DEVICE and QUERY_PORT report them.
#![forbid(unsafe_code)]

use crate::types::{Mtu, PortState};

/// What a device can do (`struct ibv_device_attr`). Field names follow rdma-core's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct DeviceAttributes {
    /// Firmware version text: sysfs `fw_ver`, or the raw value as `major.minor.sub`
    /// (rxe/siw: `0.0.0`, as rdma-core's providers print it).
    pub fw_ver: String,
    /// Node GUID, as the big-endian value (print with `{:016x}` grouped by 4).
    pub node_guid: u64,
    /// System image GUID, big-endian value.
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub device_cap_flags: u32,
    pub max_sge: u32,
    pub max_sge_rd: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_qp_rd_atom: u32,
    pub max_ee_rd_atom: u32,
    pub max_res_rd_atom: u32,
    pub max_qp_init_rd_atom: u32,
    pub max_ee_init_rd_atom: u32,
    /// 0 none, 1 HCA, 2 global.
    pub atomic_cap: u32,
    pub max_ee: u32,
    pub max_rdd: u32,
    pub max_mw: u32,
    pub max_raw_ipv6_qp: u32,
    pub max_raw_ethy_qp: u32,
    pub max_mcast_grp: u32,
    pub max_mcast_qp_attach: u32,
    pub max_total_mcast_qp_attach: u32,
    pub max_ah: u32,
    pub max_fmr: u32,
    pub max_map_per_fmr: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
    /// What `ibv_query_device_ex` adds (all zero where the kernel or provider has no
    /// extended query).
    pub extended: ExtendedDeviceAttributes,
}

/// What `struct ibv_device_attr_ex` adds to `ibv_device_attr` (EX_QUERY_DEVICE, or the
/// provider's `query_device_ex` through the rdma-core bridge). Field names follow
/// rdma-core's. TSO and packet pacing come only from a provider's own data (mlx5), so the
/// kernel providers leave them zero.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct ExtendedDeviceAttributes {
    pub odp_caps: OdpCaps,
    pub completion_timestamp_mask: u64,
    /// kHz (0: no clock).
    pub hca_core_clock: u64,
    /// The full 64-bit `IB_UVERBS_DEVICE_*` mask (the low 32 bits are `device_cap_flags`).
    pub device_cap_flags_ex: u64,
    pub tso_caps: TsoCaps,
    pub rss_caps: RssCaps,
    pub max_wq_type_rq: u32,
    pub packet_pacing_caps: PacketPacingCaps,
    pub raw_packet_caps: u32,
    pub tm_caps: TagMatchingCaps,
    pub cq_mod_caps: CqModerationCaps,
    /// Bytes of on-device memory.
    pub max_dm_size: u64,
    pub xrc_odp_caps: u32,
}

/// On-demand paging support (`struct ibv_odp_caps`): `IBV_ODP_SUPPORT*` and, per transport,
/// `IBV_ODP_SUPPORT_{SEND,RECV,WRITE,READ,ATOMIC,SRQ_RECV}` bits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct OdpCaps {
    pub general_caps: u64,
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

/// TCP segmentation offload (`struct ibv_tso_caps`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct TsoCaps {
    pub max_tso: u32,
    /// Bit n: QP type n.
    pub supported_qpts: u32,
}

/// Per-QP rate limits (`struct ibv_packet_pacing_caps`), in kbps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct PacketPacingCaps {
    pub qp_rate_limit_min: u32,
    pub qp_rate_limit_max: u32,
    /// Bit n: QP type n.
    pub supported_qpts: u32,
}

/// Receive-side scaling (`struct ibv_rss_caps`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct RssCaps {
    /// Bit n: QP type n.
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_function: u32,
    pub rx_hash_fields_mask: u64,
}

/// Tag matching (`struct ibv_tm_caps`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct TagMatchingCaps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
}

/// CQ moderation (`struct ibv_cq_moderation_caps`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct CqModerationCaps {
    pub max_cq_count: u16,
    /// Microseconds.
    pub max_cq_period: u16,
}

impl DeviceAttributes {
    /// Whether the device supports atomic operations at all.
    pub fn supports_atomics(&self) -> bool {
        self.atomic_cap != 0
    }
}

/// What a port is and does (`struct ibv_port_attr`). Field names follow rdma-core's.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct PortAttributes {
    pub state: PortState,
    /// Raw `ib_mtu` value (1..=5); see [`PortAttributes::max_mtu`].
    pub max_mtu_raw: u8,
    /// Raw `ib_mtu` value (1..=5); see [`PortAttributes::active_mtu`].
    pub active_mtu_raw: u8,
    pub gid_tbl_len: u32,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    /// 0 unspecified, 1 InfiniBand, 2 Ethernet.
    pub link_layer: u8,
    /// Bit 0: a GRH is required in address vectors (RoCE).
    pub flags: u8,
    /// `IBV_PORT_*2` capability bits (only the ioctl QUERY_PORT reports them; 0 otherwise).
    pub port_cap_flags2: u16,
    /// The extended speed code (Linux 6.7+; 0 otherwise).
    pub active_speed_ex: u32,
}

impl PortAttributes {
    /// The largest MTU the port supports.
    pub fn max_mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(self.max_mtu_raw.into())
    }
    /// The MTU in use.
    pub fn active_mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(self.active_mtu_raw.into())
    }
    /// Whether the link layer is Ethernet (RoCE or iWARP).
    pub fn is_ethernet(&self) -> bool {
        self.link_layer == 2
    }
    /// rdma-core's `link_layer_str`.
    pub fn link_layer_name(&self) -> &'static str {
        match self.link_layer {
            0 | 1 => "InfiniBand",
            2 => "Ethernet",
            _ => "Unknown",
        }
    }
}
