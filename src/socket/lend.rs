//! Writes whose bytes go to the provider from the caller's buffer: a write reserves
//! send-ring space as usual but leaves the ring unwritten, and posts each message as an
//! inline send of borrowed bytes (`ScatterGather::borrowed`) while the caller's buffer is
//! still borrowed. Two cases:
//!
//! - On a kernel device, a write the engine sends inline (up to the inline threshold): the
//!   provider copies an inline send's bytes into the work request while the post runs, so
//!   the ring copy was a second copy of the same bytes (rsocket's `rs_send` also posts
//!   these from the caller's buffer).
//! - On a device whose queue pairs lend inline sends (the userspace provider,
//!   `Context::lends_inline`), a large write: the provider writes the bytes to TCP at once
//!   and copies only what TCP did not take, so the write costs one copy fewer. Only while
//!   the transport has nothing waiting (`QueuePair::send_backlog`): behind a backlog the
//!   bytes would be copied anyway, and the ring path leaves framing and CRCs to the
//!   provider's progress thread, which a streaming sender on two CPUs needs (lending
//!   everything cost a third of the bandwidth under QEMU). Small writes there stay in the
//!   ring, where the provider may hold them to send with the next ones.

use crate::protocol::CopySpan;

/// The caller's buffer of one write and where the engine placed its messages in the ring.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lend<'a> {
    buf: &'a [u8],
    spans: &'a [CopySpan],
}

impl<'a> Lend<'a> {
    /// Nothing lent: every payload is in the ring.
    pub(crate) const NONE: Lend<'static> = Lend {
        buf: &[],
        spans: &[],
    };

    /// `buf`, whose pieces the engine put at `spans` (in the order it called back).
    pub(crate) fn new(buf: &'a [u8], spans: &'a [CopySpan]) -> Lend<'a> {
        Lend { buf, spans }
    }

    /// Whether nothing is lent.
    pub(crate) fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The caller's `len` bytes of the message whose ring payload starts at `ring_offset`,
    /// if this write made it (ring ranges in flight never overlap, so the offset names one
    /// message; a message that wraps continues in the caller's buffer without a gap).
    pub(crate) fn bytes(&self, ring_offset: usize, len: usize) -> Option<&'a [u8]> {
        let span = self.spans.iter().find(|s| s.ring_offset == ring_offset)?;
        self.buf
            .get(span.data_offset..span.data_offset.checked_add(len)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_found_by_its_first_ring_offset_and_may_wrap() {
        let buf: Vec<u8> = (0..100).collect();
        let spans = [
            CopySpan {
                data_offset: 0,
                ring_offset: 90,
                len: 10,
            },
            CopySpan {
                data_offset: 10,
                ring_offset: 0,
                len: 30,
            },
            CopySpan {
                data_offset: 40,
                ring_offset: 30,
                len: 60,
            },
        ];
        let lend = Lend::new(&buf, &spans);
        assert_eq!(lend.bytes(90, 40), Some(&buf[0..40]));
        assert_eq!(lend.bytes(30, 60), Some(&buf[40..100]));
        assert_eq!(lend.bytes(30, 61), None);
        assert_eq!(lend.bytes(50, 4), None);
        assert_eq!(Lend::NONE.bytes(0, 0), None);
    }
}
