//! CRC32c (Castagnoli), as MPA uses it: reflected polynomial 0x82F63B78, initial value and
//! final XOR 0xFFFFFFFF, sent little-endian (what siw emits and tshark checks).
//!
//! The arithmetic is the `crc32c` crate's: it uses the CPU's CRC32 instruction (SSE 4.2 on
//! x86-64, the CRC extension on aarch64) when present and a table otherwise. MPA's CRC is on
//! by default and runs over every payload byte on both sides, so a table-driven CRC capped
//! the provider's bandwidth; the tests below pin it to a bitwise reference and RFC 3720's
//! vectors.

#[cfg(test)]
const POLYNOMIAL: u32 = 0x82F6_3B78;

/// A running CRC32c over several pieces of data.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Crc32c {
    /// The CRC of the data so far, final XOR applied (what `crc32c_append` continues from).
    value: u32,
}

impl Default for Crc32c {
    fn default() -> Self {
        Crc32c::new()
    }
}

impl Crc32c {
    /// A CRC over no data yet.
    pub const fn new() -> Crc32c {
        Crc32c { value: 0 }
    }

    /// Adds `data` to the CRC.
    pub fn update(&mut self, data: &[u8]) {
        self.value = crc32c::crc32c_append(self.value, data);
    }

    /// The CRC of everything added so far.
    pub fn finish(&self) -> u32 {
        self.value
    }
}

/// The CRC32c of `data`.
pub fn checksum(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bitwise(data: &[u8]) -> u32 {
        let mut crc = 0xFFFF_FFFFu32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ POLYNOMIAL
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn check_value() {
        assert_eq!(checksum(b"123456789"), 0xE306_9283);
        assert_eq!(
            checksum(b"123456789").to_le_bytes(),
            [0x83, 0x92, 0x06, 0xe3]
        );
    }

    /// RFC 3720 appendix B.4 test vectors.
    #[test]
    fn rfc3720_vectors() {
        assert_eq!(checksum(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(checksum(&[0xFFu8; 32]), 0x62A8_AB43);
        let inc: Vec<u8> = (0u8..32).collect();
        assert_eq!(checksum(&inc), 0x46DD_794E);
        let dec: Vec<u8> = (0u8..32).rev().collect();
        assert_eq!(checksum(&dec), 0x113F_DB5C);
        let iscsi_read: [u8; 48] = [
            0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14,
            0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(checksum(&iscsi_read), 0xD996_3A56);
    }

    #[test]
    fn matches_bitwise_and_incremental() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 999, 1000] {
            assert_eq!(checksum(&data[..len]), bitwise(&data[..len]), "len {len}");
        }
        let mut c = Crc32c::new();
        c.update(&data[..3]);
        c.update(&data[3..500]);
        c.update(&data[500..]);
        assert_eq!(c.finish(), bitwise(&data));
    }
}
