//! The `#[repr(C)]` structs of the rdma_cm write ABI (`include/uapi/rdma/rdma_user_cm.h`),
//! as docs/kernel-abi.md#rdma_cm-structures lists them (sizes and offsets are checked by the
//! layout tests). Field names follow the kernel's.
// Field-for-field mirrors of the uapi header (see docs/kernel-abi.md), the whole header
// (layout-tested), commands the id layer does not send yet included.
#![allow(missing_docs, dead_code)]

use super::Pod;

#[cfg(test)]
pub(crate) use rdmasock_verbs::__private::GlobalRouteDesc as GlobalRoute;
/// `struct ib_uverbs_global_route`, `struct ib_uverbs_ah_attr` and `struct ib_uverbs_qp_attr`
/// (INIT_QP_ATTR's response) are uverbs structs: the verbs layer defines them, and its
/// `kernel::attributes_from_cm` converts the last into `QpAttributes`.
pub(crate) use rdmasock_verbs::__private::{AhAttrDesc as AhAttr, QpAttrDesc as UverbsQpAttr};

/// `RDMA_USER_CM_ABI_VERSION`: the only ABI this crate speaks (3 is pre-2.6.2x).
pub(crate) const ABI_VERSION: u32 = 4;

/// The legacy (pre-5.8) minimum size of [`EventResp`] the kernel insists on.
pub(crate) const EVENT_RESP_MIN_SIZE: usize = 328;

/// Command numbers (`enum { RDMA_USER_CM_CMD_* }`), the `cmd` of [`CmdHdr`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Command {
    /// Allocate a kernel id.
    CreateId = 0,
    /// Free a kernel id (synchronous).
    DestroyId = 1,
    /// Legacy bind with a `sockaddr_in6` slot.
    BindIp = 2,
    /// Legacy address resolution with `sockaddr_in6` slots.
    ResolveIp = 3,
    /// Route resolution.
    ResolveRoute = 4,
    /// One-shot query of GUID, port, addresses and paths.
    QueryRoute = 5,
    /// Active connect.
    Connect = 6,
    /// Passive listen.
    Listen = 7,
    /// Passive accept (or active "establish" with `valid = 0`).
    Accept = 8,
    /// Reject a connection request.
    Reject = 9,
    /// Send DREQ (or DREP).
    Disconnect = 10,
    /// The QP attributes the CM wants for a state.
    InitQpAttr = 11,
    /// Dequeue the oldest event of the fd.
    GetEvent = 12,
    /// Not implemented by any kernel (ENOSYS).
    GetOption = 13,
    /// Set an option.
    SetOption = 14,
    /// Forward a QP async event (COMM_EST).
    Notify = 15,
    /// Legacy multicast join.
    JoinIpMcast = 16,
    /// Leave a multicast group.
    LeaveMcast = 17,
    /// Move an id to another fd.
    MigrateId = 18,
    /// Option-specific query (ADDR, PATH, GID).
    Query = 19,
    /// Bind with a sockaddr_storage.
    Bind = 20,
    /// Address resolution with sockaddr_storage slots.
    ResolveAddr = 21,
    /// Multicast join with flags.
    JoinMcast = 22,
}

impl Command {
    /// The kernel's name for the command (for error messages).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Command::CreateId => "CREATE_ID",
            Command::DestroyId => "DESTROY_ID",
            Command::BindIp => "BIND_IP",
            Command::ResolveIp => "RESOLVE_IP",
            Command::ResolveRoute => "RESOLVE_ROUTE",
            Command::QueryRoute => "QUERY_ROUTE",
            Command::Connect => "CONNECT",
            Command::Listen => "LISTEN",
            Command::Accept => "ACCEPT",
            Command::Reject => "REJECT",
            Command::Disconnect => "DISCONNECT",
            Command::InitQpAttr => "INIT_QP_ATTR",
            Command::GetEvent => "GET_EVENT",
            Command::GetOption => "GET_OPTION",
            Command::SetOption => "SET_OPTION",
            Command::Notify => "NOTIFY",
            Command::JoinIpMcast => "JOIN_IP_MCAST",
            Command::LeaveMcast => "LEAVE_MCAST",
            Command::MigrateId => "MIGRATE_ID",
            Command::Query => "QUERY",
            Command::Bind => "BIND",
            Command::ResolveAddr => "RESOLVE_ADDR",
            Command::JoinMcast => "JOIN_MCAST",
        }
    }
}

/// Port spaces (`enum rdma_ucm_port_space`).
pub(crate) mod port_space {
    /// InfiniBand service ids; the QP type decides.
    pub(crate) const IB: u16 = 0x013f;
    /// Reliable connected over IP ports ("TCP").
    pub(crate) const TCP: u16 = 0x0106;
    /// Unreliable datagram over IP ports ("UDP").
    pub(crate) const UDP: u16 = 0x0111;
    /// IPoIB.
    pub(crate) const IPOIB: u16 = 0x0002;
}

/// QUERY options (`RDMA_USER_CM_QUERY_*`).
pub(crate) mod query_option {
    /// Addresses and device.
    pub(crate) const ADDR: u32 = 0;
    /// Path records.
    pub(crate) const PATH: u32 = 1;
    /// GIDs as sockaddr_ib.
    pub(crate) const GID: u32 = 2;
}

/// `struct rdma_ucm_cmd_hdr` (8 bytes), in front of every payload.
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct CmdHdr {
    pub cmd: u32,
    pub in_: u16,
    pub out: u16,
}

/// `struct sockaddr_in6` (28 bytes): the legacy address slot (an AF_INET `sockaddr_in` sits in
/// its first 16 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct SockaddrIn6 {
    pub family: u16,
    /// Network byte order.
    pub port: u16,
    /// Network byte order.
    pub flowinfo: u32,
    pub addr: [u8; 16],
    pub scope_id: u32,
}

/// `struct __kernel_sockaddr_storage` (128 bytes, 8-aligned).
#[derive(Copy, Clone)]
#[repr(C, align(8))]
pub(crate) struct SockaddrStorage {
    pub bytes: [u8; 128],
}

impl std::fmt::Debug for SockaddrStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SockaddrStorage({:?})",
            super::sockaddr::from_storage(self)
        )
    }
}

/// `struct rdma_ucm_create_id` (24 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct CreateId {
    pub uid: u64,
    pub response: u64,
    pub ps: u16,
    pub qp_type: u8,
    pub reserved: [u8; 5],
}

/// `struct rdma_ucm_create_id_resp` (4 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct CreateIdResp {
    pub id: u32,
}

/// `struct rdma_ucm_destroy_id` (16 bytes); also LEAVE_MCAST.
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct DestroyId {
    pub response: u64,
    pub id: u32,
    pub reserved: u32,
}

/// `struct rdma_ucm_destroy_id_resp` (4 bytes); also MIGRATE_ID's response.
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct DestroyIdResp {
    pub events_reported: u32,
}

/// `struct rdma_ucm_bind_ip` (40 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct BindIp {
    pub response: u64,
    pub addr: SockaddrIn6,
    pub id: u32,
}

/// `struct rdma_ucm_bind` (136 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct Bind {
    pub id: u32,
    pub addr_size: u16,
    pub reserved: u16,
    pub addr: SockaddrStorage,
}

/// `struct rdma_ucm_resolve_ip` (64 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct ResolveIp {
    pub src_addr: SockaddrIn6,
    pub dst_addr: SockaddrIn6,
    pub id: u32,
    pub timeout_ms: u32,
}

/// `struct rdma_ucm_resolve_addr` (272 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct ResolveAddr {
    pub id: u32,
    pub timeout_ms: u32,
    pub src_size: u16,
    pub dst_size: u16,
    pub reserved: u32,
    pub src_addr: SockaddrStorage,
    pub dst_addr: SockaddrStorage,
}

/// `struct rdma_ucm_resolve_route` (8 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct ResolveRoute {
    pub id: u32,
    pub timeout_ms: u32,
}

/// `struct rdma_ucm_query` (16 bytes); also QUERY_ROUTE (option ignored).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct Query {
    pub response: u64,
    pub id: u32,
    pub option: u32,
}

/// `struct ib_user_path_rec` (64 bytes). `be` fields are in network byte order.
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct UserPathRec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: u32,
    pub flow_label: u32,
    pub reversible: u32,
    pub mtu: u32,
    pub pkey: u16,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub numb_path: u8,
    pub sl: u8,
    pub mtu_selector: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct rdma_ucm_query_route_resp` (208 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct QueryRouteResp {
    /// Big-endian bytes (raw copy of `ib_device.node_guid`).
    pub node_guid: u64,
    pub ib_route: [UserPathRec; 2],
    pub src_addr: SockaddrIn6,
    pub dst_addr: SockaddrIn6,
    pub num_paths: u32,
    pub port_num: u8,
    pub reserved: [u8; 3],
    pub ibdev_index: u32,
    pub reserved1: u32,
}

/// `struct rdma_ucm_query_addr_resp` (280 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct QueryAddrResp {
    /// Big-endian bytes.
    pub node_guid: u64,
    pub port_num: u8,
    pub reserved: u8,
    /// Big-endian.
    pub pkey: u16,
    pub src_size: u16,
    pub dst_size: u16,
    pub src_addr: SockaddrStorage,
    pub dst_addr: SockaddrStorage,
    pub ibdev_index: u32,
    pub reserved1: u32,
}

/// `struct ib_path_rec_data` (72 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct PathRecData {
    pub flags: u32,
    pub reserved: u32,
    pub path_rec: [u32; 16],
}

/// `struct rdma_ucm_query_path_resp` (8 bytes) followed by `num_paths` [`PathRecData`]; here
/// with room for two paths and the spare entry the kernel's `>` test needs.
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct QueryPathResp {
    pub num_paths: u32,
    pub reserved: u32,
    pub path_data: [PathRecData; 3],
}

/// `struct rdma_ucm_conn_param` (272 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct ConnParam {
    pub qp_num: u32,
    pub qkey: u32,
    pub private_data: [u8; 256],
    pub private_data_len: u8,
    pub srq: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub valid: u8,
}

/// `struct rdma_ucm_ud_param` (304 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct UdParam {
    pub qp_num: u32,
    pub qkey: u32,
    pub ah_attr: AhAttr,
    pub private_data: [u8; 256],
    pub private_data_len: u8,
    pub reserved: [u8; 7],
}

/// `struct rdma_ucm_ece` (8 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct Ece {
    pub vendor_id: u32,
    pub attr_mod: u32,
}

/// `struct rdma_ucm_connect` (288 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct Connect {
    pub conn_param: ConnParam,
    pub id: u32,
    pub reserved: u32,
    pub ece: Ece,
}

/// `struct rdma_ucm_listen` (8 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct Listen {
    pub id: u32,
    pub backlog: u32,
}

/// `struct rdma_ucm_accept` (296 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct Accept {
    pub uid: u64,
    pub conn_param: ConnParam,
    pub id: u32,
    pub reserved: u32,
    pub ece: Ece,
}

/// `struct rdma_ucm_reject` (264 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct Reject {
    pub id: u32,
    pub private_data_len: u8,
    pub reason: u8,
    pub reserved: [u8; 2],
    pub private_data: [u8; 256],
}

/// `struct rdma_ucm_disconnect` (4 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct Disconnect {
    pub id: u32,
}

/// `struct rdma_ucm_init_qp_attr` (16 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct InitQpAttr {
    pub response: u64,
    pub id: u32,
    pub qp_state: u32,
}

/// `struct rdma_ucm_notify` (8 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct Notify {
    pub id: u32,
    pub event: u32,
}

/// `struct rdma_ucm_join_ip_mcast` (48 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct JoinIpMcast {
    pub response: u64,
    pub uid: u64,
    pub addr: SockaddrIn6,
    pub id: u32,
}

/// `struct rdma_ucm_join_mcast` (152 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct JoinMcast {
    pub response: u64,
    pub uid: u64,
    pub id: u32,
    pub addr_size: u16,
    pub join_flags: u16,
    pub addr: SockaddrStorage,
}

/// `struct rdma_ucm_get_event` (8 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct GetEvent {
    pub response: u64,
}

/// The `param` union of [`EventResp`]: `conn` for RC ids, `ud` for UD ids.
///
/// The members are private so that every value has all 304 bytes initialised: it is either
/// zeroed and then written by the kernel (GET_EVENT writes the whole response), or built by
/// [`EventParam::from_conn`]/[`EventParam::from_ud`], which zero the whole union before
/// writing one member. Reading either view is then reading initialised bytes.
#[derive(Copy, Clone)]
#[repr(C)]
pub(crate) union EventParam {
    conn: ConnParam,
    ud: UdParam,
}

impl EventParam {
    /// A union whose `conn` view is `conn` and whose remaining bytes (the `ud` view's tail)
    /// are zero.
    pub(crate) fn from_conn(conn: ConnParam) -> EventParam {
        let mut param = EventParam::zeroed();
        param.conn = conn;
        param
    }
    /// A union whose `ud` view is `ud`.
    pub(crate) fn from_ud(ud: UdParam) -> EventParam {
        let mut param = EventParam::zeroed();
        param.ud = ud;
        param
    }
    /// The connection view.
    pub(crate) fn conn(&self) -> ConnParam {
        // SAFETY: every constructor initialises all bytes of the union (see the type's docs:
        // `Pod::zeroed` or the kernel write the whole of it, and writing a member keeps the
        // other bytes), and any bit pattern is a valid ConnParam (Pod).
        unsafe { self.conn }
    }
    /// The datagram view.
    pub(crate) fn ud(&self) -> UdParam {
        // SAFETY: as in `conn`: all 304 bytes are initialised and UdParam is Pod.
        unsafe { self.ud }
    }
}

impl std::fmt::Debug for EventParam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventParam")
            .field("conn", &self.conn())
            .finish()
    }
}

/// `struct rdma_ucm_event_resp` (336 bytes on 5.8+; 328 before).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct EventResp {
    pub uid: u64,
    pub id: u32,
    pub event: u32,
    /// An `i32`: 0, a negative errno, or (REJECTED on IB/RoCE) a positive CM reject reason.
    pub status: u32,
    pub param: EventParam,
    pub reserved: u32,
    pub ece: Ece,
}

/// `struct rdma_ucm_set_option` (24 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct SetOption {
    pub optval: u64,
    pub id: u32,
    pub level: u32,
    pub optname: u32,
    pub optlen: u32,
}

/// `struct rdma_ucm_migrate_id` (16 bytes).
#[derive(Copy, Clone, Debug)]
#[repr(C)]
pub(crate) struct MigrateId {
    pub response: u64,
    pub id: u32,
    pub fd: u32,
}

macro_rules! pod {
    ($($t:ty),* $(,)?) => {
        $(
            // SAFETY: a `#[repr(C)]` struct of integers/arrays/Pod structs whose layout test
            // (layout_tests.rs) proves it has no padding.
            unsafe impl Pod for $t {}
        )*
    };
}

pod!(
    CmdHdr,
    SockaddrIn6,
    SockaddrStorage,
    CreateId,
    CreateIdResp,
    DestroyId,
    DestroyIdResp,
    BindIp,
    Bind,
    ResolveIp,
    ResolveAddr,
    ResolveRoute,
    Query,
    UserPathRec,
    QueryRouteResp,
    QueryAddrResp,
    PathRecData,
    QueryPathResp,
    ConnParam,
    UdParam,
    Ece,
    Connect,
    Listen,
    Accept,
    Reject,
    Disconnect,
    InitQpAttr,
    Notify,
    JoinIpMcast,
    JoinMcast,
    GetEvent,
    EventParam,
    EventResp,
    SetOption,
    MigrateId,
);
