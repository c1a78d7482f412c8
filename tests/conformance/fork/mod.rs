//! `fork` while connections stream (docs/MEMORY.md#fork): children that exec and children
//! that keep running, drop their copies of the parent's socket and listener and touch their
//! copy of registered memory, while the parent's streams keep passing hash checks, and a
//! connection the child dropped still works in the parent afterwards.

mod sys;

use super::socket_support::{both_ways, receive_random, send_random};
use super::Fixture;
use rdmasock::verbs::{fork_safety, ForkSafety, RegisteredMemory};
use rdmasock::{RdmaListener, RdmaSocket, SocketOptions};
use std::thread;
use sys::{Child, Exec};

/// The exit status of a child that found its copy of registered memory where
/// [`ForkSafety::DontFork`] leaves none.
const MAPPED_DESPITE_DONTFORK: i32 = 10;
/// The exit status of a child that found no copy where [`ForkSafety::CopyOnFork`] gives one.
const MISSING_DESPITE_COPY: i32 = 11;

/// Counts the child's open files that are RDMA devices, rdma_cm, sockets, eventfds or
/// epolls (whatever an inherited connection would hold) and exits with the count, after
/// listing them on stderr: an exec'd program must inherit none (close-on-exec).
const COUNT_INHERITED: &std::ffi::CStr = c"n=0; for f in /proc/$$/fd/*; do t=$(readlink $f); \
case $t in *infiniband*|*rdma_cm*|socket:*|anon_inode:*) echo \"inherited $f: $t\" >&2; \
n=$((n+1));; esac; done; exit $n";

/// A parent streams both ways on one connection (hash-checked) while it forks, again and
/// again until the stream ends: children that exec a shell (which must hold none of the
/// connection's files), and children that keep running, drop their copies of a second,
/// idle connection and of the listener (the last references in the child), check that
/// their copy of registered memory is there or not as [`fork_safety`] says, write to it,
/// and exit. Every child exits 0; the stream arrives intact; the parent's registered memory
/// holds what the parent wrote; and the idle connection, which each child dropped, still
/// carries hash-checked data both ways afterwards (a child's drop sent nothing and
/// destroyed nothing of the parent's).
pub(crate) fn fork_while_streaming_children_exec_or_drop_what_they_inherited(f: &Fixture) {
    let safety = fork_safety();
    eprintln!("{}: fork safety {safety:?}", f.provider.name());
    let opts = SocketOptions::default();
    let (listener, addr) = f.listener_with(&opts);
    let accept = |l: &RdmaListener| {
        let t = {
            let l = l.try_clone().expect("clone the listener");
            thread::spawn(move || l.accept().expect("accept").0)
        };
        let c = RdmaSocket::connect_with(addr, &opts).expect("connect");
        (t.join().expect("accept thread"), c)
    };
    let (stream_server, stream_client) = accept(&listener);
    let idle_pair = accept(&listener);
    // What each running child drops: its copies of the idle connection's two ends and of the
    // listener, the last references to them in its image (the parent keeps its own).
    let mut inherited = Some((idle_pair, listener));

    let memory = RegisteredMemory::allocate(4096).expect("registered memory");
    memory.write_at(0, b"parent").expect("write");

    let total = f.small_rings_bytes() * 8;
    let max_piece = f.max_piece();
    let stream = thread::spawn(move || both_ways(stream_server, stream_client, total, max_piece));

    let exec = Exec::shell(COUNT_INHERITED);
    let (mut execs, mut runs) = (0, 0);
    while !stream.is_finished() || execs == 0 || runs == 0 {
        let child = if execs <= runs {
            execs += 1;
            Child::Exec(&exec)
        } else {
            runs += 1;
            let inherited = &mut inherited;
            let memory = &memory;
            Child::Run(Box::new(move || {
                drop(inherited.take());
                let mapped = sys::mapped(memory.addr(), memory.len());
                match (safety, mapped) {
                    (ForkSafety::DontFork, true) => MAPPED_DESPITE_DONTFORK,
                    (ForkSafety::DontFork, false) => 0,
                    (ForkSafety::CopyOnFork, false) => MISSING_DESPITE_COPY,
                    // The child's own copy: the parent must not see this write.
                    (ForkSafety::CopyOnFork, true) => {
                        memory.write_at(0, b"child!").map_or(12, |()| 0)
                    }
                }
            }))
        };
        let pid = sys::fork(child).expect("fork");
        let status = sys::wait(pid).unwrap_or_else(|e| panic!("child {pid}: {e}"));
        assert_eq!(
            status, 0,
            "child {pid} (exec {execs}, run {runs}) exited {status}"
        );
    }
    stream.join().expect("the stream through the forks");
    eprintln!("{execs} children exec'd, {runs} kept running, while the stream ran");

    let mut parent = [0u8; 6];
    memory.read_at(0, &mut parent).expect("read");
    assert_eq!(
        &parent, b"parent",
        "a child's write reached the parent's memory"
    );

    // What the children dropped is the parent's still: the idle connection carries data both
    // ways, and the listener accepts.
    let ((idle_server, idle_client), listener) = inherited.expect("the parent's copies");
    let bytes = f.small_rings_bytes();
    both_ways(idle_server, idle_client, bytes, max_piece);
    let (server, client) = accept(&listener);
    let sent = thread::spawn(move || send_random(&client, bytes, 7, max_piece));
    let (got, hash) = receive_random(&server, 7, max_piece);
    assert_eq!(got, bytes);
    assert_eq!(hash, sent.join().expect("writer"));
}
