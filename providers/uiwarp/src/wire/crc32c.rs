//! CRC32c (Castagnoli), as MPA uses it: reflected polynomial 0x82F63B78, initial value and
//! final XOR 0xFFFFFFFF, sent little-endian (what siw emits and tshark checks).
//!
//! Table-driven, slice-by-16: sixteen 256-entry tables built at compile time (16 KiB), one
//! table lookup per byte but sixteen independent ones per step.

const POLYNOMIAL: u32 = 0x82F6_3B78;

/// How many bytes one step of [`Crc32c::update`] consumes (and how many tables there are).
const SLICES: usize = 16;

const fn make_tables() -> [[u32; 256]; SLICES] {
    let mut tables = [[0u32; 256]; SLICES];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLYNOMIAL
            } else {
                crc >> 1
            };
            bit += 1;
        }
        tables[0][i] = crc;
        i += 1;
    }
    let mut t = 1;
    while t < SLICES {
        let mut i = 0;
        while i < 256 {
            let prev = tables[t - 1][i];
            tables[t][i] = (prev >> 8) ^ tables[0][(prev & 0xff) as usize];
            i += 1;
        }
        t += 1;
    }
    tables
}

static TABLES: [[u32; 256]; SLICES] = make_tables();

/// A running CRC32c over several pieces of data.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Crc32c {
    state: u32,
}

impl Default for Crc32c {
    fn default() -> Self {
        Crc32c::new()
    }
}

impl Crc32c {
    /// A CRC over no data yet.
    pub const fn new() -> Crc32c {
        Crc32c { state: 0xFFFF_FFFF }
    }

    /// Adds `data` to the CRC.
    pub fn update(&mut self, data: &[u8]) {
        let mut crc = self.state;
        let t = &TABLES;
        let mut chunks = data.chunks_exact(SLICES);
        for c in &mut chunks {
            // The running CRC folds into the first four bytes; each byte's contribution is
            // advanced past the bytes that follow it by the table of that distance.
            let lo = crc ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            crc = t[15][(lo & 0xff) as usize]
                ^ t[14][((lo >> 8) & 0xff) as usize]
                ^ t[13][((lo >> 16) & 0xff) as usize]
                ^ t[12][(lo >> 24) as usize]
                ^ t[11][c[4] as usize]
                ^ t[10][c[5] as usize]
                ^ t[9][c[6] as usize]
                ^ t[8][c[7] as usize]
                ^ t[7][c[8] as usize]
                ^ t[6][c[9] as usize]
                ^ t[5][c[10] as usize]
                ^ t[4][c[11] as usize]
                ^ t[3][c[12] as usize]
                ^ t[2][c[13] as usize]
                ^ t[1][c[14] as usize]
                ^ t[0][c[15] as usize];
        }
        for &b in chunks.remainder() {
            crc = (crc >> 8) ^ TABLES[0][((crc ^ u32::from(b)) & 0xff) as usize];
        }
        self.state = crc;
    }

    /// The CRC of everything added so far.
    pub fn finish(&self) -> u32 {
        !self.state
    }
}

/// The CRC32c of `data`.
pub fn checksum(data: &[u8]) -> u32 {
    let mut c = Crc32c::new();
    c.update(data);
    c.finish()
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
    fn slice_by_16_matches_bitwise_and_incremental() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 1000] {
            assert_eq!(checksum(&data[..len]), bitwise(&data[..len]), "len {len}");
        }
        let mut c = Crc32c::new();
        c.update(&data[..3]);
        c.update(&data[3..500]);
        c.update(&data[500..]);
        assert_eq!(c.finish(), bitwise(&data));
    }
}
