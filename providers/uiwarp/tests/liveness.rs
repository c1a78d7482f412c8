//! A connection's liveness bound: `Endpoint::set_tcp_user_timeout` sets its TCP socket's
//! `TCP_USER_TIMEOUT` (the socket layer derives it from the keepalive interval, so that a
//! vanished peer ends the connection in bounded time; tests/two_hosts.rs cuts a wire to
//! see it happen).

mod loopback;

use loopback::*;
use rdmasock_uiwarp::driver::endpoint;
use std::time::Duration;

#[test]
fn the_tcp_user_timeout_is_set_and_cleared_on_the_connection() {
    let p = pair();
    let (a, b) = (endpoint(&p.a.qp).unwrap(), endpoint(&p.b.qp).unwrap());
    assert_eq!(
        a.tcp_user_timeout().unwrap(),
        None,
        "the system default at first"
    );
    a.set_tcp_user_timeout(Some(Duration::from_millis(2500)))
        .unwrap();
    assert_eq!(
        a.tcp_user_timeout().unwrap(),
        Some(Duration::from_millis(2500))
    );
    assert_eq!(
        b.tcp_user_timeout().unwrap(),
        None,
        "only the side that asked"
    );
    a.set_tcp_user_timeout(None).unwrap();
    assert_eq!(a.tcp_user_timeout().unwrap(), None);
}

#[test]
fn a_tcp_user_timeout_set_before_the_connection_applies_to_it() {
    let (a, b) = sides(caps(), false);
    let (ea, eb) = (endpoint(&a.qp).unwrap(), endpoint(&b.qp).unwrap());
    let (ta, tb) = (Duration::from_millis(2000), Duration::from_millis(3000));
    ea.set_tcp_user_timeout(Some(ta)).unwrap();
    eb.set_tcp_user_timeout(Some(tb)).unwrap();
    assert_eq!(ea.tcp_user_timeout().unwrap(), Some(ta), "remembered");
    let _pair = connect_sides(a, b);
    assert_eq!(
        ea.tcp_user_timeout().unwrap(),
        Some(ta),
        "on the connecting side"
    );
    assert_eq!(
        eb.tcp_user_timeout().unwrap(),
        Some(tb),
        "on the accepting side"
    );
}

#[test]
fn a_tcp_user_timeout_beyond_what_linux_takes_is_cut_to_its_most() {
    let p = pair();
    let a = endpoint(&p.a.qp).unwrap();
    a.set_tcp_user_timeout(Some(Duration::MAX)).unwrap();
    assert_eq!(
        a.tcp_user_timeout().unwrap(),
        Some(Duration::from_millis(i32::MAX as u64))
    );
}
