//! `pileup dump` and `pileup load`: parse, wire the library to a progress
//! bar (terminal) or JSON lines (`--json`), and print the outcome.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use pileup_conn::ConnOptions;
use pileup_dump::news::{Dumped, Loaded};
use pileup_dump::{dump, load, DumpOptions, Existing, LoadOptions};

use crate::output::Sink;

use super::load_profile as profile;

/// The bound on each statement of a dump or a load.
const LONG_STATEMENTS: Duration = Duration::from_secs(24 * 3600);
/// How often a dump or a load checks, on a connection of its own, that the
/// server still answers (its statements' own bound is a day).
pub const WATCHDOG: Duration = Duration::from_secs(5);

#[derive(clap::Args)]
#[command(after_long_help = "Copies the chosen tables, views, routines, triggers and events into DIR, consistently \
across --threads connections: each opens its snapshot while commits are blocked for an instant (MariaDB: BACKUP \
STAGE BLOCK_COMMIT; running queries go on, nothing is flushed), and the binlog file, position and GTID of that \
snapshot are recorded. Tables that are not transactional (Aria, MyISAM) are copied in that window, and the output \
says so and for how long. A table with an integer key is cut into chunks of about --chunk-rows rows, largest table \
first, so one large table is copied by every thread. Files are zstd-compressed, 0600, written under temporary names; \
the manifest (pileup-dump.json) is written last, so a dump cut short is never taken for a complete one.\n\n\
Examples:\n  pileup dump -S /run/mysqld/mysqld.sock -o /backup/shop --databases shop\n  \
pileup dump -o /backup/all --threads 8 --exclude '\\.log_'\n  pileup load /backup/shop --threads 8 --rename shop:shop_copy")]
pub struct DumpArgs {
    /// Directory to write (created; must not hold a dump already).
    #[arg(short = 'o', long, value_name = "DIR")]
    pub output: PathBuf,
    /// Connections copying at once.
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// Only these databases (comma-separated, or repeated). Default: all but the server's own.
    #[arg(short = 'B', long = "databases", value_name = "DB", value_delimiter = ',')]
    pub databases: Vec<String>,
    /// Only tables whose `db.table` matches this regular expression (repeatable).
    #[arg(long, value_name = "REGEX")]
    pub include: Vec<String>,
    /// Leave out tables whose `db.table` matches this regular expression (repeatable).
    #[arg(long, value_name = "REGEX")]
    pub exclude: Vec<String>,
    /// Only rows matching this condition, in every table.
    #[arg(long = "where", value_name = "CONDITION")]
    pub where_: Option<String>,
    /// Rows per chunk for tables with an integer key.
    #[arg(long, default_value_t = 200_000)]
    pub chunk_rows: u64,
    /// Layout: pileup's own (LOAD DATA text, a manifest with row counts and checksums for --resume and --verify),
    /// or mydumper 0.10.1's, which myloader loads as it is.
    #[arg(long, value_enum, default_value_t = FormatArg::Pileup)]
    pub layout: FormatArg,
    /// Compression of the data files [default: zstd; gzip with --layout mydumper, as myloader 0.10.1
    /// reads gzip and none only].
    #[arg(long, value_enum)]
    pub compress: Option<CompressArg>,
    /// zstd compression level, from -131072 to 22: 1 (the default) is the fastest of the usual levels,
    /// 19 the smallest short of 20-22 (which take far more memory); 0 is zstd's default, 3; negative
    /// levels (`--level=-3`) are faster still and larger.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub level: i32,
    /// Keep trying to take the snapshot lock this long while queries keep it waiting, then abort naming them.
    #[arg(long, default_value = "60s", value_parser = super::parse_duration)]
    pub lock_wait: Duration,
    /// Kill (KILL QUERY) the queries that keep the snapshot lock waiting.
    #[arg(long)]
    pub kill_long_queries: bool,
    /// Also dump accounts (SHOW CREATE USER, with password hashes) and their grants; loaded with the data.
    #[arg(long)]
    pub users: bool,
    /// JSON: progress and the outcome as JSON lines on stdout.
    #[command(flatten)]
    pub out: crate::output::FormatArgs,
}

#[derive(clap::Args)]
#[command(
    after_long_help = "Loads a directory written by `pileup dump` (or by mydumper 0.10.1): databases and tables first, then the data \
over --threads connections (largest table first, its chunks on every connection), each chunk in one transaction \
by MariaDB's bulk execution of a prepared INSERT (LOAD DATA LOCAL INFILE on MySQL, or with --load-data), in \
sessions with foreign-key and unique checks off, each chunk's rows and checksum checked against the manifest; then views, routines, triggers and events. Nothing global is changed on the server.\n\n\
Examples:\n  pileup load /backup/shop\n  pileup load /backup/shop --rename shop:shop_copy --existing drop"
)]
pub struct LoadArgs {
    /// The dump directory.
    pub dir: PathBuf,
    /// Connections loading at once (one more creates tables ahead of them and gives back their statistics).
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// A table that exists already: refuse (stop before loading anything), drop it, or skip it.
    #[arg(long, value_enum, default_value_t = ExistingArg::Refuse)]
    pub existing: ExistingArg,
    /// Load database FROM as TO (repeatable), FROM:TO.
    #[arg(long, value_name = "FROM:TO", value_parser = parse_rename)]
    pub rename: Vec<(String, String)>,
    /// Do not write the loaded data to the binary log (SET SESSION sql_log_bin = 0).
    #[arg(long)]
    pub no_binlog: bool,
    /// Finish an interrupted load of this dump: chunks found whole in their tables are kept, the rest loaded.
    #[arg(long)]
    pub resume: bool,
    /// After loading, read every chunk back and compare its rows with the dump's counts and hashes.
    #[arg(long)]
    pub verify: bool,
    /// Send rows with LOAD DATA LOCAL INFILE (the server's local_infile on), as on MySQL, rather than by MariaDB's
    /// bulk execution of a prepared INSERT: for a proxy between pileup and the server that does not pass bulk
    /// execution on (rows would go one execution each).
    #[arg(long)]
    pub load_data: bool,
    /// When InnoDB tables get their secondary indexes: after-data (created with the primary key only, indexes
    /// built in one ALTER TABLE once the table's data is in) or with-data (created as dumped).
    #[arg(long, value_enum, default_value_t = IndexesArg::AfterData)]
    pub indexes: IndexesArg,
    /// While loading, sample the server's threads at 10 Hz without stopping any (passive mode) and report where
    /// their time went: on a CPU, waiting on the disk or on a lock, by function. The stacks are written to FILE as
    /// folded stacks (for flame graphs). The server must run on this machine.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// JSON: progress and the outcome as JSON lines on stdout.
    #[command(flatten)]
    pub out: crate::output::FormatArgs,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IndexesArg {
    AfterData,
    WithData,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum FormatArg {
    Pileup,
    Mydumper,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum CompressArg {
    Zstd,
    Gzip,
    None,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ExistingArg {
    Refuse,
    Drop,
    Skip,
}

fn parse_rename(s: &str) -> Result<(String, String), String> {
    match s.split_once(':') {
        Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a.into(), b.into())),
        _ => Err(format!("'{s}': expected FROM:TO (two database names)")),
    }
}

fn regexes(v: &[String], flag: &str) -> Result<Vec<regex::Regex>> {
    v.iter()
        .map(|r| {
            regex::Regex::new(r).map_err(|e| {
                // The regex crate's message draws the pattern over
                // several lines; its last line says what is wrong.
                let text = e.to_string();
                let why = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
                let why = why.strip_prefix("error: ").unwrap_or(why);
                super::Usage(format!("{flag} '{r}' is not a valid regular expression: {why}")).into()
            })
        })
        .collect()
}

/// The progress bar of a dump or load: bytes, rate, ETA and rows.
const BAR: &str = "{spinner} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta} {msg}";

pub fn run_dump(a: DumpArgs, conn: &ConnOptions) -> Result<()> {
    check_dump_args(&a)?;
    let mut spec = conn.resolve()?;
    // A chunk's copy, an index build after a large table's data: statements
    // run for minutes; each is still bounded.
    spec.query_timeout = Some(LONG_STATEMENTS);
    let o = dump_options(&a)?;
    let mut sink = Sink::new(a.out.json(), Some(BAR));
    let m = dump(&spec, &o, &mut |e| sink.event(&e))?;
    sink.result(&Dumped { dir: &a.output, manifest: &m })
}

/// The checks of `pileup dump`'s flags that clap does not make.
fn check_dump_args(a: &DumpArgs) -> Result<()> {
    super::at_least_1("--threads", a.threads as u64)?;
    super::at_least_1("--chunk-rows", a.chunk_rows)?;
    let levels = zstd::compression_level_range();
    if !levels.contains(&a.level) {
        super::usage!("--level must be one of zstd's levels, from {} to {}", levels.start(), levels.end());
    }
    if matches!(a.layout, FormatArg::Mydumper) && matches!(a.compress, Some(CompressArg::Zstd)) {
        super::usage!(
            "myloader 0.10.1 reads plain or gzip files only: with --layout mydumper use --compress gzip or none"
        );
    }
    if matches!(a.layout, FormatArg::Mydumper) && a.users {
        super::usage!("mydumper 0.10.1's layout has no place for accounts: --users needs --layout pileup");
    }
    regexes(&a.include, "--include")?;
    regexes(&a.exclude, "--exclude")?;
    Ok(())
}

/// The dump's options from the command line.
fn dump_options(a: &DumpArgs) -> Result<DumpOptions> {
    Ok(DumpOptions {
        dir: a.output.clone(),
        threads: a.threads,
        filter: pileup_dump::schema::Filter {
            databases: a.databases.clone(),
            include: regexes(&a.include, "--include")?,
            exclude: regexes(&a.exclude, "--exclude")?,
        },
        where_: a.where_.clone(),
        chunk_rows: a.chunk_rows,
        compress: match a.compress.unwrap_or(match a.layout {
            FormatArg::Pileup => CompressArg::Zstd,
            FormatArg::Mydumper => CompressArg::Gzip,
        }) {
            CompressArg::Zstd => pileup_dump::files::Compress::Zstd(a.level),
            CompressArg::Gzip => pileup_dump::files::Compress::Gzip,
            CompressArg::None => pileup_dump::files::Compress::None,
        },
        format: match a.layout {
            FormatArg::Pileup => pileup_dump::dump::Format::Pileup,
            FormatArg::Mydumper => pileup_dump::dump::Format::Mydumper,
        },
        lock: pileup_dump::snapshot::LockOptions { wait: a.lock_wait, kill: a.kill_long_queries, unlocked: false },
        users: a.users,
        unlogged: false,
        watchdog: Some(WATCHDOG),
    })
}

pub fn run_load(a: LoadArgs, conn: &ConnOptions) -> Result<()> {
    super::at_least_1("--threads", a.threads as u64)?;
    let json = a.out.json();
    let mut spec = conn.resolve()?;
    // A chunk's copy, an index build after a large table's data: statements
    // run for minutes; each is still bounded.
    spec.query_timeout = Some(LONG_STATEMENTS);
    let o = LoadOptions {
        dir: a.dir.clone(),
        threads: a.threads,
        existing: match a.existing {
            ExistingArg::Refuse => Existing::Refuse,
            ExistingArg::Drop => Existing::Drop,
            ExistingArg::Skip => Existing::Skip,
        },
        rename: a.rename.clone(),
        no_binlog: a.no_binlog,
        resume: a.resume,
        verify: a.verify,
        load_data: a.load_data,
        indexes_after_data: a.indexes == IndexesArg::AfterData,
        watchdog: Some(WATCHDOG),
    };
    let profiler = a.profile.as_ref().map(|_| profile::Profiler::start(&spec)).transpose()?;
    let mut sink = Sink::new(json, Some(BAR));
    let t0 = std::time::Instant::now();
    let (mut rows, mut kept) = (0u64, 0u64);
    let loaded = load(&spec, &o, &mut |e| {
        if let pileup_dump::load::Event::Chunk { rows: r, already, .. } = &e {
            match already {
                true => kept += 1,
                false => rows += r,
            }
        }
        sink.event(&e)
    });
    sink.finish();
    // The profile is written whether the load worked or not: a failed
    // load's profile tells as much. A failed load's error is the one the
    // exit reports.
    if let (Some(p), Some(path)) = (profiler, &a.profile) {
        match (p.finish(path, &mut sink), &loaded) {
            (Err(e), Ok(())) => return Err(e),
            (Err(e), Err(_)) => {
                sink.event(&pileup_dump::load::Event::Note(format!("the load profile was not written: {e:#}")))
            }
            (Ok(()), _) => {}
        }
    }
    loaded?;
    let seconds = t0.elapsed().as_secs_f64();
    sink.result(&Loaded { dir: &a.dir, rows, chunks_already_loaded: kept, seconds })
}
