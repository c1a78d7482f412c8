//! [`RecvQueue`]: posted receive work requests, in order, with runs of regular requests
//! held as one entry.
//!
//! A stream socket posts hundreds of receives per connection and keeps them posted for the
//! connection's life: all the same (the bytes land by RDMA WRITE WITH IMMEDIATE), or one per
//! message slot (write+send mode: consecutive ids, each a 4-byte slot right after the
//! previous one). Held one entry each, an idle connection's receive queue would cost its
//! full depth in memory (tens of KiB); held as runs, it costs an entry or two. Any request
//! that does not continue the run before it starts one of its own, so what comes out is
//! exactly what was posted, in order.
#![forbid(unsafe_code)]

use super::work::{LocalSegment, RecvWork};
use std::collections::VecDeque;

/// How the requests of a run follow its first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Each the same request.
    Same,
    /// Each with the next id, and its one segment right after the previous one's (same
    /// length, same key).
    Next,
}

/// A run: its first request (the next to come out), how many it holds (never 0), and how
/// the others follow (`None` while it holds one).
#[derive(Clone, Debug)]
struct Run {
    first: RecvWork,
    count: u32,
    step: Option<Step>,
}

/// Posted receives, oldest first, regular runs held as one entry.
#[derive(Clone, Debug, Default)]
pub struct RecvQueue {
    runs: VecDeque<Run>,
    /// Requests held, over all runs.
    len: usize,
}

/// The request `n` places after `first` when they follow by `step`; `None` when it cannot
/// be written (an id or address past the end of its range).
fn nth(first: &RecvWork, step: Step, n: u32) -> Option<RecvWork> {
    match step {
        Step::Same => Some(first.clone()),
        Step::Next => {
            let [segment] = *first.segments else {
                return None;
            };
            let offset = u64::from(segment.length).checked_mul(u64::from(n))?;
            let mut work = RecvWork {
                wr_id: first.wr_id.checked_add(u64::from(n))?,
                segments: Default::default(),
            };
            work.segments.push(LocalSegment {
                addr: segment.addr.checked_add(offset)?,
                ..segment
            });
            Some(work)
        }
    }
}

/// Whether the request of `wr_id` and `segments` is the request `n` places after `first`
/// when they follow by `step`: what comparing with [`nth`]'s request gives, without
/// building either.
fn is_nth(first: &RecvWork, step: Step, n: u32, wr_id: u64, segments: &[LocalSegment]) -> bool {
    match step {
        Step::Same => first.wr_id == wr_id && *first.segments == *segments,
        Step::Next => {
            let ([segment], [other]) = (&*first.segments, segments) else {
                return false;
            };
            let Some(offset) = u64::from(segment.length).checked_mul(u64::from(n)) else {
                return false;
            };
            first.wr_id.checked_add(u64::from(n)) == Some(wr_id)
                && segment.addr.checked_add(offset) == Some(other.addr)
                && other.length == segment.length
                && other.lkey == segment.lkey
        }
    }
}

impl Run {
    /// Whether the request of `wr_id` and `segments` continues this run (and by which step).
    fn continued_by(&self, wr_id: u64, segments: &[LocalSegment]) -> Option<Step> {
        if self.count == u32::MAX {
            return None;
        }
        let continues = |step| is_nth(&self.first, step, self.count, wr_id, segments);
        match self.step {
            Some(step) => continues(step).then_some(step),
            None => [Step::Same, Step::Next]
                .into_iter()
                .find(|&step| continues(step)),
        }
    }
}

impl RecvQueue {
    /// An empty queue; it allocates with its first request.
    pub const fn new() -> RecvQueue {
        RecvQueue {
            runs: VecDeque::new(),
            len: 0,
        }
    }

    /// Requests held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no request is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `work` after every request held.
    pub fn push_back(&mut self, work: RecvWork) {
        if !self.continue_run(work.wr_id, &work.segments) {
            self.start_run(work);
        }
    }

    /// Appends the request of `wr_id` and `segments` after every request held: what
    /// [`push_back`](Self::push_back) of that request does, building a [`RecvWork`] only
    /// when it does not continue the last run.
    pub fn push_back_parts(&mut self, wr_id: u64, segments: &[LocalSegment]) {
        if !self.continue_run(wr_id, segments) {
            self.start_run(RecvWork {
                wr_id,
                segments: segments.iter().copied().collect(),
            });
        }
    }

    /// Counts the request of `wr_id` and `segments` into the last run if it continues it.
    fn continue_run(&mut self, wr_id: u64, segments: &[LocalSegment]) -> bool {
        let Some(run) = self.runs.back_mut() else {
            return false;
        };
        let Some(step) = run.continued_by(wr_id, segments) else {
            return false;
        };
        run.step = Some(step);
        run.count += 1;
        self.len += 1;
        true
    }

    /// Appends `work` as a run of its own.
    fn start_run(&mut self, work: RecvWork) {
        self.len += 1;
        self.runs.push_back(Run {
            first: work,
            count: 1,
            step: None,
        });
    }

    /// The oldest request.
    pub fn front(&self) -> Option<&RecvWork> {
        self.runs.front().map(|run| &run.first)
    }

    /// Takes the oldest request.
    pub fn pop_front(&mut self) -> Option<RecvWork> {
        let run = self.runs.front_mut()?;
        self.len -= 1;
        match run.step {
            Some(step) if run.count > 1 => {
                let next = nth(&run.first, step, 1).expect("a run's requests exist");
                run.count -= 1;
                Some(std::mem::replace(&mut run.first, next))
            }
            _ => self.runs.pop_front().map(|run| run.first),
        }
    }

    /// Drops the oldest request (after [`RecvQueue::front`]): what [`RecvQueue::pop_front`]
    /// does, with the run's next request made in place.
    pub fn drop_front(&mut self) {
        let Some(run) = self.runs.front_mut() else {
            return;
        };
        self.len -= 1;
        match run.step {
            Some(step) if run.count > 1 => {
                run.count -= 1;
                if step == Step::Next {
                    // The run holds request 1, so neither sum overflows (see `nth`).
                    let segment = &mut run.first.segments[0];
                    segment.addr += u64::from(segment.length);
                    run.first.wr_id += 1;
                }
            }
            _ => {
                self.runs.pop_front();
            }
        }
    }

    /// Every request, oldest first.
    pub fn into_works(self) -> impl Iterator<Item = RecvWork> {
        self.runs.into_iter().flat_map(|run| {
            let step = run.step.unwrap_or(Step::Same);
            (0..run.count).filter_map(move |n| nth(&run.first, step, n))
        })
    }

    /// Drops every request (their memory freed).
    pub fn clear(&mut self) {
        self.len = 0;
        self.runs = VecDeque::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{LocalSegment, Segments};

    fn work(wr_id: u64, addr: u64) -> RecvWork {
        let mut segments = Segments::new();
        if addr != 0 {
            segments.push(LocalSegment {
                addr,
                length: 64,
                lkey: rdmasock_verbs::LocalKey(7),
            });
        }
        RecvWork { wr_id, segments }
    }

    #[test]
    fn identical_requests_are_one_run_and_come_back_in_order() {
        let mut q = RecvQueue::new();
        let posted = [
            work(1, 0),
            work(1, 0),
            work(1, 0),
            work(2, 0),
            work(2, 4096),
            work(2, 4096),
            work(1, 0),
        ];
        for w in &posted {
            q.push_back(w.clone());
        }
        assert_eq!(q.len(), posted.len());
        assert_eq!(q.runs.len(), 4, "runs of equal neighbours share an entry");
        assert_eq!(q.pop_front(), Some(posted[0].clone()));
        assert_eq!(q.len(), posted.len() - 1);
        let rest: Vec<RecvWork> = std::mem::take(&mut q).into_works().collect();
        assert_eq!(rest, posted[1..]);
        assert!(q.is_empty());
        assert_eq!(q.pop_front(), None);
    }

    #[test]
    fn posting_by_parts_queues_what_posting_the_request_queues() {
        let posted = [
            work(1, 0),
            work(1, 0),
            work(2, 4096),
            work(3, 4160),
            work(4, 4224),
            work(9, 0),
            work(9, 0),
            work(10, 64),
        ];
        let (mut whole, mut parts) = (RecvQueue::new(), RecvQueue::new());
        for w in &posted {
            whole.push_back(w.clone());
            parts.push_back_parts(w.wr_id, &w.segments);
            assert_eq!(parts.len(), whole.len());
            assert_eq!(parts.runs.len(), whole.runs.len());
        }
        assert_eq!(parts.runs.len(), 4, "the same runs: {:?}", parts.runs);
        let parts: Vec<RecvWork> = parts.into_works().collect();
        assert_eq!(parts, posted);
    }

    #[test]
    fn is_nth_agrees_with_building_the_request() {
        let firsts = [
            work(5, 0),
            work(5, 4096),
            work(u64::MAX - 1, u64::MAX - 100),
        ];
        let mut others: Vec<RecvWork> = firsts.to_vec();
        others.extend([
            work(6, 4160),
            work(7, 4224),
            work(6, 4096),
            work(u64::MAX, u64::MAX - 36),
        ]);
        let mut other_key = work(6, 4160);
        other_key.segments[0].lkey = rdmasock_verbs::LocalKey(8);
        others.push(other_key);
        let mut other_length = work(6, 4160);
        other_length.segments[0].length = 32;
        others.push(other_length);
        let mut matches = 0;
        for first in &firsts {
            for step in [Step::Same, Step::Next] {
                for n in [0, 1, 2, u32::MAX] {
                    for other in &others {
                        let built = nth(first, step, n).as_ref() == Some(other);
                        assert_eq!(
                            is_nth(first, step, n, other.wr_id, &other.segments),
                            built,
                            "{first:?} {step:?} {n} {other:?}"
                        );
                        matches += usize::from(built);
                    }
                }
            }
        }
        assert!(matches > 8, "the cases must include matches ({matches})");
    }

    #[test]
    fn a_thousand_identical_receives_hold_one_entry() {
        let mut q = RecvQueue::new();
        for _ in 0..1000 {
            q.push_back(work(9, 0));
        }
        assert_eq!((q.len(), q.runs.len()), (1000, 1));
        for left in (0..1000).rev() {
            assert_eq!(q.pop_front(), Some(work(9, 0)));
            assert_eq!(q.len(), left);
        }
        assert!(q.runs.is_empty());
        q.push_back(work(3, 0));
        q.clear();
        assert_eq!((q.len(), q.pop_front()), (0, None));
    }

    #[test]
    fn message_slots_in_a_row_are_one_run() {
        let slot = |i: u64| {
            let mut w = work(1_000 + i, 0x10_000 + 4 * i);
            w.segments[0].length = 4;
            w
        };
        let mut q = RecvQueue::new();
        let mut posted: Vec<RecvWork> = (0..385).map(slot).collect();
        // Wrapping to slot 0, a gap, and a slot of another length each start a run.
        posted.push(slot(0));
        posted.push(slot(1));
        posted.push(slot(5));
        let mut longer = slot(6);
        longer.segments[0].length = 8;
        posted.push(longer);
        for w in &posted {
            q.push_back(w.clone());
        }
        assert_eq!(q.runs.len(), 4, "{:?}", q.runs);
        assert_eq!(q.pop_front(), Some(slot(0)));
        assert_eq!(q.pop_front(), Some(slot(1)));
        let rest: Vec<RecvWork> = std::mem::take(&mut q).into_works().collect();
        assert_eq!(rest, posted[2..]);
    }

    #[test]
    fn dropping_the_front_leaves_what_popping_it_does() {
        let slot = |i: u64| {
            let mut w = work(1_000 + i, 0x10_000 + 4 * i);
            w.segments[0].length = 4;
            w
        };
        let mut posted: Vec<RecvWork> = (0..5).map(slot).collect();
        posted.extend([work(2, 0), work(2, 0), work(2, 0), slot(9), work(4, 4096)]);
        let mut popped = RecvQueue::new();
        let mut dropped = RecvQueue::new();
        for w in &posted {
            popped.push_back(w.clone());
            dropped.push_back(w.clone());
        }
        for w in &posted {
            assert_eq!(dropped.front(), Some(w));
            assert_eq!(popped.pop_front().as_ref(), Some(w));
            dropped.drop_front();
            assert_eq!(dropped.len(), popped.len());
        }
        assert_eq!((dropped.front(), dropped.runs.len()), (None, 0));
        dropped.drop_front();
        assert_eq!(dropped.len(), 0);
    }
}
