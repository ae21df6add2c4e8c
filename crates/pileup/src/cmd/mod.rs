pub mod bench;
pub mod binlog;
pub mod debug_files;
pub mod digest;
pub mod dump;
pub mod lag;
pub mod load_profile;
pub mod locks;
pub mod memory;
pub mod prefetch;
pub mod sandbox;
pub mod stacks;
pub mod watch;

/// `--format` of the commands whose output is text or JSON (the commands
/// with stack output have more formats: [`crate::output`]).
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TextJson {
    Text,
    Json,
}

/// JSON when `--json` or `--format json` says so.
pub fn wants_json(json: bool, format: Option<TextJson>) -> bool {
    json || format == Some(TextJson::Json)
}

/// An error that asks for a specific exit code, with the line printed.
#[derive(Debug)]
pub struct ExitCode(pub i32, pub String);

impl std::fmt::Display for ExitCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.1)
    }
}
impl std::error::Error for ExitCode {}

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
        .ok_or_else(|| format!("{s:?} is not a duration (use e.g. 500ms, 10s, 2m)"))
}

/// `--pid PID|auto` for commands that trace a local server: `auto` is the
/// server the connection options reach when any are given (with several
/// servers on a host, `-S` picks one), else the one mysqld/mariadbd running
/// (refused when there are several).
pub fn parse_pid(arg: &str, conn: &pileup_conn::ConnOptions) -> anyhow::Result<i32> {
    match arg {
        "auto" if conn.any_given() => {
            let spec = conn.resolve()?;
            pileup_engine::process::server_for(&spec).map_err(|why| anyhow::anyhow!("{why}; give --pid"))
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
        .ok_or_else(|| anyhow::anyhow!("--pid {p:?}: expected a process id or {or}"))
}

/// `--pid PID|auto|none` for commands that read a server's OS data. `auto`
/// is the server listening on the endpoint pileup connects to (socket, or a
/// local TCP port); a remote server has no local process. Returns the pid
/// and, when there is none, why (for the start-up line).
pub fn resolve_server_pid(arg: &str, spec: &pileup_conn::ConnSpec) -> anyhow::Result<(Option<i32>, Option<String>)> {
    match arg {
        "none" => Ok((None, Some("--pid none".into()))),
        "auto" => Ok(match pileup_engine::process::server_for(spec) {
            Ok(pid) => (Some(pid), None),
            Err(why) => (None, Some(format!("{why}; give --pid for OS data and stacks"))),
        }),
        p => Ok((Some(number(p, "\"auto\" or \"none\"")?), None)),
    }
}

/// A flag SIGINT and SIGTERM set: the command stops its work and still
/// writes what it has.
pub fn stop_on_signals() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installs a handler that only stores to the flag.
        unsafe { signal_flag(sig, stop.clone()) };
    }
    stop
}

/// Set `flag` when `sig` arrives (signal-hook's job, done with one
/// sigaction: a crate for it would be out of proportion).
pub(crate) unsafe fn signal_flag(sig: i32, flag: std::sync::Arc<std::sync::atomic::AtomicBool>) {
    use std::sync::OnceLock;
    static FLAG: OnceLock<std::sync::Arc<std::sync::atomic::AtomicBool>> = OnceLock::new();
    let _ = FLAG.set(flag);
    extern "C" fn handler(_: i32) {
        if let Some(f) = FLAG.get() {
            f.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let sa = nix::sys::signal::SigAction::new(
        nix::sys::signal::SigHandler::Handler(handler),
        nix::sys::signal::SaFlags::SA_RESTART,
        nix::sys::signal::SigSet::empty(),
    );
    if let Ok(s) = nix::sys::signal::Signal::try_from(sig) {
        let _ = nix::sys::signal::sigaction(s, &sa);
    }
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
}
