//! `pileup`: command-line parsing and wiring only; the work lives in the
//! library crates (pileup-engine, pileup-watch, pileup-binlog,
//! pileup-prefetch, pileup-lag, pileup-replica, pileup-sandbox, pileup-conn,
//! pileup-files).

mod cmd;
mod conn_args;
mod output;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

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
    version,
    about,
    long_about,
    verbatim_doc_comment,
    propagate_version = true,
    disable_help_subcommand = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    conn: conn_args::ConnArgs,
    /// Print help (`-h` is the MySQL host option, as in the mysql client).
    #[arg(long, action = clap::ArgAction::Help, global = true)]
    help: Option<bool>,
    /// More diagnostics on stderr (repeat for more).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
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
    /// Which statements cost the server and how well they read: slow-log statements grouped and ranked.
    Digest(cmd::digest::DigestArgs),
    /// Print the events of binlog and relay log files, row images decoded (text or JSON).
    Binlog(cmd::binlog::BinlogArgs),
    /// Parallel, consistent logical dump: tables in chunks, views, routines, triggers, events, binlog position.
    Dump(cmd::dump::DumpArgs),
    /// Load a dump in parallel (LOAD DATA, checks off, rows and checksums verified per chunk).
    Load(cmd::dump::LoadArgs),
    /// Start, stop and list throwaway mariadbd servers.
    #[command(subcommand)]
    Sandbox(cmd::sandbox::SandboxCmd),
}

/// `-h` means `--host` everywhere, as in the MySQL clients, so clap's own
/// `-h/--help` flag is replaced by a long-only `--help` on every subcommand.
fn command() -> clap::Command {
    fn no_short_help(c: clap::Command) -> clap::Command {
        c.disable_help_flag(true).mut_subcommands(no_short_help)
    }
    no_short_help(Cli::command())
}

fn main() {
    let cli = match Cli::from_arg_matches(&command().get_matches()) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
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
    let r = conn.validate().map_err(anyhow::Error::from).and_then(|()| match cli.command {
        Command::Stacks(a) => cmd::stacks::run(a, &conn),
        Command::Watch(a) => cmd::watch::run_watch(a, &conn),
        Command::Captures(a) => cmd::watch::run_captures(a),
        Command::Top(a) => cmd::watch::run_top(a, &conn),
        Command::Report(a) => cmd::watch::run_report(a),
        Command::Binlog(a) => cmd::binlog::run(a),
        Command::Digest(a) => cmd::digest::run(a, &conn),
        Command::Prefetch(a) => cmd::prefetch::run_prefetch(a, &conn),
        Command::Lag(a) => cmd::lag::run(a, &conn),
        Command::Locks(a) => cmd::locks::run(a, &conn),
        Command::Dump(a) => cmd::dump::run_dump(a, &conn),
        Command::Load(a) => cmd::dump::run_load(a, &conn),
        Command::Sandbox(c) => cmd::sandbox::run(c),
    });
    if let Err(e) = r {
        // One line: what went wrong and what to do about it, each cause
        // after a colon, a client library's error as its message alone.
        let msg = pileup_conn::error_text(e.as_ref());
        let fix = engine_fix(&e).map(|f| format!("; {f}")).unwrap_or_default();
        eprintln!("pileup: {}{fix}", msg.lines().next().unwrap_or(""));
        for l in msg.lines().skip(1) {
            eprintln!("  {l}");
        }
        std::process::exit(match e.downcast_ref::<cmd::ExitCode>() {
            Some(c) => c.0,
            None => 1,
        });
    }
}

/// The engine names a problem of choosing the process; the fix is said
/// here, with the flags that make it.
fn engine_fix(e: &anyhow::Error) -> Option<&'static str> {
    use pileup_engine::Fix;
    fn engine<'a>(c: &'a (dyn std::error::Error + 'static)) -> Option<&'a pileup_engine::StacksError> {
        c.downcast_ref::<pileup_engine::StacksError>()
            .or(match c.downcast_ref::<pileup_lag::LagError>() {
                Some(pileup_lag::LagError::Stacks(s)) => Some(s),
                _ => None,
            })
            .or(match c.downcast_ref::<pileup_locks::LocksError>() {
                Some(pileup_locks::LocksError::Target(s)) => Some(s),
                _ => None,
            })
    }
    Some(match e.chain().find_map(engine)?.fix()? {
        Fix::CheckPid => "check the pid, or use --pid auto to find the running server",
        Fix::ServerOrAnyProcess => "pass the server's pid, or --any-process to take it anyway",
        Fix::StartOrGivePid => "start the server, or pass --pid PID",
        Fix::ChooseServer => "choose one with --pid PID, or name its socket or port with -S or -P",
    })
}
