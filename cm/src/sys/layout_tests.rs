//! Size and offset of every field of every rdma_cm ABI struct, against `rdma_user_cm.h`
//! (docs/kernel-abi.md#rdma_cm-structures) (pahole output of the 6.1 uapi headers). Each check also
//! proves the struct has no padding (the field sizes add up to the struct size), which the `Pod`
//! impls rely on.

use super::abi::*;
use super::Pod;
use std::mem::{offset_of, size_of, size_of_val};

macro_rules! layout {
    ($t:ty, $size:expr, { $($field:ident : $off:expr),* $(,)? }) => {{
        assert_eq!(size_of::<$t>(), $size, "size of {}", stringify!($t));
        $(assert_eq!(offset_of!($t, $field), $off,
            "offset of {}.{}", stringify!($t), stringify!($field));)*
        let v = <$t as Pod>::zeroed();
        let fields = 0 $(+ size_of_val(&v.$field))*;
        assert_eq!(fields, $size, "{} has padding", stringify!($t));
    }};
}

#[test]
fn command_numbers() {
    assert_eq!(Command::CreateId as u32, 0);
    assert_eq!(Command::Connect as u32, 6);
    assert_eq!(Command::InitQpAttr as u32, 11);
    assert_eq!(Command::GetEvent as u32, 12);
    assert_eq!(Command::Query as u32, 19);
    assert_eq!(Command::Bind as u32, 20);
    assert_eq!(Command::ResolveAddr as u32, 21);
    assert_eq!(Command::JoinMcast as u32, 22);
    assert_eq!(port_space::TCP, 0x0106);
}

#[test]
fn header_and_addresses() {
    layout!(CmdHdr, 8, { cmd: 0, in_: 4, out: 6 });
    layout!(SockaddrIn6, 28, { family: 0, port: 2, flowinfo: 4, addr: 8, scope_id: 24 });
    layout!(SockaddrStorage, 128, { bytes: 0 });
    assert_eq!(std::mem::align_of::<SockaddrStorage>(), 8);
}

#[test]
fn id_commands() {
    layout!(CreateId, 24, { uid: 0, response: 8, ps: 16, qp_type: 18, reserved: 19 });
    layout!(CreateIdResp, 4, { id: 0 });
    layout!(DestroyId, 16, { response: 0, id: 8, reserved: 12 });
    layout!(DestroyIdResp, 4, { events_reported: 0 });
    layout!(MigrateId, 16, { response: 0, id: 8, fd: 12 });
    layout!(SetOption, 24, { optval: 0, id: 8, level: 12, optname: 16, optlen: 20 });
    layout!(Notify, 8, { id: 0, event: 4 });
}

#[test]
fn bind_and_resolve() {
    layout!(BindIp, 40, { response: 0, addr: 8, id: 36 });
    layout!(Bind, 136, { id: 0, addr_size: 4, reserved: 6, addr: 8 });
    layout!(ResolveIp, 64, { src_addr: 0, dst_addr: 28, id: 56, timeout_ms: 60 });
    layout!(ResolveAddr, 272, {
        id: 0, timeout_ms: 4, src_size: 8, dst_size: 10, reserved: 12,
        src_addr: 16, dst_addr: 144,
    });
    layout!(ResolveRoute, 8, { id: 0, timeout_ms: 4 });
}

#[test]
fn queries() {
    layout!(Query, 16, { response: 0, id: 8, option: 12 });
    layout!(UserPathRec, 64, {
        dgid: 0, sgid: 16, dlid: 32, slid: 34, raw_traffic: 36, flow_label: 40,
        reversible: 44, mtu: 48, pkey: 52, hop_limit: 54, traffic_class: 55, numb_path: 56,
        sl: 57, mtu_selector: 58, rate_selector: 59, rate: 60, packet_life_time_selector: 61,
        packet_life_time: 62, preference: 63,
    });
    layout!(QueryRouteResp, 208, {
        node_guid: 0, ib_route: 8, src_addr: 136, dst_addr: 164, num_paths: 192,
        port_num: 196, reserved: 197, ibdev_index: 200, reserved1: 204,
    });
    layout!(QueryAddrResp, 280, {
        node_guid: 0, port_num: 8, reserved: 9, pkey: 10, src_size: 12, dst_size: 14,
        src_addr: 16, dst_addr: 144, ibdev_index: 272, reserved1: 276,
    });
    layout!(PathRecData, 72, { flags: 0, reserved: 4, path_rec: 8 });
    layout!(QueryPathResp, 8 + 3 * 72, { num_paths: 0, reserved: 4, path_data: 8 });
}

#[test]
fn connection_commands() {
    layout!(ConnParam, 272, {
        qp_num: 0, qkey: 4, private_data: 8, private_data_len: 264, srq: 265,
        responder_resources: 266, initiator_depth: 267, flow_control: 268, retry_count: 269,
        rnr_retry_count: 270, valid: 271,
    });
    layout!(Ece, 8, { vendor_id: 0, attr_mod: 4 });
    layout!(Connect, 288, { conn_param: 0, id: 272, reserved: 276, ece: 280 });
    layout!(Listen, 8, { id: 0, backlog: 4 });
    layout!(Accept, 296, { uid: 0, conn_param: 8, id: 280, reserved: 284, ece: 288 });
    layout!(Reject, 264, {
        id: 0, private_data_len: 4, reason: 5, reserved: 6, private_data: 8,
    });
    layout!(Disconnect, 4, { id: 0 });
}

#[test]
fn qp_attributes() {
    layout!(InitQpAttr, 16, { response: 0, id: 8, qp_state: 12 });
    layout!(GlobalRoute, 24, {
        dgid: 0, flow_label: 16, sgid_index: 20, hop_limit: 21, traffic_class: 22, reserved: 23,
    });
    layout!(AhAttr, 32, {
        grh: 0, dlid: 24, sl: 26, src_path_bits: 27, static_rate: 28, is_global: 29,
        port_num: 30, reserved: 31,
    });
    layout!(UverbsQpAttr, 144, {
        qp_attr_mask: 0, qp_state: 4, cur_qp_state: 8, path_mtu: 12, path_mig_state: 16,
        qkey: 20, rq_psn: 24, sq_psn: 28, dest_qp_num: 32, qp_access_flags: 36, ah_attr: 40,
        alt_ah_attr: 72, max_send_wr: 104, max_recv_wr: 108, max_send_sge: 112,
        max_recv_sge: 116, max_inline_data: 120, pkey_index: 124, alt_pkey_index: 126,
        en_sqd_async_notify: 128, sq_draining: 129, max_rd_atomic: 130,
        max_dest_rd_atomic: 131, min_rnr_timer: 132, port_num: 133, timeout: 134,
        retry_cnt: 135, rnr_retry: 136, alt_port_num: 137, alt_timeout: 138, reserved: 139,
    });
}

#[test]
fn events_and_multicast() {
    layout!(GetEvent, 8, { response: 0 });
    layout!(UdParam, 304, {
        qp_num: 0, qkey: 4, ah_attr: 8, private_data: 40, private_data_len: 296, reserved: 297,
    });
    assert_eq!(size_of::<EventParam>(), 304);
    layout!(EventResp, 336, {
        uid: 0, id: 8, event: 12, status: 16, param: 20, reserved: 324, ece: 328,
    });
    assert!(EVENT_RESP_MIN_SIZE <= size_of::<EventResp>());
    layout!(JoinIpMcast, 48, { response: 0, uid: 8, addr: 16, id: 44 });
    layout!(JoinMcast, 152, {
        response: 0, uid: 8, id: 16, addr_size: 20, join_flags: 22, addr: 24,
    });
}

/// An event parameter built from its connection view has every byte initialised: the `ud`
/// view, 32 bytes longer, reads the connection's bytes and then zeros (under miri, an
/// uninitialised tail is reported as undefined behaviour).
#[test]
fn an_event_parameter_built_from_one_member_is_whole() {
    let mut conn = ConnParam::zeroed();
    conn.qp_num = 0x0102_0304;
    conn.private_data = [0xa5; 256];
    conn.private_data_len = 7;
    conn.valid = 1;
    let param = EventParam::from_conn(conn);
    assert_eq!(param.conn().qp_num, 0x0102_0304);
    let ud = param.ud();
    let bytes = ud.as_bytes();
    assert_eq!(&bytes[..size_of::<ConnParam>()], conn.as_bytes());
    assert!(bytes[size_of::<ConnParam>()..].iter().all(|&b| b == 0));
    assert_eq!(param.as_bytes().len(), 304);
    let back = EventParam::from_ud(ud);
    assert_eq!(back.conn().as_bytes(), conn.as_bytes());
}
