//! Fixtures for VM tests that connect two RC queue pairs through the connection manager, in
//! one process: a listener and a connector on one device's address. This is the only way to
//! connect iWARP QPs (siw), whose RTR/RTS transitions the kernel's iWARP CM makes; it works
//! the same on rxe.
//!
//! ```ignore
//! #[path = "vm_support/mod.rs"]
//! mod cm_support;
//! let pair = cm_support::CmPair::connect(cm_support::device_ip("siw0"), &Default::default());
//! // pair.active.qp and pair.passive.qp are in RTS, each with its own PD, CQ and MR.
//! pair.disconnect();
//! ```
#![allow(dead_code)] // each test binary uses a different part

use nix::poll::{PollFd, PollFlags, PollTimeout};
use rdmasock::cm::{CmId, ConnectionParameters, EventChannel};
use rdmasock::verbs::kernel::KernelQp;
use rdmasock::verbs::{
    AccessFlags, AsyncEventKind, CompletionChannel, CompletionQueue, Context, MemoryRegion,
    ProtectionDomain, QpCapabilities, QpInitAttributes, QpState, QueuePair, RecvRequest,
};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// How long a connection-manager step may take under the emulated VM.
pub(crate) const CM_TIMEOUT: Duration = Duration::from_secs(20);

/// Asserts that RDMA device `name` exists (loudly: these tests need the VM) and returns the
/// IPv4 address rdma_cm reaches it by: `RDMA_VM_SIW_IP` for siw0, `RDMA_VM_RXE_IP` (or
/// `RDMA_VM_IP`) for rxe0.
pub(crate) fn device_ip(name: &str) -> IpAddr {
    let sysfs = format!("/sys/class/infiniband/{name}");
    assert!(
        std::path::Path::new(&sysfs).is_dir(),
        "{sysfs} does not exist: these tests need the VM's {name} (run tests/vm/run.sh, which \
         boots with rxe0 and siw0; by hand: `run-in-vm.sh --both '<test binary> --ignored'`)"
    );
    let vars: &[&str] = match name {
        "siw0" => &["RDMA_VM_SIW_IP"],
        _ => &["RDMA_VM_RXE_IP", "RDMA_VM_IP"],
    };
    let value = vars
        .iter()
        .find_map(|v| std::env::var(v).ok())
        .unwrap_or_else(|| {
            panic!(
                "{} is unset: these tests run in the VM (tests/vm/run.sh)",
                vars[0]
            )
        });
    value
        .parse()
        .unwrap_or_else(|e| panic!("{}={value:?} is not an IP address: {e}", vars[0]))
}

/// Runs `cmd` with `sh -c`; panics with its stderr when it fails.
pub(crate) fn sh(cmd: &str) {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .expect("sh runs");
    assert!(
        out.status.success(),
        "`{cmd}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The address in environment variable `var`, which the VM sets (`RDMA_VM_RXE_IP6`,
/// `RDMA_VM_PEER_SIW_IP`, ...); panics (loudly) outside the VM or when it is not an address.
pub(crate) fn env_ip(var: &str) -> IpAddr {
    let value = std::env::var(var)
        .unwrap_or_else(|_| panic!("{var} is unset: these tests run in the VM (tests/vm/run.sh)"));
    value
        .parse()
        .unwrap_or_else(|e| panic!("{var}={value:?} is not an IP address: {e}"))
}

/// How each side of a [`CmPair`] is built.
#[derive(Clone, Debug)]
pub(crate) struct SideOptions {
    /// Queue sizes.
    pub caps: QpCapabilities,
    /// Every send completes.
    pub sq_sig_all: bool,
    /// The CQ reports to a completion channel.
    pub with_channel: bool,
    /// Bytes of each side's memory region (registered with every access right).
    pub mr_len: usize,
    /// The connection's RDMA READ depths (responder resources and initiator depth).
    pub read_depth: u8,
}

impl Default for SideOptions {
    fn default() -> Self {
        SideOptions {
            caps: QpCapabilities {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 64,
            },
            sq_sig_all: false,
            with_channel: false,
            mr_len: 65536,
            read_depth: 4,
        }
    }
}

/// One end: its own context on the cm id's device, PD, CQ (send and receive), QP and MR.
#[allow(missing_docs)]
pub(crate) struct Side {
    pub context: Context,
    pub pd: ProtectionDomain,
    pub channel: Option<CompletionChannel>,
    pub cq: CompletionQueue,
    pub qp: QueuePair,
    pub mr: MemoryRegion,
}

impl Side {
    /// Builds the objects on `id`'s device and moves the QP to INIT with the CM's attributes.
    pub(crate) fn new(id: &CmId, options: &SideOptions) -> Side {
        let device = id.device().expect("the cm id's device");
        let context = rdmasock::open_device(Some(&device.name))
            .unwrap_or_else(|e| panic!("opening {}: {e}", device.name));
        let pd = context.alloc_pd().expect("ALLOC_PD");
        let channel = options
            .with_channel
            .then(|| context.create_comp_channel().expect("CREATE_COMP_CHANNEL"));
        let cq = context.create_cq(256, channel.as_ref()).expect("CREATE_CQ");
        let init = QpInitAttributes {
            caps: options.caps,
            sq_sig_all: options.sq_sig_all,
        };
        let qp = pd.create_qp(&init, &cq, &cq).expect("CREATE_QP");
        id.init_qp(&qp).expect("RESET -> INIT with INIT_QP_ATTR");
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let mr = pd.register(options.mr_len, access).expect("REG_MR");
        Side {
            context,
            pd,
            channel,
            cq,
            qp,
            mr,
        }
    }
}

/// Two QPs connected to each other through rdma_cm on one device.
pub(crate) struct CmPair {
    /// The connecting side.
    pub active: Side,
    /// The accepting side.
    pub passive: Side,
    /// The connecting side's cm id.
    pub active_id: CmId,
    /// The accepted request's cm id.
    pub passive_id: CmId,
    /// The listener (kept so the passive id's lifetime never depends on it going).
    pub listener: CmId,
}

impl CmPair {
    /// Listens on an ephemeral port of `ip`, connects to it, and returns both sides once
    /// each has seen ESTABLISHED. Post receives before the peer sends: iWARP has no RNR
    /// retry, a SEND that finds no receive breaks the connection.
    pub(crate) fn connect(ip: IpAddr, options: &SideOptions) -> CmPair {
        let (addr_tx, addr_rx) = mpsc::channel::<SocketAddr>();
        let passive_options = options.clone();
        let param = ConnectionParameters {
            responder_resources: options.read_depth,
            initiator_depth: options.read_depth,
            ..Default::default()
        };
        let passive_param = param.clone();
        let server = thread::spawn(move || {
            let channel = EventChannel::open().expect("opening /dev/infiniband/rdma_cm");
            let listener = CmId::new(&channel).expect("CREATE_ID for the listener");
            listener
                .bind(SocketAddr::new(ip, 0))
                .expect("binding the listener");
            listener.listen(4).expect("LISTEN");
            let addr = listener
                .local_addr()
                .expect("the listener's address")
                .expect("a bound listener has an address");
            addr_tx.send(addr).expect("the connector is waiting");
            let request = listener.get_request(CM_TIMEOUT).expect("CONNECT_REQUEST");
            let side = Side::new(&request.id, &passive_options);
            request
                .id
                .accept_blocking(Some(&side.qp), &passive_param, CM_TIMEOUT)
                .expect("ACCEPT -> ESTABLISHED");
            (side, request.id, listener)
        });
        let addr = addr_rx
            .recv()
            .expect("the listener thread reports its address");
        let channel = EventChannel::open().expect("opening /dev/infiniband/rdma_cm");
        let id = CmId::new(&channel).expect("CREATE_ID");
        id.resolve(None, addr, CM_TIMEOUT)
            .expect("resolving the listener's address and route");
        let active = Side::new(&id, options);
        id.connect_blocking(Some(&active.qp), &param, CM_TIMEOUT)
            .expect("CONNECT -> ESTABLISHED");
        let (passive, passive_id, listener) = server.join().expect("the listener thread");
        assert_eq!(active.qp.state(), QpState::ReadyToSend);
        assert_eq!(passive.qp.state(), QpState::ReadyToSend);
        CmPair {
            active,
            passive,
            active_id: id,
            passive_id,
            listener,
        }
    }

    /// Disconnects both sides (each waits for DISCONNECTED) and returns their objects.
    pub(crate) fn disconnect(self) -> (Side, Side) {
        let CmPair {
            active,
            passive,
            active_id,
            passive_id,
            listener,
        } = self;
        let server = thread::spawn(move || {
            passive_id
                .wait_disconnected(Some(&passive.qp), CM_TIMEOUT)
                .expect("DISCONNECTED on the passive side");
            drop(passive_id);
            drop(listener);
            passive
        });
        active_id
            .disconnect_blocking(Some(&active.qp), CM_TIMEOUT)
            .expect("DISCONNECT -> DISCONNECTED on the active side");
        drop(active_id);
        let passive = server.join().expect("the passive side's thread");
        (active, passive)
    }
}

/// Posts one receive on `side` scattering into `(offset, length)` pieces of its region.
pub(crate) fn post_recv(side: &Side, wr_id: u64, pieces: &[(usize, usize)]) {
    let sg: Vec<_> = pieces
        .iter()
        .map(|&(at, len)| side.mr.slice(at, len).unwrap())
        .collect();
    side.qp
        .post_recv(&[RecvRequest {
            wr_id,
            sg_list: &sg,
        }])
        .expect("post_recv");
}

/// `len` bytes of a pattern that differs with `seed`.
pub(crate) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Waits for the async event `kind` about the QP of `side`.
pub(crate) fn wait_async(side: &Side, kind: AsyncEventKind) {
    let cookie = side
        .qp
        .ops()
        .as_any()
        .downcast_ref::<KernelQp>()
        .expect("a kernel QP")
        .cookie();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(ev) = side
            .context
            .read_async_event()
            .expect("reading async events")
        {
            println!("async event: {ev:?}");
            if ev.kind == kind && ev.element == cookie {
                return;
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no {kind:?} async event for the QP");
        // Wait until the async event fd turns readable (or the deadline).
        let fd = side.context.ops().async_fd();
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        nix::poll::poll(&mut fds, PollTimeout::from(ms)).expect("poll on the async event fd");
    }
}

/// The path of example binary `name`: in `RDMASOCK_EXAMPLES_DIR` (the suite sets it), else
/// next to this test binary (`target/<profile>/deps/TEST-HASH` -> `target/<profile>/examples`).
pub(crate) fn example(name: &str) -> PathBuf {
    let dir = std::env::var_os("RDMASOCK_EXAMPLES_DIR")
        .map(PathBuf::from)
        .filter(|d| d.join(name).is_file())
        .unwrap_or_else(|| {
            let exe = std::env::current_exe().expect("current_exe");
            exe.parent()
                .and_then(|d| d.parent())
                .expect("target dir")
                .join("examples")
        });
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "example binary {} not found: build the examples first (cargo build --examples)",
        path.display()
    );
    path
}

/// For a failure message: where a stuck process `pid` sleeps. Every thread's kernel stack
/// (where a system call waits), every thread's backtrace when gdb is installed, and the
/// kernel's rdma_cm ids and QPs (`rdma res show`), so that a hang that happens once in many
/// runs is explained by the run that caught it.
pub(crate) fn where_stuck(pid: u32) -> String {
    let mut text = String::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|dir| dir.flatten().map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default();
    for task in tasks {
        let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        let stack = std::fs::read_to_string(task.join("stack"))
            .unwrap_or_else(|e| format!("(unreadable: {e})\n"));
        text += &format!(
            "kernel stack of {} ({}):\n{stack}",
            task.display(),
            comm.trim()
        );
    }
    let run = command_text;
    let gdb = run(
        "gdb",
        &[
            "-batch",
            "-p",
            &pid.to_string(),
            "-ex",
            "thread apply all bt",
        ],
    );
    let frames: Vec<&str> = gdb
        .lines()
        .filter(|l| l.starts_with('#') || l.starts_with("Thread"))
        .collect();
    text += &format!("threads (gdb):\n{}\n", frames.join("\n"));
    text += &format!(
        "rdma res show cm_id:\n{}",
        run("rdma", &["res", "show", "cm_id"])
    );
    text += &format!("rdma res show qp:\n{}", run("rdma", &["res", "show", "qp"]));
    text
}

/// For a failure message: what `program args` prints on stdout, or why it could not run.
pub(crate) fn command_text(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|e| format!("(cannot run {program}: {e})"))
}

/// Waits up to `limit` for `child`, then collects its output; a child still running then
/// is killed after its threads' kernel stacks and backtraces are taken, and the test fails
/// with them (a hang once in many runs must explain itself).
pub(crate) fn finish_within(
    child: std::process::Child,
    limit: Duration,
    what: &[String],
) -> std::process::Output {
    finish_within_explained(child, limit, what, String::new)
}

/// [`finish_within`], with `context()` (say, the state of the wire between two hosts) added
/// to the report of a child that had to be killed.
pub(crate) fn finish_within_explained(
    mut child: std::process::Child,
    limit: Duration,
    what: &[String],
    context: impl FnOnce() -> String,
) -> std::process::Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("poll the child").is_none() {
        if Instant::now() > deadline {
            let stuck = where_stuck(child.id()) + &context();
            let _ = child.kill();
            let out = child
                .wait_with_output()
                .expect("collect the child's output");
            panic!(
                "{what:?} still running after {limit:?}; stdout {:?} stderr {:?}\n{stuck}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    child
        .wait_with_output()
        .expect("collect the child's output")
}
