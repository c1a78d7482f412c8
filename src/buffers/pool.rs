//! [`BufferPool`]: a bounded set of registered buffers of one size, reused.
#![forbid(unsafe_code)]

use super::registered::RegisteredBuf;
use crate::verbs::HugePages;
use std::fmt;
use std::io;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// A fixed set of [`RegisteredBuf`]s of one size, allocated up front and handed out one at a
/// time ([`get`](Self::get) waits for one, [`try_get`](Self::try_get) does not). A
/// [`PooledBuf`] goes back into the pool when it drops, registrations and all, so a buffer
/// is registered with a device once however often it is written.
///
/// Clones share the pool.
#[derive(Clone)]
pub struct BufferPool {
    shared: Arc<PoolShared>,
}

struct PoolShared {
    free: Mutex<Vec<RegisteredBuf>>,
    returned: Condvar,
    buffer_len: usize,
    count: usize,
}

impl BufferPool {
    /// A pool of `count` buffers of `buffer_len` bytes each (zeroed, page-aligned).
    pub fn new(count: usize, buffer_len: usize) -> io::Result<BufferPool> {
        BufferPool::with_huge_pages(count, buffer_len, HugePages::Never)
    }

    /// A pool whose buffers are on 2 MiB huge pages as `huge` asks (see
    /// [`RegisteredBuf::with_huge_pages`]; on hugetlb pages each buffer takes whole 2 MiB
    /// pages, so size buffers in multiples of 2 MiB there).
    pub fn with_huge_pages(
        count: usize,
        buffer_len: usize,
        huge: HugePages,
    ) -> io::Result<BufferPool> {
        if count == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a buffer pool needs at least one buffer: BufferPool::new was given a count of 0",
            ));
        }
        let free = (0..count)
            .map(|_| RegisteredBuf::with_huge_pages(buffer_len, huge))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(BufferPool {
            shared: Arc::new(PoolShared {
                free: Mutex::new(free),
                returned: Condvar::new(),
                buffer_len,
                count,
            }),
        })
    }

    /// A buffer, waiting until one is returned when all are out.
    pub fn get(&self) -> PooledBuf {
        let mut free = self.lock();
        loop {
            if let Some(buf) = free.pop() {
                return self.lent(buf);
            }
            free = self
                .shared
                .returned
                .wait(free)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// A buffer, waiting at most `timeout` for one; `None` when none came back in time.
    pub fn get_timeout(&self, timeout: Duration) -> Option<PooledBuf> {
        let free = self.lock();
        let (mut free, _) = self
            .shared
            .returned
            .wait_timeout_while(free, timeout, |free| free.is_empty())
            .unwrap_or_else(|p| p.into_inner());
        free.pop().map(|buf| self.lent(buf))
    }

    /// A buffer if one is free now.
    pub fn try_get(&self) -> Option<PooledBuf> {
        self.lock().pop().map(|buf| self.lent(buf))
    }

    /// How many buffers are in the pool now (not handed out).
    pub fn available(&self) -> usize {
        self.lock().len()
    }

    /// How many buffers the pool holds in all.
    pub fn capacity(&self) -> usize {
        self.shared.count
    }

    /// Each buffer's length in bytes.
    pub fn buffer_len(&self) -> usize {
        self.shared.buffer_len
    }

    fn lent(&self, buf: RegisteredBuf) -> PooledBuf {
        PooledBuf {
            buf: Some(buf),
            pool: self.shared.clone(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<RegisteredBuf>> {
        self.shared.free.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("capacity", &self.capacity())
            .field("available", &self.available())
            .field("buffer_len", &self.buffer_len())
            .finish()
    }
}

/// A buffer out of a [`BufferPool`]; derefs to [`RegisteredBuf`] and goes back into the pool
/// when it drops. [`PooledBuf::into_inner`] and [`BufferPool::restore`] move the buffer out and
/// back, for the calls that take a `RegisteredBuf` by value
/// ([`RdmaSocket::submit_registered`](crate::RdmaSocket::submit_registered)).
pub struct PooledBuf {
    /// `None` only between `into_inner` and the end of `self`.
    buf: Option<RegisteredBuf>,
    pool: Arc<PoolShared>,
}

impl PooledBuf {
    /// Takes the buffer out of the pool's keeping: it no longer goes back when dropped
    /// unless handed to [`BufferPool::restore`].
    pub fn into_inner(mut self) -> RegisteredBuf {
        self.buf
            .take()
            .expect("a pooled buffer holds its buffer until it is taken")
    }
}

impl BufferPool {
    /// Puts `buf` (one of this pool's, taken with [`PooledBuf::into_inner`]) back. A buffer
    /// of another length is refused and handed back.
    pub fn restore(&self, buf: RegisteredBuf) -> Result<(), RegisteredBuf> {
        if buf.len() != self.shared.buffer_len || self.available() >= self.shared.count {
            return Err(buf);
        }
        self.lock().push(buf);
        self.shared.returned.notify_one();
        Ok(())
    }
}

impl Deref for PooledBuf {
    type Target = RegisteredBuf;

    fn deref(&self) -> &RegisteredBuf {
        self.buf.as_ref().expect("a pooled buffer holds its buffer")
    }
}

impl DerefMut for PooledBuf {
    fn deref_mut(&mut self) -> &mut RegisteredBuf {
        self.buf.as_mut().expect("a pooled buffer holds its buffer")
    }
}

impl fmt::Debug for PooledBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PooledBuf").field(&self.buf).finish()
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            self.pool
                .free
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(buf);
            self.pool.returned.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BufferPool;
    use std::time::Duration;

    #[test]
    fn buffers_go_back_on_drop_and_a_full_pool_makes_callers_wait() {
        let pool = BufferPool::new(2, 4096).unwrap();
        assert_eq!(
            (pool.capacity(), pool.available(), pool.buffer_len()),
            (2, 2, 4096)
        );
        let mut a = pool.get();
        a[0] = 9;
        let b = pool.try_get().expect("a second buffer");
        assert!(pool.try_get().is_none(), "both are out");
        assert!(pool.get_timeout(Duration::from_millis(10)).is_none());
        let waiter = {
            let pool = pool.clone();
            std::thread::spawn(move || pool.get()[0])
        };
        drop(a);
        assert_eq!(
            waiter.join().unwrap(),
            9,
            "the waiter got the buffer given back"
        );
        drop(b);
        assert_eq!(pool.available(), 2);
        let taken = pool.get().into_inner();
        assert_eq!(
            pool.available(),
            1,
            "a buffer taken out does not come back by itself"
        );
        pool.restore(taken).unwrap();
        let other = crate::RegisteredBuf::new(100).unwrap();
        assert!(
            pool.restore(other).is_err(),
            "a buffer of another size is refused"
        );
        assert!(BufferPool::new(0, 4096).is_err());
    }
}
