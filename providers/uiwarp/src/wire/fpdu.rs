//! The MPA FPDU (framed protocol data unit, RFC 5044 section 4): one DDP segment after setup.
//!
//! ```text
//! off     size  field
//!   0        2  ULPDU_Length (big-endian): DDP/RDMAP header + payload
//!   2        n  ULPDU
//!   2+n   0..3  pad (zeros) so that 2 + n + pad is a multiple of 4
//!   ..       4  CRC32c over everything before it, little-endian; 0 when CRC is off
//! ```
//! No markers: neither we nor siw use them.

use super::crc32c;
use super::{check_len, read_u16, WireResult};

/// Bytes of the length field.
pub const LENGTH_LEN: usize = 2;
/// Bytes of the CRC field.
pub const CRC_LEN: usize = 4;
/// The largest ULPDU the length field can carry.
pub const MAX_ULPDU: usize = u16::MAX as usize;

/// Pad bytes after a ULPDU of `ulpdu_len` bytes.
pub const fn pad_len(ulpdu_len: usize) -> usize {
    (4 - (LENGTH_LEN + ulpdu_len) % 4) % 4
}

/// Bytes of a whole FPDU carrying `ulpdu_len` bytes.
pub const fn frame_len(ulpdu_len: usize) -> usize {
    LENGTH_LEN + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}

/// A view of one FPDU.
#[derive(Debug, Clone)]
pub struct Fpdu<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Fpdu<T> {
    /// Wraps a buffer without checking it.
    pub fn new_unchecked(buffer: T) -> Fpdu<T> {
        Fpdu { buffer }
    }

    /// Wraps a buffer after checking that it holds the whole FPDU its length field announces.
    pub fn new_checked(buffer: T) -> WireResult<Fpdu<T>> {
        let f = Fpdu::new_unchecked(buffer);
        let len = f.buffer.as_ref().len();
        check_len("MPA FPDU length field", len, LENGTH_LEN)?;
        check_len("MPA FPDU", len, f.total_len())?;
        Ok(f)
    }

    /// The length of the FPDU starting at `prefix`, or `None` if fewer than 2 bytes are there.
    pub fn peek_len(prefix: &[u8]) -> Option<usize> {
        (prefix.len() >= LENGTH_LEN).then(|| frame_len(usize::from(read_u16(prefix, 0..2))))
    }

    /// The ULPDU_Length field.
    pub fn ulpdu_length(&self) -> u16 {
        read_u16(self.buffer.as_ref(), 0..2)
    }

    /// The bytes of the whole FPDU.
    pub fn total_len(&self) -> usize {
        frame_len(usize::from(self.ulpdu_length()))
    }

    /// The ULPDU: the DDP segment.
    pub fn ulpdu(&self) -> &[u8] {
        &self.buffer.as_ref()[LENGTH_LEN..LENGTH_LEN + usize::from(self.ulpdu_length())]
    }

    /// The CRC field as sent (little-endian on the wire).
    pub fn crc_field(&self) -> u32 {
        let end = self.total_len();
        let b = &self.buffer.as_ref()[end - CRC_LEN..end];
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The CRC32c of the length, ULPDU and pad.
    pub fn compute_crc(&self) -> u32 {
        crc32c::checksum(&self.buffer.as_ref()[..self.total_len() - CRC_LEN])
    }

    /// Whether the CRC field matches the contents.
    #[inline]
    pub fn crc_is_valid(&self) -> bool {
        self.crc_field() == self.compute_crc()
    }
}

/// Starts an FPDU at the end of `out`: reserves the length field. Append the ULPDU, then call
/// [`finish`] with the returned start.
#[inline]
pub fn begin(out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0, 0]);
    start
}

/// Finishes the FPDU begun at `start`: fills in the length, appends the pad and the CRC
/// (computed if `crc`, else zero as siw sends it). The ULPDU must not exceed [`MAX_ULPDU`].
#[inline]
pub fn finish(out: &mut Vec<u8>, start: usize, crc: bool) {
    let ulpdu = out.len() - start - LENGTH_LEN;
    debug_assert!(ulpdu <= MAX_ULPDU, "ULPDU of {ulpdu} bytes");
    let len = u16::try_from(ulpdu).unwrap_or(u16::MAX);
    out[start..start + LENGTH_LEN].copy_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&[0; 3][..pad_len(ulpdu)]);
    let value = if crc {
        crc32c::checksum(&out[start..])
    } else {
        0
    };
    out.extend_from_slice(&value.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Known-answer vectors from wire.md appendix A (tshark: Good CRC32).
    #[test]
    fn known_answer_vectors() {
        let read_response = hex("000e c142 00000000 0000000000000000 6975d6ca");
        let f = Fpdu::new_checked(&read_response[..]).unwrap();
        assert_eq!(f.ulpdu_length(), 14);
        assert_eq!(f.total_len(), read_response.len());
        assert!(f.crc_is_valid());

        let send = hex(
            "001f 4143 00000000 00000000 00000001 00000000 68656c6c6f2c20776f726c6421 000000 efcc6226",
        );
        let f = Fpdu::new_checked(&send[..]).unwrap();
        assert_eq!(f.ulpdu_length(), 31);
        assert_eq!(pad_len(31), 3);
        assert!(f.crc_is_valid());
        assert_eq!(&f.ulpdu()[18..], b"hello, world!");

        let mut built = Vec::new();
        let start = begin(&mut built);
        built.extend_from_slice(&send[2..33]);
        finish(&mut built, start, true);
        assert_eq!(built, send);
    }

    #[test]
    fn truncation_and_bad_crc() {
        let mut v = Vec::new();
        let s = begin(&mut v);
        v.extend_from_slice(&[0xC1, 0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
        finish(&mut v, s, true);
        assert_eq!(v.len() % 4, 0);
        for cut in 0..v.len() {
            assert!(Fpdu::new_checked(&v[..cut]).is_err());
        }
        assert_eq!(Fpdu::<&[u8]>::peek_len(&v), Some(v.len()));
        let mut bad = v.clone();
        bad[5] ^= 1;
        assert!(!Fpdu::new_checked(&bad[..]).unwrap().crc_is_valid());
        let mut zero = Vec::new();
        let s = begin(&mut zero);
        finish(&mut zero, s, false);
        assert_eq!(zero, [0, 0, 0, 0, 0, 0, 0, 0]);
    }
}
