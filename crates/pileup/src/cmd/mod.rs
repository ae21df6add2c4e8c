mod advise_copy;
pub mod bench;
pub mod binlog;
pub mod debug_files;
pub mod digest;
pub mod digest_fleet;
pub mod digest_ship;
pub mod dump;
pub mod lag;
pub mod load_profile;
pub mod locks;
pub mod memory;
pub mod prefetch;
pub mod sandbox;
pub mod stacks;
pub mod watch;

pub use pileup_output::plural;

pub(crate) use crate::exit::usage;
pub use crate::exit::{Damaged, Usage};

/// A count flag that must be at least 1: `--FLAG must be at least 1`
/// otherwise (a usage error).
pub fn at_least_1(flag: &str, n: u64) -> anyhow::Result<()> {
    if n == 0 {
        usage!("{flag} must be at least 1");
    }
    Ok(())
}

/// A window that must not be empty: `--FLAG must be more than 0` otherwise
/// (a usage error).
pub fn more_than_0(flag: &str, d: std::time::Duration) -> anyhow::Result<()> {
    if d.is_zero() {
        usage!("{flag} must be more than 0");
    }
    Ok(())
}

/// `--listen HOST:PORT`, checked before anything starts: an address the
/// metrics can be served on (a name is resolved).
pub fn check_listen(addr: Option<&str>, web: Option<&std::path::Path>, profiles: bool) -> anyhow::Result<()> {
    use std::net::ToSocketAddrs;
    match addr.map(listen_addr) {
        Some(a) if a.to_socket_addrs().map(|mut i| i.next().is_none()).unwrap_or(true) => {
            usage!(
                "--listen '{a}': expected [HOST:]PORT, e.g. 9104 (loopback) or 0.0.0.0:9104 (port 0 picks a free one)"
            )
        }
        Some(_) => {}
        None if web.is_some() => usage!("--web.config.file says who may reach --listen; give --listen too"),
        None if profiles => usage!("--listen-profiles serves profiles on --listen; give --listen too"),
        None => {}
    }
    if let Some(w) = web {
        if let Err(e) = std::fs::metadata(w) {
            usage!("--web.config.file {}: {e}", w.display());
        }
    }
    Ok(())
}

/// `--listen`'s address: a bare port (`9104`, `:9104`) is on loopback.
pub fn listen_addr(a: &str) -> String {
    let port = a.strip_prefix(':').unwrap_or(a);
    if port.parse::<u16>().is_ok() {
        format!("127.0.0.1:{port}")
    } else {
        a.to_string()
    }
}

/// What `--listen`, `--web.config.file` and `--listen-profiles` ask for.
pub fn listen_options(
    addr: Option<&str>,
    web: Option<&std::path::Path>,
    profiles: bool,
) -> Option<pileup_watch::expo::ListenOptions> {
    addr.map(|a| pileup_watch::expo::ListenOptions {
        addr: listen_addr(a),
        web_config: web.map(std::path::Path::to_path_buf),
        profiles,
    })
}

/// Parse `500ms`, `10s`, `2m`, `1h` (a bare number is seconds), with the
/// same rules as durations inside trigger expressions.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    let secs = match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Some(v),
        Ok(_) => None,
        Err(_) => pileup_watch::trigger::parse_duration(s),
    };
    secs.map(std::time::Duration::from_secs_f64)
        .ok_or_else(|| format!("'{s}' is not a duration (use e.g. 500ms, 10s, 2m)"))
}

/// `--pid PID|auto` for commands that trace a local server: `auto` is the
/// server the connection options reach when any are given (with several
/// servers on a host, `-S` picks one), else the one mysqld/mariadbd running
/// (refused when there are several).
pub fn parse_pid(arg: &str, conn: &pileup_conn::ConnOptions) -> anyhow::Result<i32> {
    match arg {
        "auto" if conn.any_given() => {
            let spec = conn.resolve()?;
            pileup_annotate::server_for(&spec).map_err(|why| anyhow::anyhow!("{why}; give --pid"))
        }
        "auto" => Ok(pileup_engine::process::auto_pid()?),
        p => number(p, "\"auto\""),
    }
}

/// A `--pid` value that is a process id.
fn number(p: &str, or: &str) -> anyhow::Result<i32> {
    p.parse::<i32>()
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| Usage(format!("--pid '{p}': expected a process id or {or}")).into())
}

/// `--pid PID|auto|none` for commands that read a server's OS data. `auto`
/// is the server listening on the endpoint pileup connects to (socket, or a
/// local TCP port); a remote server has no local process. Returns the pid
/// and, when there is none, why (for the start-up line).
pub fn resolve_server_pid(arg: &str, spec: &pileup_conn::ConnSpec) -> anyhow::Result<(Option<i32>, Option<String>)> {
    match arg {
        "none" => Ok((None, Some("--pid none".into()))),
        "auto" => Ok(match pileup_annotate::server_for(spec) {
            Ok(pid) => (Some(pid), None),
            Err(why) => (None, Some(format!("{why}; give --pid for OS data and stacks"))),
        }),
        p => Ok((Some(number(p, "\"auto\" or \"none\"")?), None)),
    }
}

/// A flag SIGINT, SIGTERM and a closed output set: the command stops its
/// work and still writes what it has.
pub fn stop_on_signals() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    crate::output::stop_requested()
}

/// A progress bar of `len` steps in pileup's style, drawn with `template`
/// (indicatif's template syntax).
pub fn progress_bar(len: u64, template: &str) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::new(len);
    b.set_style(
        indicatif::ProgressStyle::with_template(template)
            .expect("progress templates are literals")
            .progress_chars("=> "),
    );
    b
}

/// A byte count: digits with an optional K, M or G (powers of 1024).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.eq_ignore_ascii_case(&'k') => (&t[..i], 1u64 << 10),
        Some((i, c)) if c.eq_ignore_ascii_case(&'m') => (&t[..i], 1 << 20),
        Some((i, c)) if c.eq_ignore_ascii_case(&'g') => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    match num.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n * mult),
        _ => Err(format!("'{s}': expected a byte count such as 65536, 512K or 4M")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations() {
        use std::time::Duration;
        assert_eq!(super::parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(super::parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(super::parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(super::parse_duration("fast").is_err());
        assert!(super::parse_duration("-1s").is_err());
    }

    #[test]
    fn byte_counts_take_suffixes() {
        assert_eq!(super::parse_bytes("512K"), Ok(512 << 10));
        assert_eq!(super::parse_bytes("4m"), Ok(4 << 20));
        assert_eq!(super::parse_bytes("65536"), Ok(65536));
        assert!(super::parse_bytes("0").is_err() && super::parse_bytes("x").is_err());
    }
}
