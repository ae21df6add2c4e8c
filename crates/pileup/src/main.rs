//! `pileup`: command-line parsing and wiring only; the work lives in the
//! library crates (pileup-engine, pileup-watch, pileup-binlog,
//! pileup-prefetch, pileup-lag, pileup-replica, pileup-sandbox, pileup-conn,
//! pileup-files).

/// A line of the result on stdout (`println!`'s arguments). A closed pipe
/// ends the run (with `?`): `main` then exits quietly.
macro_rules! out {
    ($($t:tt)*) => {
        $crate::output::out_line(format_args!($($t)*))?
    };
}

/// A diagnostic line on stderr (`eprintln!`'s arguments); never fails.
macro_rules! note {
    ($($t:tt)*) => {
        $crate::output::note_line(format_args!($($t)*))
    };
}

mod cmd;
mod conn_args;
mod exit;
mod output;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// `pileup --version`: the release, the commit and the build's target and
/// capabilities.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("PILEUP_BUILD_COMMIT"),
    "; ",
    env!("PILEUP_BUILD_TARGET"),
    ", ",
    env!("PILEUP_BUILD_PROFILE"),
    "; stack capture by ptrace, perf events and eBPF; debuginfod)"
);

const EXIT_STATUS: &str = "Exit status: 0 when the work was done (and when the reader of the output stopped \
reading, as with head); 1 when it could not be (the message says why and what to do); 2 for a command line that \
cannot be used; 3 when the work was done but part of the input was damaged. With --json or -f json, the error \
that ends a run is one JSON object on stderr (schema_version, error, kind, exit).";

const AFTER_HELP: &str = concat!(
    "Exit status: 0 when the work was done (and when the reader of the output stopped reading, as with head); \
1 when it could not be (the message says why and what to do); 2 for a command line that cannot be used; 3 when \
the work was done but part of the input was damaged (a corrupt log or binlog event, reported with its offset). \
With --json or -f json, the error that ends a run is one JSON object on stderr (schema_version, error, kind, exit).

",
    "`pileup help COMMAND` or `pileup COMMAND --help` explains a command."
);

/// Performance toolkit for MariaDB and MySQL servers.
///
/// pileup sees what a busy server is doing while costing it as little as
/// possible:
///
///   stacks    every thread's stack, each stopped for microseconds, annotated
///             with its SQL and the holder of the mutex it waits on
///   watch     a per-second flight recorder that catches stalls and keeps
///             their evidence (stacks, processlist, locks) with a verdict
///   top       the live view of what watch records
///   captures  the stalls watch caught, with their verdicts
///   report    a capture's self-contained report.html
///   binlog    binlogs and relay logs read from disk, rows decoded, as text
///             or JSON lines
///   prefetch  keeps a lagging replica's applier fed by warming the pages its
///             writes will need
///   lag       where a replica's apply time goes (page reads, locks, commit,
///             CPU), per table
///   memory    where a server's memory went: resident memory by region beside
///             its own accounting, and what the allocator kept
///   digest    which statements cost the server and how well they read, from
///             slow logs (MariaDB, MySQL, Percona Server)
///   dump      parallel, consistent logical dump of schemas and data
///   load      parallel restore of a dump
///   sandbox   throwaway mariadbd servers for tests and experiments
///
/// Every command that talks SQL connects as the mysql client does
/// (--defaults-file, ~/.my.cnf, -S -h -P -u, MYSQL_PWD; never a password in
/// argv). `pileup COMMAND --help` explains each command.
#[derive(Parser)]
#[command(
    name = "pileup",
    version = VERSION,
    about,
    long_about,
    verbatim_doc_comment,
    propagate_version = true,
    after_long_help = AFTER_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    conn: conn_args::ConnArgs,
    /// Print help (`-h` is the MySQL host option, as in the mysql client).
    #[arg(long, action = clap::ArgAction::Help, global = true, help_heading = "Output")]
    help: Option<bool>,
    /// More diagnostics on stderr (repeat for more).
    #[arg(short, long, action = clap::ArgAction::Count, global = true, conflicts_with = "quiet", help_heading = "Output")]
    verbose: u8,
    /// Nothing on stderr but the error that ends a failed run: no progress,
    /// notes or warnings (the exit status still says what happened).
    #[arg(short, long, global = true, help_heading = "Output")]
    quiet: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Capture, aggregate and render the stacks of every mysqld thread (the poor man's profiler, done right).
    Stacks(cmd::stacks::StacksArgs),
    /// Poll every second, keep history, catch stalls and capture their evidence (auto-PMP).
    Watch(cmd::watch::WatchArgs),
    /// Live terminal view: metrics with sparklines, busiest statements, stall state.
    Top(cmd::watch::TopArgs),
    /// List the captures `pileup watch` made.
    Captures(cmd::watch::CapturesArgs),
    /// Rebuild a capture's self-contained report.html.
    Report(cmd::watch::ReportArgs),
    /// Keep a replica's SQL thread fed: read the relay log ahead of it and warm the pages its writes need.
    Prefetch(cmd::prefetch::PrefetchArgs),
    /// Which locks the server's threads wait on, how long, where and for whom, over a time window (eBPF).
    Locks(cmd::locks::LocksArgs),
    /// Where a replica's apply time goes: page reads, lock waits, commit, CPU, relay log; per table, with a flame graph.
    Lag(cmd::lag::LagArgs),
    /// Where a running server's memory went: resident memory by region beside the server's own accounting, and what the allocator kept.
    Memory(cmd::memory::MemoryArgs),
    /// Which statements cost the server and how well they read: slow-log statements grouped and ranked.
    Digest(cmd::digest::DigestArgs),
    /// Print the events of binlog and relay log files, row images decoded (text or JSON).
    Binlog(cmd::binlog::BinlogArgs),
    /// Parallel, consistent logical dump: tables in chunks, views, routines, triggers, events, binlog position.
    Dump(cmd::dump::DumpArgs),
    /// Load a dump in parallel (LOAD DATA, checks off, rows and checksums verified per chunk).
    Load(cmd::dump::LoadArgs),
    /// Experiments on a sandbox: hot row, accepts, table opens, point selects, ranges, durability; curves, plots and the profile at each knee.
    Bench(cmd::bench::BenchArgs),
    /// Start, stop and list throwaway mariadbd servers.
    #[command(subcommand)]
    Sandbox(cmd::sandbox::SandboxCmd),
    /// Print the shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(
        after_long_help = "Examples:\n  pileup completions bash > /usr/share/bash-completion/completions/pileup\n  pileup completions zsh > /usr/share/zsh/vendor-completions/_pileup\n  pileup completions fish > /usr/share/fish/vendor_completions.d/pileup.fish"
    )]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the manual pages (pileup.1 and one per command) into a directory.
    #[command(after_long_help = "Example:\n  pileup manpages /usr/share/man/man1 && man pileup-stacks")]
    Manpages {
        /// Where the pages go (created if missing).
        dir: std::path::PathBuf,
    },
}

/// `-h` means `--host` everywhere, as in the MySQL clients, so clap's own
/// `-h/--help` flag is replaced by a long-only `--help` on every subcommand.
fn command() -> clap::Command {
    fn no_short_help(c: clap::Command) -> clap::Command {
        c.disable_help_flag(true).mut_subcommands(no_short_help)
    }
    // Commands that never connect to a server do not list the connection
    // options: each gets hidden local copies, which the global ones then
    // leave alone (they are still accepted, and ignored).
    let hidden: Vec<clap::Arg> = <conn_args::ConnArgs as clap::Args>::augment_args(clap::Command::new("conn"))
        .get_arguments()
        .map(|a| a.clone().global(false).hide(true))
        .collect();
    fn hide(c: clap::Command, hidden: &[clap::Arg]) -> clap::Command {
        // A command's own option of the same name (sandbox start's --port) stays.
        let own: Vec<String> = c.get_arguments().map(|a| a.get_id().to_string()).collect();
        let copies: Vec<clap::Arg> =
            hidden.iter().filter(|a| !own.contains(&a.get_id().to_string())).cloned().collect();
        c.args(copies).mut_subcommands(|s| hide(s, hidden))
    }
    // Every command's --format offers exactly the formats it writes, and
    // every page of the manual ends with the exit statuses.
    fn formats(c: clap::Command, path: &str) -> clap::Command {
        let c = if c.get_arguments().any(|a| a.get_id() == "format") {
            let top = path.split(' ').next().unwrap_or(path).to_string();
            // bench's -o also takes a directory; dump's is the dump.
            let files = c.get_arguments().any(|a| a.get_id() == "output") && !matches!(top.as_str(), "dump" | "bench");
            c.mut_arg("format", |a| output::format_arg(&top, files, a))
        } else {
            c
        };
        let c = match (path.is_empty(), c.get_after_long_help().map(|h| h.to_string())) {
            (true, _) => c,
            (false, None) => c.after_long_help(EXIT_STATUS),
            (false, Some(h)) => c.after_long_help(format!("{h}\n\n{EXIT_STATUS}")),
        };
        c.mut_subcommands(|s| {
            let p = if path.is_empty() { s.get_name().to_string() } else { format!("{path} {}", s.get_name()) };
            formats(s, &p)
        })
    }
    let mut c = Cli::command();
    for name in ["binlog", "report", "captures", "sandbox", "completions", "manpages"] {
        c = c.mut_subcommand(name, |s| hide(s, &hidden));
    }
    no_short_help(formats(c, ""))
}

/// The manual: `pileup.1` and `pileup-COMMAND.1` for each command (and
/// `pileup-sandbox-start.1` for nested ones), written to a temporary name
/// and renamed.
fn manpages(dir: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let write = |name: &str, c: clap::Command| -> anyhow::Result<()> {
        let mut page = Vec::new();
        clap_mangen::Man::new(c).render(&mut page)?;
        let path = dir.join(format!("{name}.1"));
        let tmp = dir.join(format!(".{name}.1.tmp"));
        std::fs::write(&tmp, &page).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    };
    // Built first, so that the global options (connection, output) are in
    // every command's page too.
    let mut root = command();
    root.build();
    write("pileup", root.clone())?;
    fn each(
        prefix: &str,
        words: &str,
        c: &clap::Command,
        write: &dyn Fn(&str, clap::Command) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        for s in c.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
            let (name, words) = (format!("{prefix}-{}", s.get_name()), format!("{words} {}", s.get_name()));
            write(&name, s.clone().display_name(name.clone()).bin_name(words.clone()))?;
            each(&name, &words, s, write)?;
        }
        Ok(())
    }
    each("pileup", "pileup", &root, &write)?;
    note!("manual pages written to {}", dir.display());
    Ok(())
}

/// Whether the command line asks for JSON (`--json`, `-f json`,
/// `--format json`, `--format=json`, `-fjson`): then an error that ends the
/// run is a JSON object too. Read from the words themselves, so a command
/// line that does not parse is answered in JSON as well.
fn json_asked(args: &[String]) -> bool {
    let words: Vec<&str> = args.iter().skip(1).map(String::as_str).take_while(|a| *a != "--").collect();
    let json = |w: &str| w.eq_ignore_ascii_case("json");
    words.iter().enumerate().any(|(i, w)| {
        *w == "--json"
            || w.strip_prefix("--format=").is_some_and(json)
            || w.strip_prefix("-f").is_some_and(|v| !v.is_empty() && json(v))
            || ((*w == "-f" || *w == "--format") && words.get(i + 1).is_some_and(|v| json(v)))
    })
}

/// How a run ended, as its exit status says: 0 done, 1 failed, 2 a command
/// line that cannot be used, 3 done on damaged input.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Exit {
    Failed = 1,
    Usage = 2,
    Damaged = 3,
}

impl Exit {
    fn of(e: &anyhow::Error) -> Exit {
        let experiment_usage = |c: &(dyn std::error::Error + 'static)| {
            matches!(c.downcast_ref(), Some(pileup_bench::ExperimentError::Usage(_)))
        };
        // An s3:// URL that is not one is a flag's value (--ship, --from,
        // report's capture) that cannot be used.
        let bad_url = |c: &(dyn std::error::Error + 'static)| {
            matches!(c.downcast_ref(), Some(pileup_store::StoreError::BadUrl(_)))
        };
        if e.chain().any(|c| c.is::<cmd::Usage>() || is_usage_conn(c) || experiment_usage(c) || bad_url(c)) {
            Exit::Usage
        } else if e.chain().any(|c| c.is::<cmd::Damaged>()) {
            Exit::Damaged
        } else {
            Exit::Failed
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Exit::Failed => "failed",
            Exit::Usage => "usage",
            Exit::Damaged => "damaged",
        }
    }
}

/// The connection options' own refusal of a password in argv is a usage
/// error; a server that cannot be reached, or an option file that cannot
/// be read, is not (as for the mysql client).
fn is_usage_conn(c: &(dyn std::error::Error + 'static)) -> bool {
    matches!(c.downcast_ref::<pileup_conn::ConnError>(), Some(pileup_conn::ConnError::PasswordInArgs))
}

/// Write the error that ends the run, in one line (causes after colons,
/// more lines indented), or as one JSON object when JSON was asked for,
/// to the stderr the run started with; then exit with its status.
fn fail(fd: i32, json: bool, exit: Exit, msg: &str, command: Option<&str>) -> ! {
    let help = match (exit, command) {
        (Exit::Usage, Some(c)) => format!(" (see pileup {c} --help)"),
        (Exit::Usage, None) => " (see pileup --help)".to_string(),
        _ => String::new(),
    };
    let text = if json {
        let j = serde_json::json!({
            "schema_version": output::SCHEMA_VERSION,
            "error": format!("{msg}{help}"),
            "kind": exit.kind(),
            "exit": exit as i32,
        });
        format!("{j}\n")
    } else {
        let mut lines = msg.lines();
        let mut text = format!("pileup: {}{help}\n", lines.next().unwrap_or(""));
        for l in lines {
            text.push_str(&format!("  {l}\n"));
        }
        text
    };
    // SAFETY: writes a buffer to a file descriptor this process owns.
    unsafe { libc::write(fd, text.as_ptr().cast(), text.len()) };
    std::process::exit(exit as i32);
}

/// mimalloc instead of glibc's allocator: a load allocates and frees a
/// buffer for every value of every row it sends, and with mimalloc its CPU
/// is about a fifth lower (docs/BENCHMARKS.md, the dump section), for
/// a larger peak RSS.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json = json_asked(&args);
    // A password given on the command line (`-pSECRET`, `--password=SECRET`,
    // as the mysql client takes it) is refused before anything else: it
    // would show in `ps`. `-p` alone asks for it; `-p lag` is `-p`, then
    // the command.
    let given =
        args.iter().skip(1).take_while(|a| *a != "--").any(|a| {
            (a.starts_with("-p") && a.len() > 2) || a.strip_prefix("--password=").is_some_and(|v| !v.is_empty())
        });
    if given {
        fail(2, json, Exit::Usage, &pileup_conn::ConnError::PasswordInArgs.to_string(), None);
    }
    let matches = match command().try_get_matches_from(&args) {
        Ok(m) => m,
        Err(e) if json && e.use_stderr() => {
            let msg = e.kind().as_str().map(String::from).unwrap_or_else(|| "the command line cannot be used".into());
            let detail = e.to_string();
            let first = detail.lines().next().unwrap_or(&msg).trim_start_matches("error: ").to_string();
            fail(2, true, Exit::Usage, &first, None)
        }
        Err(e) => e.exit(),
    };
    let name: Option<String> = matches.subcommand_name().map(|n| match matches.subcommand() {
        Some((_, sub)) => sub.subcommand_name().map(|s| format!("{n} {s}")).unwrap_or_else(|| n.to_string()),
        None => n.to_string(),
    });
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    // Quiet: stderr goes to /dev/null for the run; the final error line is
    // written to the stderr the run was started with.
    let stderr_fd = if cli.quiet { quiet_stderr() } else { 2 };
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("PILEUP_LOG").unwrap_or_else(|_| level.into()))
        .with_writer(std::io::stderr)
        .init();
    let conn = cli.conn.options();
    let r =
        conn.validate().map_err(|e| anyhow::Error::from(cmd::Usage(e.to_string()))).and_then(|()| match cli.command {
            Command::Stacks(a) => cmd::stacks::run(a, &conn),
            Command::Watch(a) => cmd::watch::run_watch(a, &conn),
            Command::Captures(a) => cmd::watch::run_captures(a),
            Command::Top(a) => cmd::watch::run_top(a, &conn),
            Command::Report(a) => cmd::watch::run_report(a),
            Command::Binlog(a) => cmd::binlog::run(a),
            Command::Digest(a) => cmd::digest::run(a, &conn),
            Command::Prefetch(a) => cmd::prefetch::run_prefetch(a, &conn),
            Command::Lag(a) => cmd::lag::run(a, &conn),
            Command::Memory(a) => cmd::memory::run(a, &conn),
            Command::Locks(a) => cmd::locks::run(a, &conn),
            Command::Dump(a) => cmd::dump::run_dump(a, &conn),
            Command::Load(a) => cmd::dump::run_load(a, &conn),
            Command::Bench(a) => cmd::bench::run(a, &conn),
            Command::Sandbox(c) => cmd::sandbox::run(c),
            Command::Completions { shell } => {
                // Made whole first: clap_complete panics on a failed write.
                let mut script = Vec::new();
                clap_complete::generate(shell, &mut command(), "pileup", &mut script);
                output::write_output(None, |w| Ok(w.write_all(&script)?))
            }
            Command::Manpages { dir } => manpages(&dir),
        });
    // A reader of stdout that stopped reading ends the run quietly, as grep
    // and cat end; any other failure is said.
    if let Some(e) = r.as_ref().err().filter(|e| !output::ended_by_closed_stdout(e)) {
        // One line: what went wrong and what to do about it, each cause
        // after a colon, a client library's error as its message alone.
        let msg = pileup_conn::error_text(e.as_ref());
        let fix = engine_fix(e, name.as_deref()).map(|f| format!("; {f}")).unwrap_or_default();
        let mut lines = msg.lines();
        let mut text = format!("{}{fix}", lines.next().unwrap_or(""));
        for l in lines {
            text.push_str(&format!("\n{l}"));
        }
        fail(stderr_fd, json, Exit::of(e), &text, name.as_deref());
    }
}

/// The engine names a problem of choosing the process; the fix is said
/// here, with the flags that make it.
fn engine_fix(e: &anyhow::Error, command: Option<&str>) -> Option<&'static str> {
    use pileup_engine::Fix;
    fn engine<'a>(c: &'a (dyn std::error::Error + 'static)) -> Option<&'a pileup_engine::EngineError> {
        c.downcast_ref::<pileup_engine::EngineError>()
            .or(match c.downcast_ref::<pileup_lag::LagError>() {
                Some(pileup_lag::LagError::Stacks(s)) => Some(s),
                _ => None,
            })
            .or(match c.downcast_ref::<pileup_locks::LocksError>() {
                Some(pileup_locks::LocksError::Target(s)) => Some(s),
                _ => None,
            })
            .or(match c.downcast_ref::<pileup_memory::MemoryError>() {
                Some(pileup_memory::MemoryError::Target(s)) => Some(s),
                _ => None,
            })
    }
    Some(match e.chain().find_map(engine)?.fix()? {
        Fix::CheckPid => "check the pid, or use --pid auto to find the running server",
        // top and lag look at a server only.
        Fix::ServerOrAnyProcess if matches!(command, Some("top" | "lag")) => "pass the server's pid",
        Fix::ServerOrAnyProcess => "pass the server's pid, or --any-process to take it anyway",
        Fix::StartOrGivePid => "start the server, or pass --pid PID",
        Fix::ChooseServer => "choose one with --pid PID, or name its socket or port with -S or -P",
    })
}

/// Send stderr to /dev/null; returns a descriptor of the original stderr
/// (2 when that could not be arranged: then nothing is hidden).
fn quiet_stderr() -> i32 {
    // SAFETY: dup/open/dup2 on descriptors this process owns; on any
    // failure stderr is left as it was.
    unsafe {
        let saved = libc::dup(2);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
        if saved < 0 || null < 0 || libc::dup2(null, 2) < 0 {
            return 2;
        }
        libc::close(null);
        saved
    }
}

#[cfg(test)]
mod tests {
    /// The command tree is sound (clap's own checks, every command).
    #[test]
    fn the_command_line_is_sound() {
        super::command().debug_assert();
    }

    /// Every option of every command says what it does in `--help`.
    #[test]
    fn every_option_has_a_description() {
        fn walk(c: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in c.get_arguments().filter(|a| !a.is_hide_set()) {
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path} {}", a.get_id()));
                }
            }
            for s in c.get_subcommands() {
                walk(s, &format!("{path} {}", s.get_name()), missing);
            }
        }
        let mut c = super::command();
        c.build();
        let mut missing = vec![];
        walk(&c, "pileup", &mut missing);
        assert!(missing.is_empty(), "options without a description: {missing:?}");
    }
}
