//! The async API's errors carry the blocking API's text.

use super::{current_thread, Fixture};
use rdmasock::tokio::{RdmaListener, RdmaStream};
use rdmasock::{RdmaListener as BlockingListener, RdmaSocket};
use std::net::SocketAddr;

/// A refused connect, an address that does not parse, a host that does not resolve and a
/// bind on an address of no local interface fail with the same kind and text as the
/// blocking calls.
pub(crate) fn errors_read_as_the_blocking_api_s(f: &Fixture) {
    let refused = SocketAddr::new(f.ip, f.unused_port());
    let blocking = RdmaSocket::connect(refused).expect_err("nothing listens");
    let not_an_address = "not an address";
    let blocking_parse = RdmaSocket::connect(not_an_address).expect_err("no address");
    let no_host = "no-such-host.invalid:7";
    let blocking_host = RdmaSocket::connect(no_host).expect_err("no such host");
    let elsewhere = "192.0.2.1:0";
    let blocking_bind = BlockingListener::bind(elsewhere).expect_err("not a local address");
    current_thread(async {
        let e = RdmaStream::connect(refused)
            .await
            .expect_err("nothing listens");
        eprintln!("refused: {e}");
        assert_eq!(
            (e.kind(), e.to_string()),
            (blocking.kind(), blocking.to_string())
        );
        let e = RdmaStream::connect(not_an_address)
            .await
            .expect_err("no address");
        assert_eq!(
            (e.kind(), e.to_string()),
            (blocking_parse.kind(), blocking_parse.to_string())
        );
        let e = RdmaStream::connect(no_host)
            .await
            .expect_err("no such host");
        assert_eq!(e.kind(), blocking_host.kind(), "{e} / {blocking_host}");
        let e = RdmaListener::bind(elsewhere).await.expect_err("not local");
        eprintln!("bind elsewhere: {e}");
        assert_eq!(
            (e.kind(), e.to_string()),
            (blocking_bind.kind(), blocking_bind.to_string())
        );
    });
}
