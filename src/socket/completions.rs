//! The completion side of a connection: completions taken from the queue and fed to the
//! protocol engine, and the completion channel armed before a caller sleeps.
#![forbid(unsafe_code)]

use super::conn::Connection;
use super::warm::warm;
use crate::protocol::{Received, StreamEngine, WrId, RECV_DEFER_MAX, TARGET_LIST_LEN};
use crate::verbs::{InputEdge, WcOpcode, WcStatus, WorkCompletion};
use std::io;

/// The length of a message SEND in write+send mode (one word).
const MESSAGE_LEN: usize = 4;

/// Completions taken from the queue per poll.
const POLL_BATCH: usize = 32;

/// What the completion side keeps between polls.
#[derive(Debug)]
pub(crate) struct CompletionState {
    /// Where completions are polled into (kept, so that a poll initialises nothing).
    wcs: Box<[WorkCompletion; POLL_BATCH]>,
    /// The queue is armed: its next completion raises a channel event.
    armed: bool,
    /// What the first failed completion said (added to the stream's reset error).
    pub(crate) wc_error: Option<String>,
    /// A receive has completed (see
    /// [`CmEndpoint::nudge_after_first_receive`](crate::cm::CmEndpoint::nudge_after_first_receive)).
    first_receive_seen: bool,
    /// A tokio stream holds the channel's input watch and reads the input on its edges
    /// (see [`Connection::take_events_after_edge`]): arming then reads no input.
    pub(crate) input_edges_watched: bool,
}

impl CompletionState {
    /// Nothing polled yet, the queue unarmed.
    pub(crate) fn new() -> CompletionState {
        CompletionState {
            wcs: Box::new([WorkCompletion::default(); POLL_BATCH]),
            armed: false,
            wc_error: None,
            first_receive_seen: false,
            input_edges_watched: false,
        }
    }
}

/// Feeds one completion to `engine`: the socket's whole translation from a work completion,
/// whose every field a device or peer chooses, to the engine's calls. `read_message` reads a
/// write+send message word at an offset into the message area, `read_targets` the target
/// list, `end_reason` why the connection ended (asked only when a receive failed). Returns
/// whether a receive completed successfully; a completion that cannot be read (a message slot
/// outside the area) is an error for the caller to report.
pub(crate) fn feed_engine(
    engine: &mut StreamEngine,
    state: &mut CompletionState,
    wc: &WorkCompletion,
    read_message: impl FnOnce(usize, &mut [u8; 4]) -> io::Result<()>,
    read_targets: impl FnOnce(&mut [u8; TARGET_LIST_LEN]) -> io::Result<()>,
    end_reason: impl FnOnce() -> Option<String>,
) -> io::Result<bool> {
    let id = WrId(wc.wr_id);
    let status = wc.status();
    let ok = status.is_success();
    if !ok && status != WcStatus::WorkRequestFlushError && state.wc_error.is_none() {
        state.wc_error = Some(format!(
            "work request {:#x} completed with status {} ({status}, vendor error {:#x})",
            wc.wr_id, wc.status, wc.vendor_err
        ));
    }
    if !id.is_receive() {
        engine.on_send_completion(id, ok);
        return Ok(false);
    }
    if !ok {
        let cause = end_reason();
        engine.on_receive_failed(id, cause.as_deref());
        return Ok(false);
    }
    let received = if wc.opcode() == WcOpcode::RecvRdmaWithImm {
        Received::Immediate(wc.imm_data)
    } else if (wc.byte_len as usize) < MESSAGE_LEN {
        // The slot holds whatever an earlier message left there: not a message.
        Received::ShortMessage(wc.byte_len)
    } else {
        let mut word = [0u8; 4];
        read_message(id.message_slot() as usize * 4, &mut word)?;
        Received::Message(word)
    };
    let mut read = Ok(());
    engine.on_receive_with(id, received, |list| read = read_targets(list));
    read?;
    Ok(true)
}

impl Connection {
    /// Feeds one completion to the engine (see [`feed_engine`]).
    fn feed(&mut self, wc: &WorkCompletion) -> io::Result<()> {
        // A receive of the shared receive queue: its word is read and its slot freed at once.
        let mut srq_word = None;
        if let Some(share) = &mut self.res.srq {
            let id = WrId(wc.wr_id);
            if id.is_receive() {
                let mut word = [0u8; 4];
                share.consumed(id, Some(&mut word))?;
                srq_word = Some(word);
            }
        }
        let message_mr = &self.res.message_mr;
        let target_mr = &self.res.target_mr;
        let endpoint = &self.endpoint;
        let received = feed_engine(
            &mut self.engine,
            &mut self.completions,
            wc,
            |offset, word| match (srq_word, message_mr) {
                (Some(w), _) => {
                    *word = w;
                    Ok(())
                }
                (None, Some(mr)) => Ok(mr.read_at(offset, word)?),
                (None, None) => Ok(()),
            },
            |list| Ok(target_mr.read_at(0, list)?),
            || endpoint.end_reason(),
        )?;
        if received && self.engine.iomap_local_size() > 0 {
            self.take_iomap_updates()?;
        }
        if received && !self.completions.first_receive_seen {
            self.completions.first_receive_seen = true;
            if self.endpoint.nudge_after_first_receive() {
                self.engine.keepalive();
            }
        }
        Ok(())
    }

    /// Feeds every completion waiting in the queue; true when there was any.
    pub(crate) fn drain_cq(&mut self) -> io::Result<bool> {
        let mut progress = false;
        loop {
            let n = self.res.cq.poll(&mut self.completions.wcs[..])?.len();
            for i in 0..n {
                let wc = self.completions.wcs[i];
                self.feed(&wc)?;
                // A lone receive repost waits for the next post (see `progress_after_read`).
                if !self.engine.only_receives_queued(RECV_DEFER_MAX) {
                    self.post_ops()?;
                }
            }
            progress |= n > 0;
            if n < POLL_BATCH {
                if self.engine.ring_change_pending() {
                    self.change_rings()?;
                }
                if progress && self.res.recv_warm.is_some() {
                    // The next bytes land behind these: bring their pages in.
                    let end = self.engine.received_end();
                    warm(&mut self.res.recv_warm, &self.res.recv_mr, end);
                }
                return Ok(progress);
            }
        }
    }

    /// Takes the completion channel's events and arms the queue, so that the next completion
    /// wakes the channel; then polls once more (the lost-wakeup race). Returns whether events
    /// were taken or that last poll made progress. Every caller has just made progress (polled
    /// the queue).
    ///
    /// Where a tokio stream watches the input and the queue is still armed from an earlier
    /// wait with no event taken since, only the connection manager's notices are looked at:
    /// every completion since that arming raised an event (none did), the caller's progress
    /// polled what came before it, and a queue armed since holds no post back (the provider
    /// holds posts only while its queues are unarmed) nor leaves the input to anyone but the
    /// stream, which reads it on its edges.
    pub(crate) fn arm(&mut self) -> io::Result<bool> {
        let took = self.take_events()?;
        if self.completions.armed && self.completions.input_edges_watched {
            return self.take_notices();
        }
        if !self.completions.armed {
            self.res.cq.req_notify(false)?;
            self.completions.armed = true;
        }
        Ok(self.pump()? || took)
    }

    /// Before a nap (see `WaitPolicy::plan`), on a provider whose channel events move the
    /// data (uiwarp): arms the queue, so that what arrives during the nap raises an event
    /// that the first look after it takes (`take_events_after_wake` reads the socket). Without
    /// it, bytes that came during the nap wait in the socket until a spinning poll checks it,
    /// the look after the nap finds nothing, and the nap is never judged too long. True when
    /// arming found progress (no nap then). A kernel provider's completions are in the queue
    /// at the first look: nothing to do.
    pub(crate) fn arm_for_nap(&mut self) -> io::Result<bool> {
        if self.res.cq_channel.events_make_progress() {
            self.arm()
        } else {
            Ok(false)
        }
    }

    /// Takes and acknowledges the completion channel's events, leaving the queue unarmed;
    /// true when there were any.
    fn take_events(&mut self) -> io::Result<bool> {
        // Where a tokio stream watches the input, it reads it on each edge (below): arming
        // takes only the events already raised.
        let input = match self.completions.input_edges_watched {
            true => Some(InputEdge::None),
            false => None,
        };
        self.take_events_reading(input)
    }

    /// Takes and acknowledges the channel's events, reading the provider's input as `input`
    /// says (`None`: the plain way, until it would block).
    fn take_events_reading(&mut self, input: Option<InputEdge>) -> io::Result<bool> {
        let mut events = 0;
        let channel = &self.res.cq_channel;
        let take = || match input {
            None => channel.try_get_event(),
            Some(edge) => channel.try_get_event_watched(edge),
        };
        while take()?.is_some() {
            events += 1;
        }
        if events > 0 {
            self.res.cq.ack_events(events);
            self.completions.armed = false;
        }
        Ok(events > 0)
    }

    /// After a sleep on the completion channel: on a provider whose events move the data
    /// (uiwarp, see `events_make_progress`), takes them first, so that the woken thread reads
    /// the socket inside `get_event` and the event it raises needs no eventfd write and read;
    /// the queue is re-armed only before the next sleep. On a kernel provider this does
    /// nothing: the completions are polled as usual, and the event is taken when arming.
    pub(crate) fn take_events_after_wake(&mut self) -> io::Result<bool> {
        if self.res.cq_channel.events_make_progress() {
            self.take_events_reading(None)
        } else {
            Ok(false)
        }
    }

    /// [`take_events_after_wake`](Self::take_events_after_wake) for a tokio stream that an
    /// edge of the input it watches woke: the provider reads the input until a read that
    /// does not fill its buffer (later bytes make a new edge; the end shows in the stream's
    /// readiness as read-closed).
    #[cfg(feature = "tokio")]
    pub(crate) fn take_events_after_edge(&mut self) -> io::Result<bool> {
        if self.res.cq_channel.events_make_progress() {
            self.take_events_reading(Some(InputEdge::Seen))
        } else {
            Ok(false)
        }
    }
}
