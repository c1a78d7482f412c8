//! rxe work queue elements as bytes (docs/kernel-abi.md#rxe-work-queue-elements): the send WQE
//! (`struct rxe_send_wqe`, 208-byte header then SGEs or inline data) and the receive WQE
//! (`struct rxe_recv_wqe`, 40-byte header then SGEs), and CQE decoding.
#![forbid(unsafe_code)]

use rdmasock_verbs::__private::WorkCompletionDesc;
use rdmasock_verbs::wr::{SendFlags, SendOp};
use rdmasock_verbs::{QpNumber, WorkCompletion};

/// Bytes of `struct rxe_send_wqe` before the SGEs / inline data.
pub(crate) const SEND_HEADER_LEN: usize = 208;
/// Bytes of `struct rxe_recv_wqe` before the SGEs.
pub(crate) const RECV_HEADER_LEN: usize = 40;
/// Bytes of one `struct rxe_sge`.
pub(crate) const SGE_LEN: usize = 16;
/// Bytes of the CQE (`struct ib_uverbs_wc`) at the start of a CQ slot.
#[cfg(test)]
pub(crate) const CQE_LEN: usize = 48;

// rxe_send_wr (at 0)
const WR_ID: usize = 0;
const WR_NUM_SGE: usize = 8;
const WR_OPCODE: usize = 12;
const WR_SEND_FLAGS: usize = 16;
const WR_IMM: usize = 20;
const WR_REMOTE_ADDR: usize = 24;
const WR_RDMA_RKEY: usize = 32;
const WR_ATOMIC_COMPARE_ADD: usize = 32;
const WR_ATOMIC_SWAP: usize = 40;
const WR_ATOMIC_RKEY: usize = 48;
// rxe_send_wqe after the wr
const WQE_IOVA: usize = 152;
const WQE_DMA: usize = 184;
// rxe_dma_info, relative to its start
const DMA_LENGTH: usize = 0;
const DMA_RESID: usize = 4;
const DMA_NUM_SGE: usize = 12;
// rxe_recv_wqe
const RECV_NUM_SGE: usize = 8;
const RECV_DMA: usize = 16;

#[inline]
fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

#[inline]
fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// One scatter/gather entry as the WQE stores it (`struct rxe_sge`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Sge {
    /// Local virtual address.
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// Local key of the region.
    pub lkey: u32,
}

impl From<&rdmasock_verbs::ScatterGather<'_>> for Sge {
    fn from(s: &rdmasock_verbs::ScatterGather<'_>) -> Sge {
        Sge {
            addr: s.addr(),
            length: s.length(),
            lkey: s.lkey().0,
        }
    }
}

/// Anything that describes one scatter/gather entry: the verbs layer's [`ScatterGather`]
/// (what the data path encodes straight from the caller's list) or an [`Sge`].
///
/// [`ScatterGather`]: rdmasock_verbs::ScatterGather
pub(crate) trait SgeSource {
    /// The entry in WQE form.
    fn sge(&self) -> Sge;
}

impl SgeSource for Sge {
    fn sge(&self) -> Sge {
        *self
    }
}

impl SgeSource for rdmasock_verbs::ScatterGather<'_> {
    fn sge(&self) -> Sge {
        Sge::from(self)
    }
}

/// The fields of a send work request the WQE carries.
#[derive(Copy, Clone, Debug)]
pub(crate) struct SendDescriptor<'a, S: SgeSource> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Operation and its remote fields.
    pub op: SendOp,
    /// `IB_SEND_*` flags.
    pub flags: SendFlags,
    /// The gather (or, for READ and atomics, scatter) list.
    pub sges: &'a [S],
}

/// Writes the SGE array at `at`; returns the total length of the entries.
#[inline]
fn put_sges<S: SgeSource>(buf: &mut [u8], at: usize, sges: &[S]) -> u32 {
    if let [s] = sges {
        // The usual request has one entry: no loop.
        let s = s.sge();
        put_sge(&mut buf[at..at + SGE_LEN], s);
        return s.length;
    }
    let dst = &mut buf[at..at + sges.len() * SGE_LEN];
    let mut total = 0u64;
    for (chunk, s) in dst.chunks_exact_mut(SGE_LEN).zip(sges) {
        let s = s.sge();
        put_sge(chunk, s);
        total += u64::from(s.length);
    }
    total as u32
}

/// Writes one `struct rxe_sge` into `chunk` (16 bytes).
#[inline]
fn put_sge(chunk: &mut [u8], s: Sge) {
    chunk[0..8].copy_from_slice(&s.addr.to_le_bytes());
    chunk[8..12].copy_from_slice(&s.length.to_le_bytes());
    chunk[12..16].copy_from_slice(&s.lkey.to_le_bytes());
}

#[inline]
fn put_dma(buf: &mut [u8], at: usize, length: u32, num_sge: u32) {
    put_u32(buf, at + DMA_LENGTH, length);
    put_u32(buf, at + DMA_RESID, length);
    put_u32(buf, at + DMA_NUM_SGE, num_sge);
    // cur_sge (+8), sge_offset (+16) and reserved (+20) stay zero.
}

/// Bytes a send WQE needs: the header plus the SGE array or the inline bytes.
#[cfg(test)]
pub(crate) fn send_len(num_sge: usize, inline_len: Option<usize>) -> usize {
    SEND_HEADER_LEN + inline_len.unwrap_or(num_sge * SGE_LEN)
}

/// Encodes `wr` in place into `buf` (a send queue slot of at least [`send_len`] bytes,
/// whatever it held before): the 208-byte header is cleared and filled, then the SGE array
/// follows it — or, with `inline` (the payload length), nothing: the caller gathers that
/// many payload bytes to +208 ([`SEND_HEADER_LEN`]) itself. Bytes past [`send_len`] are left
/// alone (the kernel reads only `num_sge` entries or `length` inline bytes).
#[inline]
pub(crate) fn encode_send<S: SgeSource>(
    wr: &SendDescriptor<'_, S>,
    inline: Option<u32>,
    buf: &mut [u8],
) {
    let num_sge = wr.sges.len() as u32;
    buf[..SEND_HEADER_LEN].fill(0);
    put_u64(buf, WR_ID, wr.wr_id);
    put_u32(buf, WR_NUM_SGE, num_sge); // `reserved` since 6.1; num_sge before
    put_u32(buf, WR_OPCODE, wr.op.opcode());
    put_u32(buf, WR_SEND_FLAGS, wr.flags.bits());
    if let Some(imm) = wr.op.imm() {
        buf[WR_IMM..WR_IMM + 4].copy_from_slice(&imm.to_be_bytes());
    }
    match wr.op {
        SendOp::Send | SendOp::SendWithImm(_) => {}
        SendOp::RdmaWrite { remote_addr, rkey }
        | SendOp::RdmaWriteWithImm {
            remote_addr, rkey, ..
        }
        | SendOp::RdmaRead { remote_addr, rkey } => {
            put_u64(buf, WR_REMOTE_ADDR, remote_addr);
            put_u32(buf, WR_RDMA_RKEY, rkey.0);
            put_u64(buf, WQE_IOVA, remote_addr);
        }
        SendOp::AtomicCompareSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        } => {
            put_u64(buf, WR_REMOTE_ADDR, remote_addr);
            put_u64(buf, WR_ATOMIC_COMPARE_ADD, compare);
            put_u64(buf, WR_ATOMIC_SWAP, swap);
            put_u32(buf, WR_ATOMIC_RKEY, rkey.0);
            put_u64(buf, WQE_IOVA, remote_addr);
        }
        SendOp::AtomicFetchAdd {
            remote_addr,
            rkey,
            add,
        } => {
            put_u64(buf, WR_REMOTE_ADDR, remote_addr);
            put_u64(buf, WR_ATOMIC_COMPARE_ADD, add);
            put_u32(buf, WR_ATOMIC_RKEY, rkey.0);
            put_u64(buf, WQE_IOVA, remote_addr);
        }
    }
    let length = match inline {
        Some(len) => len,
        None => put_sges(buf, SEND_HEADER_LEN, wr.sges),
    };
    put_dma(buf, WQE_DMA, length, num_sge);
}

/// Bytes a receive WQE needs.
#[cfg(test)]
pub(crate) fn recv_len(num_sge: usize) -> usize {
    RECV_HEADER_LEN + num_sge * SGE_LEN
}

/// Encodes a receive request in place into `buf` (a receive queue slot of at least
/// [`recv_len`] bytes, whatever it held before): the 40-byte header is cleared and filled,
/// the SGE array follows.
#[inline]
pub(crate) fn encode_recv<S: SgeSource>(wr_id: u64, sges: &[S], buf: &mut [u8]) {
    let num_sge = sges.len() as u32;
    buf[..RECV_HEADER_LEN].fill(0);
    put_u64(buf, WR_ID, wr_id);
    put_u32(buf, RECV_NUM_SGE, num_sge);
    let length = put_sges(buf, RECV_HEADER_LEN, sges);
    put_dma(buf, RECV_DMA, length, num_sge);
}

/// Decodes a CQE (`struct ib_uverbs_wc`, the first 48 bytes of a CQ slot). The immediate
/// is turned to host order.
#[inline]
pub(crate) fn decode_cqe(d: WorkCompletionDesc) -> WorkCompletion {
    WorkCompletion {
        wr_id: d.wr_id,
        status: d.status,
        opcode: d.opcode,
        vendor_err: d.vendor_err,
        byte_len: d.byte_len,
        imm_data: u32::from_be(d.ex),
        qp_num: QpNumber(d.qp_num),
        src_qp: QpNumber(d.src_qp),
        wc_flags: d.wc_flags,
        pkey_index: d.pkey_index,
        slid: d.slid,
        sl: d.sl,
        dlid_path_bits: d.dlid_path_bits,
    }
}

#[cfg(test)]
#[path = "wqe_tests.rs"]
mod tests;
