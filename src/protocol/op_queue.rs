//! [`OpQueue`]: the engine's queue of work requests for the driver, with runs of receive
//! reposts held as one entry.
//!
//! A new connection queues one receive per receive-queue entry (hundreds): all the same
//! when the bytes land by WRITE WITH IMMEDIATE (no message slot), or for consecutive
//! message slots in write+send mode. One entry each would leave the queue's memory sized by
//! the receive queue's depth for the connection's life, long after the driver took them.
//! Held as a run (the first op and how many follow it), they cost one entry; every other op
//! keeps an entry of its own, and what comes out is exactly what went in, in order.
#![forbid(unsafe_code)]

use super::op::{Op, WrId};
use std::collections::VecDeque;

/// Ops in queue order; a run of receive reposts shares an entry.
#[derive(Debug, Default)]
pub(crate) struct OpQueue {
    /// Each entry: the next op it yields, and how many it yields (never 0; above 1 only for
    /// a run of [`Op::PostRecv`]: each the same without a message slot, each the next
    /// slot's with one, see [`nth_in_run`]).
    entries: VecDeque<(Op, u32)>,
    /// Ops queued, over all entries.
    len: usize,
}

impl OpQueue {
    /// An empty queue; it allocates with its first op.
    pub(crate) const fn new() -> OpQueue {
        OpQueue {
            entries: VecDeque::new(),
            len: 0,
        }
    }

    /// Ops queued.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is queued.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queues `op` after every op queued.
    #[inline]
    pub(crate) fn push_back(&mut self, op: Op) {
        self.len += 1;
        if let Some((first, count)) = self.entries.back_mut() {
            if *count < u32::MAX && nth_in_run(first, *count) == Some(op) {
                *count += 1;
                return;
            }
        }
        self.entries.push_back((op, 1));
    }

    /// Takes the oldest op.
    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<Op> {
        let (op, count) = self.entries.front_mut()?;
        self.len -= 1;
        if *count > 1 {
            let taken = *op;
            *op = nth_in_run(&taken, 1).expect("only receive reposts make runs");
            *count -= 1;
            return Some(taken);
        }
        self.entries.pop_front().map(|(op, _)| op)
    }

    /// The oldest op, left queued.
    #[inline]
    pub(crate) fn front(&self) -> Option<&Op> {
        self.entries.front().map(|(op, _)| op)
    }

    /// Whether `op` is queued.
    pub(crate) fn contains(&self, op: &Op) -> bool {
        match op {
            Op::PostRecv { .. } => self.entries.iter().any(|(first, count)| {
                (0..*count).any(|n| nth_in_run(first, n).as_ref() == Some(op))
            }),
            // Only receive reposts make runs: any other op is an entry's first.
            _ => self.entries.iter().any(|(first, _)| first == op),
        }
    }

    /// Drops every op queued.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.len = 0;
    }
}

/// The op `n` places after `first` in a run (`first` itself for 0): a receive repost
/// without a message slot repeats; one with slot `s` (and the id of slot `s`) is followed by
/// slot `s + 1`'s. Other ops make no runs.
#[inline]
fn nth_in_run(first: &Op, n: u32) -> Option<Op> {
    if n == 0 {
        return Some(*first);
    }
    match *first {
        Op::PostRecv {
            message_slot: None, ..
        } => Some(*first),
        Op::PostRecv {
            wr_id,
            message_slot: Some(slot),
        } if wr_id == WrId::recv(slot) => {
            let nth = slot.checked_add(n)?;
            Some(Op::PostRecv {
                wr_id: WrId::recv(nth),
                message_slot: Some(nth),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receive(slot: Option<u32>) -> Op {
        Op::PostRecv {
            wr_id: WrId::recv(slot.unwrap_or(0)),
            message_slot: slot,
        }
    }

    #[test]
    fn receive_runs_share_an_entry_and_order_is_kept() {
        let mut q = OpQueue::new();
        let clear = Op::ClearTargetEntry { offset: 16 };
        let queued = [
            receive(None),
            receive(None),
            receive(None),
            clear,
            clear,
            receive(Some(1)),
            receive(Some(1)),
            receive(None),
        ];
        for op in queued {
            q.push_back(op);
        }
        assert_eq!(q.len(), queued.len());
        // Only slotless receives merge: the clears and slotted receives stay one each.
        assert_eq!(q.entries.len(), 6);
        assert!(q.contains(&clear));
        let mut out = Vec::new();
        while let Some(front) = q.front().copied() {
            assert_eq!(q.pop_front(), Some(front));
            assert_eq!(q.len(), queued.len() - out.len() - 1);
            out.push(front);
        }
        assert_eq!(out, queued);
        assert!(q.is_empty() && q.pop_front().is_none() && !q.contains(&clear));
    }

    #[test]
    fn a_connections_receives_hold_one_entry() {
        let mut q = OpQueue::new();
        for _ in 0..400 {
            q.push_back(receive(None));
        }
        assert_eq!((q.len(), q.entries.len()), (400, 1));
        q.clear();
        assert!(q.is_empty() && q.front().is_none());
    }

    #[test]
    fn consecutive_message_slots_are_one_run() {
        let mut q = OpQueue::new();
        // Write+send mode: slots 0..385, wrapping to 0 again, then a send.
        let mut queued: Vec<Op> = (0..385).map(|s| receive(Some(s))).collect();
        queued.extend((0..3).map(|s| receive(Some(s))));
        queued.push(Op::ClearTargetEntry { offset: 0 });
        // A slot out of order, or with another id, starts an entry of its own.
        queued.push(receive(Some(7)));
        queued.push(Op::PostRecv {
            wr_id: WrId::recv(9),
            message_slot: Some(8),
        });
        for &op in &queued {
            q.push_back(op);
        }
        assert_eq!(q.entries.len(), 5, "{:?}", q.entries);
        assert!(q.contains(&receive(Some(200))) && q.contains(&receive(Some(2))));
        assert!(!q.contains(&receive(Some(385))) && !q.contains(&receive(None)));
        let out: Vec<Op> = std::iter::from_fn(|| q.pop_front()).collect();
        assert_eq!(out, queued);
        assert!(q.is_empty());
    }
}
