//! [`RxeSrq`]: a kernel SRQ handle with its mapped ring, in the receive ring's format.
#![forbid(unsafe_code)]

use crate::cq::{map_ring, MmapInfo};
use crate::qp::Producer;
use crate::wqe::{encode_recv, RECV_HEADER_LEN};
use rdmasock_verbs::kernel::{KernelPd, KernelSrq};
use rdmasock_verbs::provider::SrqOps;
use rdmasock_verbs::wr::PostError;
use rdmasock_verbs::{Error, RecvRequest, Result, SrqCapabilities, SrqInitAttributes};
use std::any::Any;
use std::sync::{Arc, Mutex};

/// An rxe shared receive queue. Its `as_any` returns itself.
#[derive(Debug)]
pub struct RxeSrq {
    // Field order is drop order: DESTROY_SRQ first, then unmap.
    kernel: KernelSrq,
    ring: Mutex<Producer>,
    /// The SRQ number the kernel reported.
    srq_num: u32,
}

/// The CREATE_SRQ driver response, `struct rxe_create_srq_resp` (`rdma_user_rxe.h`): where to
/// map the ring (`mi`, at 0) and the SRQ number (at 16), then 4 reserved bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct CreateSrqResponse {
    ring: MmapInfo,
    srq_num: u32,
}

impl CreateSrqResponse {
    /// Its size in bytes.
    const LEN: usize = 24;

    fn parse(out: &[u8; Self::LEN]) -> CreateSrqResponse {
        CreateSrqResponse {
            ring: MmapInfo::parse(out, 0),
            srq_num: u32::from_le_bytes(out[16..20].try_into().expect("4 bytes")),
        }
    }
}

/// `rxe_modify_srq_cmd`'s length: rxe refuses MODIFY_SRQ without it.
pub(crate) const MODIFY_SRQ_DATA_LEN: usize = 8;

/// The kernel handle of an SRQ created by this provider.
pub(crate) fn kernel_srq_handle(srq: &Arc<dyn SrqOps>) -> Result<u32> {
    srq.as_any()
        .downcast_ref::<RxeSrq>()
        .map(|s| s.kernel.handle())
        .ok_or_else(|| {
            Error::InvalidArgument(
                "an rxe queue pair needs a shared receive queue created on an rxe device".into(),
            )
        })
}

impl RxeSrq {
    /// CREATE_SRQ (no driver input; driver response `rxe_create_srq_resp`, 24 bytes) and the
    /// mapping of its ring.
    pub fn create(pd: &KernelPd, init: &SrqInitAttributes) -> Result<RxeSrq> {
        let mut out = [0u8; CreateSrqResponse::LEN];
        let kernel = KernelSrq::create(pd, init, &mut out)?;
        let response = CreateSrqResponse::parse(&out);
        let ring = map_ring(pd.context(), response.ring, "shared receive queue")?;
        let caps = kernel.caps();
        let ring = Producer::new(ring, caps.max_wr, caps.max_sge, RECV_HEADER_LEN, 0);
        Ok(RxeSrq {
            kernel,
            ring: Mutex::new(ring),
            srq_num: response.srq_num,
        })
    }

    /// The SRQ number the kernel reported.
    pub fn srq_num(&self) -> u32 {
        self.srq_num
    }
}

impl SrqOps for RxeSrq {
    fn caps(&self) -> SrqCapabilities {
        self.kernel.caps()
    }

    fn cookie(&self) -> u64 {
        self.kernel.cookie()
    }

    fn post_recv(&self, wrs: &[RecvRequest<'_>]) -> std::result::Result<(), PostError> {
        let mut guard = self.ring.lock().expect("shared receive queue lock");
        let ring = &mut *guard;
        let mut result = Ok(());
        for (index, wr) in wrs.iter().enumerate() {
            if wr.sg_list.len() > ring.max_sge {
                let e = Error::InvalidArgument(format!(
                    "receive on shared receive queue {} has {} scatter/gather entries; it \
                     allows {} (ask for more in SrqInitAttributes::max_sge)",
                    self.srq_num,
                    wr.sg_list.len(),
                    ring.max_sge
                ));
                result = Err(PostError {
                    index,
                    wr_id: wr.wr_id,
                    error: e,
                });
                break;
            }
            if ring.full() {
                let e = Error::InvalidArgument(format!(
                    "shared receive queue {} is full: it holds {} receives",
                    self.srq_num, ring.depth
                ));
                result = Err(PostError {
                    index,
                    wr_id: wr.wr_id,
                    error: e,
                });
                break;
            }
            encode_recv(wr.wr_id, wr.sg_list, ring.next_slot());
        }
        // Those before a failed one are posted, as with verbs.
        ring.publish();
        result
    }

    fn set_limit(&self, limit: u32) -> Result<()> {
        self.kernel.set_limit(limit)
    }

    fn query_limit(&self) -> Result<u32> {
        self.kernel.query_limit()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `struct rxe_create_srq_resp` built byte by byte from the kernel's layout
    /// (`rdma/rdma_user_rxe.h`): `struct mminfo mi` (`__aligned_u64 offset`, `__u32 size`,
    /// `__u32 pad`), `__u32 srq_num`, `__u32 reserved`, little-endian. The pads hold garbage.
    #[test]
    fn create_srq_response_layout() {
        let mut out = [0u8; 24];
        out[0..8].copy_from_slice(&[0x00, 0x20, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00]);
        out[8..12].copy_from_slice(&[0x00, 0x40, 0x00, 0x00]);
        out[12..16].copy_from_slice(&[0xee; 4]);
        out[16..20].copy_from_slice(&[0x11, 0x00, 0x00, 0x00]);
        out[20..24].copy_from_slice(&[0xdd; 4]);
        assert_eq!(
            CreateSrqResponse::parse(&out),
            CreateSrqResponse {
                ring: MmapInfo {
                    offset: 0x3_0000_2000,
                    size: 0x4000,
                },
                srq_num: 0x11,
            }
        );
    }
}
