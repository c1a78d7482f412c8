//! MPA connection setup frames: the MPA Request and MPA Reply (RFC 5044 section 7.1), with the
//! enhanced IRD/ORD block of RFC 6581.
//!
//! ```text
//! off size field
//!   0  16  key: "MPA ID Req Frame" or "MPA ID Rep Frame"
//!  16   1  flags: M 0x80, C 0x40, R 0x20, Enhanced 0x10
//!  17   1  revision (1 = RFC 5044, 2 = RFC 6581)
//!  18   2  PD_Length (big-endian), counting the enhanced block
//!  20   4  if Enhanced: IRD word, ORD word (big-endian u16 each)
//!  ..   .  private data
//! ```

use super::{check_len, read_u16, write_u16, Field, WireError, WireResult};

mod field {
    use super::Field;
    pub(super) const KEY: Field = 0..16;
    pub(super) const FLAGS: usize = 16;
    pub(super) const REVISION: usize = 17;
    pub(super) const PD_LENGTH: Field = 18..20;
}

/// The key of an MPA Request.
pub const REQUEST_KEY: [u8; 16] = *b"MPA ID Req Frame";
/// The key of an MPA Reply.
pub const REPLY_KEY: [u8; 16] = *b"MPA ID Rep Frame";
/// Bytes before the private data.
pub const HEADER_LEN: usize = field::PD_LENGTH.end;
/// Bytes of the RFC 6581 IRD/ORD block at the start of the private data.
pub const ENHANCED_LEN: usize = 4;
/// The largest PD_Length RFC 5044 allows.
pub const MAX_PRIVATE_DATA: usize = 512;
/// The largest PD_Length siw accepts (`MPA_MAX_PRIVDATA`); with the enhanced block this leaves
/// 252 bytes of application private data.
pub const SIW_MAX_PRIVATE_DATA: usize = 256;
/// The largest IRD or ORD value the 14-bit fields carry; also the "no value" marker.
pub const IRD_ORD_NO_VALUE: u16 = 0x3FFF;

/// Flag bits of byte 16.
pub mod flags {
    /// Markers requested (never by us; siw rejects it).
    pub const MARKERS: u8 = 0x80;
    /// CRC32c requested.
    pub const CRC: u8 = 0x40;
    /// Reject (reply only).
    pub const REJECT: u8 = 0x20;
    /// RFC 6581 enhanced connection setup: the IRD/ORD block is present.
    pub const ENHANCED: u8 = 0x10;
}

mod words {
    pub(super) const PEER_TO_PEER: u16 = 0x8000;
    pub(super) const RTR_SEND: u16 = 0x4000;
    pub(super) const RTR_WRITE: u16 = 0x8000;
    pub(super) const RTR_READ: u16 = 0x4000;
    pub(super) const VALUE: u16 = 0x3FFF;
}

/// A view of an MPA Request or Reply frame.
#[derive(Debug, Clone)]
pub struct MpaFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MpaFrame<T> {
    /// Wraps a buffer without checking it (for emitting).
    pub fn new_unchecked(buffer: T) -> MpaFrame<T> {
        MpaFrame { buffer }
    }

    /// Wraps a buffer after checking that it holds the header and all the private data.
    pub fn new_checked(buffer: T) -> WireResult<MpaFrame<T>> {
        let f = MpaFrame::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Checks the lengths the accessors rely on.
    pub fn check_len(&self) -> WireResult<()> {
        let len = self.buffer.as_ref().len();
        check_len("MPA request/reply header", len, HEADER_LEN)?;
        check_len(
            "MPA request/reply private data",
            len,
            HEADER_LEN + usize::from(self.private_data_length()),
        )
    }

    /// The whole frame's length from its first 20 bytes, or `None` with fewer than 20.
    pub fn frame_len(prefix: &[u8]) -> Option<usize> {
        (prefix.len() >= HEADER_LEN)
            .then(|| HEADER_LEN + usize::from(read_u16(prefix, field::PD_LENGTH)))
    }

    /// Returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The 16-byte key.
    pub fn key(&self) -> &[u8] {
        &self.buffer.as_ref()[field::KEY]
    }

    /// The flags byte.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// The revision.
    pub fn revision(&self) -> u8 {
        self.buffer.as_ref()[field::REVISION]
    }

    /// PD_Length: bytes after the header, enhanced block included.
    pub fn private_data_length(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::PD_LENGTH)
    }

    /// Everything after the header (enhanced block included).
    pub fn private_data_field(&self) -> &[u8] {
        let end = HEADER_LEN + usize::from(self.private_data_length());
        &self.buffer.as_ref()[HEADER_LEN..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MpaFrame<T> {
    /// Sets the key.
    pub fn set_key(&mut self, key: &[u8; 16]) {
        self.buffer.as_mut()[field::KEY].copy_from_slice(key);
    }
    /// Sets the flags byte.
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    /// Sets the revision.
    pub fn set_revision(&mut self, v: u8) {
        self.buffer.as_mut()[field::REVISION] = v;
    }
    /// Sets PD_Length.
    pub fn set_private_data_length(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::PD_LENGTH, v);
    }
}

/// Whether a frame is a request or a reply.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// "MPA ID Req Frame", sent by the TCP client (the MPA initiator).
    Request,
    /// "MPA ID Rep Frame", sent by the MPA responder.
    Reply,
}

/// The ready-to-receive operations the peer-to-peer mode of RFC 6581 offers.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct RtrKinds {
    /// A zero-length SEND.
    pub send: bool,
    /// A zero-length RDMA WRITE.
    pub write: bool,
    /// A zero-length RDMA READ.
    pub read: bool,
}

impl RtrKinds {
    /// How many kinds are set.
    pub fn count(self) -> usize {
        usize::from(self.send) + usize::from(self.write) + usize::from(self.read)
    }
}

/// The RFC 6581 IRD/ORD block.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct IrdOrd {
    /// Inbound RDMA READ depth (14 bits; [`IRD_ORD_NO_VALUE`] means none given).
    pub ird: u16,
    /// Outbound RDMA READ depth (14 bits).
    pub ord: u16,
    /// Peer-to-peer mode requested (request) or accepted (reply).
    pub peer_to_peer: bool,
    /// RTR operations offered (request) or chosen (reply).
    pub rtr: RtrKinds,
}

impl IrdOrd {
    fn parse(b: &[u8]) -> IrdOrd {
        let ird = read_u16(b, 0..2);
        let ord = read_u16(b, 2..4);
        IrdOrd {
            ird: ird & words::VALUE,
            ord: ord & words::VALUE,
            peer_to_peer: ird & words::PEER_TO_PEER != 0,
            rtr: RtrKinds {
                send: ird & words::RTR_SEND != 0,
                write: ord & words::RTR_WRITE != 0,
                read: ord & words::RTR_READ != 0,
            },
        }
    }

    fn emit(&self, b: &mut [u8]) {
        let mut ird = self.ird.min(words::VALUE);
        let mut ord = self.ord.min(words::VALUE);
        if self.peer_to_peer {
            ird |= words::PEER_TO_PEER;
        }
        if self.rtr.send {
            ird |= words::RTR_SEND;
        }
        if self.rtr.write {
            ord |= words::RTR_WRITE;
        }
        if self.rtr.read {
            ord |= words::RTR_READ;
        }
        write_u16(b, 0..2, ird);
        write_u16(b, 2..4, ord);
    }
}

/// A parsed MPA Request or Reply.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MpaRepr<'a> {
    /// Request or reply.
    pub kind: FrameKind,
    /// M: markers.
    pub markers: bool,
    /// C: CRC32c.
    pub crc: bool,
    /// R: reject (replies only).
    pub reject: bool,
    /// The revision.
    pub revision: u8,
    /// The enhanced block, when the Enhanced flag is set.
    pub enhanced: Option<IrdOrd>,
    /// The application's private data (after the enhanced block).
    pub private_data: &'a [u8],
}

impl<'a> MpaRepr<'a> {
    /// Parses a checked frame: the key must be a request or reply key, and with Enhanced set
    /// PD_Length must hold the 4-byte block. Other limits (revision, sizes) are policy and
    /// left to the caller.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &'a MpaFrame<&'a T>) -> WireResult<MpaRepr<'a>> {
        let kind = match frame.key() {
            k if k == REQUEST_KEY => FrameKind::Request,
            k if k == REPLY_KEY => FrameKind::Reply,
            _ => {
                return Err(WireError::Malformed {
                    what: "MPA request/reply",
                    detail: "the key is neither \"MPA ID Req Frame\" nor \"MPA ID Rep Frame\"",
                })
            }
        };
        let fl = frame.flags();
        let pd = frame.private_data_field();
        let (enhanced, private_data) = if fl & flags::ENHANCED != 0 {
            if pd.len() < ENHANCED_LEN {
                return Err(WireError::Malformed {
                    what: "MPA request/reply",
                    detail: "the Enhanced flag is set but PD_Length is below 4",
                });
            }
            (
                Some(IrdOrd::parse(&pd[..ENHANCED_LEN])),
                &pd[ENHANCED_LEN..],
            )
        } else {
            (None, pd)
        };
        Ok(MpaRepr {
            kind,
            markers: fl & flags::MARKERS != 0,
            crc: fl & flags::CRC != 0,
            reject: fl & flags::REJECT != 0,
            revision: frame.revision(),
            enhanced,
            private_data,
        })
    }

    /// Bytes [`MpaRepr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.enhanced.map_or(0, |_| ENHANCED_LEN) + self.private_data.len()
    }

    /// Writes the frame into a buffer exactly [`MpaRepr::buffer_len`] long. PD_Length is
    /// computed from the private data; the caller keeps it within [`MAX_PRIVATE_DATA`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut MpaFrame<T>) {
        frame.set_key(match self.kind {
            FrameKind::Request => &REQUEST_KEY,
            FrameKind::Reply => &REPLY_KEY,
        });
        let mut fl = 0;
        if self.markers {
            fl |= flags::MARKERS;
        }
        if self.crc {
            fl |= flags::CRC;
        }
        if self.reject {
            fl |= flags::REJECT;
        }
        if self.enhanced.is_some() {
            fl |= flags::ENHANCED;
        }
        frame.set_flags(fl);
        frame.set_revision(self.revision);
        let pd_len = self.buffer_len() - HEADER_LEN;
        frame.set_private_data_length(u16::try_from(pd_len).unwrap_or(u16::MAX));
        let buf = &mut frame.buffer.as_mut()[HEADER_LEN..];
        let mut at = 0;
        if let Some(e) = self.enhanced {
            e.emit(&mut buf[..ENHANCED_LEN]);
            at = ENHANCED_LEN;
        }
        buf[at..at + self.private_data.len()].copy_from_slice(self.private_data);
    }

    /// The frame as a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.buffer_len()];
        self.emit(&mut MpaFrame::new_unchecked(&mut v[..]));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trip() {
        let repr = MpaRepr {
            kind: FrameKind::Request,
            markers: false,
            crc: true,
            reject: false,
            revision: 2,
            enhanced: Some(IrdOrd {
                ird: 16,
                ord: 8,
                peer_to_peer: true,
                rtr: RtrKinds {
                    send: false,
                    write: true,
                    read: true,
                },
            }),
            private_data: b"hello",
        };
        let bytes = repr.to_vec();
        assert_eq!(&bytes[..16], b"MPA ID Req Frame");
        assert_eq!(bytes[16], 0x50);
        assert_eq!(bytes[17], 2);
        assert_eq!(&bytes[18..20], &[0, 9]);
        assert_eq!(&bytes[20..24], &[0x80, 0x10, 0xC0, 0x08]);
        assert_eq!(MpaFrame::<&[u8]>::frame_len(&bytes), Some(bytes.len()));
        let frame = MpaFrame::new_checked(&bytes[..]).unwrap();
        assert_eq!(MpaRepr::parse(&frame).unwrap(), repr);
    }

    #[test]
    fn truncated_and_bad_key() {
        let repr = MpaRepr {
            kind: FrameKind::Reply,
            markers: false,
            crc: false,
            reject: true,
            revision: 1,
            enhanced: None,
            private_data: b"no",
        };
        let bytes = repr.to_vec();
        assert_eq!(bytes[16], 0x20);
        for cut in 0..bytes.len() {
            assert!(MpaFrame::new_checked(&bytes[..cut]).is_err(), "cut {cut}");
        }
        let mut bad = bytes.clone();
        bad[3] = b'x';
        let frame = MpaFrame::new_checked(&bad[..]).unwrap();
        assert!(MpaRepr::parse(&frame).is_err());
        let mut short_enhanced = bytes.clone();
        short_enhanced[16] |= flags::ENHANCED;
        let frame = MpaFrame::new_checked(&short_enhanced[..]).unwrap();
        assert!(MpaRepr::parse(&frame).is_err());
    }
}
