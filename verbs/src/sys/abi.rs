//! The uverbs legacy write ABI: command numbers, the command header, and the request and
//! response structs of the context, device, PD, MR, completion channel and CQ commands, plus
//! the event records read from the channel and async fds (`ib_user_verbs.h`;
//! docs/kernel-abi.md#uverbs-write-commands and #event-records).
//!
//! Queue pair structs live in [`super::abi_qp`]. Field names follow the uapi header
//! (`rdma/ib_user_verbs.h`); every layout is checked by a test against the reference tables.

use super::pod::{impl_pod, Pod};

/// Legacy write command numbers (`enum ib_uverbs_write_cmds`), the ones this library uses.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
#[allow(missing_docs)]
pub enum Command {
    GetContext = 0,
    QueryDevice = 1,
    QueryPort = 2,
    AllocPd = 3,
    DeallocPd = 4,
    CreateAh = 5,
    DestroyAh = 8,
    RegMr = 9,
    DeregMr = 13,
    CreateCompChannel = 17,
    CreateCq = 18,
    ResizeCq = 19,
    DestroyCq = 20,
    PollCq = 21,
    ReqNotifyCq = 23,
    CreateQp = 24,
    QueryQp = 25,
    ModifyQp = 26,
    DestroyQp = 27,
    PostSend = 28,
    PostRecv = 29,
    CreateSrq = 32,
    ModifySrq = 33,
    QuerySrq = 34,
    DestroySrq = 35,
}

impl Command {
    /// The name used in error messages (`CREATE_QP`).
    pub fn name(self) -> &'static str {
        use Command::*;
        match self {
            GetContext => "GET_CONTEXT",
            QueryDevice => "QUERY_DEVICE",
            QueryPort => "QUERY_PORT",
            AllocPd => "ALLOC_PD",
            DeallocPd => "DEALLOC_PD",
            CreateAh => "CREATE_AH",
            DestroyAh => "DESTROY_AH",
            RegMr => "REG_MR",
            DeregMr => "DEREG_MR",
            CreateCompChannel => "CREATE_COMP_CHANNEL",
            CreateCq => "CREATE_CQ",
            ResizeCq => "RESIZE_CQ",
            DestroyCq => "DESTROY_CQ",
            PollCq => "POLL_CQ",
            ReqNotifyCq => "REQ_NOTIFY_CQ",
            CreateQp => "CREATE_QP",
            QueryQp => "QUERY_QP",
            ModifyQp => "MODIFY_QP",
            DestroyQp => "DESTROY_QP",
            PostSend => "POST_SEND",
            PostRecv => "POST_RECV",
            CreateSrq => "CREATE_SRQ",
            ModifySrq => "MODIFY_SRQ",
            QuerySrq => "QUERY_SRQ",
            DestroySrq => "DESTROY_SRQ",
        }
    }
}

/// A legacy write command: its request struct, its number and its core response.
///
/// Requests of commands with a response begin with the `u64 response` pointer, which
/// [`super::uverbs::UverbsFile::execute`] fills in; requests of commands without one
/// (`Response = NoResponse`) do not have that field.
pub trait WriteCommand: Pod {
    /// The command number.
    const COMMAND: Command;
    /// The core response struct (exact kernel size), or [`NoResponse`].
    type Response: Pod;
}

/// The response of commands that have none (size 0).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct NoResponse {}

/// `struct ib_uverbs_cmd_hdr`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct CommandHeader {
    /// Command number.
    pub command: u32,
    /// Total write length / 4, header and driver data included.
    pub in_words: u16,
    /// (Core response + driver response) / 4.
    pub out_words: u16,
}

/// `struct ib_uverbs_get_context`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct GetContextRequest {
    pub response: u64,
}

/// `struct ib_uverbs_get_context_resp`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub struct GetContextResponse {
    pub async_fd: u32,
    pub num_comp_vectors: u32,
}

/// `struct ib_uverbs_query_device`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct QueryDeviceRequest {
    pub response: u64,
}

/// `struct ib_uverbs_query_device_resp` (176 bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub struct QueryDeviceResponse {
    pub fw_ver: u64,
    /// Big-endian.
    pub node_guid: u64,
    /// Big-endian.
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
    pub reserved: [u8; 4],
}

/// `struct ib_uverbs_query_port`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct QueryPortRequest {
    pub response: u64,
    pub port_num: u8,
    pub reserved: [u8; 7],
}

/// `struct ib_uverbs_query_port_resp` (40 bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub struct QueryPortResponse {
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub gid_tbl_len: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub state: u8,
    pub max_mtu: u8,
    pub active_mtu: u8,
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
    pub reserved: u8,
}

/// `struct ib_uverbs_alloc_pd`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct AllocPdRequest {
    pub response: u64,
}

/// `struct ib_uverbs_alloc_pd_resp`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct AllocPdResponse {
    pub pd_handle: u32,
}

/// `struct ib_uverbs_dealloc_pd`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct DeallocPdRequest {
    pub pd_handle: u32,
}

/// `struct ib_uverbs_reg_mr`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct RegMrRequest {
    pub response: u64,
    pub start: u64,
    pub length: u64,
    pub hca_va: u64,
    pub pd_handle: u32,
    pub access_flags: u32,
}

/// `struct ib_uverbs_reg_mr_resp`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct RegMrResponse {
    pub mr_handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ib_uverbs_dereg_mr`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct DeregMrRequest {
    pub mr_handle: u32,
}

/// `struct ib_uverbs_create_comp_channel`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct CreateCompChannelRequest {
    pub response: u64,
}

/// `struct ib_uverbs_create_comp_channel_resp`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct CreateCompChannelResponse {
    pub fd: u32,
}

/// `struct ib_uverbs_create_cq`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct CreateCqRequest {
    pub response: u64,
    pub user_handle: u64,
    pub cqe: u32,
    pub comp_vector: u32,
    /// Channel fd or -1.
    pub comp_channel: i32,
    pub reserved: u32,
}

/// `struct ib_uverbs_create_cq_resp`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct CreateCqResponse {
    pub cq_handle: u32,
    pub cqe: u32,
}

/// `struct ib_uverbs_destroy_cq`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct DestroyCqRequest {
    pub response: u64,
    pub cq_handle: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_destroy_cq_resp`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub struct DestroyCqResponse {
    pub comp_events_reported: u32,
    pub async_events_reported: u32,
}

/// `struct ib_uverbs_req_notify_cq`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct ReqNotifyCqRequest {
    pub cq_handle: u32,
    pub solicited_only: u32,
}

/// `struct ib_uverbs_comp_event_desc`: one record read from a completion channel.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct CompEventDesc {
    /// The `user_handle` of the CQ.
    pub cq_handle: u64,
}

/// `struct ib_uverbs_async_event_desc`: one record read from the async event fd.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct AsyncEventDesc {
    /// The `user_handle` of the CQ/QP/SRQ, or a port number.
    pub element: u64,
    /// `enum ib_event_type`.
    pub event_type: u32,
    /// Zero.
    pub reserved: u32,
}

/// `struct ib_uverbs_wc` (48 bytes): what rxe writes at the start of each CQ slot.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub struct WorkCompletionDesc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data` (big-endian) or `invalidate_rkey`.
    pub ex: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    /// Kernel `ib_wc_flags` encoding.
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
    pub port_num: u8,
    pub reserved: u8,
}

impl_pod!(
    NoResponse,
    CommandHeader,
    GetContextRequest,
    GetContextResponse,
    QueryDeviceRequest,
    QueryDeviceResponse,
    QueryPortRequest,
    QueryPortResponse,
    AllocPdRequest,
    AllocPdResponse,
    DeallocPdRequest,
    RegMrRequest,
    RegMrResponse,
    DeregMrRequest,
    CreateCompChannelRequest,
    CreateCompChannelResponse,
    CreateCqRequest,
    CreateCqResponse,
    DestroyCqRequest,
    DestroyCqResponse,
    ReqNotifyCqRequest,
    CompEventDesc,
    AsyncEventDesc,
    WorkCompletionDesc,
);

macro_rules! write_command {
    ($($req:ty => $cmd:ident, $resp:ty;)*) => {
        $(
            impl WriteCommand for $req {
                const COMMAND: Command = Command::$cmd;
                type Response = $resp;
            }
        )*
    };
}

write_command! {
    GetContextRequest => GetContext, GetContextResponse;
    QueryDeviceRequest => QueryDevice, QueryDeviceResponse;
    QueryPortRequest => QueryPort, QueryPortResponse;
    AllocPdRequest => AllocPd, AllocPdResponse;
    DeallocPdRequest => DeallocPd, NoResponse;
    RegMrRequest => RegMr, RegMrResponse;
    DeregMrRequest => DeregMr, NoResponse;
    CreateCompChannelRequest => CreateCompChannel, CreateCompChannelResponse;
    CreateCqRequest => CreateCq, CreateCqResponse;
    DestroyCqRequest => DestroyCq, DestroyCqResponse;
    ReqNotifyCqRequest => ReqNotifyCq, NoResponse;
}

/// Whether a request type begins with the `u64 response` pointer.
pub(crate) fn has_response_pointer<C: WriteCommand>() -> bool {
    size_of::<C::Response>() > 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::pod::assert_layout;

    /// The number and name of `command` in the kernel's `enum ib_uverbs_write_cmds`
    /// (`include/uapi/rdma/ib_user_verbs.h`; values copied from Debian's linux-libc-dev 6.1
    /// `/usr/include/rdma/ib_user_verbs.h` and docs/kernel-abi.md#uverbs-write-commands). The
    /// kernel enum has no explicit values, so each is its position, counting the commands this
    /// library does not use: MODIFY_AH 6, QUERY_AH 7, REG_SMR 10, REREG_MR 11, QUERY_MR 12,
    /// ALLOC_MW 14, BIND_MW 15, DEALLOC_MW 16, PEEK_CQ 22, ATTACH_MCAST 30, DETACH_MCAST 31,
    /// POST_SRQ_RECV 36, OPEN_XRCD 37, CLOSE_XRCD 38, CREATE_XSRQ 39, OPEN_QP 40. The match has no
    /// wildcard: a new variant does not compile until it has its row here.
    fn kernel(command: Command) -> (u32, &'static str) {
        use Command::*;
        match command {
            GetContext => (0, "GET_CONTEXT"),
            QueryDevice => (1, "QUERY_DEVICE"),
            QueryPort => (2, "QUERY_PORT"),
            AllocPd => (3, "ALLOC_PD"),
            DeallocPd => (4, "DEALLOC_PD"),
            CreateAh => (5, "CREATE_AH"),
            DestroyAh => (8, "DESTROY_AH"),
            RegMr => (9, "REG_MR"),
            DeregMr => (13, "DEREG_MR"),
            CreateCompChannel => (17, "CREATE_COMP_CHANNEL"),
            CreateCq => (18, "CREATE_CQ"),
            ResizeCq => (19, "RESIZE_CQ"),
            DestroyCq => (20, "DESTROY_CQ"),
            PollCq => (21, "POLL_CQ"),
            ReqNotifyCq => (23, "REQ_NOTIFY_CQ"),
            CreateQp => (24, "CREATE_QP"),
            QueryQp => (25, "QUERY_QP"),
            ModifyQp => (26, "MODIFY_QP"),
            DestroyQp => (27, "DESTROY_QP"),
            PostSend => (28, "POST_SEND"),
            PostRecv => (29, "POST_RECV"),
            CreateSrq => (32, "CREATE_SRQ"),
            ModifySrq => (33, "MODIFY_SRQ"),
            QuerySrq => (34, "QUERY_SRQ"),
            DestroySrq => (35, "DESTROY_SRQ"),
        }
    }

    #[test]
    fn command_numbers() {
        use Command::*;
        // Every variant, in the kernel's order; keep it in step with the enum. The numbers
        // must rise strictly, so a variant listed twice fails.
        let all = [
            GetContext,
            QueryDevice,
            QueryPort,
            AllocPd,
            DeallocPd,
            CreateAh,
            DestroyAh,
            RegMr,
            DeregMr,
            CreateCompChannel,
            CreateCq,
            ResizeCq,
            DestroyCq,
            PollCq,
            ReqNotifyCq,
            CreateQp,
            QueryQp,
            ModifyQp,
            DestroyQp,
            PostSend,
            PostRecv,
            CreateSrq,
            ModifySrq,
            QuerySrq,
            DestroySrq,
        ];
        let mut previous = None;
        for command in all {
            let (number, name) = kernel(command);
            assert_eq!(command as u32, number, "IB_USER_VERBS_CMD_{name}");
            assert_eq!(command.name(), name, "name of command {number}");
            assert!(
                previous < Some(number),
                "{name} ({number}) is listed after command {previous:?}: each is listed once, \
                 in the kernel's order"
            );
            previous = Some(number);
        }
    }

    #[test]
    fn header_and_context() {
        assert_layout!(CommandHeader, size 8, { command @ 0, in_words @ 4, out_words @ 6 });
        assert_layout!(GetContextRequest, size 8, { response @ 0 });
        assert_layout!(GetContextResponse, size 8, { async_fd @ 0, num_comp_vectors @ 4 });
        assert_layout!(NoResponse, size 0, {});
    }

    #[test]
    fn query_device() {
        assert_layout!(QueryDeviceRequest, size 8, { response @ 0 });
        assert_layout!(QueryDeviceResponse, size 176, {
            fw_ver @ 0, node_guid @ 8, sys_image_guid @ 16, max_mr_size @ 24,
            page_size_cap @ 32, vendor_id @ 40, vendor_part_id @ 44, hw_ver @ 48, max_qp @ 52,
            max_qp_wr @ 56, device_cap_flags @ 60, max_sge @ 64, max_sge_rd @ 68, max_cq @ 72,
            max_cqe @ 76, max_mr @ 80, max_pd @ 84, max_qp_rd_atom @ 88, max_ee_rd_atom @ 92,
            max_res_rd_atom @ 96, max_qp_init_rd_atom @ 100, max_ee_init_rd_atom @ 104,
            atomic_cap @ 108, max_ee @ 112, max_rdd @ 116, max_mw @ 120, max_raw_ipv6_qp @ 124,
            max_raw_ethy_qp @ 128, max_mcast_grp @ 132, max_mcast_qp_attach @ 136,
            max_total_mcast_qp_attach @ 140, max_ah @ 144, max_fmr @ 148, max_map_per_fmr @ 152,
            max_srq @ 156, max_srq_wr @ 160, max_srq_sge @ 164, max_pkeys @ 168,
            local_ca_ack_delay @ 170, phys_port_cnt @ 171, reserved @ 172,
        });
    }

    #[test]
    fn query_port() {
        assert_layout!(QueryPortRequest, size 16, { response @ 0, port_num @ 8, reserved @ 9 });
        assert_layout!(QueryPortResponse, size 40, {
            port_cap_flags @ 0, max_msg_sz @ 4, bad_pkey_cntr @ 8, qkey_viol_cntr @ 12,
            gid_tbl_len @ 16, pkey_tbl_len @ 20, lid @ 22, sm_lid @ 24, state @ 26, max_mtu @ 27,
            active_mtu @ 28, lmc @ 29, max_vl_num @ 30, sm_sl @ 31, subnet_timeout @ 32,
            init_type_reply @ 33, active_width @ 34, active_speed @ 35, phys_state @ 36,
            link_layer @ 37, flags @ 38, reserved @ 39,
        });
    }

    #[test]
    fn pd_and_mr() {
        assert_layout!(AllocPdRequest, size 8, { response @ 0 });
        assert_layout!(AllocPdResponse, size 4, { pd_handle @ 0 });
        assert_layout!(DeallocPdRequest, size 4, { pd_handle @ 0 });
        assert_layout!(RegMrRequest, size 40, {
            response @ 0, start @ 8, length @ 16, hca_va @ 24, pd_handle @ 32, access_flags @ 36,
        });
        assert_layout!(RegMrResponse, size 12, { mr_handle @ 0, lkey @ 4, rkey @ 8 });
        assert_layout!(DeregMrRequest, size 4, { mr_handle @ 0 });
    }

    #[test]
    fn channel_and_cq() {
        assert_layout!(CreateCompChannelRequest, size 8, { response @ 0 });
        assert_layout!(CreateCompChannelResponse, size 4, { fd @ 0 });
        assert_layout!(CreateCqRequest, size 32, {
            response @ 0, user_handle @ 8, cqe @ 16, comp_vector @ 20, comp_channel @ 24,
            reserved @ 28,
        });
        assert_layout!(CreateCqResponse, size 8, { cq_handle @ 0, cqe @ 4 });
        assert_layout!(DestroyCqRequest, size 16, { response @ 0, cq_handle @ 8, reserved @ 12 });
        assert_layout!(DestroyCqResponse, size 8, {
            comp_events_reported @ 0, async_events_reported @ 4,
        });
        assert_layout!(ReqNotifyCqRequest, size 8, { cq_handle @ 0, solicited_only @ 4 });
    }

    #[test]
    fn events_and_wc() {
        assert_layout!(CompEventDesc, size 8, { cq_handle @ 0 });
        assert_layout!(AsyncEventDesc, size 16, { element @ 0, event_type @ 8, reserved @ 12 });
        assert_layout!(WorkCompletionDesc, size 48, {
            wr_id @ 0, status @ 8, opcode @ 12, vendor_err @ 16, byte_len @ 20, ex @ 24,
            qp_num @ 28, src_qp @ 32, wc_flags @ 36, pkey_index @ 40, slid @ 42, sl @ 44,
            dlid_path_bits @ 45, port_num @ 46, reserved @ 47,
        });
    }

    #[test]
    fn response_pointer_detection() {
        assert!(has_response_pointer::<GetContextRequest>());
        assert!(!has_response_pointer::<DeallocPdRequest>());
        assert!(!has_response_pointer::<ReqNotifyCqRequest>());
    }
}
