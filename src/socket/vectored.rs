//! Vectored reads and writes: the engine places a byte range of one logical buffer at a time
//! (a [`CopySpan`]); here that range is found in a list of buffers (`IoSlice`s to gather
//! from, `IoSliceMut`s to scatter into). A vectored write of several slices whose total fits
//! one message goes out as one message, as `writev(2)` makes one TCP segment.
#![forbid(unsafe_code)]

use super::data_path::keep_first_error;
use super::pool::LocalSlice;
use crate::protocol::CopySpan;
use crate::verbs::MemoryRegion;
use std::io::{IoSlice, IoSliceMut};

/// The total length of buffers of lengths `lens`, saturating (slices may alias, so the sum
/// of their lengths is not bounded by the address space).
pub(crate) fn total_len(lens: impl Iterator<Item = usize>) -> usize {
    lens.fold(0usize, usize::saturating_add)
}

/// Calls `f(item, start, at, n)` for each piece of the range `[offset, offset + len)` of
/// the concatenation of `items` (each `len_of(item)` bytes long): `n` bytes of `item` from
/// `start`, which are bytes `at..at + n` of the range. Bytes past the last item are
/// skipped; empty items are never passed.
fn pieces<T>(
    items: impl IntoIterator<Item = T>,
    len_of: impl Fn(&T) -> usize,
    offset: usize,
    len: usize,
    mut f: impl FnMut(T, usize, usize, usize),
) {
    if len == 0 {
        return;
    }
    let end = offset.saturating_add(len);
    let mut base = 0usize;
    for item in items {
        if base >= end {
            return;
        }
        let l = len_of(&item);
        let next = base.saturating_add(l);
        if l > 0 && next > offset {
            let from = offset.max(base);
            let to = end.min(next);
            f(item, from - base, from - offset, to - from);
        }
        base = next;
    }
}

/// [`pieces`] of the bytes `span` names, with each piece's offset in the ring.
fn ring_pieces<T>(
    items: impl IntoIterator<Item = T>,
    len_of: impl Fn(&T) -> usize,
    span: CopySpan,
    mut f: impl FnMut(T, std::ops::Range<usize>, usize),
) {
    pieces(
        items,
        len_of,
        span.data_offset,
        span.len,
        |item, start, at, n| f(item, start..start + n, span.ring_offset + at),
    );
}

/// Copies the bytes `span` names from `bufs` into the send ring `mr`; the first failure
/// (out of range: a bug in the engine's arithmetic) is the result.
pub(crate) fn gather_to_ring(
    mr: &LocalSlice,
    bufs: &[IoSlice<'_>],
    span: CopySpan,
) -> Result<(), crate::verbs::Error> {
    let mut copied = Ok(());
    ring_pieces(
        bufs,
        |b| b.len(),
        span,
        |b, range, ring_at| keep_first_error(&mut copied, mr.write_at(ring_at, &b[range])),
    );
    copied
}

/// Copies the bytes `span` names from the receive ring `mr` into `bufs`; the first failure
/// is the result.
pub(crate) fn scatter_from_ring(
    mr: &MemoryRegion,
    bufs: &mut [IoSliceMut<'_>],
    span: CopySpan,
) -> Result<(), crate::verbs::Error> {
    let mut copied = Ok(());
    ring_pieces(
        bufs,
        |b| b.len(),
        span,
        |b, range, ring_at| keep_first_error(&mut copied, mr.read_at(ring_at, &mut b[range])),
    );
    copied
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(lens: &[usize], offset: usize, len: usize) -> Vec<(usize, usize, usize, usize)> {
        let mut out = Vec::new();
        let items = lens.iter().copied().enumerate();
        pieces(
            items,
            |&(_, l)| l,
            offset,
            len,
            |(i, _), s, a, n| out.push((i, s, a, n)),
        );
        out
    }

    #[test]
    fn a_range_is_cut_at_buffer_boundaries_and_skips_empty_buffers() {
        let lens = [3, 0, 5, 2];
        assert_eq!(
            collect(&lens, 0, 10),
            [(0, 0, 0, 3), (2, 0, 3, 5), (3, 0, 8, 2)]
        );
        assert_eq!(collect(&lens, 2, 4), [(0, 2, 0, 1), (2, 0, 1, 3)]);
        assert_eq!(collect(&lens, 3, 5), [(2, 0, 0, 5)]);
        assert_eq!(collect(&lens, 9, 1), [(3, 1, 0, 1)]);
        assert_eq!(collect(&lens, 4, 0), []);
        assert_eq!(collect(&lens, 3, 0), []);
        assert_eq!(collect(&lens, 10, 5), [], "past the end");
        assert_eq!(collect(&lens, 8, 99), [(3, 0, 0, 2)], "cut at the end");
    }

    #[test]
    fn pieces_cover_every_range_exactly_once() {
        let lens = [1, 4, 0, 0, 7, 2, 9];
        let data: Vec<u8> = (0..23).collect();
        let bufs: Vec<&[u8]> = {
            let mut rest = &data[..];
            lens.iter()
                .map(|&l| {
                    let (a, b) = rest.split_at(l);
                    rest = b;
                    a
                })
                .collect()
        };
        for offset in 0..=23 {
            for len in 0..=(23 - offset) {
                let mut got = vec![0xffu8; len];
                let mut covered = 0;
                pieces(
                    &bufs,
                    |b| b.len(),
                    offset,
                    len,
                    |b, s, a, n| {
                        got[a..a + n].copy_from_slice(&b[s..s + n]);
                        covered += n;
                    },
                );
                assert_eq!(covered, len);
                assert_eq!(got, &data[offset..offset + len]);
            }
        }
    }

    #[test]
    fn total_len_saturates() {
        assert_eq!(total_len([1, 2, 3].into_iter()), 6);
        assert_eq!(total_len([usize::MAX, 2].into_iter()), usize::MAX);
    }
}
