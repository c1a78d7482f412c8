//! iWARP wire formats as zero-copy views, in the style of smoltcp's `wire` module.
//!
//! Every view is a `Packet<T: AsRef<[u8]>>`-like wrapper over a byte buffer with offset
//! constants, accessors, setters for `T: AsMut<[u8]>`, and a `new_checked` constructor.
//!
//! The contract, as in smoltcp:
//! * `new_checked` validates every length the accessors rely on; once it succeeds, **no
//!   accessor of that view can panic**. Use it on every buffer that came from a peer.
//! * `new_unchecked` is for buffers being emitted, sized with the matching `*_LEN` constant or
//!   the `buffer_len()` of the representation about to be written into them.
//! * A `Repr` (parsed, validated, owned or borrowing) has `parse` and `emit`; `emit` never
//!   panics when the buffer is exactly `buffer_len()` long.
//!
//! Layers, from the TCP stream upwards:
//! * [`mpa`]: the MPA request/reply frames of connection setup (RFC 5044 with the RFC 6581
//!   enhanced IRD/ORD block) and the FPDU framing (length, pad, CRC32c) of every later message.
//! * [`fpdu`]: the framed PDU that carries each DDP segment after setup.
//! * [`ddp`]: the DDP control bytes with the RDMAP version and opcode, tagged and untagged
//!   headers (RFC 5041, RFC 5040 section 4).
//! * [`rdmap`]: the RDMAP bodies: the RDMA READ request and the TERMINATE message.
//! * [`crc32c`]: the Castagnoli CRC that MPA uses.
#![forbid(unsafe_code)]

pub mod crc32c;
pub mod ddp;
pub mod fpdu;
pub mod mpa;
pub mod rdmap;

use std::ops::Range;

/// A byte range of a header field.
pub(crate) type Field = Range<usize>;

/// Why a buffer is not a valid frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer is shorter than the frame it starts.
    #[error("truncated {what}: needs {needed} bytes, has {got}")]
    Truncated {
        /// The frame or header being read.
        what: &'static str,
        /// Bytes the frame needs.
        needed: usize,
        /// Bytes the buffer holds.
        got: usize,
    },
    /// A field holds a value the protocol does not allow.
    #[error("malformed {what}: {detail}")]
    Malformed {
        /// The frame or header being read.
        what: &'static str,
        /// What is wrong with it.
        detail: &'static str,
    },
}

/// Results of parsing.
pub type WireResult<T> = Result<T, WireError>;

pub(crate) fn check_len(what: &'static str, got: usize, needed: usize) -> WireResult<()> {
    if got < needed {
        Err(WireError::Truncated { what, needed, got })
    } else {
        Ok(())
    }
}

pub(crate) fn read_u16(data: &[u8], field: Field) -> u16 {
    u16::from_be_bytes([data[field.start], data[field.start + 1]])
}

pub(crate) fn read_u32(data: &[u8], field: Field) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&data[field]);
    u32::from_be_bytes(b)
}

pub(crate) fn read_u64(data: &[u8], field: Field) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&data[field]);
    u64::from_be_bytes(b)
}

pub(crate) fn write_u16(data: &mut [u8], field: Field, v: u16) {
    data[field].copy_from_slice(&v.to_be_bytes());
}

pub(crate) fn write_u32(data: &mut [u8], field: Field, v: u32) {
    data[field].copy_from_slice(&v.to_be_bytes());
}

pub(crate) fn write_u64(data: &mut [u8], field: Field, v: u64) {
    data[field].copy_from_slice(&v.to_be_bytes());
}
