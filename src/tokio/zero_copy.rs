//! Zero-copy writes on [`RdmaStream`]: the buffer is passed by value and handed back with
//! the result, so that a future dropped half-way cannot free memory the device still reads
//! (the socket keeps a submitted buffer until its sends completed).
#![forbid(unsafe_code)]

use super::events::Way;
use super::stream::RdmaStream;
use crate::buffers::RegisteredBuf;
use crate::socket::CompletedWrite;
use std::future::poll_fn;
use std::io;

impl RdmaStream {
    /// Writes all of `buf` without copying it (see
    /// [`RdmaSocket::write_registered`](crate::RdmaSocket::write_registered)) and hands the
    /// buffer back once the device has read every byte of it, with how many bytes were
    /// written or the error that stopped the write (the buffer comes back either way).
    ///
    /// Cancellation: dropping the future before it completes drops the buffer once the
    /// socket has let go of it: part of it may have been sent, as with a `write_all` that
    /// was dropped. Memory the device still reads is never freed.
    pub async fn write_registered(
        &mut self,
        buf: RegisteredBuf,
    ) -> (io::Result<usize>, RegisteredBuf) {
        let len = buf.len();
        let identity = buf.as_ptr();
        let mut held = Some(buf);
        let mut done = 0;
        loop {
            let submitted = poll_fn(|cx| {
                self.events().drive(cx, Way::Write, || {
                    let buf = held.take().expect("the buffer is held between submissions");
                    match self.socket().submit_registered_range(buf, done..) {
                        Ok(n) => Ok(n),
                        Err(refused) => {
                            held = Some(refused.buf);
                            Err(refused.error)
                        }
                    }
                })
            })
            .await;
            let n = match submitted {
                Ok(n) => n,
                Err(e) => return (Err(e), held.expect("a refused buffer comes back")),
            };
            let completed = poll_fn(|cx| {
                self.events().drive(cx, Way::Write, || {
                    while let Some(done) = self.socket().completed_registered() {
                        if done.buf.as_ptr() == identity {
                            return Ok(done);
                        }
                        // A buffer of a write whose future was dropped: let it go.
                    }
                    Err(io::ErrorKind::WouldBlock.into())
                })
            })
            .await;
            let CompletedWrite { buf, result, .. } = match completed {
                Ok(done) => done,
                // The reactor failed to watch the socket: the buffer is waited for here, on
                // this thread (its sends complete, or the stream fails).
                Err(e) => CompletedWrite {
                    result: Err(e),
                    ..self.wait_for(identity)
                },
            };
            done += n;
            if let Err(e) = result {
                return (Err(e), buf);
            }
            if done == len {
                return (Ok(done), buf);
            }
            held = Some(buf);
        }
    }
}

impl RdmaStream {
    /// Blocks until the submitted buffer at `identity` comes back, dropping those of dropped
    /// writes on the way (its sends complete, or the stream fails and it comes back with
    /// the error).
    fn wait_for(&self, identity: *const u8) -> CompletedWrite {
        loop {
            match self.socket().completed_registered() {
                Some(done) if done.buf.as_ptr() == identity => return done,
                Some(_) => {}
                None => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
    }
}
