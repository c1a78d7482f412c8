//! The uverbs legacy write ABI for shared receive queues: CREATE/MODIFY/QUERY/DESTROY_SRQ
//! (`ib_user_verbs.h`, docs/kernel-abi.md#shared-receive-queue-commands).

use super::abi::{Command, NoResponse, WriteCommand};
use super::pod::impl_pod;

/// `struct ib_uverbs_create_srq` (32 bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct CreateSrqRequest {
    pub response: u64,
    pub user_handle: u64,
    pub pd_handle: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ib_uverbs_create_srq_resp` (16 bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct CreateSrqResponse {
    pub srq_handle: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    /// The SRQ number (meaningful for XRC SRQs only).
    pub srqn: u32,
}

/// `struct ib_uverbs_modify_srq` (16 bytes; no response).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct ModifySrqRequest {
    pub srq_handle: u32,
    /// `IB_SRQ_MAX_WR` (1) and/or `IB_SRQ_LIMIT` (2).
    pub attr_mask: u32,
    pub max_wr: u32,
    pub srq_limit: u32,
}

/// `struct ib_uverbs_query_srq` (16 bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct QuerySrqRequest {
    pub response: u64,
    pub srq_handle: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_query_srq_resp` (16 bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct QuerySrqResponse {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_destroy_srq` (16 bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct DestroySrqRequest {
    pub response: u64,
    pub srq_handle: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_destroy_srq_resp` (4 bytes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
#[allow(missing_docs)]
pub(crate) struct DestroySrqResponse {
    pub events_reported: u32,
}

/// `IB_SRQ_LIMIT`: MODIFY_SRQ sets (arms) the limit.
pub(crate) const SRQ_ATTR_LIMIT: u32 = 1 << 1;

impl_pod!(
    CreateSrqRequest,
    CreateSrqResponse,
    ModifySrqRequest,
    QuerySrqRequest,
    QuerySrqResponse,
    DestroySrqRequest,
    DestroySrqResponse,
);

impl WriteCommand for CreateSrqRequest {
    const COMMAND: Command = Command::CreateSrq;
    type Response = CreateSrqResponse;
}
impl WriteCommand for ModifySrqRequest {
    const COMMAND: Command = Command::ModifySrq;
    type Response = NoResponse;
}
impl WriteCommand for QuerySrqRequest {
    const COMMAND: Command = Command::QuerySrq;
    type Response = QuerySrqResponse;
}
impl WriteCommand for DestroySrqRequest {
    const COMMAND: Command = Command::DestroySrq;
    type Response = DestroySrqResponse;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::abi::has_response_pointer;
    use crate::sys::pod::assert_layout;

    #[test]
    fn layouts() {
        assert_layout!(CreateSrqRequest, size 32, {
            response @ 0, user_handle @ 8, pd_handle @ 16, max_wr @ 20, max_sge @ 24,
            srq_limit @ 28,
        });
        assert_layout!(CreateSrqResponse, size 16, {
            srq_handle @ 0, max_wr @ 4, max_sge @ 8, srqn @ 12,
        });
        assert_layout!(ModifySrqRequest, size 16, {
            srq_handle @ 0, attr_mask @ 4, max_wr @ 8, srq_limit @ 12,
        });
        assert_layout!(QuerySrqRequest, size 16, { response @ 0, srq_handle @ 8, reserved @ 12 });
        assert_layout!(QuerySrqResponse, size 16, {
            max_wr @ 0, max_sge @ 4, srq_limit @ 8, reserved @ 12,
        });
        assert_layout!(DestroySrqRequest, size 16, { response @ 0, srq_handle @ 8, reserved @ 12 });
        assert_layout!(DestroySrqResponse, size 4, { events_reported @ 0 });
    }

    /// MODIFY_SRQ is the one SRQ command without a response pointer (the kernel reads its
    /// first word as the handle).
    #[test]
    fn response_pointers() {
        assert!(has_response_pointer::<CreateSrqRequest>());
        assert!(!has_response_pointer::<ModifySrqRequest>());
        assert!(has_response_pointer::<QuerySrqRequest>());
        assert!(has_response_pointer::<DestroySrqRequest>());
    }
}
