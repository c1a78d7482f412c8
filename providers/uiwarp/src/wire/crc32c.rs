//! CRC32c (Castagnoli), as MPA uses it: reflected polynomial 0x82F63B78, initial value and
//! final XOR 0xFFFFFFFF, sent little-endian (what siw emits and tshark checks).
//!
//! Two ways to compute it, with the same results:
//! * [`Method::Instruction`]: the `crc-fast` crate, which uses the CPU's CRC32 and carry-less
//!   multiply instructions (SSE 4.2/PCLMULQDQ or AVX-512 VPCLMULQDQ on x86-64, CRC and PMULL
//!   on aarch64) when present. MPA's CRC runs over every payload byte on both sides; on this
//!   project's (AVX-512) hosts this runs at ~43 GB/s on 4 KiB and ~57 GB/s on 64 KiB, 2.2x
//!   the `crc32c` crate's CRC32-instruction-only code it replaced.
//! * [`Method::Table`]: slice-by-8 over tables built at compile time, ~2 GB/s on hardware,
//!   but 2.8x the instruction's speed under QEMU's TCG (0.36 against 0.13 GB/s on 4 KiB),
//!   which emulates CRC32 through a helper call per instruction: the VM the test suite and
//!   the benchmarks run in.
//!
//! The default is the instruction; the driver times both once at start-up and sets the
//! faster ([`set_method`]), so this module itself reads no clock.
//! The tests below pin both to a bitwise reference and RFC 3720's vectors.

use std::sync::atomic::{AtomicU8, Ordering};

/// The reflected CRC32c polynomial.
const POLYNOMIAL: u32 = 0x82F6_3B78;

/// How the CRC is computed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Method {
    /// The `crc-fast` crate: the CPU's CRC32 and carry-less multiply instructions where it
    /// has them.
    Instruction,
    /// Slice-by-8 tables.
    Table,
}

static METHOD: AtomicU8 = AtomicU8::new(0);

/// Chooses how every CRC in this process is computed (both give the same values).
pub fn set_method(method: Method) {
    METHOD.store(method as u8, Ordering::Relaxed);
}

/// How CRCs are computed now.
#[inline]
pub fn method() -> Method {
    match METHOD.load(Ordering::Relaxed) {
        0 => Method::Instruction,
        _ => Method::Table,
    }
}

/// Slice-by-8 tables: `TABLES[0]` is the byte-at-a-time table, `TABLES[k][b]` the CRC of
/// byte `b` followed by `k` zero bytes.
static TABLES: [[u32; 256]; 8] = tables();

const fn tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ POLYNOMIAL
            } else {
                c >> 1
            };
            bit += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

/// Continues `crc` (final XOR applied) over `data` by tables.
fn table_append(crc: u32, data: &[u8]) -> u32 {
    let t = &TABLES;
    let mut crc = !crc;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let lo = u32::from_le_bytes([w[0], w[1], w[2], w[3]]) ^ crc;
        let hi = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
        crc = t[7][(lo & 0xff) as usize]
            ^ t[6][((lo >> 8) & 0xff) as usize]
            ^ t[5][((lo >> 16) & 0xff) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][(hi & 0xff) as usize]
            ^ t[2][((hi >> 8) & 0xff) as usize]
            ^ t[1][((hi >> 16) & 0xff) as usize]
            ^ t[0][(hi >> 24) as usize];
    }
    for &b in words.remainder() {
        crc = (crc >> 8) ^ t[0][((crc ^ u32::from(b)) & 0xff) as usize];
    }
    !crc
}

/// Continues `crc` (final XOR applied) over `data` with `crc-fast`, whose running state is
/// the CRC before its final XOR. A CRC from the start (every FPDU's, sent and received) takes
/// the crate's one-shot function, which reads its parameters in place; a `Digest` copies
/// them (a few hundred bytes) each time it is made.
fn instruction_append(crc: u32, data: &[u8]) -> u32 {
    if crc == 0 {
        return crc_fast::crc32_iscsi(data);
    }
    let mut digest =
        crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    digest.update(data);
    digest.finalize() as u32
}

/// Continues `crc` over `data` with `method`.
pub fn append_with(method: Method, crc: u32, data: &[u8]) -> u32 {
    match method {
        Method::Instruction => instruction_append(crc, data),
        Method::Table => table_append(crc, data),
    }
}

/// A running CRC32c over several pieces of data.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Crc32c {
    /// The CRC of the data so far, final XOR applied.
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
        self.value = append_with(method(), self.value, data);
    }

    /// The CRC of everything added so far.
    pub fn finish(&self) -> u32 {
        self.value
    }
}

/// The CRC32c of `data`. Every FPDU's CRC, sent and received, comes from here: it calls the
/// chosen method straight, without [`append_with`]'s continuation case.
#[inline]
pub fn checksum(data: &[u8]) -> u32 {
    match method() {
        Method::Instruction => crc_fast::crc32_iscsi(data),
        Method::Table => table_append(0, data),
    }
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
    #[cfg_attr(
        miri,
        ignore = "600 lengths, each through the bitwise reference and both methods: too long under miri; the other tests here run the same code"
    )]
    fn both_methods_match_bitwise_on_every_length_and_split() {
        let data: Vec<u8> = (0..600u32).map(|i| (i * 131 + 17) as u8).collect();
        for len in 0..data.len() {
            let want = bitwise(&data[..len]);
            for m in [Method::Instruction, Method::Table] {
                assert_eq!(append_with(m, 0, &data[..len]), want, "{m:?} len {len}");
                let split = len / 3;
                let part = append_with(m, 0, &data[..split]);
                assert_eq!(
                    append_with(m, part, &data[split..len]),
                    want,
                    "{m:?} split {len}"
                );
            }
        }
        assert_eq!(append_with(Method::Table, 0, b"123456789"), 0xE306_9283);
    }

    /// The SIMD code changes strategy with the length (folding blocks of 64, 128, 256 bytes
    /// and more, then a tail): long lengths around those sizes, and odd splits, against the
    /// bitwise reference.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "12 lengths up to 70 KB with 7 splits each, through the bitwise reference and both methods: too long under miri; the other tests here run the same code"
    )]
    fn both_methods_match_bitwise_on_long_lengths_and_odd_splits() {
        let data: Vec<u8> = (0..70_001u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in [
            1023, 1024, 1025, 2047, 4095, 4096, 4097, 8191, 16_385, 65_535, 65_536, 70_001,
        ] {
            let want = bitwise(&data[..len]);
            for m in [Method::Instruction, Method::Table] {
                assert_eq!(append_with(m, 0, &data[..len]), want, "{m:?} len {len}");
                for split in [1, 3, 14, 63, 257, len / 2 + 1, len - 5] {
                    let part = append_with(m, 0, &data[..split]);
                    assert_eq!(
                        append_with(m, part, &data[split..len]),
                        want,
                        "{m:?} len {len} split {split}"
                    );
                }
            }
        }
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
