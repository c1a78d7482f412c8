//! RDMAP message bodies (RFC 5040): the RDMA READ request and the TERMINATE message.

use super::ddp::{TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use super::{check_len, read_u16, read_u32, read_u64, write_u32, write_u64, Field, WireResult};

mod field {
    use super::Field;
    pub(super) const SINK_STAG: Field = 0..4;
    pub(super) const SINK_OFFSET: Field = 4..12;
    pub(super) const SIZE: Field = 12..16;
    pub(super) const SOURCE_STAG: Field = 16..20;
    pub(super) const SOURCE_OFFSET: Field = 20..28;
}

/// Bytes of a READ request body (after the 18-byte untagged header).
pub const READ_REQUEST_LEN: usize = field::SOURCE_OFFSET.end;

/// A parsed RDMA READ request body.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ReadRequestRepr {
    /// The requester's buffer the response is placed into.
    pub sink_stag: u32,
    /// The tagged offset in the sink.
    pub sink_offset: u64,
    /// Bytes to read.
    pub size: u32,
    /// The responder's buffer to read.
    pub source_stag: u32,
    /// The tagged offset in the source.
    pub source_offset: u64,
}

impl ReadRequestRepr {
    /// Parses the body (the bytes after the untagged header).
    pub fn parse(body: &[u8]) -> WireResult<ReadRequestRepr> {
        check_len("RDMA READ request", body.len(), READ_REQUEST_LEN)?;
        Ok(ReadRequestRepr {
            sink_stag: read_u32(body, field::SINK_STAG),
            sink_offset: read_u64(body, field::SINK_OFFSET),
            size: read_u32(body, field::SIZE),
            source_stag: read_u32(body, field::SOURCE_STAG),
            source_offset: read_u64(body, field::SOURCE_OFFSET),
        })
    }

    /// Appends the 28-byte body to `out`.
    pub fn append(&self, out: &mut Vec<u8>) {
        let at = out.len();
        out.resize(at + READ_REQUEST_LEN, 0);
        let b = &mut out[at..];
        write_u32(b, field::SINK_STAG, self.sink_stag);
        write_u64(b, field::SINK_OFFSET, self.sink_offset);
        write_u32(b, field::SIZE, self.size);
        write_u32(b, field::SOURCE_STAG, self.source_stag);
        write_u64(b, field::SOURCE_OFFSET, self.source_offset);
    }
}

/// The error layer of a TERMINATE (high nibble of its first byte).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Layer {
    /// RDMAP.
    Rdmap,
    /// DDP.
    Ddp,
    /// The lower layer protocol: MPA (and TCP).
    Llp,
    /// A value RFC 5040 does not define.
    Other(u8),
}

impl Layer {
    fn from_raw(v: u8) -> Layer {
        match v {
            0 => Layer::Rdmap,
            1 => Layer::Ddp,
            2 => Layer::Llp,
            o => Layer::Other(o),
        }
    }
    fn to_raw(self) -> u8 {
        match self {
            Layer::Rdmap => 0,
            Layer::Ddp => 1,
            Layer::Llp => 2,
            Layer::Other(o) => o & 0x0f,
        }
    }
}

/// Layer, error type and error code of a TERMINATE.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct TerminateCode {
    /// Which layer found the error.
    pub layer: Layer,
    /// The error type within the layer.
    pub etype: u8,
    /// The error code within the type.
    pub code: u8,
}

macro_rules! codes {
    ($($(#[$m:meta])* $name:ident = ($layer:ident, $etype:expr, $code:expr, $text:expr);)*) => {
        impl TerminateCode {
            $($(#[$m])* pub const $name: TerminateCode =
                TerminateCode { layer: Layer::$layer, etype: $etype, code: $code };)*

            /// RFC 5040/5041/5044/6581's name of the error.
            pub fn description(&self) -> &'static str {
                $(if *self == TerminateCode::$name { return $text; })*
                match self.layer {
                    Layer::Rdmap => "RDMAP error",
                    Layer::Ddp => "DDP error",
                    Layer::Llp => "MPA/LLP error",
                    Layer::Other(_) => "error in an unknown layer",
                }
            }
        }
    };
}

codes! {
    /// RDMAP local catastrophic error.
    RDMAP_LOCAL_CATASTROPHIC = (Rdmap, 0, 0, "RDMAP local catastrophic error");
    /// RDMAP remote protection: invalid STag.
    RDMAP_INVALID_STAG = (Rdmap, 1, 0x00, "RDMAP remote protection error: invalid STag");
    /// RDMAP remote protection: base or bounds violation.
    RDMAP_BASE_BOUNDS = (Rdmap, 1, 0x01, "RDMAP remote protection error: base or bounds violation");
    /// RDMAP remote protection: access rights violation.
    RDMAP_ACCESS_RIGHTS = (Rdmap, 1, 0x02, "RDMAP remote protection error: access rights violation");
    /// RDMAP remote protection: STag not associated with the stream.
    RDMAP_STAG_NOT_ASSOCIATED = (Rdmap, 1, 0x03, "RDMAP remote protection error: STag not associated with this stream");
    /// RDMAP remote protection: tagged offset wrap.
    RDMAP_TO_WRAP = (Rdmap, 1, 0x04, "RDMAP remote protection error: tagged offset wraps");
    /// RDMAP remote operation: invalid RDMAP version.
    RDMAP_VERSION = (Rdmap, 2, 0x05, "RDMAP remote operation error: invalid RDMAP version");
    /// RDMAP remote operation: unexpected opcode.
    RDMAP_UNEXPECTED_OPCODE = (Rdmap, 2, 0x06, "RDMAP remote operation error: unexpected opcode");
    /// RDMAP remote operation: catastrophic error localized to the stream (siw: IRD overrun).
    RDMAP_CATASTROPHIC_STREAM = (Rdmap, 2, 0x07, "RDMAP remote operation error: catastrophic error on this stream");
    /// DDP tagged buffer: invalid STag.
    DDP_TAGGED_INVALID_STAG = (Ddp, 1, 0x00, "DDP tagged buffer error: invalid STag");
    /// DDP tagged buffer: base or bounds violation.
    DDP_TAGGED_BASE_BOUNDS = (Ddp, 1, 0x01, "DDP tagged buffer error: base or bounds violation");
    /// DDP tagged buffer: STag not associated with the stream.
    DDP_TAGGED_STAG_NOT_ASSOCIATED = (Ddp, 1, 0x02, "DDP tagged buffer error: STag not associated with this stream");
    /// DDP tagged buffer: tagged offset wrap.
    DDP_TAGGED_TO_WRAP = (Ddp, 1, 0x03, "DDP tagged buffer error: tagged offset wraps");
    /// DDP tagged buffer: invalid DDP version.
    DDP_TAGGED_VERSION = (Ddp, 1, 0x04, "DDP tagged buffer error: invalid DDP version");
    /// DDP untagged buffer: invalid queue number.
    DDP_UNTAGGED_INVALID_QN = (Ddp, 2, 0x01, "DDP untagged buffer error: invalid queue number");
    /// DDP untagged buffer: no buffer (a SEND with no receive posted).
    DDP_UNTAGGED_NO_BUFFER = (Ddp, 2, 0x02, "DDP untagged buffer error: no receive buffer posted");
    /// DDP untagged buffer: MSN out of range.
    DDP_UNTAGGED_MSN_RANGE = (Ddp, 2, 0x03, "DDP untagged buffer error: message sequence number out of range");
    /// DDP untagged buffer: invalid message offset.
    DDP_UNTAGGED_INVALID_MO = (Ddp, 2, 0x04, "DDP untagged buffer error: invalid message offset");
    /// DDP untagged buffer: message too long for the receive buffer.
    DDP_UNTAGGED_TOO_LONG = (Ddp, 2, 0x05, "DDP untagged buffer error: message too long for the receive buffer");
    /// DDP untagged buffer: invalid DDP version.
    DDP_UNTAGGED_VERSION = (Ddp, 2, 0x06, "DDP untagged buffer error: invalid DDP version");
    /// MPA: TCP connection error.
    LLP_TCP_ERROR = (Llp, 0, 0x01, "MPA error: TCP connection error");
    /// MPA: CRC error.
    LLP_CRC = (Llp, 0, 0x02, "MPA error: CRC error");
    /// MPA: marker or FPDU start error (a malformed FPDU).
    LLP_FPDU = (Llp, 0, 0x03, "MPA error: malformed FPDU or marker");
    /// MPA: invalid request or reply frame.
    LLP_INVALID_REQUEST_REPLY = (Llp, 0, 0x04, "MPA error: invalid MPA request or reply");
    /// RFC 6581: local catastrophic error during enhanced setup.
    LLP_LOCAL_CATASTROPHIC = (Llp, 0, 0x05, "MPA enhanced setup: local catastrophic error");
    /// RFC 6581: insufficient IRD resources.
    LLP_INSUFFICIENT_IRD = (Llp, 0, 0x06, "MPA enhanced setup: insufficient IRD resources");
    /// RFC 6581: no matching RTR.
    LLP_NO_MATCHING_RTR = (Llp, 0, 0x07, "MPA enhanced setup: no matching ready-to-receive message");
}

const HDR_M: u8 = 0x80;
const HDR_D: u8 = 0x40;
const HDR_R: u8 = 0x20;

/// Bytes of the Terminate Control field.
pub const TERMINATE_CONTROL_LEN: usize = 4;

/// A parsed TERMINATE body.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TerminateRepr<'a> {
    /// What went wrong.
    pub code: TerminateCode,
    /// M: the ULPDU length of the offending FPDU.
    pub segment_length: Option<u16>,
    /// D: a copy of the offending DDP header (14 or 18 bytes).
    pub ddp_header: Option<&'a [u8]>,
    /// R: a copy of the offending RDMAP header (the 28-byte READ request body).
    pub rdmap_header: Option<&'a [u8]>,
}

impl<'a> TerminateRepr<'a> {
    /// Parses a TERMINATE body leniently.
    ///
    /// siw's bitfield declaration emits byte 0 as `(etype << 4) | layer` and puts M/D/R in
    /// bits 0/1/2 of byte 2; RFC 5040 has `(layer << 4) | etype` and M/D/R in bits 7/6/5.
    /// siw's order is recognised when byte 2 carries only low flag bits, or when the RFC
    /// reading gives an unknown layer and the swapped one a known layer. Header copies that
    /// are announced but missing are left out rather than failing the parse.
    pub fn parse(body: &'a [u8]) -> WireResult<TerminateRepr<'a>> {
        check_len("TERMINATE control", body.len(), TERMINATE_CONTROL_LEN)?;
        let (mut hi, mut lo) = (body[0] >> 4, body[0] & 0x0f);
        let b2 = body[2];
        let siw_order = (b2 & 0xE0 == 0 && b2 & 0x07 != 0) || (hi > 2 && lo <= 2);
        let (m, d, r) = if siw_order {
            std::mem::swap(&mut hi, &mut lo);
            (b2 & 0x01 != 0, b2 & 0x02 != 0, b2 & 0x04 != 0)
        } else {
            (b2 & HDR_M != 0, b2 & HDR_D != 0, b2 & HDR_R != 0)
        };
        let code = TerminateCode {
            layer: Layer::from_raw(hi),
            etype: lo,
            code: body[1],
        };
        let mut at = TERMINATE_CONTROL_LEN;
        let mut segment_length = None;
        if m && body.len() >= at + 2 {
            segment_length = Some(read_u16(body, at..at + 2));
            at += 2;
        }
        let mut ddp_header = None;
        if d && body.len() > at {
            let len = if body[at] & 0x80 != 0 {
                TAGGED_HEADER_LEN
            } else {
                UNTAGGED_HEADER_LEN
            };
            if body.len() >= at + len {
                ddp_header = Some(&body[at..at + len]);
                at += len;
            }
        }
        let rdmap_header =
            (r && body.len() >= at + READ_REQUEST_LEN).then(|| &body[at..at + READ_REQUEST_LEN]);
        Ok(TerminateRepr {
            code,
            segment_length,
            ddp_header,
            rdmap_header,
        })
    }

    /// Appends the body in RFC 5040 order.
    pub fn append(&self, out: &mut Vec<u8>) {
        let mut hdrct = 0;
        if self.segment_length.is_some() {
            hdrct |= HDR_M;
        }
        if self.ddp_header.is_some() {
            hdrct |= HDR_D;
        }
        if self.rdmap_header.is_some() {
            hdrct |= HDR_R;
        }
        out.push((self.code.layer.to_raw() << 4) | (self.code.etype & 0x0f));
        out.push(self.code.code);
        out.push(hdrct);
        out.push(0);
        if let Some(l) = self.segment_length {
            out.extend_from_slice(&l.to_be_bytes());
        }
        if let Some(h) = self.ddp_header {
            out.extend_from_slice(h);
        }
        if let Some(h) = self.rdmap_header {
            out.extend_from_slice(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_request_round_trip() {
        let r = ReadRequestRepr {
            sink_stag: 1,
            sink_offset: 2,
            size: 3,
            source_stag: 4,
            source_offset: 5,
        };
        let mut b = Vec::new();
        r.append(&mut b);
        assert_eq!(b.len(), READ_REQUEST_LEN);
        assert_eq!(ReadRequestRepr::parse(&b).unwrap(), r);
        assert!(ReadRequestRepr::parse(&b[..27]).is_err());
    }

    #[test]
    fn terminate_rfc_order_round_trip() {
        let hdr = [0x41u8, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
        let t = TerminateRepr {
            code: TerminateCode::DDP_UNTAGGED_NO_BUFFER,
            segment_length: Some(31),
            ddp_header: Some(&hdr),
            rdmap_header: None,
        };
        let mut b = Vec::new();
        t.append(&mut b);
        assert_eq!(&b[..4], &[0x12, 0x02, 0xC0, 0x00]);
        assert_eq!(TerminateRepr::parse(&b).unwrap(), t);
        assert!(t.code.description().contains("no receive buffer"));
    }

    #[test]
    fn terminate_siw_order_is_recognised() {
        // wire.md: siw emits 21 33 01 for layer 1, etype 2, code 0x33, M = 1.
        let b = [0x21u8, 0x33, 0x01, 0x00, 0x00, 0x2a];
        let t = TerminateRepr::parse(&b).unwrap();
        assert_eq!(t.code.layer, Layer::Ddp);
        assert_eq!(t.code.etype, 2);
        assert_eq!(t.code.code, 0x33);
        assert_eq!(t.segment_length, Some(42));
        // Announced copies that are missing are dropped, not a failure.
        let t = TerminateRepr::parse(&[0x12, 0x02, 0xE0, 0]).unwrap();
        assert_eq!(t.segment_length, None);
        assert!(TerminateRepr::parse(&[0x12, 0x02, 0xE0]).is_err());
    }
}
