//! [`Segments`]: a work request's scatter/gather list, held inline up to two entries.

use super::work::LocalSegment;
use std::ops::{Deref, DerefMut};

/// Entries held without an allocation: the socket layer posts one or two.
const INLINE: usize = 2;

/// A scatter/gather list. Up to two entries live inline (most requests: a post per message
/// would otherwise allocate and free a `Vec`); longer lists go to the heap. Derefs to a
/// slice.
#[derive(Clone, Debug)]
pub struct Segments(Repr);

#[derive(Clone, Debug)]
enum Repr {
    Inline {
        len: u8,
        items: [LocalSegment; INLINE],
    },
    Heap(Vec<LocalSegment>),
}

const EMPTY: LocalSegment = LocalSegment {
    addr: 0,
    length: 0,
    lkey: rdmasock_verbs::LocalKey(0),
};

impl Segments {
    /// An empty list.
    pub const fn new() -> Segments {
        Segments(Repr::Inline {
            len: 0,
            items: [EMPTY; INLINE],
        })
    }

    /// Appends `s`.
    #[inline]
    pub fn push(&mut self, s: LocalSegment) {
        match &mut self.0 {
            Repr::Inline { len, items } if usize::from(*len) < INLINE => {
                items[usize::from(*len)] = s;
                *len += 1;
            }
            Repr::Inline { len, items } => {
                let mut v = items[..usize::from(*len)].to_vec();
                v.push(s);
                self.0 = Repr::Heap(v);
            }
            Repr::Heap(v) => v.push(s),
        }
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        *self = Segments::new();
    }
}

impl Default for Segments {
    fn default() -> Segments {
        Segments::new()
    }
}

impl Deref for Segments {
    type Target = [LocalSegment];
    #[inline]
    fn deref(&self) -> &[LocalSegment] {
        match &self.0 {
            Repr::Inline { len, items } => &items[..usize::from(*len)],
            Repr::Heap(v) => v,
        }
    }
}

impl DerefMut for Segments {
    #[inline]
    fn deref_mut(&mut self) -> &mut [LocalSegment] {
        match &mut self.0 {
            Repr::Inline { len, items } => &mut items[..usize::from(*len)],
            Repr::Heap(v) => v,
        }
    }
}

impl FromIterator<LocalSegment> for Segments {
    /// Fills the inline array straight (a request's list is made once per post); a third
    /// entry moves them all to the heap.
    #[inline]
    fn from_iter<I: IntoIterator<Item = LocalSegment>>(iter: I) -> Segments {
        let mut iter = iter.into_iter();
        let mut items = [EMPTY; INLINE];
        for (len, slot) in items.iter_mut().enumerate() {
            match iter.next() {
                Some(x) => *slot = x,
                None => {
                    return Segments(Repr::Inline {
                        len: len as u8,
                        items,
                    })
                }
            }
        }
        match iter.next() {
            None => Segments(Repr::Inline {
                len: INLINE as u8,
                items,
            }),
            Some(x) => {
                let mut v = items.to_vec();
                v.push(x);
                v.extend(iter);
                Segments(Repr::Heap(v))
            }
        }
    }
}

impl From<Vec<LocalSegment>> for Segments {
    fn from(v: Vec<LocalSegment>) -> Segments {
        v.into_iter().collect()
    }
}

impl<'a> IntoIterator for &'a Segments {
    type Item = &'a LocalSegment;
    type IntoIter = std::slice::Iter<'a, LocalSegment>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl PartialEq for Segments {
    fn eq(&self, other: &Segments) -> bool {
        **self == **other
    }
}

impl Eq for Segments {}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmasock_verbs::LocalKey;

    fn seg(i: u32) -> LocalSegment {
        LocalSegment {
            addr: u64::from(i) * 100,
            length: i,
            lkey: LocalKey(i),
        }
    }

    #[test]
    fn inline_then_heap_keeps_order() {
        let mut s = Segments::new();
        assert!(s.is_empty());
        for i in 1..=5 {
            s.push(seg(i));
            assert_eq!(s.len(), i as usize);
            assert_eq!(
                s.iter().map(|x| x.length).collect::<Vec<_>>(),
                (1..=i).collect::<Vec<_>>()
            );
        }
        s[4].length = 9;
        assert_eq!(s.last().map(|x| x.length), Some(9));
        let copy: Segments = s.iter().copied().collect();
        assert_eq!(copy, s);
        s.clear();
        assert!(s.is_empty());
        assert_ne!(copy, s);
        assert_eq!(
            Segments::from(vec![seg(1), seg(2)]),
            [seg(1), seg(2)].into_iter().collect()
        );
    }

    #[test]
    fn collect_keeps_every_entry_in_order() {
        for n in 0..=5u32 {
            let made: Segments = (1..=n).map(seg).collect();
            assert_eq!(made.len(), n as usize);
            assert_eq!(
                made.iter().map(|x| x.length).collect::<Vec<_>>(),
                (1..=n).collect::<Vec<_>>()
            );
            assert_eq!(matches!(made.0, Repr::Heap(_)), n as usize > INLINE);
        }
    }
}
