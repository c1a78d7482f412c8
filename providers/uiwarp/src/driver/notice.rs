//! A queue pair's notice fd: readable while a connection notice waits (and, during a
//! connect, when its next step can run). With a uiwarp completion channel on the receive
//! queue it is the channel's eventfd (no fd per connection), otherwise one of its own.
#![forbid(unsafe_code)]

use super::completion::uiwarp_cq;
use super::Endpoint;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;

impl Endpoint {
    /// Readable while [`Endpoint::poll_notice`] has something (and, during a connect, when
    /// its next step can run). Without a uiwarp channel on the receive CQ it is the QP's own
    /// eventfd; with one it is the channel's, shared with its events and the notices of the
    /// channel's other QPs: it may then be readable with nothing for this QP (a waiter finds
    /// nothing and waits again).
    pub fn notice_fd(&self) -> BorrowedFd<'_> {
        match (&self.own_notice_fd, uiwarp_cq(&self.recv_cq).channel()) {
            (Some(fd), _) => fd.as_fd(),
            (None, Some(channel)) => channel.notice_fd(),
            (None, None) => unreachable!("a QP without its own notice fd reports to a channel"),
        }
    }

    /// Makes the notice fd readable (if it is not), under the state lock.
    pub(super) fn raise_notice(&self) {
        if self.notice_raised.swap(true, Ordering::Relaxed) {
            return;
        }
        match (&self.own_notice_fd, uiwarp_cq(&self.recv_cq).channel()) {
            (Some(fd), _) => {
                let _ = fd.write(1);
            }
            (None, Some(channel)) => channel.raise_notice(),
            (None, None) => {}
        }
    }

    /// Takes back what [`raise_notice`](Self::raise_notice) raised, under the state lock.
    pub(super) fn lower_notice(&self) {
        if !self.notice_raised.swap(false, Ordering::Relaxed) {
            return;
        }
        match (&self.own_notice_fd, uiwarp_cq(&self.recv_cq).channel()) {
            (Some(fd), _) => {
                let _ = fd.read();
            }
            (None, Some(channel)) => channel.lower_notice(),
            (None, None) => {}
        }
    }
}

impl Drop for Endpoint {
    /// A notice still raised on a channel that other QPs share is taken back: it would keep
    /// the channel readable for nothing.
    fn drop(&mut self) {
        self.lower_notice();
    }
}
