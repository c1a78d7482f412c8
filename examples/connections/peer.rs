//! The peer process: one mio thread accepting and echoing every connection, RDMA or TCP.
use mio::event::Source;
use mio::{Events, Interest, Poll, Token};
use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};

const LISTENER: Token = Token(0);

/// A stream the peer echoes on.
pub(crate) trait Stream: Read + Write + Source {}
impl<T: Read + Write + Source> Stream for T {}

/// A listener the peer accepts on: a nonblocking accept.
pub(crate) trait Accept: Source {
    fn accept_one(&mut self) -> io::Result<Box<dyn Stream>>;
}

impl Accept for rdmasock::RdmaListener {
    fn accept_one(&mut self) -> io::Result<Box<dyn Stream>> {
        let (s, _) = self.accept()?;
        s.set_nonblocking(true)?;
        Ok(Box::new(s))
    }
}

impl Accept for mio::net::TcpListener {
    fn accept_one(&mut self) -> io::Result<Box<dyn Stream>> {
        let (s, _) = self.accept()?;
        s.set_nodelay(true)?;
        Ok(Box::new(s))
    }
}

struct Client {
    stream: Box<dyn Stream>,
    pending: Vec<u8>,
    done: bool,
}

/// Reads what is there and writes back what it can, until both would block; true when the
/// client closed and everything went back.
fn service(c: &mut Client, buf: &mut [u8]) -> io::Result<bool> {
    loop {
        let mut progress = false;
        if !c.done && c.pending.len() < 1 << 20 {
            match c.stream.read(buf) {
                Ok(0) => {
                    c.done = true;
                    progress = true;
                }
                Ok(n) => {
                    c.pending.extend_from_slice(&buf[..n]);
                    progress = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        if !c.pending.is_empty() {
            match c.stream.write(&c.pending) {
                Ok(n) => {
                    c.pending.drain(..n);
                    progress = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        if c.done && c.pending.is_empty() {
            return Ok(true);
        }
        if !progress {
            return Ok(false);
        }
    }
}

/// Serves `listener` forever from this thread: accepts every connection and echoes it.
pub(crate) fn serve(listener: &mut dyn Accept) -> io::Result<()> {
    let mut poll = Poll::new()?;
    poll.registry()
        .register(listener, LISTENER, Interest::READABLE)?;
    let mut clients: HashMap<Token, Client> = HashMap::new();
    let mut next = 1;
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 65536];
    loop {
        poll.poll(&mut events, None)?;
        for ev in events.iter() {
            if ev.token() == LISTENER {
                loop {
                    match listener.accept_one() {
                        Ok(mut stream) => {
                            let token = Token(next);
                            next += 1;
                            poll.registry().register(
                                &mut stream,
                                token,
                                Interest::READABLE | Interest::WRITABLE,
                            )?;
                            let c = Client {
                                stream,
                                pending: Vec::new(),
                                done: false,
                            };
                            clients.insert(token, c);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => {
                            // A failed handshake or a full table: the others go on.
                            eprintln!("connections peer: accept: {e}");
                            break;
                        }
                    }
                }
                continue;
            }
            let Some(c) = clients.get_mut(&ev.token()) else {
                continue;
            };
            let finished = service(c, &mut buf).unwrap_or_else(|e| {
                eprintln!("connections peer: {:?}: {e}", ev.token());
                true
            });
            if finished {
                let mut c = clients.remove(&ev.token()).expect("present");
                poll.registry().deregister(&mut c.stream)?;
            }
        }
    }
}
