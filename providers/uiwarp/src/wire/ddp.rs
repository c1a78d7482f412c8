//! DDP segment headers (RFC 5041) with the RDMAP control byte (RFC 5040 section 4.1).
//!
//! ```text
//! byte 0: T 0x80 (tagged) | L 0x40 (last) | reserved 0x3c | DDP version 0x03 (= 1)
//! byte 1: RDMAP version 0xc0 (= 1) | reserved 0x30 | opcode 0x0f
//! tagged   (14 bytes): 2 STag (32) | 6 tagged offset (64)
//! untagged (18 bytes): 2 reserved for the ULP (32; the STag to invalidate) | 6 QN (32)
//!                      | 10 MSN (32) | 14 MO (32)
//! ```

use super::{check_len, read_u32, read_u64, write_u32, write_u64, Field, WireError, WireResult};

mod field {
    use super::Field;
    pub(super) const CONTROL: usize = 0;
    pub(super) const RDMAP: usize = 1;
    pub(super) const STAG: Field = 2..6;
    pub(super) const TAGGED_OFFSET: Field = 6..14;
    pub(super) const RESERVED_ULP: Field = 2..6;
    pub(super) const QUEUE: Field = 6..10;
    pub(super) const MSN: Field = 10..14;
    pub(super) const MESSAGE_OFFSET: Field = 14..18;
}

/// Bytes of a tagged header, control bytes included.
pub const TAGGED_HEADER_LEN: usize = field::TAGGED_OFFSET.end;
/// Bytes of an untagged header, control bytes included.
pub const UNTAGGED_HEADER_LEN: usize = field::MESSAGE_OFFSET.end;
/// The longer of the two headers.
const MAX_HEADER_LEN: usize = if TAGGED_HEADER_LEN > UNTAGGED_HEADER_LEN {
    TAGGED_HEADER_LEN
} else {
    UNTAGGED_HEADER_LEN
};
/// The DDP version we speak and siw checks.
pub const DDP_VERSION: u8 = 1;
/// The RDMAP version we speak and siw checks.
pub const RDMAP_VERSION: u8 = 1;

/// Untagged queue numbers (RFC 5040 section 5.1).
pub mod queue {
    /// SEND messages.
    pub const SEND: u32 = 0;
    /// RDMA READ requests.
    pub const READ_REQUEST: u32 = 1;
    /// TERMINATE messages.
    pub const TERMINATE: u32 = 2;
}

const TAGGED: u8 = 0x80;
const LAST: u8 = 0x40;

/// RDMAP opcodes (RFC 5040 section 4.2); siw knows 0 to 7.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Opcode {
    /// RDMA WRITE (tagged).
    RdmaWrite,
    /// RDMA READ request (untagged, queue 1).
    ReadRequest,
    /// RDMA READ response (tagged).
    ReadResponse,
    /// SEND (untagged, queue 0).
    Send,
    /// SEND with invalidate.
    SendWithInvalidate,
    /// SEND with solicited event.
    SendWithSolicitedEvent,
    /// SEND with solicited event and invalidate.
    SendWithSolicitedEventAndInvalidate,
    /// TERMINATE (untagged, queue 2).
    Terminate,
}

impl Opcode {
    /// Decodes the 4-bit opcode; `None` for the RFC 7306 opcodes and reserved values.
    pub fn from_raw(v: u8) -> Option<Opcode> {
        Some(match v {
            0 => Opcode::RdmaWrite,
            1 => Opcode::ReadRequest,
            2 => Opcode::ReadResponse,
            3 => Opcode::Send,
            4 => Opcode::SendWithInvalidate,
            5 => Opcode::SendWithSolicitedEvent,
            6 => Opcode::SendWithSolicitedEventAndInvalidate,
            7 => Opcode::Terminate,
            _ => return None,
        })
    }
    /// The 4-bit value.
    pub fn to_raw(self) -> u8 {
        match self {
            Opcode::RdmaWrite => 0,
            Opcode::ReadRequest => 1,
            Opcode::ReadResponse => 2,
            Opcode::Send => 3,
            Opcode::SendWithInvalidate => 4,
            Opcode::SendWithSolicitedEvent => 5,
            Opcode::SendWithSolicitedEventAndInvalidate => 6,
            Opcode::Terminate => 7,
        }
    }
    /// Whether the message travels in tagged segments.
    pub fn is_tagged(self) -> bool {
        matches!(self, Opcode::RdmaWrite | Opcode::ReadResponse)
    }
    /// Whether this is one of the four SEND variants.
    pub fn is_send(self) -> bool {
        matches!(
            self,
            Opcode::Send
                | Opcode::SendWithInvalidate
                | Opcode::SendWithSolicitedEvent
                | Opcode::SendWithSolicitedEventAndInvalidate
        )
    }
    /// The untagged queue the opcode uses, for untagged opcodes.
    pub fn queue(self) -> Option<u32> {
        match self {
            o if o.is_send() => Some(queue::SEND),
            Opcode::ReadRequest => Some(queue::READ_REQUEST),
            Opcode::Terminate => Some(queue::TERMINATE),
            _ => None,
        }
    }
}

/// A view of a DDP segment (an FPDU's ULPDU).
#[derive(Debug, Clone)]
pub struct Segment<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Segment<T> {
    /// Wraps a buffer without checking it.
    pub fn new_unchecked(buffer: T) -> Segment<T> {
        Segment { buffer }
    }

    /// Wraps a buffer after checking it holds the whole header its T bit announces.
    pub fn new_checked(buffer: T) -> WireResult<Segment<T>> {
        let s = Segment::new_unchecked(buffer);
        let len = s.buffer.as_ref().len();
        check_len("DDP control field", len, 2)?;
        check_len("DDP header", len, s.header_len())?;
        Ok(s)
    }

    /// Returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn control(&self) -> u8 {
        self.buffer.as_ref()[field::CONTROL]
    }
    /// T: a tagged segment.
    pub fn tagged(&self) -> bool {
        self.control() & TAGGED != 0
    }
    /// L: the last segment of its message.
    pub fn last(&self) -> bool {
        self.control() & LAST != 0
    }
    /// The DDP version (must be 1).
    pub fn ddp_version(&self) -> u8 {
        self.control() & 0x03
    }
    /// The RDMAP version (must be 1).
    pub fn rdmap_version(&self) -> u8 {
        self.buffer.as_ref()[field::RDMAP] >> 6
    }
    /// The 4-bit RDMAP opcode.
    pub fn opcode_raw(&self) -> u8 {
        self.buffer.as_ref()[field::RDMAP] & 0x0f
    }
    /// The header length the T bit implies.
    pub fn header_len(&self) -> usize {
        if self.tagged() {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        }
    }
    /// The header bytes (for a TERMINATE's copy).
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }
    /// Tagged: the STag.
    pub fn stag(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::STAG)
    }
    /// Tagged: the tagged offset.
    pub fn tagged_offset(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::TAGGED_OFFSET)
    }
    /// Untagged: the 32 bits reserved for the ULP (the STag to invalidate).
    pub fn reserved_ulp(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::RESERVED_ULP)
    }
    /// Untagged: the queue number.
    pub fn queue_number(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::QUEUE)
    }
    /// Untagged: the message sequence number.
    pub fn msn(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::MSN)
    }
    /// Untagged: the message offset.
    pub fn message_offset(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::MESSAGE_OFFSET)
    }
    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// The addressing part of a DDP header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Tagged: place at `offset` in the region named by `stag`.
    Tagged {
        /// The STag.
        stag: u32,
        /// The tagged offset.
        offset: u64,
    },
    /// Untagged: the next buffer of queue `queue`, message `msn`, at `offset`.
    Untagged {
        /// Reserved for the ULP: the STag a SEND with invalidate names, else 0.
        reserved_ulp: u32,
        /// Queue number.
        queue: u32,
        /// Message sequence number.
        msn: u32,
        /// Message offset.
        offset: u32,
    },
}

/// A parsed DDP/RDMAP header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SegmentRepr {
    /// L.
    pub last: bool,
    /// The RDMAP opcode.
    pub opcode: Opcode,
    /// Tagged or untagged addressing.
    pub placement: Placement,
}

impl SegmentRepr {
    /// Parses and validates a checked segment as siw does: DDP version 1, RDMAP version 1, a
    /// known opcode, and a T bit matching the opcode.
    pub fn parse<T: AsRef<[u8]>>(seg: &Segment<T>) -> WireResult<SegmentRepr> {
        const WHAT: &str = "DDP/RDMAP header";
        if seg.ddp_version() != DDP_VERSION {
            return Err(WireError::Malformed {
                what: WHAT,
                detail: "DDP version is not 1",
            });
        }
        if seg.rdmap_version() != RDMAP_VERSION {
            return Err(WireError::Malformed {
                what: WHAT,
                detail: "RDMAP version is not 1",
            });
        }
        let opcode = Opcode::from_raw(seg.opcode_raw()).ok_or(WireError::Malformed {
            what: WHAT,
            detail: "unknown RDMAP opcode",
        })?;
        if opcode.is_tagged() != seg.tagged() {
            return Err(WireError::Malformed {
                what: WHAT,
                detail: "the T bit does not match the opcode",
            });
        }
        let placement = if seg.tagged() {
            Placement::Tagged {
                stag: seg.stag(),
                offset: seg.tagged_offset(),
            }
        } else {
            Placement::Untagged {
                reserved_ulp: seg.reserved_ulp(),
                queue: seg.queue_number(),
                msn: seg.msn(),
                offset: seg.message_offset(),
            }
        };
        Ok(SegmentRepr {
            last: seg.last(),
            opcode,
            placement,
        })
    }

    /// Header bytes [`SegmentRepr::emit`] writes.
    pub fn header_len(&self) -> usize {
        match self.placement {
            Placement::Tagged { .. } => TAGGED_HEADER_LEN,
            Placement::Untagged { .. } => UNTAGGED_HEADER_LEN,
        }
    }

    /// Writes the header into the first [`SegmentRepr::header_len`] bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) {
        let mut control = DDP_VERSION;
        if self.last {
            control |= LAST;
        }
        match self.placement {
            Placement::Tagged { stag, offset } => {
                buf[field::CONTROL] = control | TAGGED;
                write_u32(buf, field::STAG, stag);
                write_u64(buf, field::TAGGED_OFFSET, offset);
            }
            Placement::Untagged {
                reserved_ulp,
                queue,
                msn,
                offset,
            } => {
                buf[field::CONTROL] = control;
                write_u32(buf, field::RESERVED_ULP, reserved_ulp);
                write_u32(buf, field::QUEUE, queue);
                write_u32(buf, field::MSN, msn);
                write_u32(buf, field::MESSAGE_OFFSET, offset);
            }
        }
        buf[field::RDMAP] = (RDMAP_VERSION << 6) | self.opcode.to_raw();
    }

    /// Appends the header to `out`.
    #[inline]
    pub fn append(&self, out: &mut Vec<u8>) {
        // Made on the stack and appended in one copy (no zero fill of `out` first).
        let mut header = [0u8; MAX_HEADER_LEN];
        let len = self.header_len();
        self.emit(&mut header[..len]);
        out.extend_from_slice(&header[..len]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_bytes_match_wire_md() {
        let send = SegmentRepr {
            last: true,
            opcode: Opcode::Send,
            placement: Placement::Untagged {
                reserved_ulp: 0,
                queue: 0,
                msn: 1,
                offset: 0,
            },
        };
        let mut b = Vec::new();
        send.append(&mut b);
        assert_eq!(&b[..2], &[0x41, 0x43]);
        assert_eq!(b.len(), UNTAGGED_HEADER_LEN);
        let seg = Segment::new_checked(&b[..]).unwrap();
        assert_eq!(SegmentRepr::parse(&seg).unwrap(), send);

        let write = SegmentRepr {
            last: true,
            opcode: Opcode::RdmaWrite,
            placement: Placement::Tagged {
                stag: 0x1234,
                offset: 0xdead_beef_0000,
            },
        };
        let mut b = Vec::new();
        write.append(&mut b);
        assert_eq!(&b[..2], &[0xC1, 0x40]);
        let seg = Segment::new_checked(&b[..]).unwrap();
        assert_eq!(seg.stag(), 0x1234);
        assert_eq!(SegmentRepr::parse(&seg).unwrap(), write);
    }

    #[test]
    fn rejects_bad_versions_opcodes_and_lengths() {
        let mut b = vec![0x41, 0x43];
        b.resize(UNTAGGED_HEADER_LEN, 0);
        for cut in 0..UNTAGGED_HEADER_LEN {
            assert!(Segment::new_checked(&b[..cut]).is_err());
        }
        let parse = |b: &[u8]| SegmentRepr::parse(&Segment::new_checked(b).unwrap());
        assert!(parse(&b).is_ok());
        let mut v = b.clone();
        v[0] = 0x42;
        assert!(parse(&v).is_err());
        let mut v = b.clone();
        v[1] = 0x83;
        assert!(parse(&v).is_err());
        let mut v = b.clone();
        v[1] = 0x48;
        assert!(parse(&v).is_err());
        let mut v = b.clone();
        v[1] = 0x40; // WRITE untagged
        assert!(parse(&v).is_err());
    }
}
