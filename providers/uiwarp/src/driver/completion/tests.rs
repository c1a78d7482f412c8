//! Tests of the completion channel and queue.

use super::*;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

fn readable(fd: BorrowedFd<'_>) -> bool {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::ZERO).expect("poll") == 1
}

#[test]
fn the_eventfd_is_readable_exactly_while_an_event_or_a_notice_waits() {
    let channel = UiwarpChannel::new().expect("a channel");
    let (notice, whole) = (channel.notice_fd(), channel.fd());
    assert!(!readable(notice) && !readable(whole));
    channel.raise_notice();
    assert!(readable(notice) && readable(whole), "a raised notice");
    channel.signal(7);
    assert_eq!(channel.pop(), Some(7));
    assert!(
        readable(notice),
        "the event is taken; the notice still waits"
    );
    channel.raise_notice();
    channel.lower_notice();
    assert!(readable(notice), "another QP's notice still waits");
    channel.lower_notice();
    assert!(!readable(notice) && !readable(whole), "nothing waits");
    channel.signal(8);
    assert!(readable(notice) && readable(whole), "an event");
    channel.lower_notice();
    assert!(readable(notice), "a lower with none raised takes nothing");
    assert_eq!(channel.pop(), Some(8));
    assert!(!readable(notice) && !readable(whole));
}

#[test]
fn a_wake_lasts_until_taken_back_whatever_events_are_taken() {
    let channel = UiwarpChannel::new().expect("a channel");
    assert!(channel.can_wake());
    channel.wake();
    assert!(readable(channel.fd()), "woken");
    assert_eq!(
        channel.get_event().expect("no error"),
        None,
        "a wake is no event"
    );
    assert!(
        readable(channel.fd()),
        "another thread's get_event leaves the wake"
    );
    channel.signal(3);
    assert_eq!(channel.get_event().expect("no error"), Some(3));
    assert!(readable(channel.fd()), "so does taking an event");
    channel.take_wake();
    assert!(!readable(channel.fd()), "taken back");
    channel.signal(4);
    channel.wake();
    channel.take_wake();
    assert!(readable(channel.fd()), "the event still waits");
    assert_eq!(channel.get_event().expect("no error"), Some(4));
    assert!(!readable(channel.fd()));
}

fn completion(wr_id: u64, status: WcStatus) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        status: status.to_raw(),
        ..WorkCompletion::default()
    }
}

/// The wr_ids in the queue, in order.
fn queued(cq: &UiwarpCq) -> Vec<u64> {
    let s = cq.state.lock().unwrap();
    s.queue.iter().map(|wc| wc.wr_id).collect()
}

#[test]
fn a_batch_keeps_order_and_raises_the_channel_once() {
    let channel = Arc::new(UiwarpChannel::new().expect("a channel"));
    let cq = UiwarpCq::new(16, Some(channel.clone() as Arc<dyn ChannelOps>));
    cq.push_all(
        [1, 2, 3]
            .map(|id| (completion(id, WcStatus::Success), false))
            .into_iter(),
    );
    assert_eq!(queued(&cq), [1, 2, 3]);
    assert!(!readable(channel.fd()), "not armed: no event");
    cq.req_notify(false).unwrap();
    assert!(cq.is_armed());
    cq.push_all(
        [4, 5]
            .map(|id| (completion(id, WcStatus::Success), false))
            .into_iter(),
    );
    assert_eq!(queued(&cq), [1, 2, 3, 4, 5]);
    assert!(!cq.is_armed(), "the first completion disarmed the queue");
    assert_eq!(channel.pop(), Some(cq.cookie()), "one event");
    assert_eq!(channel.pop(), None, "only one");
    assert!(!readable(channel.fd()));
}

#[test]
fn a_batch_wakes_a_solicited_only_arm_at_its_solicited_or_failed_completion() {
    let channel = Arc::new(UiwarpChannel::new().expect("a channel"));
    let cq = UiwarpCq::new(16, Some(channel.clone() as Arc<dyn ChannelOps>));
    cq.req_notify(true).unwrap();
    cq.push_all([(completion(1, WcStatus::Success), false)].into_iter());
    assert!(
        cq.is_armed(),
        "an unsolicited success leaves a solicited-only arm"
    );
    assert!(!readable(channel.fd()));
    cq.push_all(
        [
            (completion(2, WcStatus::Success), false),
            (completion(3, WcStatus::Success), true),
            (completion(4, WcStatus::Success), true),
        ]
        .into_iter(),
    );
    assert!(!cq.is_armed());
    assert_eq!(channel.pop(), Some(cq.cookie()));
    assert_eq!(
        channel.pop(),
        None,
        "the solicited completion after it finds no arm"
    );
    cq.req_notify(true).unwrap();
    cq.push_all([(completion(5, WcStatus::WorkRequestFlushError), false)].into_iter());
    assert!(!cq.is_armed(), "an error wakes a solicited-only arm");
    assert_eq!(channel.pop(), Some(cq.cookie()));
    assert_eq!(queued(&cq), [1, 2, 3, 4, 5]);
}
