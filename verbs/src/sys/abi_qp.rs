//! The uverbs legacy write ABI for queue pairs: CREATE/MODIFY/QUERY/DESTROY_QP, the POST_SEND
//! doorbell, and the attribute structs rdma_cm's INIT_QP_ATTR returns (`ib_uverbs_qp_attr`,
//! `ib_uverbs_ah_attr`, `ib_uverbs_global_route`) — `ib_user_verbs.h`,
//! docs/kernel-abi.md#queue-pair-commands.

use super::abi::{Command, WriteCommand};
use super::pod::impl_pod;

/// `struct ib_uverbs_create_qp` (56 bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct CreateQpRequest {
    pub response: u64,
    pub user_handle: u64,
    pub pd_handle: u32,
    pub send_cq_handle: u32,
    pub recv_cq_handle: u32,
    pub srq_handle: u32,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub sq_sig_all: u8,
    /// 2 = RC.
    pub qp_type: u8,
    pub is_srq: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_create_qp_resp` (32 bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct CreateQpResponse {
    pub qp_handle: u32,
    pub qpn: u32,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_qp_dest` (32 bytes): the address vector in MODIFY_QP and QUERY_QP.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub struct QpDest {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub dlid: u16,
    pub reserved: u16,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ib_uverbs_modify_qp` (112 bytes, no response).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub struct ModifyQpRequest {
    pub dest: QpDest,
    pub alt_dest: QpDest,
    pub qp_handle: u32,
    pub attr_mask: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub qp_state: u8,
    pub cur_qp_state: u8,
    pub path_mtu: u8,
    pub path_mig_state: u8,
    pub en_sqd_async_notify: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub reserved: [u8; 2],
}

/// `struct ib_uverbs_query_qp`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct QueryQpRequest {
    pub response: u64,
    pub qp_handle: u32,
    pub attr_mask: u32,
}

/// `struct ib_uverbs_query_qp_resp` (128 bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub struct QueryQpResponse {
    pub dest: QpDest,
    pub alt_dest: QpDest,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub qp_state: u8,
    pub cur_qp_state: u8,
    pub path_mtu: u8,
    pub path_mig_state: u8,
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
    pub sq_sig_all: u8,
    pub reserved: [u8; 5],
}

/// `struct ib_uverbs_destroy_qp`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct DestroyQpRequest {
    pub response: u64,
    pub qp_handle: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_destroy_qp_resp`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct DestroyQpResponse {
    pub events_reported: u32,
}

/// `struct ib_uverbs_post_send` (24 bytes); with `wr_count = 0` the rxe/siw doorbell.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct PostSendRequest {
    pub response: u64,
    pub qp_handle: u32,
    pub wr_count: u32,
    pub sge_count: u32,
    pub wqe_size: u32,
}

/// `struct ib_uverbs_post_send_resp`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct PostSendResponse {
    pub bad_wr: u32,
}

/// `struct ib_uverbs_global_route` (24 bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub struct GlobalRouteDesc {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_ah_attr` (32 bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub struct AhAttrDesc {
    pub grh: GlobalRouteDesc,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_qp_attr` (144 bytes): what rdma_cm's INIT_QP_ATTR returns.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub struct QpAttrDesc {
    pub qp_attr_mask: u32,
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub ah_attr: AhAttrDesc,
    pub alt_ah_attr: AhAttrDesc,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
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
    pub reserved: [u8; 5],
}

impl_pod!(
    CreateQpRequest,
    CreateQpResponse,
    QpDest,
    ModifyQpRequest,
    QueryQpRequest,
    QueryQpResponse,
    DestroyQpRequest,
    DestroyQpResponse,
    PostSendRequest,
    PostSendResponse,
    GlobalRouteDesc,
    AhAttrDesc,
    QpAttrDesc,
);

impl WriteCommand for CreateQpRequest {
    const COMMAND: Command = Command::CreateQp;
    type Response = CreateQpResponse;
}
impl WriteCommand for ModifyQpRequest {
    const COMMAND: Command = Command::ModifyQp;
    type Response = super::abi::NoResponse;
}
impl WriteCommand for QueryQpRequest {
    const COMMAND: Command = Command::QueryQp;
    type Response = QueryQpResponse;
}
impl WriteCommand for DestroyQpRequest {
    const COMMAND: Command = Command::DestroyQp;
    type Response = DestroyQpResponse;
}
impl WriteCommand for PostSendRequest {
    const COMMAND: Command = Command::PostSend;
    type Response = PostSendResponse;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::pod::assert_layout;

    #[test]
    fn create_and_destroy() {
        assert_layout!(CreateQpRequest, size 56, {
            response @ 0, user_handle @ 8, pd_handle @ 16, send_cq_handle @ 20,
            recv_cq_handle @ 24, srq_handle @ 28, max_send_wr @ 32, max_recv_wr @ 36,
            max_send_sge @ 40, max_recv_sge @ 44, max_inline_data @ 48, sq_sig_all @ 52,
            qp_type @ 53, is_srq @ 54, reserved @ 55,
        });
        assert_layout!(CreateQpResponse, size 32, {
            qp_handle @ 0, qpn @ 4, max_send_wr @ 8, max_recv_wr @ 12, max_send_sge @ 16,
            max_recv_sge @ 20, max_inline_data @ 24, reserved @ 28,
        });
        assert_layout!(DestroyQpRequest, size 16, { response @ 0, qp_handle @ 8, reserved @ 12 });
        assert_layout!(DestroyQpResponse, size 4, { events_reported @ 0 });
    }

    #[test]
    fn dest_and_modify() {
        assert_layout!(QpDest, size 32, {
            dgid @ 0, flow_label @ 16, dlid @ 20, reserved @ 22, sgid_index @ 24, hop_limit @ 25,
            traffic_class @ 26, sl @ 27, src_path_bits @ 28, static_rate @ 29, is_global @ 30,
            port_num @ 31,
        });
        assert_layout!(ModifyQpRequest, size 112, {
            dest @ 0, alt_dest @ 32, qp_handle @ 64, attr_mask @ 68, qkey @ 72, rq_psn @ 76,
            sq_psn @ 80, dest_qp_num @ 84, qp_access_flags @ 88, pkey_index @ 92,
            alt_pkey_index @ 94, qp_state @ 96, cur_qp_state @ 97, path_mtu @ 98,
            path_mig_state @ 99, en_sqd_async_notify @ 100, max_rd_atomic @ 101,
            max_dest_rd_atomic @ 102, min_rnr_timer @ 103, port_num @ 104, timeout @ 105,
            retry_cnt @ 106, rnr_retry @ 107, alt_port_num @ 108, alt_timeout @ 109,
            reserved @ 110,
        });
    }

    #[test]
    fn query() {
        assert_layout!(QueryQpRequest, size 16, { response @ 0, qp_handle @ 8, attr_mask @ 12 });
        assert_layout!(QueryQpResponse, size 128, {
            dest @ 0, alt_dest @ 32, max_send_wr @ 64, max_recv_wr @ 68, max_send_sge @ 72,
            max_recv_sge @ 76, max_inline_data @ 80, qkey @ 84, rq_psn @ 88, sq_psn @ 92,
            dest_qp_num @ 96, qp_access_flags @ 100, pkey_index @ 104, alt_pkey_index @ 106,
            qp_state @ 108, cur_qp_state @ 109, path_mtu @ 110, path_mig_state @ 111,
            sq_draining @ 112, max_rd_atomic @ 113, max_dest_rd_atomic @ 114,
            min_rnr_timer @ 115, port_num @ 116, timeout @ 117, retry_cnt @ 118,
            rnr_retry @ 119, alt_port_num @ 120, alt_timeout @ 121, sq_sig_all @ 122,
            reserved @ 123,
        });
    }

    #[test]
    fn post_send() {
        assert_layout!(PostSendRequest, size 24, {
            response @ 0, qp_handle @ 8, wr_count @ 12, sge_count @ 16, wqe_size @ 20,
        });
        assert_layout!(PostSendResponse, size 4, { bad_wr @ 0 });
    }

    #[test]
    fn cm_qp_attr() {
        assert_layout!(GlobalRouteDesc, size 24, {
            dgid @ 0, flow_label @ 16, sgid_index @ 20, hop_limit @ 21, traffic_class @ 22,
            reserved @ 23,
        });
        assert_layout!(AhAttrDesc, size 32, {
            grh @ 0, dlid @ 24, sl @ 26, src_path_bits @ 27, static_rate @ 28, is_global @ 29,
            port_num @ 30, reserved @ 31,
        });
        assert_layout!(QpAttrDesc, size 144, {
            qp_attr_mask @ 0, qp_state @ 4, cur_qp_state @ 8, path_mtu @ 12,
            path_mig_state @ 16, qkey @ 20, rq_psn @ 24, sq_psn @ 28, dest_qp_num @ 32,
            qp_access_flags @ 36, ah_attr @ 40, alt_ah_attr @ 72, max_send_wr @ 104,
            max_recv_wr @ 108, max_send_sge @ 112, max_recv_sge @ 116, max_inline_data @ 120,
            pkey_index @ 124, alt_pkey_index @ 126, en_sqd_async_notify @ 128,
            sq_draining @ 129, max_rd_atomic @ 130, max_dest_rd_atomic @ 131,
            min_rnr_timer @ 132, port_num @ 133, timeout @ 134, retry_cnt @ 135,
            rnr_retry @ 136, alt_port_num @ 137, alt_timeout @ 138, reserved @ 139,
        });
    }
}
