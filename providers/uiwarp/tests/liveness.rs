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
