//! `rc_pingpong`'s command line: ibv_rc_pingpong's options (`getopt_long` string
//! `p:d:i:s:m:r:n:l:eg:oOPtcjN`), its usage text and its checks before any device is opened.

use crate::common::{c_long, parse_args, OptSpec};
use rdmasock::verbs::Mtu;
use std::process::ExitCode;

const fn opt(short: char, long: &'static str, takes_value: bool) -> OptSpec {
    OptSpec {
        short,
        long,
        takes_value,
    }
}

/// Every option ibv_rc_pingpong takes, with its long name.
const OPTIONS: &[OptSpec] = &[
    opt('p', "port", true),
    opt('d', "ib-dev", true),
    opt('i', "ib-port", true),
    opt('s', "size", true),
    opt('m', "mtu", true),
    opt('r', "rx-depth", true),
    opt('n', "iters", true),
    opt('l', "sl", true),
    opt('e', "events", false),
    opt('g', "gid-idx", true),
    opt('o', "odp", false),
    opt('O', "iodp", false),
    opt('P', "prefetch", false),
    opt('t', "ts", false),
    opt('c', "chk", false),
    opt('j', "dm", false),
    opt('N', "new_send", false),
];

/// ibv_rc_pingpong's usage text, line for line.
pub(crate) fn usage(argv0: &str) {
    println!("Usage:");
    println!("  {argv0}            start a server and wait for connection");
    println!("  {argv0} <host>     connect to server at <host>");
    println!();
    println!("Options:");
    println!("  -p, --port=<port>      listen on/connect to port <port> (default 18515)");
    println!("  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)");
    println!("  -i, --ib-port=<port>   use port <port> of IB device (default 1)");
    println!("  -s, --size=<size>      size of message to exchange (default 4096)");
    println!("  -m, --mtu=<size>       path MTU (default 1024)");
    println!("  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)");
    println!("  -n, --iters=<iters>    number of exchanges (default 1000)");
    println!("  -l, --sl=<sl>          service level value");
    println!("  -e, --events           sleep on CQ events (default poll)");
    println!("  -g, --gid-idx=<gid index> local port gid index");
    println!("  -o, --odp\t\t    use on demand paging");
    println!("  -O, --iodp\t\t    use implicit on demand paging");
    println!("  -P, --prefetch\t    prefetch an ODP MR");
    println!("  -t, --ts\t            get CQE with timestamp");
    println!("  -c, --chk\t            validate received buffer");
    println!("  -j, --dm\t            use device memory");
    println!("  -N, --new_send            use new post send WR API");
}

/// The settings from the command line.
pub(crate) struct Config {
    /// The server to connect to (client), or `None` (server).
    pub server: Option<String>,
    /// `-p`: the TCP port of the address exchange.
    pub tcp_port: u16,
    /// `-d`: the device to use (default the first).
    pub dev_name: Option<String>,
    /// `-i`: the device's port.
    pub ib_port: u8,
    /// `-s`: bytes per message.
    pub size: usize,
    /// `-m`: the path MTU.
    pub mtu: Mtu,
    /// `-r`: receives posted at a time.
    pub rx_depth: u32,
    /// `-n`: round trips.
    pub iters: u32,
    /// `-l`: service level.
    pub sl: u8,
    /// `-e`: sleep on completion events instead of polling.
    pub events: bool,
    /// `-g`: the local GID index.
    pub gid_index: Option<u32>,
    /// `-c`: check the received buffer.
    pub validate: bool,
    /// `-o` (or `-O`): register the buffer for on-demand paging.
    pub odp: bool,
    /// `-O`: an implicit on-demand-paging region (the whole address space).
    pub implicit_odp: bool,
    /// `-P`: prefetch the on-demand-paging region.
    pub prefetch: bool,
    /// `-t`: completions with timestamps.
    pub timestamps: bool,
    /// `-j`: the buffer in device memory.
    pub device_memory: bool,
    /// `-N`: post sends through the work-request builder API (`ibv_wr_*`).
    pub new_send: bool,
}

impl Config {
    /// Whether a device capability must be checked (ibv_rc_pingpong's
    /// `use_odp || use_ts || use_dm`).
    pub(crate) fn needs_features(&self) -> bool {
        self.odp || self.timestamps || self.device_memory
    }
}

/// Parses the command line; `Err` carries the exit code after usage or a message.
pub(crate) fn parse_config(args: &[String]) -> Result<Config, ExitCode> {
    let argv0 = args.first().map(String::as_str).unwrap_or("rc_pingpong");
    let bad = || {
        usage(argv0);
        ExitCode::FAILURE
    };
    let parsed = parse_args(args.get(1..).unwrap_or_default(), OPTIONS).map_err(|e| {
        eprintln!("{argv0}: {e}");
        bad()
    })?;
    let mut c = Config {
        server: None,
        tcp_port: 18515,
        dev_name: None,
        ib_port: 1,
        size: 4096,
        mtu: Mtu::Mtu1024,
        rx_depth: 500,
        iters: 1000,
        sl: 0,
        events: false,
        gid_index: None,
        validate: false,
        odp: false,
        implicit_odp: false,
        prefetch: false,
        timestamps: false,
        device_memory: false,
        new_send: false,
    };
    for (opt, value) in parsed.opts {
        let v = value.as_deref().map(c_long).unwrap_or(0);
        match opt {
            'p' => c.tcp_port = u16::try_from(v).map_err(|_| bad())?,
            'd' => c.dev_name = value,
            'i' => c.ib_port = u8::try_from(v).ok().filter(|p| *p >= 1).ok_or_else(bad)?,
            's' => c.size = usize::try_from(v).map_err(|_| bad())?,
            'm' => {
                c.mtu = u32::try_from(v)
                    .ok()
                    .and_then(Mtu::from_bytes)
                    .ok_or_else(bad)?
            }
            'r' => c.rx_depth = u32::try_from(v).map_err(|_| bad())?,
            'n' => c.iters = u32::try_from(v).map_err(|_| bad())?,
            'l' => c.sl = u8::try_from(v).map_err(|_| bad())?,
            'e' => c.events = true,
            'g' => c.gid_index = u32::try_from(v).ok(),
            'c' => c.validate = true,
            'o' => c.odp = true,
            'O' => {
                c.odp = true;
                c.implicit_odp = true;
            }
            'P' => c.prefetch = true,
            't' => c.timestamps = true,
            'j' => c.device_memory = true,
            'N' => c.new_send = true,
            _ => unreachable!("parse_args returns only the options of OPTIONS"),
        }
    }
    match parsed.free.as_slice() {
        [] => {}
        [host] => c.server = Some(host.clone()),
        _ => return Err(bad()),
    }
    // ibv_rc_pingpong's own checks, with its words, before it looks for a device.
    if c.odp && c.device_memory {
        eprintln!("DM memory region can't be on demand");
        return Err(ExitCode::FAILURE);
    }
    if !c.odp && c.prefetch {
        eprintln!("prefetch is valid only with on-demand memory region");
        return Err(ExitCode::FAILURE);
    }
    if c.rx_depth < 2 || c.size == 0 {
        eprintln!("{argv0}: the size and rx-depth must be at least 1 and 2");
        return Err(ExitCode::FAILURE);
    }
    Ok(c)
}
