//! rdma-core's stable libibverbs ABI (`<infiniband/verbs.h>`, `libibverbs.so.1`): the
//! structs this crate reads or fills, `#[repr(C)]` field for field. Fields we never touch
//! are kept as opaque padding of the right size; the layout of every struct is checked
//! against the installed headers by `tests/abi_ibverbs.rs` (gcc prints `sizeof`/`offsetof`)
//! and by the size tests below.
//!
//! Numbers (opcodes, flags, states, masks) are the same as the kernel's except the work
//! completion flags (docs/kernel-abi.md#work-completion-flags), converted in `convert.rs`.
#![allow(missing_docs)] // field names are rdma-core's; see verbs.h for each

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `struct ibv_device` is only ever handled by pointer.
#[repr(C)]
#[derive(Debug)]
pub struct IbvDevice {
    _opaque: [u8; 0],
}

/// `struct ibv_context_ops`: 32 function pointers. The data path (`ibv_post_send`,
/// `ibv_post_recv`, `ibv_poll_cq`, `ibv_req_notify_cq` are `static inline` in verbs.h) calls
/// through this table; the `_compat_*` slots are unused by rdma-core since v17.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvContextOps {
    pub _compat_0_10: [*const c_void; 11],
    pub poll_cq: Option<unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int>,
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut IbvCq, c_int) -> c_int>,
    pub _compat_13_24: [*const c_void; 12],
    pub post_send:
        Option<unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int>,
    pub post_recv:
        Option<unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int>,
    pub _compat_27_31: [*const c_void; 5],
}

/// `struct ibv_context`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvContext {
    pub device: *mut IbvDevice,
    pub ops: IbvContextOps,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: libc::pthread_mutex_t,
    /// `__VERBS_ABI_IS_EXTENDED` (all ones) when the context is embedded in a
    /// [`VerbsContext`].
    pub abi_compat: *mut c_void,
}

/// `__VERBS_ABI_IS_EXTENDED`.
pub const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

/// `struct verbs_context`: the extended context that embeds [`IbvContext`] as its last
/// field. Only `query_port` and `query_device_ex` (what the inline `ibv_query_port` and
/// `ibv_query_device_ex` call) and `sz` are used.
#[repr(C)]
#[derive(Debug)]
pub struct VerbsContext {
    pub query_port:
        Option<unsafe extern "C" fn(*mut IbvContext, u8, *mut IbvPortAttr, usize) -> c_int>,
    /// `advise_mr` .. `priv`: 25 function pointers and a pointer.
    pub _ops_a: [*const c_void; 26],
    /// `(context, input, attr, attr_size)`; `input` may be null.
    pub query_device_ex: Option<
        unsafe extern "C" fn(*mut IbvContext, *const c_void, *mut IbvDeviceAttrEx, usize) -> c_int,
    >,
    /// `ibv_destroy_flow` .. `close_xrcd`: 10 function pointers.
    pub _ops_b: [*const c_void; 10],
    pub _abi_placeholder3: u64,
    pub sz: usize,
    pub context: IbvContext,
}

/// `struct ibv_device_attr_ex` (rdma-core v44; newer versions only append).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvDeviceAttrEx {
    pub orig_attr: IbvDeviceAttr,
    pub comp_mask: u32,
    pub odp_caps: IbvOdpCaps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub tso_caps: IbvTsoCaps,
    pub rss_caps: IbvRssCaps,
    pub max_wq_type_rq: u32,
    pub packet_pacing_caps: IbvPacketPacingCaps,
    pub raw_packet_caps: u32,
    pub tm_caps: IbvTmCaps,
    pub cq_mod_caps: IbvCqModerationCaps,
    pub max_dm_size: u64,
    pub pci_atomic_caps: IbvPciAtomicCaps,
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_odp_caps` (its `per_transport_caps` struct flattened: same layout).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvOdpCaps {
    pub general_caps: u64,
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

/// `struct ibv_tso_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvTsoCaps {
    pub max_tso: u32,
    pub supported_qpts: u32,
}

/// `struct ibv_rss_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvRssCaps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

/// `struct ibv_packet_pacing_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvPacketPacingCaps {
    pub qp_rate_limit_min: u32,
    pub qp_rate_limit_max: u32,
    pub supported_qpts: u32,
}

/// `struct ibv_tm_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvTmCaps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
}

/// `struct ibv_cq_moderation_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvCqModerationCaps {
    pub max_cq_count: u16,
    pub max_cq_period: u16,
}

/// `struct ibv_pci_atomic_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvPciAtomicCaps {
    pub fetch_add: u16,
    pub swap: u16,
    pub compare_swap: u16,
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvDeviceAttr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvPortAttr {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
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
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `union ibv_gid` (16 bytes, 8-byte aligned for its `__be64` view).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct IbvGid {
    pub raw: [u8; 16],
}

/// `struct ibv_pd`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvPd {
    pub context: *mut IbvContext,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvMr {
    pub context: *mut IbvContext,
    pub pd: *mut IbvPd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvCompChannel {
    pub context: *mut IbvContext,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvCq {
    pub context: *mut IbvContext,
    pub channel: *mut IbvCompChannel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvQp {
    pub context: *mut IbvContext,
    pub qp_context: *mut c_void,
    pub pd: *mut IbvPd,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_int,
    pub qp_type: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct IbvQpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvQpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut c_void,
    pub cap: IbvQpCap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

/// `IBV_QPT_RC`.
pub const IBV_QPT_RC: c_int = 2;

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct IbvGlobalRoute {
    pub dgid: IbvGid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct IbvAhAttr {
    pub grh: IbvGlobalRoute,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct IbvQpAttr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: IbvQpCap,
    pub ah_attr: IbvAhAttr,
    pub alt_ah_attr: IbvAhAttr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct IbvSge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`, laid out as its largest member `wr.atomic`
/// (32 bytes). The `wr.rdma` member overlays it: `remote_addr` at the same place, its `rkey`
/// in the first four bytes of `compare_add` ([`IbvWr::rdma`] puts it there). The `wr.ud`
/// member is never used here.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct IbvWr {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

impl IbvWr {
    /// The `wr.rdma` member.
    pub fn rdma(remote_addr: u64, rkey: u32) -> IbvWr {
        let mut word = [0u8; 8];
        word[..4].copy_from_slice(&rkey.to_ne_bytes());
        IbvWr {
            remote_addr,
            compare_add: u64::from_ne_bytes(word),
            ..IbvWr::default()
        }
    }

    /// The `wr.atomic` member.
    pub fn atomic(remote_addr: u64, compare_add: u64, swap: u64, rkey: u32) -> IbvWr {
        IbvWr {
            remote_addr,
            compare_add,
            swap,
            rkey,
        }
    }
}

/// `struct ibv_send_wr`. `next` and `sg_list` are linked by the sys layer just before the
/// call; the trailing `bind_mw`/`tso` union is unused (zero).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbvSendWr {
    pub wr_id: u64,
    pub next: *mut IbvSendWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: c_uint,
    /// Network byte order (`__be32`).
    pub imm_data: u32,
    pub wr: IbvWr,
    pub qp_type: u32,
    pub _tail: [u64; 6],
}

impl Default for IbvSendWr {
    fn default() -> Self {
        IbvSendWr {
            wr_id: 0,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: 0,
            opcode: 0,
            send_flags: 0,
            imm_data: 0,
            wr: IbvWr::default(),
            qp_type: 0,
            _tail: [0; 6],
        }
    }
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbvRecvWr {
    pub wr_id: u64,
    pub next: *mut IbvRecvWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
}

impl Default for IbvRecvWr {
    fn default() -> Self {
        IbvRecvWr {
            wr_id: 0,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: 0,
        }
    }
}

// SAFETY: the raw pointers in work requests are links into the buffers they are posted
// from, set by the sys layer just before a post under the owner's lock and never
// dereferenced by Rust; the structs own nothing.
unsafe impl Send for IbvSendWr {}
// SAFETY: as above.
unsafe impl Send for IbvRecvWr {}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct IbvWc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data` (network byte order) or `invalidated_rkey`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_async_event`: `element` is a CQ or QP pointer, or a port number.
#[repr(C)]
#[derive(Debug)]
pub struct IbvAsyncEvent {
    pub element: *mut c_void,
    pub event_type: c_int,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    // x86_64/aarch64 Linux values, the same numbers tests/abi_ibverbs.rs checks against the
    // headers with gcc.
    #[test]
    fn sizes_match_rdma_core_on_64_bit_linux() {
        assert_eq!(size_of::<IbvContextOps>(), 32 * 8);
        assert_eq!(offset_of!(IbvContextOps, poll_cq), 88);
        assert_eq!(offset_of!(IbvContextOps, req_notify_cq), 96);
        assert_eq!(offset_of!(IbvContextOps, post_send), 200);
        assert_eq!(offset_of!(IbvContextOps, post_recv), 208);
        assert_eq!(size_of::<IbvContext>(), 328);
        assert_eq!(offset_of!(VerbsContext, query_device_ex), 216);
        assert_eq!(size_of::<IbvDeviceAttrEx>(), 400);
        assert_eq!(offset_of!(IbvDeviceAttrEx, xrc_odp_caps), 392);
        assert_eq!(offset_of!(VerbsContext, sz), 312);
        assert_eq!(offset_of!(VerbsContext, context), 320);
        assert_eq!(size_of::<IbvGid>(), 16);
        assert_eq!(align_of::<IbvGid>(), 8);
        assert_eq!(size_of::<IbvGlobalRoute>(), 24);
        assert_eq!(size_of::<IbvAhAttr>(), 32);
        assert_eq!(size_of::<IbvQpAttr>(), 144);
        assert_eq!(size_of::<IbvSendWr>(), 128);
        assert_eq!(offset_of!(IbvSendWr, wr), 40);
        assert_eq!(offset_of!(IbvSendWr, qp_type), 72);
        assert_eq!(size_of::<IbvRecvWr>(), 32);
        assert_eq!(size_of::<IbvWc>(), 48);
        assert_eq!(size_of::<IbvAsyncEvent>(), 16);
    }
}
