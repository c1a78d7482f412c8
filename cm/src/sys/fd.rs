//! [`CmFd`]: one open `/dev/infiniband/rdma_cm` (one event channel) and every write command.
//!
//! Each command is `write(fd, header ++ payload)`; commands with a response carry a user pointer to
//! it inside the payload, which the kernel `copy_to_user`s into before `write` returns
//! (docs/kernel-abi.md#rdma_cm-commands-and-responses). The pointer is made and consumed inside one
//! method call here.

use super::abi::*;
use super::sockaddr;
use super::Pod;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The kernel's `ibdev_index` sentinel for "not reported" (pre-5.8 kernels).
pub(crate) const NO_IBDEV_INDEX: u32 = u32::MAX;

/// An open rdma_cm file, non-blocking and close-on-exec.
#[derive(Debug)]
pub(crate) struct CmFd {
    fd: OwnedFd,
}

fn as_u64<T>(r: &mut T) -> u64 {
    (r as *mut T) as usize as u64
}

impl CmFd {
    /// `open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK)`.
    pub(crate) fn open(path: &Path) -> io::Result<CmFd> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(path)?;
        Ok(CmFd { fd: file.into() })
    }

    /// Writes one command.
    ///
    /// # Safety
    /// Every user pointer inside `payload` (its `response`/`optval` field) must be null or
    /// point to at least `out` (for `response`) writable bytes, or to the option value, that
    /// stay valid until this call returns and are not otherwise borrowed during it.
    unsafe fn write_command<P: Pod>(
        &self,
        cmd: Command,
        payload: &P,
        out: usize,
    ) -> io::Result<()> {
        let body = payload.as_bytes();
        let hdr = CmdHdr {
            cmd: cmd as u32,
            in_: u16::try_from(body.len()).expect("payload structs are < 64 KiB"),
            out: u16::try_from(out).expect("response structs are < 64 KiB"),
        };
        let mut buf = Vec::with_capacity(8 + body.len());
        buf.extend_from_slice(hdr.as_bytes());
        buf.extend_from_slice(body);
        // SAFETY: `buf` is a live, initialised buffer of `buf.len()` bytes; the kernel reads it
        // and writes only through the response pointers, which the caller guarantees valid.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n as usize != buf.len() {
            // librdmacm treats a short write as ENODATA.
            return Err(io::Error::from_raw_os_error(libc::ENODATA));
        }
        Ok(())
    }

    /// A command without a response.
    fn command<P: Pod>(&self, cmd: Command, payload: &P) -> io::Result<()> {
        // SAFETY: callers pass payloads whose pointer fields are zero.
        unsafe { self.write_command(cmd, payload, 0) }
    }

    /// A command whose payload holds a pointer to `resp`, set by `with_ptr`.
    fn command_resp<P: Pod, R: Pod>(
        &self,
        cmd: Command,
        mut payload: P,
        resp: &mut R,
        with_ptr: fn(&mut P, u64),
    ) -> io::Result<()> {
        with_ptr(&mut payload, as_u64(resp));
        // SAFETY: the only pointer in `payload` is `resp`, exclusively borrowed for this call
        // and `size_of::<R>()` bytes long, which is what `out` says.
        unsafe { self.write_command(cmd, &payload, std::mem::size_of::<R>()) }
    }

    /// CREATE_ID: a new kernel id in port space `ps`; events carry `uid` (must be non-zero).
    pub(crate) fn create_id(&self, uid: u64, ps: u16, qp_type: u8) -> io::Result<u32> {
        let mut resp = CreateIdResp::zeroed();
        let p = CreateId {
            uid,
            ps,
            qp_type,
            ..CreateId::zeroed()
        };
        self.command_resp(Command::CreateId, p, &mut resp, |p, r| p.response = r)?;
        Ok(resp.id)
    }

    /// DESTROY_ID: returns `events_reported`.
    pub(crate) fn destroy_id(&self, id: u32) -> io::Result<u32> {
        let mut resp = DestroyIdResp::zeroed();
        let p = DestroyId {
            id,
            ..DestroyId::zeroed()
        };
        self.command_resp(Command::DestroyId, p, &mut resp, |p, r| p.response = r)?;
        Ok(resp.events_reported)
    }

    /// BIND (sockaddr_storage form).
    pub(crate) fn bind(&self, id: u32, addr: &SocketAddr) -> io::Result<()> {
        let (addr, addr_size) = sockaddr::to_storage(addr);
        self.command(
            Command::Bind,
            &Bind {
                id,
                addr_size,
                reserved: 0,
                addr,
            },
        )
    }

    /// BIND_IP (legacy form).
    #[allow(dead_code)] // the ABI's command, not sent by the id layer yet
    pub(crate) fn bind_ip(&self, id: u32, addr: &SocketAddr) -> io::Result<()> {
        let p = BindIp {
            response: 0,
            addr: sockaddr::to_in6(addr),
            id,
        };
        self.command(Command::BindIp, &p)
    }

    /// RESOLVE_ADDR (sockaddr_storage form).
    pub(crate) fn resolve_addr(
        &self,
        id: u32,
        src: Option<&SocketAddr>,
        dst: &SocketAddr,
        timeout_ms: u32,
    ) -> io::Result<()> {
        let mut p = ResolveAddr {
            id,
            timeout_ms,
            ..ResolveAddr::zeroed()
        };
        if let Some(src) = src {
            (p.src_addr, p.src_size) = sockaddr::to_storage(src);
        }
        (p.dst_addr, p.dst_size) = sockaddr::to_storage(dst);
        self.command(Command::ResolveAddr, &p)
    }

    /// RESOLVE_IP (legacy form).
    #[allow(dead_code)] // the ABI's command, not sent by the id layer yet
    pub(crate) fn resolve_ip(
        &self,
        id: u32,
        src: Option<&SocketAddr>,
        dst: &SocketAddr,
        timeout_ms: u32,
    ) -> io::Result<()> {
        let p = ResolveIp {
            src_addr: src
                .map(sockaddr::to_in6)
                .unwrap_or_else(SockaddrIn6::zeroed),
            dst_addr: sockaddr::to_in6(dst),
            id,
            timeout_ms,
        };
        self.command(Command::ResolveIp, &p)
    }

    /// RESOLVE_ROUTE.
    pub(crate) fn resolve_route(&self, id: u32, timeout_ms: u32) -> io::Result<()> {
        self.command(Command::ResolveRoute, &ResolveRoute { id, timeout_ms })
    }

    fn query<R: Pod>(&self, cmd: Command, id: u32, option: u32, resp: &mut R) -> io::Result<()> {
        let p = Query {
            response: 0,
            id,
            option,
        };
        self.command_resp(cmd, p, resp, |p, r| p.response = r)
    }

    /// QUERY(ADDR); `ibdev_index` is [`NO_IBDEV_INDEX`] on kernels before 5.8.
    pub(crate) fn query_addr(&self, id: u32) -> io::Result<QueryAddrResp> {
        let mut resp = QueryAddrResp::zeroed();
        resp.ibdev_index = NO_IBDEV_INDEX;
        self.query(Command::Query, id, query_option::ADDR, &mut resp)?;
        Ok(resp)
    }

    /// QUERY(GID): the same struct with `sockaddr_ib` addresses holding the GIDs.
    #[allow(dead_code)] // the ABI's command, not sent by the id layer yet
    pub(crate) fn query_gid(&self, id: u32) -> io::Result<QueryAddrResp> {
        let mut resp = QueryAddrResp::zeroed();
        resp.ibdev_index = NO_IBDEV_INDEX;
        self.query(Command::Query, id, query_option::GID, &mut resp)?;
        Ok(resp)
    }

    /// QUERY(PATH).
    #[allow(dead_code)] // the ABI's command, not sent by the id layer yet
    pub(crate) fn query_path(&self, id: u32) -> io::Result<QueryPathResp> {
        let mut resp = QueryPathResp::zeroed();
        self.query(Command::Query, id, query_option::PATH, &mut resp)?;
        Ok(resp)
    }

    /// QUERY_ROUTE; `ibdev_index` is [`NO_IBDEV_INDEX`] on kernels before 5.8.
    pub(crate) fn query_route(&self, id: u32) -> io::Result<QueryRouteResp> {
        let mut resp = QueryRouteResp::zeroed();
        resp.ibdev_index = NO_IBDEV_INDEX;
        self.query(Command::QueryRoute, id, 0, &mut resp)?;
        Ok(resp)
    }

    /// CONNECT (`conn_param.valid` must be 1).
    pub(crate) fn connect(&self, id: u32, conn_param: &ConnParam) -> io::Result<()> {
        let p = Connect {
            conn_param: *conn_param,
            id,
            ..Connect::zeroed()
        };
        self.command(Command::Connect, &p)
    }

    /// LISTEN.
    pub(crate) fn listen(&self, id: u32, backlog: u32) -> io::Result<()> {
        self.command(Command::Listen, &Listen { id, backlog })
    }

    /// ACCEPT: `valid = 1` accepts (and sets `uid` on the id), `valid = 0` establishes.
    pub(crate) fn accept(&self, id: u32, uid: u64, conn_param: &ConnParam) -> io::Result<()> {
        let p = Accept {
            uid,
            conn_param: *conn_param,
            id,
            ..Accept::zeroed()
        };
        self.command(Command::Accept, &p)
    }

    /// REJECT with `private_data` (the caller checks the transport's limit; ≤ 256 here).
    pub(crate) fn reject(&self, id: u32, reason: u8, private_data: &[u8]) -> io::Result<()> {
        let mut p = Reject {
            id,
            reason,
            ..Reject::zeroed()
        };
        let n = private_data.len().min(p.private_data.len());
        p.private_data[..n].copy_from_slice(&private_data[..n]);
        p.private_data_len = n as u8;
        self.command(Command::Reject, &p)
    }

    /// DISCONNECT.
    pub(crate) fn disconnect(&self, id: u32) -> io::Result<()> {
        self.command(Command::Disconnect, &Disconnect { id })
    }

    /// INIT_QP_ATTR for `qp_state` (1 INIT, 2 RTR, 3 RTS).
    pub(crate) fn init_qp_attr(&self, id: u32, qp_state: u32) -> io::Result<UverbsQpAttr> {
        let mut resp = UverbsQpAttr::zeroed();
        let p = InitQpAttr {
            response: 0,
            id,
            qp_state,
        };
        self.command_resp(Command::InitQpAttr, p, &mut resp, |p, r| p.response = r)?;
        Ok(resp)
    }

    /// GET_EVENT; `Ok(None)` when no event is queued.
    pub(crate) fn get_event(&self) -> io::Result<Option<EventResp>> {
        let mut resp = EventResp::zeroed();
        let p = GetEvent { response: 0 };
        match self.command_resp(Command::GetEvent, p, &mut resp, |p, r| p.response = r) {
            Ok(()) => Ok(Some(resp)),
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// SET_OPTION with the raw option value.
    pub(crate) fn set_option(
        &self,
        id: u32,
        level: u32,
        optname: u32,
        value: &[u8],
    ) -> io::Result<()> {
        let p = SetOption {
            optval: value.as_ptr() as usize as u64,
            id,
            level,
            optname,
            optlen: u32::try_from(value.len()).expect("option values are small"),
        };
        // SAFETY: `optval` points to `value`, borrowed for the whole call; the kernel only
        // reads `optlen` bytes from it. There is no response.
        unsafe { self.write_command(Command::SetOption, &p, 0) }
    }

    /// NOTIFY (forward a QP async event, e.g. 4 = COMM_EST).
    #[allow(dead_code)] // the ABI's command, not sent by the id layer yet
    pub(crate) fn notify(&self, id: u32, event: u32) -> io::Result<()> {
        self.command(Command::Notify, &Notify { id, event })
    }

    /// MIGRATE_ID: moves `id` from the channel `from` to this one; returns `events_reported`.
    pub(crate) fn migrate_id(&self, id: u32, from: BorrowedFd<'_>) -> io::Result<u32> {
        let mut resp = DestroyIdResp::zeroed();
        let p = MigrateId {
            response: 0,
            id,
            fd: from.as_raw_fd() as u32,
        };
        self.command_resp(Command::MigrateId, p, &mut resp, |p, r| p.response = r)?;
        Ok(resp.events_reported)
    }
}

impl AsFd for CmFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for CmFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
