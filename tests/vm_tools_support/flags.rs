//! `rc_pingpong`'s `-o -O -P -t -j -N -c` against `ibv_rc_pingpong`'s on the VM's devices:
//! where rxe0 or siw0 lacks what a flag needs, ours fails with ibv_rc_pingpong's message and
//! exit status; `-N` still interoperates both ways; `-c` reports the same unmarked pages.

use super::{listening, require_device, run_bounded, vm_ip, wait_bounded, ITERS};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// rdma-core's tool.
const THEIRS: &str = "ibv_rc_pingpong";

/// Our twin.
fn ours_path() -> PathBuf {
    super::example("rc_pingpong")
}

/// The flag sets each device lacks a capability for, as ibv_rc_pingpong reports them (and
/// its two checks of flag combinations).
const REFUSED: [&[&str]; 9] = [
    &["-o"],
    &["--odp"],
    &["-O"],
    &["-o", "-P"],
    &["-P"],
    &["-t"],
    &["--ts"],
    &["-j"],
    &["-o", "-j"],
];

/// Runs ours and ibv_rc_pingpong as clients of a port nobody serves, with each flag set of
/// [`REFUSED`]: each must fail before it connects, and ours must print what theirs prints
/// and exit as it does.
fn refusals_match(device: &str, gid_index: &str) {
    require_device(device);
    for (i, flags) in REFUSED.iter().enumerate() {
        let port = (18620 + i).to_string();
        let mut args = vec!["-d", device, "-g", gid_index, "-p", &port];
        args.extend_from_slice(flags);
        args.push("127.0.0.1");
        let run = |program: PathBuf| {
            run_bounded(Command::new(program).args(&args), Duration::from_secs(30))
        };
        let (theirs, ours) = (run(PathBuf::from(THEIRS)), run(ours_path()));
        let said = |o: &Output| {
            (
                o.status.code(),
                String::from_utf8_lossy(&o.stdout).into_owned(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        };
        let (t, o) = (said(&theirs), said(&ours));
        assert!(
            !theirs.status.success() && !t.2.is_empty(),
            "{THEIRS} {args:?} was expected to refuse: {t:?}"
        );
        assert_eq!(o, t, "rc_pingpong {args:?} must say what {THEIRS} says");
    }
}

#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rc_pingpong_refuses_what_rxe0_lacks_as_ibv_rc_pingpong_does() {
    refusals_match("rxe0", "1");
}

/// On siw0 the capability checks come before anything iWARP-specific can fail, in both.
/// `-N` fails in both too: rdma-core's siw provider has no `ibv_create_qp_ex` (its message:
/// "Couldn't create QP"), and ours refuses iWARP devices for this by-hand connection.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rc_pingpong_refuses_what_siw0_lacks_as_ibv_rc_pingpong_does() {
    refusals_match("siw0", "0");
    let args = ["-d", "siw0", "-g", "0", "-p", "18640", "-N", "127.0.0.1"];
    for program in [PathBuf::from(THEIRS), ours_path()] {
        let out = run_bounded(Command::new(&program).args(args), Duration::from_secs(30));
        assert!(
            !out.status.success(),
            "{} {args:?} succeeded: {}",
            program.display(),
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// `-N` changes only how each end posts: ours with it serves ibv_rc_pingpong with it, and the
/// other way, and two of ours with `-N -e -c`.
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rc_pingpong_new_send_interoperates_with_ibv_rc_pingpong() {
    require_device("rxe0");
    let theirs = || (THEIRS, PathBuf::from(THEIRS));
    let mine = || ("rc_pingpong", ours_path());
    super::pingpong(mine(), theirs(), Some(18641), &["-N"]);
    super::pingpong(theirs(), mine(), Some(18642), &["-N", "-c"]);
    super::pingpong(mine(), mine(), Some(18643), &["-N", "-e", "-c"]);
}

/// Starts `server` with `args` and `server_extra` on `port`, waits until it listens, runs
/// `client` with `args` and the VM's address; returns both outputs, failed or not.
fn pair(
    server: &PathBuf,
    client: &PathBuf,
    args: &[&str],
    server_extra: &[&str],
    port: u16,
) -> (Output, Output) {
    let srv = Command::new(server)
        .args(args)
        .args(server_extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", server.display()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !listening(port) {
        assert!(
            Instant::now() < deadline,
            "{} {args:?} never listened on port {port}",
            server.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let c_out = run_bounded(
        Command::new(client).args(args).arg(vm_ip()),
        Duration::from_secs(120),
    );
    let s_out = wait_bounded(srv, Duration::from_secs(60), &server.display().to_string());
    (s_out, c_out)
}

/// `-c`: the connecting side marks the first byte of each page it sends, the listening side
/// checks them. Against ibv_rc_pingpong's client without `-c` (no marks), both servers with
/// `-c` name the same two pages of an 8 KiB message (ours also exits 1 then, where
/// rdma-core's exits 0).
#[test]
#[ignore = "needs the VM: run tests/vm/run.sh"]
fn rc_pingpong_chk_reports_unmarked_pages_as_ibv_rc_pingpong_does() {
    require_device("rxe0");
    let iters = ITERS.to_string();
    let expected = "invalid data in page 0\ninvalid data in page 1\n";
    for (server, port, status) in [
        (PathBuf::from(THEIRS), 18644u16, Some(0)),
        (ours_path(), 18645, Some(1)),
    ] {
        let p = port.to_string();
        let args = [
            "-d", "rxe0", "-g", "1", "-s", "8192", "-n", &iters, "-p", &p,
        ];
        let (s_out, c_out) = pair(&server, &PathBuf::from(THEIRS), &args, &["-c"], port);
        let s_text = String::from_utf8_lossy(&s_out.stdout);
        assert!(c_out.status.success(), "the client failed: {c_out:?}");
        assert_eq!(
            s_out.status.code(),
            status,
            "{}: {s_text}",
            server.display()
        );
        assert!(
            s_text.ends_with(expected),
            "{} -c against a client that marks nothing: {s_text}",
            server.display()
        );
    }
}
