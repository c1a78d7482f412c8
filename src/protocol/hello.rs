//! The 40-byte rsocket hello (`struct rs_conn_data`), carried as rdma_cm private data in the
//! connect request and in the accept reply.
//!
//! Layout (rdma-core `librdmacm/rsocket.c`, every multi-byte field big-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | version (must be 1) |
//! | 1 | 1 | flags: bit 0 "my host is big-endian", bit 1 "I support iomap", bit 6 "my target list's first byte may be RDMA READ: I answer a placement fence" (rdmasock), bit 7 rdmasock extensions |
//! | 2 | 2 | credits: the sender's receive-queue depth |
//! | 4 | 3 | reserved, zero |
//! | 7 | 1 | target iomap size (rsocket's scaled 8-bit encoding) |
//! | 8 | 16 | target SGL: address (8), rkey (4), number of entries (4) |
//! | 24 | 16 | first data buffer: address (8), rkey (4), length in bytes (4) |
//!
//! Private data delivered by the connection manager is usually longer than 40 bytes (the IB CM
//! pads it); the bytes after the hello are ignored.
#![forbid(unsafe_code)]

use super::msg::{BufferProblem, RemoteSge};

/// The only hello version rsocket defines.
pub const HELLO_VERSION: u8 = 1;
/// Size of the hello in bytes.
pub const HELLO_LEN: usize = 40;

/// Flag bit 0: the sender's host is big-endian; it decides the byte order of the SGL entries
/// the peer RDMA-writes into the sender's target list (and of iWARP message words).
pub const FLAG_BIG_ENDIAN: u8 = 1 << 0;
/// Flag bit 1: the sender supports rsocket's iomap (direct placement) extension.
pub const FLAG_IOMAP: u8 = 1 << 1;
/// Flag bit 6 (an rdmasock extension, with [`FLAG_RDMASOCK`]): the sender answers a placement
/// fence. It promises that the peer may RDMA READ the first [`FENCE_READ_LEN`] byte of the
/// sender's target list (the address and rkey of its target SGL in this hello) for as long as
/// the connection is up: the sender registered its target list with remote read access, and
/// its queue pair grants the peer's READs (one at a time: `responder_resources = 1`). Such a
/// READ's response comes back only after the sender placed every message sent before it, so
/// the peer may prove a flush with one. The byte it reads is one the peer itself wrote there
/// (part of a target entry) or zero: the grant exposes no other memory. The userspace provider and the
/// kernel's siw both answer it; a plain rsocket peer never sets the flag and gets no fence.
pub const FLAG_ANSWERS_FENCE: u8 = 1 << 6;
/// The bytes a placement fence reads from the start of a [`FLAG_ANSWERS_FENCE`] peer's target
/// list: one, because the kernel's siw refuses a zero-length READ (it names no memory, STag 0)
/// with a TERMINATE.
pub const FENCE_READ_LEN: u32 = 1;
/// Flag bit 7: the sender is rdmasock and understands its extensions. rsocket ignores unknown
/// flag bits, so setting it is harmless against a plain rsocket peer.
pub const FLAG_RDMASOCK: u8 = 1 << 7;

mod field {
    use std::ops::Range;
    pub(super) const VERSION: usize = 0;
    pub(super) const FLAGS: usize = 1;
    pub(super) const CREDITS: Range<usize> = 2..4;
    pub(super) const RESERVED: Range<usize> = 4..7;
    pub(super) const IOMAP_SIZE: usize = 7;
    pub(super) const TARGET_SGL: Range<usize> = 8..24;
    pub(super) const DATA_BUF: Range<usize> = 24..40;
}

/// Why a hello was refused. Each message says what was wrong; the connection must be rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    /// Fewer than 40 bytes of private data.
    #[error(
        "connection private data is {len} bytes, shorter than the 40-byte rsocket hello: the peer \
         is not an rsocket/rdmasock stream endpoint (reject the connection)"
    )]
    TooShort {
        /// The length received.
        len: usize,
    },
    /// A version other than 1.
    #[error(
        "rsocket hello version {version} is not supported (only version 1 is): the peer speaks \
         another protocol revision (reject the connection)"
    )]
    UnsupportedVersion {
        /// The version received.
        version: u8,
    },
    /// A field holds a value the protocol cannot work with.
    #[error("malformed rsocket hello: {reason} (reject the connection)")]
    Malformed {
        /// What is wrong.
        reason: &'static str,
    },
}

/// A parsed (or to-be-emitted) hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Flag bits ([`FLAG_BIG_ENDIAN`], [`FLAG_IOMAP`], [`FLAG_RDMASOCK`]; others preserved).
    pub flags: u8,
    /// Initial credits: the sender's receive-queue depth.
    pub credits: u16,
    /// The raw scaled iomap-size byte (0 = no iomap slots).
    pub target_iomap_size: u8,
    /// Where the peer writes buffer advertisements: the address and rkey of the sender's target
    /// list, `length` = number of 16-byte entries (rsocket: 2).
    pub target_sgl: RemoteSge,
    /// The first receive buffer (half of the sender's receive ring).
    pub data_buf: RemoteSge,
}

impl Hello {
    /// Parses a hello from the start of `bytes` (connection private data), checking the length,
    /// the version and the fields the stream needs. Never panics.
    pub fn parse(bytes: &[u8]) -> Result<Self, HelloError> {
        if bytes.len() < HELLO_LEN {
            return Err(HelloError::TooShort { len: bytes.len() });
        }
        let b = &bytes[..HELLO_LEN];
        if b[field::VERSION] != HELLO_VERSION {
            return Err(HelloError::UnsupportedVersion {
                version: b[field::VERSION],
            });
        }
        let hello = Hello {
            flags: b[field::FLAGS],
            credits: u16::from_be_bytes([b[2], b[3]]),
            target_iomap_size: b[field::IOMAP_SIZE],
            target_sgl: RemoteSge::decode_be(&b[field::TARGET_SGL]),
            data_buf: RemoteSge::decode_be(&b[field::DATA_BUF]),
        };
        hello.check()?;
        Ok(hello)
    }

    fn check(&self) -> Result<(), HelloError> {
        let malformed = |reason| Err(HelloError::Malformed { reason });
        if self.credits == 0 {
            return malformed("zero credits (the peer has no receive queue)");
        }
        if self.target_sgl.length < 2 {
            return malformed("the target list has fewer than 2 entries");
        }
        if self
            .target_sgl
            .addr
            .checked_add(16 * u64::from(self.target_sgl.length))
            .is_none()
        {
            return malformed("the target list's address range overflows");
        }
        if self.data_buf.length == 0 {
            return malformed("the first receive buffer is empty");
        }
        match self.data_buf.buffer_problem() {
            Some(BufferProblem::TooLong) => {
                malformed("the first receive buffer is larger than a 29-bit message can count")
            }
            Some(BufferProblem::Overflows) => {
                malformed("the first receive buffer's address range overflows")
            }
            None => Ok(()),
        }
    }

    /// True when the sender says its host is big-endian.
    pub fn big_endian(&self) -> bool {
        self.flags & FLAG_BIG_ENDIAN != 0
    }

    /// True when the sender is an rdmasock endpoint (flag bit 7).
    pub fn is_rdmasock(&self) -> bool {
        self.flags & FLAG_RDMASOCK != 0
    }

    /// Whether the sender is rdmasock and answers a placement fence ([`FLAG_ANSWERS_FENCE`]).
    pub fn answers_fence(&self) -> bool {
        self.is_rdmasock() && self.flags & FLAG_ANSWERS_FENCE != 0
    }

    /// The 40 wire bytes.
    pub fn to_bytes(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[field::VERSION] = HELLO_VERSION;
        b[field::FLAGS] = self.flags;
        b[field::CREDITS].copy_from_slice(&self.credits.to_be_bytes());
        b[field::RESERVED].fill(0);
        b[field::IOMAP_SIZE] = self.target_iomap_size;
        b[field::TARGET_SGL].copy_from_slice(&self.target_sgl.encode_be());
        b[field::DATA_BUF].copy_from_slice(&self.data_buf.encode_be());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hello as x86 rsocket 1 emits it: flags = IOMAP, credits 384, iomap size 0, target list
    /// at 0x00007f1234560000 rkey 0x1234 with 2 entries, data buffer at 0x00007f1234000000
    /// rkey 0xabcd, 64 KiB (half of the default 128 KiB ring). Built by hand from the struct.
    const RSOCKET_X86: [u8; 40] = [
        0x01, 0x02, 0x01, 0x80, 0x00, 0x00, 0x00,
        0x00, // version, flags, credits, rsvd, iomap
        0x00, 0x00, 0x7f, 0x12, 0x34, 0x56, 0x00, 0x00, // target_sgl.addr
        0x00, 0x00, 0x12, 0x34, 0x00, 0x00, 0x00, 0x02, // target_sgl.key, .length
        0x00, 0x00, 0x7f, 0x12, 0x34, 0x00, 0x00, 0x00, // data_buf.addr
        0x00, 0x00, 0xab, 0xcd, 0x00, 0x01, 0x00, 0x00, // data_buf.key, .length
    ];

    #[test]
    fn parses_rsocket_bytes() {
        let h = Hello::parse(&RSOCKET_X86).unwrap();
        assert_eq!(h.flags, FLAG_IOMAP);
        assert!(!h.big_endian());
        assert!(!h.is_rdmasock());
        assert_eq!(h.credits, 384);
        assert_eq!(h.target_iomap_size, 0);
        assert_eq!(h.target_sgl, RemoteSge::new(0x7f12_3456_0000, 0x1234, 2));
        assert_eq!(
            h.data_buf,
            RemoteSge::new(0x7f12_3400_0000, 0xabcd, 0x1_0000)
        );
        assert_eq!(h.to_bytes(), RSOCKET_X86);
    }

    #[test]
    fn ignores_trailing_private_data() {
        let mut padded = [0u8; 56];
        padded[..40].copy_from_slice(&RSOCKET_X86);
        padded[40..].fill(0xee);
        assert_eq!(
            Hello::parse(&padded).unwrap(),
            Hello::parse(&RSOCKET_X86).unwrap()
        );
    }

    #[test]
    fn rejects_short_and_other_versions() {
        assert_eq!(Hello::parse(&[]), Err(HelloError::TooShort { len: 0 }));
        assert_eq!(
            Hello::parse(&RSOCKET_X86[..39]),
            Err(HelloError::TooShort { len: 39 })
        );
        for v in [0u8, 2, 0xff] {
            let mut b = RSOCKET_X86;
            b[0] = v;
            assert_eq!(
                Hello::parse(&b),
                Err(HelloError::UnsupportedVersion { version: v })
            );
            assert!(Hello::parse(&b)
                .unwrap_err()
                .to_string()
                .contains("version"));
        }
    }

    #[test]
    fn rejects_unusable_fields() {
        let malformed = |edit: fn(&mut [u8; 40])| {
            let mut b = RSOCKET_X86;
            edit(&mut b);
            matches!(Hello::parse(&b), Err(HelloError::Malformed { .. }))
        };
        assert!(malformed(|b| b[2..4].fill(0)), "zero credits");
        assert!(malformed(|b| b[23] = 1), "one target entry");
        assert!(malformed(|b| b[36..40].fill(0)), "empty data buffer");
        assert!(malformed(|b| b[36] = 0x20), "data buffer beyond 29 bits");
        assert!(malformed(|b| b[24..32].fill(0xff)), "address overflow");
    }

    #[test]
    fn never_panics_on_noise() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        // Under miri, which interprets every instruction, fewer draws of each length.
        let draws = if cfg!(miri) { 8 } else { 200 };
        for len in 0..64usize {
            for _ in 0..draws {
                let mut b = vec![0u8; len];
                for byte in b.iter_mut() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *byte = x as u8;
                }
                if len > 0 && x & 1 == 0 {
                    b[0] = 1;
                }
                if let Ok(h) = Hello::parse(&b) {
                    assert_eq!(
                        h.to_bytes()[..],
                        {
                            let mut e = [0u8; 40];
                            e.copy_from_slice(&b[..40]);
                            e[4..7].fill(0);
                            e
                        }[..]
                    );
                }
            }
        }
    }
}
