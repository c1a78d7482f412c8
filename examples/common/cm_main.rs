//! The `main` that librdmacm's `rdma_server` and `rdma_client` twins share: their options,
//! their start and end lines, their exit status.

use super::{parse_args, OptSpec};

/// The `main` of both examples, as librdmacm's: reads `-s server_address` and `-p
/// port_number` (getopt("s:p:"): short forms only; the server defaults to `default_server`,
/// the port to 7471), prints `PROGRAM: start`, runs `run(server, port)`, prints its failure
/// and `PROGRAM: end 0` or `end -1`, and exits with that status (255 for -1). Bad options
/// print the C example's usage and exit 1.
pub(crate) fn example_main(
    program: &str,
    default_server: &str,
    run: fn(&str, u16) -> Result<(), String>,
) -> ! {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let specs = ['s', 'p'].map(|short| OptSpec {
        short,
        long: "",
        takes_value: true,
    });
    let options = parse_args(&args, &specs).and_then(|p| {
        let (mut server, mut port) = (default_server.to_string(), 7471u16);
        for (name, v) in p.opts {
            let v = v.unwrap_or_default();
            match name {
                's' => server = v,
                _ => {
                    port = v
                        .parse()
                        .map_err(|_| format!("invalid port number '{v}'"))?
                }
            }
        }
        Ok((server, port))
    });
    let (server, port) = match options {
        Ok(o) => o,
        Err(e) => {
            println!("{program}: {e}");
            println!("usage: {program}");
            println!("\t[-s server_address]");
            println!("\t[-p port_number]");
            std::process::exit(1);
        }
    };
    println!("{program}: start");
    let ret = match run(&server, port) {
        Ok(()) => 0,
        Err(e) => {
            println!("{e}");
            -1
        }
    };
    println!("{program}: end {ret}");
    std::process::exit(ret);
}
