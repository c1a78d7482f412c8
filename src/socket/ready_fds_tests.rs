//! The handed-out fd's write half carries two notices, a write's and a submitted buffer's:
//! each is raised only while its call waits and the socket allows it, each call quiets only
//! its own, and the fd stays readable while either is up.

use super::readiness::ReadyFds;
use nix::poll::{PollFd, PollFlags, PollTimeout};

/// Whether the handed-out fd is readable now.
fn readable(ready: &ReadyFds) -> bool {
    let mut fds = [PollFd::new(ready.fd(), PollFlags::POLLIN)];
    nix::poll::poll(&mut fds, PollTimeout::ZERO).expect("poll") == 1
}

#[test]
fn a_buffer_that_can_be_taken_back_raises_the_fd_until_the_next_look() {
    let ready = ReadyFds::new().unwrap();
    assert!(!readable(&ready), "quiet at first");
    ready.completion_blocked();
    ready.update(false, true, false);
    assert!(!readable(&ready), "room to write is no buffer back");
    ready.update(false, false, true);
    assert!(readable(&ready), "a buffer can be taken back");
    ready.update(false, false, true);
    assert!(readable(&ready), "still, until the next look");
    ready.completion_called();
    assert!(!readable(&ready), "the look quiets it");
    ready.update(false, false, true);
    assert!(!readable(&ready), "no look waits: nothing to announce");
}

#[test]
fn a_write_notice_and_a_buffer_notice_quiet_only_themselves() {
    let ready = ReadyFds::new().unwrap();
    ready.write_blocked();
    ready.completion_blocked();
    ready.update(false, true, true);
    assert!(readable(&ready));
    ready.completion_called();
    assert!(readable(&ready), "the write's notice stays");
    ready.write_called();
    assert!(!readable(&ready));

    ready.write_blocked();
    ready.completion_blocked();
    ready.update(false, true, true);
    ready.write_called();
    assert!(readable(&ready), "the buffer's notice stays");
    ready.completion_called();
    assert!(!readable(&ready));
}

#[test]
fn a_notice_raised_before_the_fd_exists_shows_on_it() {
    let ready = ReadyFds::new().unwrap();
    ready.completion_blocked();
    ready.update(false, false, true);
    assert!(
        readable(&ready),
        "made after the raise, the fd starts raised"
    );
}
