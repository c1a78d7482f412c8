//! A connection's liveness bound: `Endpoint::set_liveness_timeout` bounds how long its peer
//! may leave what was sent unacknowledged (the socket layer derives it from the keepalive
//! interval, so that a vanished peer ends the connection in bounded time;
//! tests/uiwarp_faults.rs cuts a wire and stops a peer to see it judged).

mod loopback;

use loopback::*;
use rdmasock_uiwarp::driver::endpoint;
use std::time::Duration;

#[test]
fn the_liveness_timeout_is_set_and_cleared_on_the_connection() {
    let p = pair();
    let (a, b) = (endpoint(&p.a.qp).unwrap(), endpoint(&p.b.qp).unwrap());
    assert_eq!(a.liveness_timeout(), None, "the system default at first");
    a.set_liveness_timeout(Some(Duration::from_millis(2500)));
    assert_eq!(a.liveness_timeout(), Some(Duration::from_millis(2500)));
    assert_eq!(b.liveness_timeout(), None, "only the side that asked");
    a.set_liveness_timeout(None);
    assert_eq!(a.liveness_timeout(), None);
}

#[test]
fn a_liveness_timeout_set_before_the_connection_applies_to_it() {
    let (a, b) = sides(caps(), false);
    let (ea, eb) = (endpoint(&a.qp).unwrap(), endpoint(&b.qp).unwrap());
    let (ta, tb) = (Duration::from_millis(2000), Duration::from_millis(3000));
    ea.set_liveness_timeout(Some(ta));
    eb.set_liveness_timeout(Some(tb));
    assert_eq!(ea.liveness_timeout(), Some(ta), "remembered");
    let _pair = connect_sides(a, b);
    assert_eq!(ea.liveness_timeout(), Some(ta), "on the connecting side");
    assert_eq!(eb.liveness_timeout(), Some(tb), "on the accepting side");
}

#[test]
fn a_liveness_timeout_beyond_its_most_is_cut_to_it() {
    let p = pair();
    let a = endpoint(&p.a.qp).unwrap();
    a.set_liveness_timeout(Some(Duration::MAX));
    assert_eq!(
        a.liveness_timeout(),
        Some(rdmasock_uiwarp::driver::MAX_LIVENESS_TIMEOUT)
    );
}
