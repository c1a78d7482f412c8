//! Inline sends from borrowed memory (`ScatterGather::borrowed`): uiwarp sends a large one
//! from the caller's bytes while `post_send` runs and copies only what TCP did not take, so
//! the caller may reuse its buffer as soon as the post returns, whatever TCP did.

mod common;
mod loopback;

use loopback::*;
use rdmasock_uiwarp::protocol::{Config, Connection, Event};
use rdmasock_verbs::{
    QpCapabilities, QueuePair, RecvRequest, RemoteKey, ScatterGather, SendFlags, SendOp,
    SendRequest, WcStatus, WorkCompletion,
};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

const MIB: usize = 1 << 20;

fn big_inline_caps() -> QpCapabilities {
    QpCapabilities {
        max_inline_data: 4 << 20,
        ..caps()
    }
}

fn write_to(p: &Pair, at: usize) -> SendOp {
    SendOp::RdmaWrite {
        remote_addr: p.b.mr.addr() + at as u64,
        rkey: p.b.mr.rkey(),
    }
}

/// The peer of [`lent_writes_arrive_intact_when_tcp_takes_only_part`]: the sans-IO core as
/// a responder on a plain TCP socket, which reads only when told to.
struct StalledPeer {
    side: common::Side,
    stream: TcpStream,
}

impl StalledPeer {
    /// Accepts `a`'s connection (made by `rdmasock_uiwarp::connect` on another thread).
    fn accept(listener: &TcpListener, a: &QueuePair) -> StalledPeer {
        let addr = listener.local_addr().unwrap();
        std::thread::scope(|s| {
            let dial = s.spawn(|| rdmasock_uiwarp::connect(a, addr, b"lend", TIMEOUT).unwrap());
            let (stream, _) = listener.accept().unwrap();
            stream.set_nonblocking(true).unwrap();
            let mut peer = StalledPeer {
                side: common::Side::new(Connection::responder(Config::default(), Instant::now())),
                stream,
            };
            peer.side.auto_accept = Some(b"ok".to_vec());
            let deadline = Instant::now() + TIMEOUT;
            while !peer.side.established() {
                assert!(
                    Instant::now() < deadline,
                    "no MPA exchange within {TIMEOUT:?}"
                );
                peer.step();
            }
            assert_eq!(dial.join().unwrap(), b"ok");
            peer
        })
    }

    /// Reads what TCP has into the core and writes what the core answers; true if it read.
    fn step(&mut self) -> bool {
        let mut buf = vec![0u8; 1 << 20];
        let read = match self.stream.read(&mut buf) {
            Ok(0) => panic!("the uiwarp side closed"),
            Ok(n) => {
                self.side.conn.handle_input(&buf[..n], &self.side.table);
                true
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
            Err(e) => panic!("reading from the uiwarp side: {e}"),
        };
        while let Some(e) = self.side.conn.poll_event() {
            if let (Event::ConnectRequest(_), Some(pd)) = (&e, &self.side.auto_accept) {
                self.side.conn.accept(&pd.clone(), Instant::now()).unwrap();
            }
            self.side.events.push(e);
        }
        let mut out = Vec::new();
        self.side
            .conn
            .poll_transmit(&self.side.table, &mut out, usize::MAX);
        self.stream.set_nonblocking(false).unwrap();
        self.stream.write_all(&out).unwrap();
        self.stream.set_nonblocking(true).unwrap();
        if !read {
            std::thread::yield_now();
        }
        read
    }
}

/// Eight 1 MiB inline WRITEs in one post, to a peer that does not read meanwhile, are more
/// than TCP's buffers take: the rest is copied before the post returns. Each source buffer is
/// overwritten right after the post; once the peer reads, it still receives what was posted.
#[test]
fn lent_writes_arrive_intact_when_tcp_takes_only_part() {
    const WRITES: usize = 8;
    let ctx = context();
    let a = Side::new(&ctx, big_inline_caps(), false);
    init(&a.qp);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut peer = StalledPeer::accept(&listener, &a.qp);
    let (rkey, raddr, placed) = peer.side.region(MIB, all());
    let endpoint = rdmasock_uiwarp::driver::endpoint(&a.qp).unwrap();
    let mut sources: Vec<Vec<u8>> = (0..WRITES)
        .map(|i| pattern(MIB, (i as u8).wrapping_mul(17).wrapping_add(1)))
        .collect();
    let expected = sources[WRITES - 1].clone();
    {
        let sges: Vec<[ScatterGather<'_>; 1]> = sources
            .iter()
            .map(|s| [ScatterGather::borrowed(s)])
            .collect();
        let wrs: Vec<SendRequest<'_>> = sges
            .iter()
            .enumerate()
            .map(|(i, sg)| {
                let op = SendOp::RdmaWrite {
                    remote_addr: raddr,
                    rkey: RemoteKey(rkey),
                };
                SendRequest::new(i as u64, op, sg)
                    .with_flags(SendFlags::INLINE | SendFlags::SIGNALED)
            })
            .collect();
        a.qp.post_send(&wrs).unwrap();
    }
    for s in &mut sources {
        s.fill(0xee);
    }
    let (lent, copied) = endpoint.lent_bytes();
    assert_eq!(
        lent,
        (WRITES * MIB) as u64,
        "the WRITEs were lent, not copied at post"
    );
    assert!(
        copied > 0 && copied < lent,
        "{copied} of {lent} lent bytes copied: TCP should take part of them during the post"
    );
    // What TCP did not take waits in the transmit queue: senders see the backlog.
    assert!(a.qp.send_backlog().unwrap() > 0);
    // The peer reads now; every WRITE completes once its last byte is written to TCP.
    let deadline = Instant::now() + TIMEOUT;
    let mut wc = [WorkCompletion::default()];
    let mut done = 0;
    while done < WRITES {
        assert!(
            Instant::now() < deadline,
            "{done} of {WRITES} WRITEs completed"
        );
        peer.step();
        if let Some(c) = a.cq.poll(&mut wc).unwrap().first() {
            assert_eq!((c.wr_id, c.status()), (done as u64, WcStatus::Success));
            done += 1;
        }
    }
    while peer.step() {}
    assert!(peer.side.terminated().is_none(), "the peer terminated");
    assert_eq!(a.qp.send_backlog(), Some(0), "all written");
    assert!(placed.to_vec() == expected[..], "the peer's region differs");
}

/// A fenced WRITE behind an RDMA READ cannot be framed before the READ's response: its lent
/// bytes are copied whole when the post ends, and the copy is what the peer gets.
#[test]
fn a_lent_write_that_waits_behind_a_read_is_copied_before_the_post_returns() {
    let p = pair_with(big_inline_caps(), false, &[]);
    p.b.mr.write_at(0, &pattern(4096, 3)).unwrap();
    let mut source = pattern(64 * 1024, 9);
    let expected = source.clone();
    {
        let read_sink = [p.a.mr.slice(0, 4096).unwrap()];
        let lent = [ScatterGather::borrowed(&source)];
        let wrs = [
            SendRequest::new(
                1,
                SendOp::RdmaRead {
                    remote_addr: p.b.mr.addr(),
                    rkey: p.b.mr.rkey(),
                },
                &read_sink,
            ),
            SendRequest::new(2, write_to(&p, 8192), &lent)
                .with_flags(SendFlags::INLINE | SendFlags::FENCE | SendFlags::SIGNALED),
        ];
        p.a.qp.post_send(&wrs).unwrap();
    }
    source.fill(0);
    assert_eq!(poll_ok(&p.a.cq).wr_id, 1);
    assert_eq!(poll_ok(&p.a.cq).wr_id, 2);
    let mut read = vec![0u8; 4096];
    p.a.mr.read_at(0, &mut read).unwrap();
    assert_eq!(read, pattern(4096, 3));
    // A SEND behind the WRITE: once it is received, the WRITE is placed.
    p.b.post_recv(5, &[(0, 16)]);
    let sg = [ScatterGather::borrowed(b"after")];
    p.a.qp
        .post_send(&[SendRequest::new(3, SendOp::Send, &sg)
            .with_flags(SendFlags::INLINE | SendFlags::SIGNALED)])
        .unwrap();
    assert_eq!(poll_ok(&p.a.cq).wr_id, 3);
    assert_eq!(poll_ok(&p.b.cq).wr_id, 5);
    let mut got = vec![0u8; expected.len()];
    p.b.mr.read_at(8192, &mut got).unwrap();
    assert!(got == expected, "the fenced WRITE's bytes differ");
}

/// Small borrowed payloads are copied at post (as registered inline ones are), and a SEND
/// from several borrowed pieces arrives in order.
#[test]
fn small_and_gathered_borrowed_sends_arrive_in_order() {
    let p = pair_with(big_inline_caps(), false, &[(1, 0, 4096), (2, 4096, 4096)]);
    let small = pattern(100, 1);
    let (x, y) = (pattern(700, 2), pattern(900, 3));
    let sg_small = [ScatterGather::borrowed(&small)];
    let sg_two = [ScatterGather::borrowed(&x), ScatterGather::borrowed(&y)];
    let flags = SendFlags::INLINE | SendFlags::SIGNALED;
    p.a.qp
        .post_send(&[
            SendRequest::new(10, SendOp::Send, &sg_small).with_flags(flags),
            SendRequest::new(11, SendOp::Send, &sg_two).with_flags(flags),
        ])
        .unwrap();
    assert_eq!(poll_ok(&p.a.cq).wr_id, 10);
    assert_eq!(poll_ok(&p.a.cq).wr_id, 11);
    let first = poll_ok(&p.b.cq);
    let second = poll_ok(&p.b.cq);
    assert_eq!((first.wr_id, first.byte_len), (1, 100));
    assert_eq!((second.wr_id, second.byte_len), (2, 1600));
    let mut got = vec![0u8; 1600];
    p.b.mr.read_at(4096, &mut got).unwrap();
    assert_eq!(&got[..700], &x[..]);
    assert_eq!(&got[700..], &y[..]);
}

/// A borrowed entry needs INLINE: a send without it, and any receive, is refused before
/// anything is posted, with a message that says what to do.
#[test]
fn borrowed_entries_outside_inline_sends_are_refused() {
    let p = pair_with(big_inline_caps(), false, &[]);
    let bytes = pattern(2048, 4);
    let sg = [ScatterGather::borrowed(&bytes)];
    let registered = [p.a.mr.slice(0, 8).unwrap()];
    let err =
        p.a.qp
            .post_send(&[
                SendRequest::new(1, write_to(&p, 0), &registered),
                SendRequest::new(2, write_to(&p, 0), &sg),
            ])
            .unwrap_err();
    assert_eq!((err.index, err.wr_id), (1, 2));
    assert!(err.to_string().contains("INLINE"), "{err}");
    let err =
        p.a.qp
            .post_recv(&[RecvRequest {
                wr_id: 3,
                sg_list: &sg,
            }])
            .unwrap_err();
    assert!(err.to_string().contains("borrowed"), "{err}");
    // Nothing was posted: no completion comes for either.
    let mut wc = [Default::default()];
    assert!(p.a.cq.poll(&mut wc).unwrap().is_empty());
}
