//! `pileup`: command-line parsing and wiring only; the work lives in the
//! library crates (pileup-stacks, pileup-watch, pileup-binlog, pileup-prefetch,
//! pileup-lag, pileup-sandbox, pileup-conn).

mod cmd;
mod output;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// Performance toolkit for MariaDB and MySQL servers.
///
/// pileup sees what a busy server is doing while costing it as little as
/// possible: stacks of every thread captured in microseconds per thread and
/// annotated with the SQL behind them, throwaway sandboxes for trying things.
#[derive(Parser)]
#[command(name = "pileup", version, about, long_about, propagate_version = true, disable_help_subcommand = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    conn: pileup_conn::ConnArgs,
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
    /// Where a replica's apply time goes: page reads, lock waits, commit, CPU, relay log; per table, with a flame graph.
    Lag(cmd::lag::LagArgs),
    /// Print the events of binlog and relay log files, row images decoded (text or JSON).
    Binlog(cmd::binlog::BinlogArgs),
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
    let r = cli.conn.validate().and_then(|()| match cli.command {
        Command::Stacks(a) => cmd::stacks::run(a, &cli.conn),
        Command::Watch(a) => cmd::watch::run_watch(a, &cli.conn),
        Command::Captures(a) => cmd::watch::run_captures(a),
        Command::Top(a) => cmd::watch::run_top(a, &cli.conn),
        Command::Report(a) => cmd::watch::run_report(a),
        Command::Binlog(a) => cmd::binlog::run(a),
        Command::Prefetch(a) => cmd::prefetch::run_prefetch(a, &cli.conn),
        Command::Lag(a) => cmd::lag::run(a, &cli.conn),
        Command::Sandbox(c) => cmd::sandbox::run(c),
    });
    if let Err(e) = r {
        // One line: what went wrong and what to do about it.
        let msg = format!("{e:#}");
        eprintln!("pileup: {}", msg.lines().next().unwrap_or(""));
        for l in msg.lines().skip(1) {
            eprintln!("  {l}");
        }
        std::process::exit(match e.downcast_ref::<cmd::ExitCode>() {
            Some(c) => c.0,
            None => 1,
        });
    }
}
