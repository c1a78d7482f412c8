//! The uverbs file: legacy write commands with driver data, and the event fds it hands out.

use super::abi::{
    has_response_pointer, CommandHeader, CreateCompChannelRequest, GetContextRequest,
    GetContextResponse, WriteCommand,
};
use super::abi_qp::{PostSendRequest, PostSendResponse};
use super::pod::{as_bytes, from_bytes, impl_pod, Pod};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// An open `/dev/infiniband/uverbsN`.
#[derive(Debug)]
pub struct UverbsFile {
    fd: OwnedFd,
}

/// Size in bytes of the command header.
const HEADER_LEN: usize = size_of::<CommandHeader>();

/// The error of a failed or short command write (out of line: the hot path only compares).
#[cold]
#[inline(never)]
fn write_error(what: &str, written: libc::c_long) -> io::Error {
    if written < 0 {
        return io::Error::last_os_error();
    }
    io::Error::new(
        io::ErrorKind::WriteZero,
        format!("{what}: short write of {written} bytes"),
    )
}

impl UverbsFile {
    /// Wraps an fd opened on a uverbs character device (O_RDWR).
    pub fn new(fd: OwnedFd) -> UverbsFile {
        UverbsFile { fd }
    }

    /// Runs one legacy write command: header + `request` + `driver_in` go in, and the core
    /// response is returned while the driver's response fills `driver_out`.
    ///
    /// `in_words`/`out_words` are computed from the struct sizes and the slice lengths, which
    /// must be multiples of 4. The request's `response` pointer (commands with a response) is
    /// set here; whatever the caller put there is ignored. `driver_in` must name no process
    /// memory: the crate passes it empty or a [`crate::kernel::KernelDriver`]'s driver data,
    /// which that unsafe trait's implementations promise.
    pub fn execute<C: WriteCommand>(
        &self,
        request: &C,
        driver_in: &[u8],
        driver_out: &mut [u8],
    ) -> io::Result<C::Response> {
        let req_len = size_of::<C>();
        let resp_len = size_of::<C::Response>();
        let in_len = HEADER_LEN + req_len + driver_in.len();
        let out_len = resp_len + driver_out.len();
        if !in_len.is_multiple_of(4)
            || !out_len.is_multiple_of(4)
            || in_len / 4 > 0xffff
            || out_len / 4 > 0xffff
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: request {in_len} / response {out_len} bytes are not a whole number of \
                     32-bit words below 256 KiB",
                    C::COMMAND.name()
                ),
            ));
        }
        if !has_response_pointer::<C>() && !driver_out.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} has no response, so it cannot take driver output",
                    C::COMMAND.name()
                ),
            ));
        }
        // The kernel copies the response out byte-wise (copy_to_user): no alignment needed.
        let mut response = Bytes::zeroed(out_len);
        let response = response.as_mut_slice();
        let header = CommandHeader {
            command: C::COMMAND as u32,
            in_words: (in_len / 4) as u16,
            out_words: (out_len / 4) as u16,
        };
        let mut buf = Bytes::zeroed(in_len);
        let buf = buf.as_mut_slice();
        buf[..HEADER_LEN].copy_from_slice(as_bytes(&header));
        buf[HEADER_LEN..HEADER_LEN + req_len].copy_from_slice(as_bytes(request));
        buf[HEADER_LEN + req_len..].copy_from_slice(driver_in);
        if has_response_pointer::<C>() {
            let ptr = response.as_mut_ptr() as u64;
            buf[HEADER_LEN..HEADER_LEN + 8].copy_from_slice(&ptr.to_ne_bytes());
        }
        // SAFETY: the only memory the kernel writes is the response area whose address we
        // put in the request: it is `response`, owned by this frame (on its stack or the
        // heap), `out_len` bytes long (out_words * 4), and not otherwise accessed until
        // write() returns. The core request holds no other address, and `driver_in` names
        // no memory (the contract above, kept by every KernelDriver implementation).
        unsafe { self.write_command(C::COMMAND.name(), buf)? };
        let core = from_bytes::<C::Response>(&response[..resp_len]);
        driver_out.copy_from_slice(&response[resp_len..]);
        Ok(core)
    }

    /// POST_SEND with no work requests: the send doorbell of rxe and siw ("process the mapped
    /// send queue now"), rung on every post. It writes the bytes [`UverbsFile::execute`]
    /// would (a test compares them) from one stack struct, without `execute`'s generic
    /// length checks, zeroed buffers and copies: ~90 user instructions a post under
    /// callgrind, in a ping-pong of ~860 a round trip.
    #[inline]
    pub fn post_send_doorbell(&self, qp_handle: u32, wqe_size: u32) -> io::Result<()> {
        let mut response = PostSendResponse::default();
        let command = DoorbellCommand::new(
            qp_handle,
            wqe_size,
            &mut response as *mut PostSendResponse as u64,
        );
        // SAFETY: the only memory the kernel writes is the response whose address is in the
        // request: `response`, a PostSendResponse on this frame, the out_words * 4 bytes the
        // header announces, not otherwise accessed until write() returns.
        unsafe { self.write_command("POST_SEND doorbell", as_bytes(&command)) }
    }

    /// Writes one whole command (`bytes`: header, request, driver input) in one write(2);
    /// a short write is an error naming `what`.
    ///
    /// # Safety
    /// The kernel writes the command's response to the address in its request: the caller
    /// makes sure that memory is valid, as long as the header's out_words say, and not
    /// accessed by anything else until this returns.
    #[inline]
    pub(super) unsafe fn write_command(&self, what: &str, bytes: &[u8]) -> io::Result<()> {
        // SAFETY: `bytes` is a valid, initialized buffer of `bytes.len()` bytes; the memory
        // the kernel writes through the request's response pointer is the caller's promise.
        // The raw system call skips libc's write wrapper, a cancellation point that flips the
        // thread's cancellation state around every call (two atomic updates a doorbell).
        let written = unsafe {
            libc::syscall(
                libc::SYS_write,
                self.fd.as_raw_fd(),
                bytes.as_ptr(),
                bytes.len(),
            )
        };
        if written as usize == bytes.len() {
            return Ok(());
        }
        Err(write_error(what, written))
    }

    /// GET_CONTEXT: the response and the async event fd it created.
    pub fn get_context(
        &self,
        driver_in: &[u8],
        driver_out: &mut [u8],
    ) -> io::Result<(GetContextResponse, OwnedFd)> {
        let resp = self.execute(&GetContextRequest::default(), driver_in, driver_out)?;
        Ok((resp, adopt_new_fd(resp.async_fd)?))
    }

    /// CREATE_COMP_CHANNEL: the new completion channel fd.
    pub fn create_comp_channel(&self) -> io::Result<OwnedFd> {
        let resp = self.execute(&CreateCompChannelRequest::default(), &[], &mut [])?;
        adopt_new_fd(resp.fd)
    }
}

/// The whole POST_SEND doorbell write: the header, then the request (32 bytes, no padding).
#[derive(Copy, Clone, Debug, Default)]
#[repr(C)]
struct DoorbellCommand {
    header: CommandHeader,
    request: PostSendRequest,
}

impl_pod!(DoorbellCommand);

impl DoorbellCommand {
    fn new(qp_handle: u32, wqe_size: u32, response: u64) -> DoorbellCommand {
        DoorbellCommand {
            header: CommandHeader {
                command: PostSendRequest::COMMAND as u32,
                in_words: (size_of::<DoorbellCommand>() / 4) as u16,
                out_words: (size_of::<PostSendResponse>() / 4) as u16,
            },
            request: PostSendRequest {
                response,
                qp_handle,
                wr_count: 0,
                sge_count: 0,
                wqe_size,
            },
        }
    }
}

impl AsFd for UverbsFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Takes ownership of an fd number the kernel just created for us in a command response.
fn adopt_new_fd(raw: u32) -> io::Result<OwnedFd> {
    let raw = raw as RawFd;
    if raw < 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "kernel returned a negative fd",
        ));
    }
    // SAFETY: the kernel installed this fd in our table as the result of the command that
    // just succeeded; nothing else in the process knows its number, so we are its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Reads one fixed-size event record from an event fd (completion channel or async fd);
/// `Ok(None)` when the fd is non-blocking and has none.
pub(crate) fn read_record<T: Pod>(fd: BorrowedFd<'_>) -> io::Result<Option<T>> {
    let mut buf = Bytes::zeroed(size_of::<T>());
    let buf = buf.as_mut_slice();
    loop {
        match nix::unistd::read(fd.as_raw_fd(), buf) {
            Ok(n) if n == buf.len() => return Ok(Some(from_bytes(buf))),
            Ok(n) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("event record of {n} bytes, expected {}", buf.len()),
                ))
            }
            Err(nix::errno::Errno::EAGAIN) => return Ok(None),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Bytes up to [`INLINE_BYTES`] on the stack, more on the heap: the data path runs a command
/// per doorbell (POST_SEND), per CQ arming (REQ_NOTIFY_CQ) and reads a record per channel
/// event, and two allocations each were ~40% of rc_pingpong's user-space instructions.
// The large inline variant is the point: it lives on the caller's stack for one call.
#[allow(clippy::large_enum_variant)]
enum Bytes {
    Small([u8; SMALL_BYTES], usize),
    Inline([u8; INLINE_BYTES], usize),
    Heap(Vec<u8>),
}

/// The largest command or response kept on the stack (every data-path command is far smaller).
const INLINE_BYTES: usize = 256;
/// The size class of the data-path commands (post-send doorbell, CQ notify) and responses.
const SMALL_BYTES: usize = 64;

impl Bytes {
    /// `len` zero bytes.
    fn zeroed(len: usize) -> Bytes {
        if len <= SMALL_BYTES {
            // The doorbell and notify commands: zeroing 256 bytes would cost more than them.
            Bytes::Small([0; SMALL_BYTES], len)
        } else if len <= INLINE_BYTES {
            Bytes::Inline([0; INLINE_BYTES], len)
        } else {
            Bytes::Heap(vec![0; len])
        }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Bytes::Small(bytes, len) => &mut bytes[..*len],
            Bytes::Inline(bytes, len) => &mut bytes[..*len],
            Bytes::Heap(bytes) => bytes,
        }
    }
}

/// Puts an fd into non-blocking mode.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_fd_blocking(fd, false)
}

/// Clears (`blocking`) or sets O_NONBLOCK on an fd.
pub(crate) fn set_fd_blocking(fd: BorrowedFd<'_>, blocking: bool) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = OFlag::from_bits_retain(fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL)?);
    let flags = if blocking {
        flags - OFlag::O_NONBLOCK
    } else {
        flags | OFlag::O_NONBLOCK
    };
    fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(flags))?;
    Ok(())
}

/// Whether an fd is readable now (poll(2) with a zero timeout).
pub(crate) fn poll_readable(fd: BorrowedFd<'_>) -> io::Result<bool> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    loop {
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(n) => return Ok(n > 0),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::abi::{DeallocPdRequest, QueryPortRequest};
    use std::io::Read;

    /// Runs a command against a pipe and returns the bytes the "kernel" saw.
    fn captured<C: WriteCommand>(req: &C, din: &[u8], dout: &mut [u8]) -> Vec<u8> {
        let (r, w) = nix::unistd::pipe().unwrap();
        let file = UverbsFile::new(w);
        file.execute(req, din, dout).unwrap();
        drop(file);
        let mut out = Vec::new();
        std::fs::File::from(r).read_to_end(&mut out).unwrap();
        out
    }

    /// The doorbell's own write is byte for byte what `execute` writes for the same request,
    /// but for the response pointer (each points at its own stack frame).
    #[test]
    fn the_doorbell_writes_what_execute_writes() {
        assert_eq!(
            size_of::<DoorbellCommand>(),
            HEADER_LEN + size_of::<PostSendRequest>()
        );
        let req = PostSendRequest {
            qp_handle: 0x1234_5678,
            wqe_size: 128,
            ..Default::default()
        };
        let mut generic = captured(&req, &[], &mut []);
        let (r, w) = nix::unistd::pipe().unwrap();
        let file = UverbsFile::new(w);
        file.post_send_doorbell(0x1234_5678, 128).unwrap();
        drop(file);
        let mut fast = Vec::new();
        std::fs::File::from(r).read_to_end(&mut fast).unwrap();
        assert_eq!(fast.len(), generic.len());
        assert_ne!(&fast[8..16], &[0u8; 8], "response pointer filled in");
        fast[8..16].fill(0);
        generic[8..16].fill(0);
        assert_eq!(fast, generic);
    }

    #[test]
    fn words_are_computed_from_sizes() {
        let req = QueryPortRequest {
            port_num: 1,
            ..Default::default()
        };
        let mut dout = [0u8; 8];
        let bytes = captured(&req, &[1, 2, 3, 4], &mut dout);
        // header 8 + request 16 + driver 4 = 28 bytes = 7 words; response 40 + 8 = 12 words.
        assert_eq!(bytes.len(), 28);
        assert_eq!(&bytes[0..4], &2u32.to_ne_bytes());
        assert_eq!(u16::from_ne_bytes([bytes[4], bytes[5]]), 7);
        assert_eq!(u16::from_ne_bytes([bytes[6], bytes[7]]), 12);
        assert_ne!(&bytes[8..16], &[0u8; 8], "response pointer filled in");
        assert_eq!(bytes[16], 1);
        assert_eq!(&bytes[24..28], &[1, 2, 3, 4]);
    }

    #[test]
    fn commands_without_response() {
        let bytes = captured(&DeallocPdRequest { pd_handle: 5 }, &[], &mut []);
        assert_eq!(bytes, [4, 0, 0, 0, 3, 0, 0, 0, 5, 0, 0, 0]);
        let (_r, w) = nix::unistd::pipe().unwrap();
        let err = UverbsFile::new(w)
            .execute(&DeallocPdRequest { pd_handle: 5 }, &[], &mut [0u8; 4])
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn odd_lengths_are_refused() {
        let (_r, w) = nix::unistd::pipe().unwrap();
        let err = UverbsFile::new(w)
            .execute(&DeallocPdRequest { pd_handle: 5 }, &[1, 2], &mut [])
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn event_records() {
        let (r, w) = nix::unistd::pipe().unwrap();
        set_nonblocking(r.as_fd()).unwrap();
        assert_eq!(read_record::<u64>(r.as_fd()).unwrap(), None);
        nix::unistd::write(&w, &7u64.to_ne_bytes()).unwrap();
        assert_eq!(read_record::<u64>(r.as_fd()).unwrap(), Some(7));
    }
}
