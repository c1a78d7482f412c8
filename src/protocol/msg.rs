//! rsocket's 32-bit messages and its 16-byte SGL entries.
//!
//! A message is the immediate data of an RDMA WRITE-WITH-IMM (or, in write+send mode, the 4-byte
//! payload of a SEND): the top 3 bits are the operation, the low 29 bits its value
//! (`rs_msg_set(op, data) = op << 29 | data`). Immediate data is carried big-endian on the wire
//! (the verbs layer converts; here it is a host `u32`). The 4-byte SEND payload of write+send
//! mode is written in the *receiver's* announced byte order, like the SGL entries: rsocket
//! writes and reads it in its own host order, which is the same thing between peers of one
//! byte order (rsocket itself does not support write+send between peers of different orders).
#![forbid(unsafe_code)]

/// Mask of the 29-bit value of a message.
pub const DATA_MASK: u32 = 0x1FFF_FFFF;
/// Size of an iWARP message word (the SEND payload in write+send mode).
pub const MESSAGE_WORD_LEN: usize = 4;
/// Size of one SGL entry as written into a peer's target list.
pub const SGE_LEN: usize = 16;

const OP_DATA: u32 = 0;
const OP_WRITE: u32 = 2;
const OP_SGL: u32 = 4;
const OP_IOMAP_SGL: u32 = 6;
const OP_CTRL: u32 = 7;

/// A control message's value (op 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// 0: the sender is fully closed; data already received may still be read.
    Disconnect,
    /// 1: keepalive (rsocket sends it as a plain zero-length WRITE, so it is never received).
    Keepalive,
    /// 2: the sender will send no more data (half-close of its write side).
    Shutdown,
    /// Any other value (ignored, as rsocket does).
    Other(u32),
}

impl Control {
    fn value(self) -> u32 {
        match self {
            Control::Disconnect => 0,
            Control::Keepalive => 1,
            Control::Shutdown => 2,
            Control::Other(v) => v & DATA_MASK,
        }
    }

    fn from_value(v: u32) -> Self {
        match v {
            0 => Control::Disconnect,
            1 => Control::Keepalive,
            2 => Control::Shutdown,
            v => Control::Other(v),
        }
    }
}

/// A decoded 32-bit message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// Op 0: this many bytes of stream data were written into the next receive-ring position.
    Data(u32),
    /// Op 2: a local `riowrite` tag; never sent on the wire.
    Write(u32),
    /// Op 4: credit update; the value is the new absolute credit limit (a receive sequence
    /// number, compared in 16 bits). It may come with a new entry in the target list.
    Sgl(u32),
    /// Op 6: the iomap entry with this index was written.
    IomapSgl(u32),
    /// Op 7: a control message.
    Control(Control),
    /// Ops 1, 3, 5: reserved.
    Reserved {
        /// The 3-bit operation.
        op: u8,
        /// The 29-bit value.
        data: u32,
    },
}

impl Message {
    /// Encodes as `op << 29 | value` (values are masked to 29 bits).
    #[inline(always)]
    pub fn encode(self) -> u32 {
        let (op, data) = match self {
            Message::Data(n) => (OP_DATA, n),
            Message::Write(n) => (OP_WRITE, n),
            Message::Sgl(n) => (OP_SGL, n),
            Message::IomapSgl(n) => (OP_IOMAP_SGL, n),
            Message::Control(c) => (OP_CTRL, c.value()),
            Message::Reserved { op, data } => (u32::from(op & 7), data),
        };
        (op << 29) | (data & DATA_MASK)
    }

    /// Decodes any 32-bit word (every word is some message).
    #[inline]
    pub fn decode(word: u32) -> Self {
        let data = word & DATA_MASK;
        match word >> 29 {
            OP_DATA => Message::Data(data),
            OP_WRITE => Message::Write(data),
            OP_SGL => Message::Sgl(data),
            OP_IOMAP_SGL => Message::IomapSgl(data),
            OP_CTRL => Message::Control(Control::from_value(data)),
            op => Message::Reserved { op: op as u8, data },
        }
    }
}

/// A byte order, as announced by a hello's big-endian flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteOrder {
    /// Least significant byte first (x86, most ARM).
    Little,
    /// Most significant byte first.
    Big,
}

impl ByteOrder {
    /// This machine's byte order.
    pub const fn native() -> Self {
        if cfg!(target_endian = "big") {
            ByteOrder::Big
        } else {
            ByteOrder::Little
        }
    }

    /// The order a hello's flags announce.
    pub fn from_big_endian_flag(big: bool) -> Self {
        if big {
            ByteOrder::Big
        } else {
            ByteOrder::Little
        }
    }

    /// A message word's 4 bytes in this order.
    pub fn word_bytes(self, word: u32) -> [u8; 4] {
        match self {
            ByteOrder::Little => word.to_le_bytes(),
            ByteOrder::Big => word.to_be_bytes(),
        }
    }

    /// A message word from 4 bytes in this order.
    pub fn word_from(self, bytes: [u8; 4]) -> u32 {
        match self {
            ByteOrder::Little => u32::from_le_bytes(bytes),
            ByteOrder::Big => u32::from_be_bytes(bytes),
        }
    }
}

/// rsocket's `struct rs_sge`: a remote buffer (address, rkey, length). In the hello it is
/// big-endian; written into a peer's target list it is in the *peer's* host byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteSge {
    /// Remote virtual address.
    pub addr: u64,
    /// Remote key.
    pub key: u32,
    /// Length in bytes (for the hello's target-list descriptor: the number of entries).
    pub length: u32,
}

/// What makes an advertised receive buffer unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BufferProblem {
    /// Longer than a 29-bit data message can count.
    TooLong,
    /// Its address range runs past the end of the address space, so that writing into it
    /// would advance the address beyond `u64`.
    Overflows,
}

impl BufferProblem {
    /// The problem, as the end of a sentence about the buffer.
    pub(crate) fn text(self) -> &'static str {
        match self {
            BufferProblem::TooLong => "is larger than a 29-bit message can count",
            BufferProblem::Overflows => "has an address range that overflows",
        }
    }
}

impl RemoteSge {
    /// A new entry.
    pub const fn new(addr: u64, key: u32, length: u32) -> Self {
        RemoteSge { addr, key, length }
    }

    /// Why this entry cannot be a receive buffer the peer advertises (its first one in the
    /// hello, or a later one in our target list), if it cannot.
    pub(crate) fn buffer_problem(&self) -> Option<BufferProblem> {
        if self.length > DATA_MASK {
            Some(BufferProblem::TooLong)
        } else if self.addr.checked_add(u64::from(self.length)).is_none() {
            Some(BufferProblem::Overflows)
        } else {
            None
        }
    }

    /// The 16 bytes in `order`.
    pub fn encode(&self, order: ByteOrder) -> [u8; SGE_LEN] {
        let mut b = [0u8; SGE_LEN];
        match order {
            ByteOrder::Little => {
                b[0..8].copy_from_slice(&self.addr.to_le_bytes());
                b[8..12].copy_from_slice(&self.key.to_le_bytes());
                b[12..16].copy_from_slice(&self.length.to_le_bytes());
            }
            ByteOrder::Big => {
                b[0..8].copy_from_slice(&self.addr.to_be_bytes());
                b[8..12].copy_from_slice(&self.key.to_be_bytes());
                b[12..16].copy_from_slice(&self.length.to_be_bytes());
            }
        }
        b
    }

    /// Decodes 16 bytes in `order`; returns `None` when `bytes` is shorter than 16.
    pub fn decode(bytes: &[u8], order: ByteOrder) -> Option<Self> {
        let b: &[u8; SGE_LEN] = bytes.get(..SGE_LEN)?.try_into().ok()?;
        let addr: [u8; 8] = [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
        let key = [b[8], b[9], b[10], b[11]];
        let length = [b[12], b[13], b[14], b[15]];
        Some(match order {
            ByteOrder::Little => RemoteSge::new(
                u64::from_le_bytes(addr),
                u32::from_le_bytes(key),
                u32::from_le_bytes(length),
            ),
            ByteOrder::Big => RemoteSge::new(
                u64::from_be_bytes(addr),
                u32::from_be_bytes(key),
                u32::from_be_bytes(length),
            ),
        })
    }

    pub(crate) fn encode_be(&self) -> [u8; SGE_LEN] {
        self.encode(ByteOrder::Big)
    }

    /// `bytes` must be exactly 16 long (callers slice fixed ranges).
    pub(crate) fn decode_be(bytes: &[u8]) -> Self {
        RemoteSge::decode(bytes, ByteOrder::Big).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_encoding_matches_rs_msg_set() {
        // rs_msg_set(RS_OP_DATA, 2048), rs_msg_set(RS_OP_SGL, 384 + 192),
        // rs_msg_set(RS_OP_CTRL, RS_CTRL_SHUTDOWN), rs_msg_set(RS_OP_IOMAP_SGL, 3).
        assert_eq!(Message::Data(2048).encode(), 0x0000_0800);
        assert_eq!(Message::Sgl(576).encode(), 0x8000_0240);
        assert_eq!(Message::Control(Control::Shutdown).encode(), 0xE000_0002);
        assert_eq!(Message::Control(Control::Disconnect).encode(), 0xE000_0000);
        assert_eq!(Message::Control(Control::Keepalive).encode(), 0xE000_0001);
        assert_eq!(Message::IomapSgl(3).encode(), 0xC000_0003);
        assert_eq!(Message::Write(5).encode(), 0x4000_0005);
        assert_eq!(
            Message::decode(0x2000_0001),
            Message::Reserved { op: 1, data: 1 }
        );
        assert_eq!(
            Message::decode(0xA000_0000),
            Message::Reserved { op: 5, data: 0 }
        );
        assert_eq!(
            Message::decode(0x7FFF_FFFF),
            Message::Reserved {
                op: 3,
                data: DATA_MASK
            }
        );
        assert_eq!(
            Message::decode(0xE000_0009),
            Message::Control(Control::Other(9))
        );
    }

    #[test]
    fn every_word_round_trips() {
        let mut x: u32 = 0x1234_5678;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            assert_eq!(Message::decode(x).encode(), x);
        }
    }

    #[test]
    fn sge_layout_in_both_orders() {
        let sge = RemoteSge::new(0x0011_2233_4455_6677, 0x8899_aabb, 0x0001_0000);
        let le = sge.encode(ByteOrder::Little);
        assert_eq!(
            le,
            [
                0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x00, 0xbb, 0xaa, 0x99, 0x88, 0x00, 0x00,
                0x01, 0x00
            ]
        );
        let be = sge.encode(ByteOrder::Big);
        assert_eq!(
            be,
            [
                0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0x00, 0x01,
                0x00, 0x00
            ]
        );
        assert_eq!(RemoteSge::decode(&le, ByteOrder::Little), Some(sge));
        assert_eq!(RemoteSge::decode(&be, ByteOrder::Big), Some(sge));
        assert_eq!(RemoteSge::decode(&be[..15], ByteOrder::Big), None);
    }

    #[test]
    fn message_words_follow_the_order() {
        assert_eq!(ByteOrder::Little.word_bytes(0xE000_0002), [2, 0, 0, 0xE0]);
        assert_eq!(ByteOrder::Big.word_bytes(0xE000_0002), [0xE0, 0, 0, 2]);
        for o in [ByteOrder::Little, ByteOrder::Big] {
            assert_eq!(o.word_from(o.word_bytes(0x8000_0240)), 0x8000_0240);
        }
    }
}
