//! [`SiwSrq`]: a kernel SRQ handle with its mapped receive array (elements in the receive
//! queue's format, `struct siw_rqe`).
#![forbid(unsafe_code)]

use crate::cq::map_elements;
use crate::element::{encode_rqe, Sge, MAX_SGE, RQE_LEN};
use crate::qp::Producer;
use rdmasock_verbs::kernel::{KernelPd, KernelSrq};
use rdmasock_verbs::provider::SrqOps;
use rdmasock_verbs::wr::PostError;
use rdmasock_verbs::{Error, RecvRequest, Result, SrqCapabilities, SrqInitAttributes};
use std::any::Any;
use std::sync::{Arc, Mutex};

/// Bytes of `struct siw_uresp_create_srq`: `num_rqe` (u32), a pad, `srq_key` (u64).
const CREATE_SRQ_RESPONSE_LEN: usize = 16;

/// A siw shared receive queue. Its `as_any` returns itself.
#[derive(Debug)]
pub struct SiwSrq {
    // Field order is drop order: DESTROY_SRQ first, then unmap.
    kernel: KernelSrq,
    array: Mutex<Producer>,
    device: String,
}

/// The kernel handle of an SRQ created by this provider.
pub(crate) fn kernel_srq_handle(srq: &Arc<dyn SrqOps>) -> Result<u32> {
    srq.as_any()
        .downcast_ref::<SiwSrq>()
        .map(|s| s.kernel.handle())
        .ok_or_else(|| {
            Error::InvalidArgument(
                "a siw queue pair needs a shared receive queue created on a siw device".into(),
            )
        })
}

/// The element count and mmap key of `siw_uresp_create_srq`.
fn parse_response(out: &[u8; CREATE_SRQ_RESPONSE_LEN]) -> (u32, u64) {
    (
        u32::from_le_bytes(out[0..4].try_into().expect("4 bytes")),
        u64::from_le_bytes(out[8..16].try_into().expect("8 bytes")),
    )
}

impl SiwSrq {
    /// CREATE_SRQ (no driver input; driver response `siw_uresp_create_srq`) and the mapping
    /// of its receive array.
    pub fn create(pd: &KernelPd, init: &SrqInitAttributes) -> Result<SiwSrq> {
        let device = pd.context().device_info().name.clone();
        if init.max_sge as usize > MAX_SGE {
            return Err(Error::Unsupported {
                device,
                operation: format!(
                    "shared receive queues with max_sge = {} (siw allows at most {MAX_SGE})",
                    init.max_sge
                ),
            });
        }
        let mut out = [0u8; CREATE_SRQ_RESPONSE_LEN];
        let kernel = KernelSrq::create(pd, init, &mut out)?;
        let (num_rqe, key) = parse_response(&out);
        let array = map_elements(
            pd.context(),
            key,
            num_rqe,
            RQE_LEN,
            0,
            "shared receive queue",
        )?;
        Ok(SiwSrq {
            kernel,
            array: Mutex::new(Producer::new(array)),
            device,
        })
    }
}

impl SrqOps for SiwSrq {
    fn caps(&self) -> SrqCapabilities {
        self.kernel.caps()
    }

    fn cookie(&self) -> u64 {
        self.kernel.cookie()
    }

    fn post_recv(&self, wrs: &[RecvRequest<'_>]) -> std::result::Result<(), PostError> {
        let caps = self.kernel.caps();
        let mut array = self.array.lock().expect("shared receive queue lock");
        let mut sges: Vec<Sge> = Vec::with_capacity(MAX_SGE);
        for (index, wr) in wrs.iter().enumerate() {
            let n = wr.sg_list.len();
            let refused = if n > caps.max_sge as usize || n > MAX_SGE {
                Some(format!(
                    "a receive on a shared receive queue of {} has {n} scatter/gather entries; \
                     the queue allows {} (ask for more in SrqInitAttributes::max_sge; siw allows \
                     at most {MAX_SGE})",
                    self.device, caps.max_sge
                ))
            } else if array.full() {
                Some(format!(
                    "a shared receive queue of {} is full: it holds {} receives",
                    self.device,
                    array.ring.count()
                ))
            } else {
                None
            };
            if let Some(message) = refused {
                return Err(PostError {
                    index,
                    wr_id: wr.wr_id,
                    error: Error::InvalidArgument(message),
                });
            }
            sges.clear();
            sges.extend(wr.sg_list.iter().map(Sge::from));
            array.scratch.fill(0);
            let element_flags = encode_rqe(wr.wr_id, &sges, &mut array.scratch);
            array.publish(element_flags);
        }
        Ok(())
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

    /// `struct siw_uresp_create_srq` (`rdma/siw-abi.h`): `__u32 num_rqe`, `__u32 pad`,
    /// `__aligned_u64 srq_key`, little-endian; the pad holds garbage.
    #[test]
    fn create_srq_response_layout() {
        let mut out = [0u8; CREATE_SRQ_RESPONSE_LEN];
        out[0..4].copy_from_slice(&[0x00, 0x01, 0x00, 0x00]);
        out[4..8].copy_from_slice(&[0xee; 4]);
        out[8..16].copy_from_slice(&[0x00, 0x30, 0x09, 0x00, 0x00, 0x00, 0x00, 0x01]);
        assert_eq!(parse_response(&out), (0x100, 0x0100_0000_0009_3000));
    }
}
