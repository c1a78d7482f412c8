//! The rdma-core tool twins against rdma-core itself, in the VM (tests/vm/run.sh runs these
//! with `--ignored`): discovery against sysfs and netlink, `devices`/`devinfo` against
//! `ibv_devices`/`ibv_devinfo`, and `rc_pingpong` against `ibv_rc_pingpong` both ways; and
//! `bench_floor`, the benchmark of the latency floor, runs to the end on rxe0; `flags`
//! compares rc_pingpong's capability flags and `-N`/`-c` with ibv_rc_pingpong's.
//!
//! The examples must be built (`cargo build --examples`); they are found in
//! `$RDMASOCK_EXAMPLES_DIR` or in `target/<profile>/examples` next to this test binary.
#![forbid(unsafe_code)]

#[path = "vm_tools_support/closing_lines.rs"]
mod closing_lines;
#[path = "vm_tools_support/flags.rs"]
mod flags;
mod vm_support;
use closing_lines::check_closing_lines;

use rdmasock::verbs::{DeviceList, GidType, Transport};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use vm_support::example;

/// Panics unless the VM's rxe0 exists, saying what is wrong.
fn require_device(name: &str) {
    let path = format!("/sys/class/infiniband/{name}");
    assert!(
        std::path::Path::new(&path).is_dir(),
        "RDMA device {name} is missing ({path} does not exist): these tests run only in the VM \
         with soft-RDMA devices (tests/vm/run.sh; siw0 needs --both)"
    );
}

fn vm_ip() -> String {
    std::env::var("RDMA_VM_IP").unwrap_or_else(|_| "10.99.0.2".into())
}

/// Runs a command to completion within `limit`, killing it (and failing) past that.
fn run_bounded(cmd: &mut Command, limit: Duration) -> Output {
    let what = format!("{cmd:?}");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    wait_bounded(child, limit, &what)
}

fn wait_bounded(mut child: Child, limit: Duration, what: &str) -> Output {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait().expect("try_wait") {
            Some(_) => return child.wait_with_output().expect("wait_with_output"),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("wait_with_output");
                panic!(
                    "{what} did not finish within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn stdout_ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("utf-8 output")
}

fn tool(program: &str, args: &[&str]) -> String {
    let out = run_bounded(Command::new(program).args(args), Duration::from_secs(60));
    stdout_ok(&out, &format!("{program} {args:?}"))
}

fn ours(name: &str, args: &[&str]) -> String {
    let path = example(name);
    let out = run_bounded(Command::new(&path).args(args), Duration::from_secs(60));
    stdout_ok(&out, &format!("{} {args:?}", path.display()))
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn discovery_reads_sysfs_and_the_netlink_driver_id() {
    require_device("rxe0");
    let list = DeviceList::discover().expect("discover");
    let rxe = list.pick(Some("rxe0")).expect("rxe0 listed");
    assert_eq!(rxe.driver.as_deref(), Some("rxe"));
    assert_eq!(
        rxe.driver_id,
        Some(14),
        "UVERBS_DRIVER_ID from netlink (14 = RXE)"
    );
    assert_eq!(rxe.transport, Transport::InfiniBand);
    assert_eq!(rxe.uverbs_abi, Some(2));
    let uverbs = rxe.uverbs_path.as_ref().expect("uverbs node");
    assert!(uverbs.exists(), "{} missing", uverbs.display());
    let netdev = std::env::var("RDMA_VM_NETDEV").unwrap_or_else(|_| "eth0".into());
    assert_eq!(rxe.parent_netdev.as_deref(), Some(netdev.as_str()));
    let port = rxe.port(1).expect("port 1");
    let mapped = format!("::ffff:{}", vm_ip());
    assert!(
        port.gids
            .iter()
            .any(|g| g.gid.to_string() == mapped && g.gid_type == GidType::RoceV2),
        "no RoCE v2 GID {mapped} in {:?}",
        port.gids
    );
    // The same GUID the kernel's sysfs shows.
    let sysfs_guid = std::fs::read_to_string("/sys/class/infiniband/rxe0/node_guid").unwrap();
    assert_eq!(rxe.guid_grouped(), sysfs_guid.trim());
    if let Ok(siw) = list.pick(Some("siw0")) {
        assert_eq!(siw.driver.as_deref(), Some("siw"));
        assert_eq!(
            siw.driver_id,
            Some(18),
            "UVERBS_DRIVER_ID from netlink (18 = SIW)"
        );
        assert_eq!(siw.transport, Transport::Iwarp);
        assert_eq!(siw.uverbs_abi, Some(1));
    }
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn devices_prints_what_ibv_devices_prints() {
    require_device("rxe0");
    let theirs = tool("ibv_devices", &[]);
    let mine = ours("devices", &[]);
    let (mut t, mut m): (Vec<&str>, Vec<&str>) = (theirs.lines().collect(), mine.lines().collect());
    assert_eq!(m[..2], t[..2], "headers differ");
    t[2..].sort_unstable();
    m[2..].sort_unstable();
    assert_eq!(
        m, t,
        "device lines differ:\nours:\n{mine}\ntheirs:\n{theirs}"
    );
    assert!(mine.contains("rxe0"), "{mine}");
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn devinfo_prints_what_ibv_devinfo_prints() {
    require_device("rxe0");
    for args in [
        &[][..],
        &["-v"],
        &["-d", "rxe0"],
        &["-d", "rxe0", "-v", "-i", "1"],
        &["-l"],
    ] {
        let theirs = tool("ibv_devinfo", args);
        let mine = ours("devinfo", args);
        let expected: Vec<&str> = theirs.lines().collect();
        let got: Vec<&str> = mine.lines().collect();
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(
                g, e,
                "devinfo {args:?} line {i} differs\nours:\n{mine}\ntheirs:\n{theirs}"
            );
        }
        assert_eq!(
            got.len(),
            expected.len(),
            "devinfo {args:?}: {} lines, ibv_devinfo {}\nours:\n{mine}\ntheirs:\n{theirs}",
            got.len(),
            expected.len()
        );
    }
    if std::path::Path::new("/sys/class/infiniband/siw0").is_dir() {
        let theirs = tool("ibv_devinfo", &["-d", "siw0", "-v"]);
        let mine = ours("devinfo", &["-d", "siw0", "-v"]);
        assert_eq!(
            mine.lines().collect::<Vec<_>>(),
            theirs.lines().collect::<Vec<_>>(),
            "devinfo -d siw0 -v\nours:\n{mine}\ntheirs:\n{theirs}"
        );
    }
}

/// Whether something listens on TCP `port` (from /proc/net/tcp and tcp6).
fn listening(port: u16) -> bool {
    let needle = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && format!("{} ", cols[1]).ends_with(&needle) && cols[3] == "0A"
            })
        })
    })
}

/// The fields of "  local address:  LID 0x0000, QPN 0x000011, PSN 0x2f0a1c, GID ::ffff:..."
fn address(out: &str, which: &str) -> (String, String) {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("  {which} address:")))
        .unwrap_or_else(|| panic!("no `{which} address` line in:\n{out}"));
    let field = |name: &str| {
        line.split(", ")
            .find_map(|p| {
                p.trim()
                    .split_once(&format!("{name} "))
                    .map(|(_, v)| v.to_string())
            })
            .unwrap_or_else(|| panic!("no {name} in `{line}`"))
    };
    (field("QPN"), field("GID"))
}

/// Ping-pong round trips of every run.
const ITERS: u64 = 300;

/// The value after `flag` in `args`.
fn flag_value(args: &[&str], flag: &str) -> Option<u64> {
    let i = args.iter().position(|a| *a == flag)?;
    Some(args[i + 1].parse().expect("a numeric flag value"))
}

/// One ping-pong on rxe0 with the RoCE v2 GID of 10.99.0.2: `server` listens on `port`
/// (rc_pingpong's default, 18515, when `None`: no `-p` given), `client` connects; both
/// must finish, agree on each other's addresses and print the closing lines for the `-s`
/// in `extra` (default 4096).
fn pingpong(server: (&str, PathBuf), client: (&str, PathBuf), port: Option<u16>, extra: &[&str]) {
    let iters = ITERS;
    let size = flag_value(extra, "-s").unwrap_or(4096);
    let mut common: Vec<String> = vec!["-d".into(), "rxe0".into(), "-g".into(), "1".into()];
    common.extend(["-n".into(), iters.to_string()]);
    if let Some(port) = port {
        common.extend(["-p".into(), port.to_string()]);
    }
    common.extend(extra.iter().map(|s| s.to_string()));
    let port = port.unwrap_or(18515);
    let what_s = format!("{} (server) {common:?}", server.0);
    let srv = Command::new(&server.1)
        .args(&common)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what_s}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut srv = Some(srv);
    while !listening(port) {
        if let Some(status) = srv.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            let mut err = String::new();
            let _ = srv.take().unwrap().stderr.unwrap().read_to_string(&mut err);
            panic!("{what_s} exited ({status}) before listening: {err}");
        }
        assert!(
            Instant::now() < deadline,
            "{what_s} never listened on port {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let what_c = format!("{} (client) {common:?}", client.0);
    let c_out = run_bounded(
        Command::new(&client.1).args(&common).arg(vm_ip()),
        Duration::from_secs(120),
    );
    let mut srv = srv.take().unwrap();
    if !c_out.status.success() {
        let _ = srv.kill();
        let s_out = srv.wait_with_output().expect("wait_with_output");
        panic!(
            "{what_c} failed ({}):\nstdout:\n{}\nstderr:\n{}\nserver stdout:\n{}\nserver stderr:\n{}",
            c_out.status,
            String::from_utf8_lossy(&c_out.stdout),
            String::from_utf8_lossy(&c_out.stderr),
            String::from_utf8_lossy(&s_out.stdout),
            String::from_utf8_lossy(&s_out.stderr)
        );
    }
    let s_out = wait_bounded(srv, Duration::from_secs(30), &what_s);
    let s_text = stdout_ok(&s_out, &what_s);
    let c_text = stdout_ok(&c_out, &what_c);
    check_closing_lines(&s_text, size, iters, &what_s);
    check_closing_lines(&c_text, size, iters, &what_c);
    assert!(!c_text.contains("invalid data"), "{what_c}: {c_text}");
    // Each side's view of the other is what the other printed about itself.
    assert_eq!(
        address(&s_text, "local"),
        address(&c_text, "remote"),
        "{s_text}\n{c_text}"
    );
    assert_eq!(
        address(&c_text, "local"),
        address(&s_text, "remote"),
        "{s_text}\n{c_text}"
    );
    assert_eq!(address(&s_text, "local").1, format!("::ffff:{}", vm_ip()));
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rc_pingpong_interoperates_with_ibv_rc_pingpong() {
    require_device("rxe0");
    let theirs = || ("ibv_rc_pingpong", PathBuf::from("ibv_rc_pingpong"));
    let mine = || ("rc_pingpong", example("rc_pingpong"));
    pingpong(mine(), theirs(), Some(18601), &["-c"]);
    pingpong(theirs(), mine(), Some(18602), &["-c"]);
    pingpong(mine(), theirs(), Some(18603), &["-e"]);
    pingpong(theirs(), mine(), Some(18604), &["-e"]);
    pingpong(mine(), mine(), Some(18605), &["-e", "-c"]);
}

/// Packets rxe0 has sent (its hardware counter).
fn rxe0_sent_packets() -> u64 {
    let path = "/sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts";
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{path}: {text:?}: {e}"))
}

/// `-s -m -r -l -i` against ibv_rc_pingpong both ways, the default port both ways, and `-i`
/// naming a port rxe0 lacks refused as ibv_rc_pingpong refuses it.
///
/// What each flag shows on rxe0: `-s` the byte count of the closing lines; `-m 512` the
/// packets rxe0 sends (a 3072-byte SEND is 6 packets at MTU 512, 3 at the default 1024:
/// both sides must use 512); `-i 1` is rxe0's only port, and `-i 2` fails at the move to
/// INIT. `-r` (receives posted at a time) and `-l` (service level: rxe carries it in no
/// header of an untagged RoCE v2 link) change nothing visible here: the runs show only that
/// both sides accept them and still interoperate.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rc_pingpong_flags_and_default_port_interoperate_with_ibv_rc_pingpong() {
    require_device("rxe0");
    let theirs = || ("ibv_rc_pingpong", PathBuf::from("ibv_rc_pingpong"));
    let mine = || ("rc_pingpong", example("rc_pingpong"));
    let flags = ["-s", "3072", "-m", "512", "-r", "100", "-l", "1", "-i", "1"];
    for (server, client, port) in [(mine(), theirs(), 18606), (theirs(), mine(), 18607)] {
        let who = format!("{} serving {}", server.0, client.0);
        let before = rxe0_sent_packets();
        pingpong(server, client, Some(port), &flags);
        let sent = rxe0_sent_packets() - before;
        let least = 2 * ITERS * 3072_u64.div_ceil(512);
        println!("{who} {flags:?}: rxe0 sent {sent} packets");
        assert!(
            sent >= least,
            "{who} {flags:?}: rxe0 sent {sent} packets, fewer than the {least} data packets of \
             {ITERS} round trips of 3072 bytes at MTU 512: a side ignored -m"
        );
    }
    pingpong(mine(), theirs(), None, &[]);
    pingpong(theirs(), mine(), None, &[]);
    let refusal = |program: &PathBuf| {
        let out = run_bounded(
            Command::new(program).args(["-d", "rxe0", "-g", "1", "-i", "2", "-p", "18608"]),
            Duration::from_secs(30),
        );
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            !out.status.success(),
            "{} -i 2 succeeded: {err}",
            program.display()
        );
        err
    };
    let (t, m) = (refusal(&theirs().1), refusal(&mine().1));
    let first = t
        .lines()
        .next()
        .expect("ibv_rc_pingpong -i 2 says why it failed");
    assert_eq!(first, "Failed to modify QP to INIT", "{t}");
    assert!(
        m.starts_with(first),
        "ours with -i 2: {m}\nibv_rc_pingpong: {t}"
    );
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rc_pingpong_refuses_iwarp_devices() {
    require_device("siw0");
    let out = run_bounded(
        Command::new(example("rc_pingpong")).args(["-d", "siw0", "-g", "0"]),
        Duration::from_secs(30),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "rc_pingpong on siw0 should fail at once"
    );
    assert!(
        err.contains("connection manager") && err.contains("pingpong"),
        "the refusal should explain iWARP needs the CM and name the pingpong example: {err}"
    );
}

/// The examples above open rxe0 through `rdmasock::default_registry()` with this process's
/// environment: this test proves which provider that gives them (the rdma-core bridge when
/// tests/vm/suite.sh reruns this suite with RDMASOCK_PROVIDER=ibverbs, else pure-Rust rxe).
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn the_examples_run_on_the_provider_asked_for() {
    require_device("rxe0");
    let forced = rdmasock::ProviderChoice::from_env()
        .expect("RDMASOCK_PROVIDER is malformed")
        .for_device("rxe0");
    let expected = match forced {
        Some(rdmasock::ProviderKind::Ibverbs) => "ibverbs",
        _ => "rxe",
    };
    let context = rdmasock::open_device(Some("rxe0")).expect("opening rxe0");
    assert_eq!(context.provider_name(), expected);
    let port = context
        .query_port(1)
        .expect("query_port through the provider");
    assert!(port.is_ethernet(), "rxe0's port 1 is RoCE: {port:?}");
}

/// `bench_floor` (the latency floor that tests/vm/bench-socket.sh prints beside RdmaSocket):
/// both ways run a ping-pong on rxe0 to the end and report a time for each size (every
/// completion's status and, in the socket way, every echoed byte are checked inside), and an
/// iWARP device is refused with what to do.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn bench_floor_runs_both_ways_on_rxe0_and_refuses_iwarp() {
    require_device("rxe0");
    let out = ours(
        "bench_floor",
        &["--device", "rxe0", "--sizes", "64,4096", "--iters", "50"],
    );
    let mut seen = Vec::new();
    for line in out.lines().filter(|l| l.starts_with("RESULT floor ")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 6, "RESULT floor WAY SIZE AVG MEDIAN: {line}");
        for v in &f[4..] {
            let us: f64 = v.parse().unwrap_or_else(|e| panic!("{line}: {e}"));
            assert!(
                us > 0.0 && us.is_finite(),
                "a time must be positive: {line}"
            );
        }
        seen.push(format!("{} {}", f[2], f[3]));
    }
    assert_eq!(
        seen,
        ["raw 64", "raw 4096", "socket 64", "socket 4096"],
        "one result per way and size, in order:\n{out}"
    );
    if std::path::Path::new("/sys/class/infiniband/siw0").is_dir() {
        let out = run_bounded(
            Command::new(example("bench_floor")).args(["--device", "siw0"]),
            Duration::from_secs(30),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "bench_floor on siw0 must fail");
        assert!(
            err.contains("siw0 is an iWARP device") && err.contains("--device"),
            "the refusal should say why and how to pick another device: {err}"
        );
    }
}
