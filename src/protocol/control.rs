//! Send completions, half-close / disconnect, keepalive.
#![forbid(unsafe_code)]

use super::engine::{Phase, StreamEngine};
use super::error::StreamError;
use super::msg::{Control, Message};
use super::op::{Op, Payload, WrId};
use std::net::Shutdown;

impl StreamEngine {
    /// A send work request completed. With selective signalling a completion also retires
    /// every earlier unsignalled work request (RC completes them in order). `success` is false
    /// for any error status; every error completion must be fed, flushed ones included.
    pub fn on_send_completion(&mut self, wr_id: WrId, success: bool) {
        if wr_id.is_receive() {
            self.fail(StreamError::Protocol(format!(
                "the driver fed receive work request {wr_id:?} as a send"
            )));
            return;
        }
        // What earlier completions found lost: a refused farewell (below) keeps it.
        let lost_before = (self.sends_lost, self.lost_message);
        while let Some(p) = self.pending.front().copied() {
            // A failed completion of an unsignalled iowrite inside a run of them retires the
            // whole run (the writes after it in the run fail with the queue pair): its loss
            // is counted below and the connection fails.
            if p.seq > wr_id.seq() && (success || p.first > wr_id.seq()) {
                break;
            }
            self.pending.pop_front();
            self.sqe_avail += p.sqes;
            self.ctrl_in_use -= p.ctrl;
            self.sbuf_avail += p.bytes;
            // A failed completion retires requests whose success no completion confirmed:
            // stream data among them (a data slot), or a close message, may not have arrived.
            // Data the peer's credit updates show it consumed did arrive, whenever those
            // updates are fed: `undelivered` weighs them when asked.
            if !success {
                if p.sqes > 0 {
                    self.lost_message = Some(p.message);
                }
                // A fence that failed proves nothing about the data messages it covers.
                if p.fence && p.message != self.fenced_message {
                    self.lost_message = Some(p.message);
                }
                self.sends_lost |= p.disconnect;
            } else if p.fence {
                self.fenced_message = p.message;
            }
            if p.disconnect {
                // When a DISCONNECT sent after the peer's SHUTDOWN is the first send to fail,
                // every send before it was acknowledged: the peer closed first (rsocket
                // answers crossing SHUTDOWNs with no DISCONNECT of its own) and the stream is
                // over both ways, not reset. An earlier failure keeps its loss.
                let farewell_refused = !success
                    && self.peer_shutdown
                    && p.seq == wr_id.seq()
                    && lost_before == (false, None);
                if success || farewell_refused {
                    self.phase = Phase::Disconnected;
                }
                if farewell_refused {
                    // Every send before it was acknowledged (see above): nothing was lost.
                    (self.sends_lost, self.lost_message) = lost_before;
                }
            }
        }
        if !success && self.error.is_none() && self.phase == Phase::Connected {
            self.fail(StreamError::ConnectionReset(format!(
                "send work request {} completed with an error: the peer is unreachable or gone \
                 (transport retries exhausted) or rejected the access",
                wr_id.0
            )));
        }
        self.flush_pending_control();
        self.signal_last_send();
        self.update_credits();
    }

    /// Waits for every posted send to complete, like `TcpStream`'s flush waiting for the
    /// peer's acknowledgement. `Ok(())` once [`all_sends_done`](Self::all_sends_done) holds
    /// and every send carrying stream data completed successfully (where a completion does
    /// not prove placement, a placement fence after the last of them completed too: see
    /// [`proves_placement_by_read`](Self::proves_placement_by_read)), or once the connection
    /// failed after all of them did (and, with fences, after a fence proved them). An error
    /// when they cannot all have arrived: a send carrying data (or its fence) completed with
    /// an error, or the connection failed with some still outstanding or unproven
    /// ([`undelivered`](Self::undelivered)). Otherwise returns
    /// [`StreamError::WouldBlock`] after making sure a completion will come: with
    /// selective signalling the last posted work request may be unsignalled, and then nothing
    /// would ever retire it, so a signalled zero-length RDMA WRITE (invisible to the peer, like
    /// a keepalive), or the fence, is queued after it, as soon as a control slot is free.
    /// Call again after feeding completions.
    pub fn flush(&mut self) -> Result<(), StreamError> {
        if let Some(e) = self.undelivered() {
            return Err(e);
        }
        if self.error.is_some() {
            return Ok(());
        }
        // Once the connection manager reported the connection gone, no fence can go out:
        // data messages no fence proved stay unproven until the flushed receives say whether
        // the peer closed (its DISCONNECT came after every message it placed) or the
        // connection broke (`undelivered` then counts them as outstanding).
        let unproven_until_the_end = self.awaits_flush() && self.placement_unproven();
        if self.all_sends_done() && !self.fence_wanted() && !unproven_until_the_end {
            return Ok(());
        }
        self.completion_wanted = true;
        self.signal_last_send();
        Err(StreamError::WouldBlock)
    }

    /// Why bytes a write accepted (or a close message) may not have reached the peer, if they
    /// may not have: a send carrying them completed with an error, or the connection failed
    /// while one was still outstanding or unproven (sent where only a placement fence proves
    /// placement, and no fence after it came back), and the peer's credit updates do not
    /// show that it
    /// consumed them (the peer counts the data messages it consumed in every update, so
    /// an update proves every message up to that count arrived, whatever became of the
    /// completions). Our close message failing is no loss once the peer's DISCONNECT
    /// arrived: the peer closed first and may be gone already (on rxe it disconnects as soon
    /// as its DISCONNECT is acknowledged, so ours, posted before theirs was fed, fails with
    /// the connection), and the data messages before ours are weighed by their own
    /// completions. The stream's own error when it has one.
    pub fn undelivered(&self) -> Option<StreamError> {
        let outstanding = self.pending.iter().any(|p| {
            p.disconnect
                || ((p.sqes > 0 || (p.fence && p.message != self.fenced_message))
                    && !self.consumed_by_peer(p.message))
        }) || self.pending_ctrl.is_some()
            || self.placement_unproven();
        let lost = (self.sends_lost && !self.peer_closed)
            || self.lost_message.is_some_and(|m| !self.consumed_by_peer(m))
            || (self.error.is_some() && outstanding);
        if !lost {
            return None;
        }
        Some(self.error.clone().unwrap_or_else(|| {
            StreamError::ConnectionReset(
                "a send carrying written bytes completed with an error after the connection \
                 closed: the peer may not have everything that was written"
                    .into(),
            )
        }))
    }

    /// Whether the peer's latest credit update shows it consumed our data message number
    /// `message` (`sseq_no` just after it was sent). The update's limit is the peer's count of
    /// our data messages it consumed plus its credit window; every message sent since that
    /// count is unproven.
    pub(crate) fn consumed_by_peer(&self, message: u16) -> bool {
        let consumed = self.sseq_comp.wrapping_sub(self.peer_window);
        let unproven = self.sseq_no.wrapping_sub(consumed);
        self.sseq_no.wrapping_sub(message) >= unproven
    }

    /// Whether data messages were sent that only a placement fence could prove placed
    /// ([`proves_placement_by_read`](Self::proves_placement_by_read)) and none did: no fence
    /// after the newest came back, and the peer's credit updates do not show it consumed.
    /// Their sends completing says only that the local transport took them.
    pub(crate) fn placement_unproven(&self) -> bool {
        self.proves_placement_by_read()
            && self.sseq_no != self.fenced_message
            && !self.consumed_by_peer(self.sseq_no)
    }

    /// Whether a flush or close proves placement with a placement fence, where a signalled
    /// completion proves only that the local transport took a send, not that the peer placed
    /// it: on iWARP (write+send mode) a WRITE completes once TCP has its bytes. When the
    /// configuration asks for it ([`StreamConfig::placement_fence`](super::StreamConfig)),
    /// against an rdmasock peer that says it answers one (its hello's
    /// [`FLAG_ANSWERS_FENCE`](super::FLAG_ANSWERS_FENCE): the userspace provider and the
    /// kernel's siw), the fence is an RDMA READ of the first
    /// [`FENCE_READ_LEN`](super::FENCE_READ_LEN) byte of the peer's target list after the
    /// data, whose response comes back only once the peer placed every message before it
    /// (RFC 5040's ordering: a READ request is processed after the messages sent before it).
    /// rsocket grants no READs on iWARP: against it a flush vouches for the local transport
    /// only. Where RC acknowledgements complete a WRITE (InfiniBand, RoCE) the completion
    /// itself proves placement.
    pub fn proves_placement_by_read(&self) -> bool {
        self.cfg.write_with_send && self.cfg.placement_fence && self.peer_answers_fence
    }

    /// Whether data messages posted since the last fence wait for one (see
    /// [`proves_placement_by_read`](Self::proves_placement_by_read)): not once the peer
    /// closed, which answers no more READs.
    pub(crate) fn fence_wanted(&self) -> bool {
        self.unfenced
            && self.proves_placement_by_read()
            && self.phase == Phase::Connected
            && !self.peer_closed
            && self.error.is_none()
    }

    /// When a flush (or the peer's DISCONNECT) waits for every send, queues a signalled
    /// zero-length RDMA WRITE unless the last posted work request is signalled already, or
    /// the placement fence that data messages since the last one wait for.
    pub(crate) fn signal_last_send(&mut self) {
        if !self.completion_wanted {
            return;
        }
        let fence = self.fence_wanted();
        if !fence && self.pending.back().is_none_or(|p| p.signaled) {
            // Nothing outstanding, or its last completion is on its way.
            self.completion_wanted = false;
            return;
        }
        if self.phase == Phase::Opening || self.error.is_some() {
            self.completion_wanted = false;
            return;
        }
        if !self.control_available(1) {
            // A busy control slot is a signalled request: its completion calls us again.
            return;
        }
        self.completion_wanted = false;
        if fence {
            self.post_fence();
        } else {
            self.post_zero_write();
        }
    }

    /// The placement fence: a signalled one-byte RDMA READ of the peer's target list,
    /// invisible to the peer's application (see [`proves_placement_by_read`](Self::proves_placement_by_read)). It
    /// holds a control slot and covers every data message posted so far.
    fn post_fence(&mut self) {
        let wr_id = self.track(true, 0, false, true);
        if let Some(p) = self.pending.back_mut() {
            p.fence = true;
            p.message = self.sseq_no;
        }
        self.unfenced = false;
        self.ops.push_back(Op::Read {
            wr_id,
            remote_addr: self.remote_sgl.addr,
            rkey: self.remote_sgl.key,
        });
    }

    /// A signalled zero-length RDMA WRITE without immediate: invisible to the peer. It holds
    /// a control slot.
    fn post_zero_write(&mut self) {
        let wr_id = self.track(true, 0, false, true);
        self.ops.push_back(Op::Write {
            wr_id,
            payload: Payload::Empty,
            remote_addr: 0,
            rkey: 0,
            inline: false,
            signaled: true,
        });
    }

    /// Shuts down reading, writing or both, like `TcpStream::shutdown`, sending rsocket's
    /// SHUTDOWN or DISCONNECT control message when the protocol calls for one. Once
    /// [`Readiness::disconnected`](super::Readiness) and [`all_sends_done`](Self::all_sends_done)
    /// hold, the driver runs the connection manager's disconnect.
    pub fn shutdown(&mut self, how: Shutdown) {
        if self.phase != Phase::Connected || self.error.is_some() {
            self.readable = false;
            self.writable = false;
            return;
        }
        let ctrl = match how {
            Shutdown::Both => {
                self.readable = false;
                self.writable = false;
                Control::Disconnect
            }
            Shutdown::Write => {
                if !self.writable {
                    return;
                }
                self.writable = false;
                if self.readable {
                    Control::Shutdown
                } else {
                    Control::Disconnect
                }
            }
            Shutdown::Read => {
                if !self.readable {
                    return;
                }
                self.readable = false;
                if self.writable {
                    return;
                }
                Control::Disconnect
            }
        };
        // A DISCONNECT supersedes a SHUTDOWN still waiting for a control slot.
        self.pending_ctrl = Some(ctrl);
        self.flush_pending_control();
    }

    pub(crate) fn flush_pending_control(&mut self) {
        let Some(ctrl) = self.pending_ctrl else {
            return;
        };
        if self.phase != Phase::Connected || self.error.is_some() {
            self.pending_ctrl = None;
            return;
        }
        // Where a completion does not prove placement, the fence goes before the close
        // message: once the peer has that, it may answer no more READs.
        let fence = self.fence_wanted();
        if !self.control_available(1 + u32::from(fence)) {
            return;
        }
        if fence {
            self.post_fence();
        }
        self.pending_ctrl = None;
        let msg = Message::Control(ctrl).encode();
        self.disconnect_posted |= ctrl == Control::Disconnect;
        self.post_ctrl_message(msg, ctrl == Control::Disconnect);
    }

    /// Queues a keepalive: like rsocket, a zero-length RDMA WRITE without immediate, invisible
    /// to the peer; a dead peer shows up as a failed completion. The driver calls it on its
    /// keepalive timer. Returns false when nothing was queued (not connected, or all control
    /// slots busy — which itself proves recent traffic).
    pub fn keepalive(&mut self) -> bool {
        if self.phase != Phase::Connected
            || self.error.is_some()
            || self.disconnect_posted
            || !self.control_available(1)
        {
            return false;
        }
        self.post_zero_write();
        true
    }

    /// The connection manager reported the connection gone (DISCONNECTED event). Data already
    /// received stays readable. The driver moves the queue pair to the error state, which
    /// flushes every receive still posted.
    ///
    /// The event can overtake the completions of the peer's last messages (a device that
    /// posts them from another task), its DISCONNECT among them, so a connected stream does
    /// not end here: it waits ([`awaits_flush`](Self::awaits_flush)), reads of an empty ring
    /// saying [`StreamError::WouldBlock`], for the flushed
    /// receives. A queue pair completes its receives in order, so when the first flushed one
    /// is fed every message the peer sent was: the stream then ends cleanly if the peer's
    /// DISCONNECT was among them (it ends the stream when fed), and fails
    /// ([`on_receive_failed`](Self::on_receive_failed)) if it was not.
    ///
    /// With no receive posted (all reposts still queued, see
    /// [`RECV_DEFER_MAX`](super::RECV_DEFER_MAX)) nothing can flush, and nothing more can
    /// arrive either: every message the peer sends takes a posted receive, so all it sent was
    /// fed with the completions of the receives posted so far. That is the same decision,
    /// made at once: no DISCONNECT was fed (it would have ended the stream), so the
    /// connection broke.
    pub fn on_cm_disconnected(&mut self) {
        self.writable = false;
        self.pending_ctrl = None;
        match self.phase {
            Phase::Connected if self.error.is_none() && self.receives_posted > 0 => {
                self.phase = Phase::Disconnecting;
            }
            Phase::Connected if self.error.is_none() => {
                self.phase = Phase::Disconnected;
                self.fail(StreamError::ConnectionReset(
                    "the connection manager reported the connection closed (DISCONNECTED) \
                     while no receive was posted, so nothing more can arrive: the connection \
                     broke without a DISCONNECT message from the peer"
                        .into(),
                ));
            }
            Phase::Disconnecting => {}
            _ => {
                self.phase = Phase::Disconnected;
                self.readable = false;
            }
        }
    }

    /// True when no posted send is outstanding and no control message waits for a slot.
    pub fn all_sends_done(&self) -> bool {
        self.pending.is_empty() && self.pending_ctrl.is_none()
    }

    /// Entries of the record of posted sends not yet completed (a run of unsignalled
    /// iowrites counts once).
    pub fn sends_outstanding(&self) -> usize {
        self.pending.len()
    }
}
