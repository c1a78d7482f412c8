//! rxe work queue elements as bytes (kernel-abi.md §3.5, §3.6): the send WQE
//! (`struct rxe_send_wqe`, 208-byte header then SGEs or inline data) and the receive WQE
//! (`struct rxe_recv_wqe`, 40-byte header then SGEs), and CQE decoding.
#![forbid(unsafe_code)]

use rdmasock_verbs::sys::abi::WorkCompletionDesc;
use rdmasock_verbs::sys::pod::from_bytes;
use rdmasock_verbs::wr::{SendFlags, SendOp};
use rdmasock_verbs::{QpNumber, WorkCompletion};

/// Bytes of `struct rxe_send_wqe` before the SGEs / inline data.
pub const SEND_HEADER_LEN: usize = 208;
/// Bytes of `struct rxe_recv_wqe` before the SGEs.
pub const RECV_HEADER_LEN: usize = 40;
/// Bytes of one `struct rxe_sge`.
pub const SGE_LEN: usize = 16;
/// Bytes of the CQE (`struct ib_uverbs_wc`) at the start of a CQ slot.
pub const CQE_LEN: usize = 48;

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

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// One scatter/gather entry as the WQE stores it (`struct rxe_sge`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Sge {
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

/// The fields of a send work request the WQE carries.
#[derive(Copy, Clone, Debug)]
pub struct SendDescriptor<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Operation and its remote fields.
    pub op: SendOp,
    /// `IB_SEND_*` flags.
    pub flags: SendFlags,
    /// The gather (or, for READ and atomics, scatter) list.
    pub sges: &'a [Sge],
}

fn put_sges(buf: &mut [u8], at: usize, sges: &[Sge]) {
    for (i, s) in sges.iter().enumerate() {
        let o = at + i * SGE_LEN;
        put_u64(buf, o, s.addr);
        put_u32(buf, o + 8, s.length);
        put_u32(buf, o + 12, s.lkey);
    }
}

fn total_length(sges: &[Sge]) -> u32 {
    sges.iter().map(|s| u64::from(s.length)).sum::<u64>() as u32
}

fn put_dma(buf: &mut [u8], at: usize, length: u32, num_sge: u32) {
    put_u32(buf, at + DMA_LENGTH, length);
    put_u32(buf, at + DMA_RESID, length);
    put_u32(buf, at + DMA_NUM_SGE, num_sge);
    // cur_sge (+8), sge_offset (+16) and reserved (+20) stay zero.
}

/// Bytes a send WQE needs: the header plus the SGE array or the inline bytes.
pub fn send_len(num_sge: usize, inline_len: Option<usize>) -> usize {
    SEND_HEADER_LEN + inline_len.unwrap_or(num_sge * SGE_LEN)
}

/// Encodes `wr` into `buf` (zeroed, at least [`send_len`] bytes). With `inline` the payload
/// bytes (already gathered from the SGEs) go to +208 instead of the SGE array.
pub fn encode_send(wr: &SendDescriptor<'_>, inline: Option<&[u8]>, buf: &mut [u8]) {
    let num_sge = wr.sges.len() as u32;
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
    put_dma(buf, WQE_DMA, total_length(wr.sges), num_sge);
    match inline {
        Some(data) => buf[SEND_HEADER_LEN..SEND_HEADER_LEN + data.len()].copy_from_slice(data),
        None => put_sges(buf, SEND_HEADER_LEN, wr.sges),
    }
}

/// Bytes a receive WQE needs.
pub fn recv_len(num_sge: usize) -> usize {
    RECV_HEADER_LEN + num_sge * SGE_LEN
}

/// Encodes a receive request into `buf` (zeroed, at least [`recv_len`] bytes).
pub fn encode_recv(wr_id: u64, sges: &[Sge], buf: &mut [u8]) {
    let num_sge = sges.len() as u32;
    put_u64(buf, WR_ID, wr_id);
    put_u32(buf, RECV_NUM_SGE, num_sge);
    put_dma(buf, RECV_DMA, total_length(sges), num_sge);
    put_sges(buf, RECV_HEADER_LEN, sges);
}

/// Decodes the 48-byte CQE at the start of a CQ slot. The immediate is turned to host order.
pub fn decode_cqe(bytes: &[u8; CQE_LEN]) -> WorkCompletion {
    let d: WorkCompletionDesc = from_bytes(bytes);
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
