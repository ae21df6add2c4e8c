//! `pileup digest`: which statements cost the server and how well they read.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{bail, Result};
use pileup_digest::output::DigestReport;
use pileup_digest::report::View;
use pileup_digest::{digest, Input, Options, Rank};

use crate::output::emit;

/// Group a slow log's statements into classes and rank them by cost or by
/// read efficiency.
///
/// Every statement is reduced to its fingerprint (literals, IN lists and
/// VALUES rows folded, comments and case dropped), and each class gets its
/// count; query time (total, mean, p95, p99, max); lock time; rows sent,
/// examined and affected; bytes; pages accessed and read, and the time
/// spent outside the storage engine (MariaDB's Query_time − Engine_time:
/// parsing and optimization, such as index dives on a long IN list) where
/// the server logs them; temporary tables, sorts and full scans; first and
/// last seen; hosts, users and databases; and its slowest statement with
/// the logged EXPLAIN.
///
/// Rankings (--rank):
///   time       total query time (default)
///   count      executions
///   examined   rows examined per row returned or changed: missing indexes
///   pages      buffer-pool pages accessed per row returned or changed
///   optimizer  share of the time spent outside the engine: plans that cost
///              more to choose than to run (classes whose mean time outside
///              the engine is under 0.5 ms are not ranked)
///   spill      sorts and temporary tables that went to disk
///   lock       time waiting for table and row locks
///
/// Inputs: slow-log files written by MariaDB 10.x/11.x (any
/// log_slow_verbosity; log_slow_verbosity=full gives every column), MySQL
/// 5.7/8.0 (log_slow_extra too) or Percona Server; plain, gzip or zstd
/// (recognised by their first bytes, whatever their name); several files
/// (a rotated set, in any order); "-" for standard input; with --follow, one
/// file read as it grows, across rotation, until Ctrl-C; with
/// --slow-log-table, the mysql.slow_log table of the server pileup connects
/// to (log_output=TABLE: times, rows, user, host and database only); with
/// --server, performance_schema's events_statements_summary_by_digest read
/// twice, --duration apart (sums over the window: totals and means, no
/// percentiles; performance_schema must be on), or with --follow minute by
/// minute until Ctrl-C. Entries cut short
/// or with garbled values are named by file and line, counted and skipped;
/// every statement that can be read counts. A file's last entry with no
/// statement yet, or ending inside a line (a live log the server is
/// writing), is a note, not damage.
///
/// Memory grows with the number of classes, not of statements: past
/// --max-classes, statements of new fingerprints are counted together as
/// one "other" class, and the report says so.
///
/// The advisor (--advise) runs, on the server pileup connects to (a replica
/// or a copy), each top class's slowest statement and variants of it: each
/// index hint or STRAIGHT_JOIN it carries removed, FORCE INDEX on the index
/// chosen and on each other candidate, IGNORE INDEX on each other
/// candidate, a session eq_range_index_dive_limit, optimizer_switch flags.
/// A statement without hints is tried only where optimization is at least
/// half its time (ANALYZE FORMAT=JSON) or it reads at least 100 rows per
/// row it returns. A variant whose plan (EXPLAIN FORMAT=JSON: access type,
/// index, key parts, join order, rowid filter) is the statement's is never
/// timed. The others are timed against the statement in interleaved
/// rounds until each is settled or --advise-budget is spent; the speed-up
/// is the median of the per-round ratios with its 95% interval. A variant
/// is advised only when it returns the same rows (checksum), the interval's
/// lower bound reaches --advise-min-gain and it saves at least
/// --advise-min-ms a run; otherwise the report says "within noise" with
/// the figures. It runs only SELECTs that neither lock nor write, in
/// read-only transactions, each bounded by the statement time limit, and
/// changes nothing but its own session.
///
/// The index advisor (--advise-indexes) takes the top classes of the time
/// and examined rankings and proposes indexes from each statement's
/// structure (equality columns, then a range, or the order; join columns;
/// covering when it adds few), leaving out those that exist. MariaDB cannot
/// plan with a hypothetical index, so they are built for real on a copy:
/// the base tables the classes read, dumped from the server named (no
/// lock, each thread in its own snapshot, out of the slow log; at most
/// 4 GiB scanned; --sample PCT of the rows sent) and loaded into a sandbox
/// server pileup starts in a private directory and removes, on Ctrl-C too
/// (mariadbd must be installed here). A candidate is advised only
/// when the copy plans the statement as the server does, the optimizer
/// chooses the index, and the statement with it is settled faster than
/// with it ignored (the same rounds, intervals and floors as --advise).
/// The report gives each candidate's plan, time and rows examined before
/// and after, size, build time scaled to the server's table, the other top
/// classes whose plan it changes, the top write classes on the table
/// replayed and rolled back before and after, and the ALTER TABLE to run;
/// then the indexes no explained statement of the log uses and those
/// another index makes redundant.
///
/// A fleet's digests: --ship s3://BUCKET/PREFIX stores each minute's
/// classes, one Parquet file per host per --ship-window under
/// dt=DAY/hour=HH/host=NAME/, queued on local disk while the store is down
/// (with --follow, each window once it is complete; else all at the end).
/// --from s3://BUCKET/PREFIX reads what the fleet shipped for --since to
/// --until (only those hours' files, and --hosts' hosts) and writes the
/// same report with each host's share and each class's hosts; --compare-to
/// ranks what changed since an earlier window, each change with its 95%
/// interval; --compact folds each hour's windows of every host into one
/// file.
///
/// Exit status: 0 when every entry was read; 3 when the report is written
/// but some entries or values were skipped (the report names them); 1 on
/// an error (nothing written).
///
/// Examples:
///   pileup digest /var/log/mysql/mariadb-slow.log
///   pileup digest slow.log slow.log.1 slow.log.2.gz --rank examined
///   zcat slow.log.*.gz | pileup digest - --format json -o digest.json
///   pileup digest slow.log -o report.html
///   pileup digest slow.log --rank optimizer --limit 5
///   pileup digest --follow /var/lib/mysql/slow.log     # until Ctrl-C, then the report
///   pileup digest --slow-log-table -S /run/mysqld/mysqld.sock
///   pileup digest --server --duration 5m -S /run/mysqld/mysqld.sock
///   pileup digest --follow slow.log --ship s3://digests/prod --label env=prod
///   pileup digest --server --follow --ship s3://digests/prod -S /run/mysqld/mysqld.sock
///   pileup digest --from s3://digests/prod --since 1h --hosts 'orders-*'
///   pileup digest --from s3://digests/prod --since 1h --compare-to 25h
///   pileup digest slow.log --rank optimizer --advise -S /run/mysqld/replica.sock
///   pileup digest slow.log --advise-indexes --sample 20 -S /run/mysqld/replica.sock
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct DigestArgs {
    /// Slow-log files, or "-" for standard input.
    #[arg(value_name = "FILE", required_unless_present_any = ["slow_log_table", "server", "from"])]
    pub files: Vec<PathBuf>,
    /// Keep reading FILE as it grows, across rotation and truncation (as tail -F does), until
    /// Ctrl-C or SIGTERM; then write the report.
    #[arg(long)]
    pub follow: bool,
    /// Read the mysql.slow_log table (log_output=TABLE) of the server pileup connects to.
    #[arg(long)]
    pub slow_log_table: bool,
    /// Read performance_schema's statement digests of the server pileup connects to, twice,
    /// --duration apart: what each statement did in between (sums only; Ctrl-C ends the window early).
    /// With --follow, minute by minute until Ctrl-C (what --ship stores).
    #[arg(long)]
    pub server: bool,
    /// The window --server reads (e.g. 30s, 5m).
    #[arg(long, default_value = "60s", value_parser = super::parse_duration)]
    pub duration: std::time::Duration,
    /// Order classes by: time, count, examined, pages, optimizer, spill, lock.
    #[arg(long, default_value = "time", value_parser = rank_values())]
    pub rank: Rank,
    /// Classes in the profile and in detail (the JSON has them all).
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
    /// Write the profile alone: each class's time, calls, mean and maximum time, rows examined
    /// per call and what --rank scores by, no class in detail. With --from only the stored
    /// columns these need are read (no percentiles, samples or databases); text or JSON.
    #[arg(long)]
    pub profile_only: bool,
    /// html: a self-contained report.html, the profile, and per class a
    /// histogram of its times and when it ran. Files hold query text.
    #[command(flatten)]
    pub out: crate::output::OutputArgs,
    /// Distinct classes kept apart; statements of further fingerprints go to one "other" class.
    #[arg(long, default_value_t = 10_000)]
    pub max_classes: usize,
    /// Threads parsing the log (default: one per CPU).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Run the top classes' samples on the server pileup connects to (a replica or a copy:
    /// -S/-h/-P/-u, option files) with ANALYZE FORMAT=JSON, and time variants of the plan.
    #[arg(long)]
    pub advise: bool,
    /// Classes from the top of the ranking whose samples --advise examines.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub advise_classes: usize,
    /// Rounds before a variant is settled (a 95% interval needs at least 6).
    #[arg(long, default_value_t = 6, value_name = "N", value_parser = clap::value_parser!(u32).range(6..=1000))]
    pub advise_runs: u32,
    /// Time spent timing one class's variants, at most (1s to 10m).
    #[arg(long, default_value = "20s", value_name = "DURATION", value_parser = parse_budget)]
    pub advise_budget: std::time::Duration,
    /// Speed-up a variant must be sure of, percent: the lower bound of its 95% interval.
    #[arg(long, default_value_t = 10, value_name = "PCT", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub advise_min_gain: u32,
    /// Milliseconds a variant must save per execution (medians).
    #[arg(long, default_value_t = 0.5, value_name = "MS", value_parser = parse_min_ms)]
    pub advise_min_ms: f64,
    /// Propose indexes for the top classes of the time and examined rankings, each built and
    /// timed on a copy of the tables in a sandbox of pileup's own (never on the server).
    #[arg(long)]
    pub advise_indexes: bool,
    /// The copy holds this share of each table's rows, percent (default: all of them); the
    /// server still scans every row.
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u32).range(1..=100), requires = "advise_indexes")]
    pub sample: Option<u32>,
    #[command(flatten)]
    pub ship: super::digest_ship::ShipArgs,
    #[command(flatten)]
    pub fleet: super::digest_fleet::FromArgs,
}

fn parse_budget(s: &str) -> Result<std::time::Duration, String> {
    let d = super::parse_duration(s)?;
    if d < std::time::Duration::from_secs(1) || d > std::time::Duration::from_secs(600) {
        return Err(format!("{s} is outside 1s to 10m"));
    }
    Ok(d)
}

fn parse_min_ms(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("'{s}' is not a number of milliseconds (0 or more)")),
    }
}

/// `--rank`'s names, as the possible values help, the manual and
/// completions list.
fn rank_values() -> impl clap::builder::TypedValueParser<Value = Rank> {
    use clap::builder::TypedValueParser;
    // Every listed name parses; the default is never reached.
    clap::builder::PossibleValuesParser::new(Rank::ALL.iter().map(|r| clap::builder::PossibleValue::new(r.0).help(r.2)))
        .map(|s| Rank::parse(&s).unwrap_or(Rank::ALL[0].1))
}

/// What the report shows, as the flags say.
fn view(a: &DigestArgs) -> View {
    View { rank: a.rank, limit: a.limit.max(1), profile_only: a.profile_only }
}

pub fn run(a: DigestArgs, conn: &pileup_conn::ConnOptions) -> Result<()> {
    let targets = a.out.targets("digest")?;
    if a.profile_only && targets.iter().any(|(_, f)| *f == crate::output::Format::Html) {
        super::usage!(
            "--profile-only writes text or JSON: the HTML page is the whole report (leave --profile-only out)"
        );
    }
    check_digest_args(&a)?;
    if a.fleet.from.is_some() {
        return super::digest_fleet::run(&a.fleet, a.jobs, view(&a), &targets);
    }
    let inputs = inputs(&a, conn)?;
    let mut shipping = super::digest_ship::Shipping::start(&a.ship)?;
    let mut shipping_failed = None;
    let ships = shipping.is_some();
    let mut o = Options { max_classes: a.max_classes, windows: a.ship.windows(), ..Options::default() };
    if let Some(j) = a.jobs {
        o.jobs = j;
    }
    // The result is a document: the sink only moves the bar, of bytes read
    // (of the inputs' size when it is known).
    let total: Option<u64> = inputs.iter().map(Input::size).sum();
    let mut bar = crate::output::Sink::new(
        false,
        Some(match total {
            Some(_) => "{spinner} reading [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
            None => "{spinner} reading {bytes} {bytes_per_sec}",
        }),
    );
    let mut sink = super::digest_ship::Sink { bar: &mut bar, ship: shipping.as_mut() };
    let d = digest(&inputs, &o, &mut sink);
    bar.finish();
    // What was handed to the shipper is in the store (or its queue) before
    // anything else can fail.
    let shipped = shipping.map(super::digest_ship::Shipping::finish);
    let d = match (d, shipped) {
        (Err(e), Some(Err(s))) => return Err(anyhow::Error::from(e).context(format!("{s:#}"))),
        (Err(e), _) => return Err(e.into()),
        (Ok(d), Some(Err(s))) => {
            shipping_failed = Some(s);
            d
        }
        (Ok(d), _) => d,
    };
    if d.events == 0 && d.problem_count == 0 {
        let names = d.inputs.join(", ");
        match d.bytes {
            0 => note!("note: {names}: empty, no statements to digest"),
            n => note!("note: {names}: no slow-log entries in {}", super::plural(n, "byte", "bytes")),
        }
    }
    if let Some(n) = d.minutes.as_ref().map(|m| m.untimed).filter(|n| *n > 0 && ships) {
        note!(
            "note: {} without a time of their own (no SET timestamp) are in the report, not in the shipped minutes",
            super::plural(n, "statement", "statements")
        );
    }
    let view = view(&a);
    let advice = if a.advise { Some(advise(&a, conn, &d)?) } else { None };
    let indexes = if a.advise_indexes { Some(advise_indexes(&a, conn, &d)?) } else { None };
    emit(
        &DigestReport {
            digest: &d,
            view,
            advice: advice.as_deref(),
            indexes: indexes.as_ref(),
            hosts: None,
            changes: None,
        },
        &targets,
        &Default::default(),
    )?;
    let problems = (d.problem_count, d.problems.first().cloned());
    if let Some(s) = shipping_failed {
        return Err(s);
    }
    // The classes' memory goes back with the process: freeing tens of
    // thousands of them one by one would only delay the exit.
    std::mem::forget(d);
    if let (n, Some(first)) = problems {
        let msg = format!(
            "{} in the input, the first at {}:{}: {} (the report lists them)",
            pileup_output::plural(n, "problem", "problems"),
            first.file,
            first.line,
            first.what
        );
        return Err(super::Damaged(msg).into());
    }
    Ok(())
}

/// The checks of `pileup digest`'s flags that clap does not make.
fn check_digest_args(a: &DigestArgs) -> Result<()> {
    super::at_least_1("--max-classes", a.max_classes as u64)?;
    a.ship.check()?;
    if a.fleet.from.is_some() {
        let other = [
            (!a.files.is_empty(), "FILE"),
            (a.follow, "--follow"),
            (a.server, "--server"),
            (a.slow_log_table, "--slow-log-table"),
            (a.ship.ship.is_some(), "--ship"),
            (a.advise || a.advise_indexes, "--advise"),
        ];
        if let Some((_, what)) = other.iter().find(|(given, _)| *given) {
            super::usage!(
                "--from reads a fleet's shipped digests; {what} reads a server's statements: give one or the other"
            );
        }
    }
    if a.ship.ship.is_some() && a.server && !a.follow {
        super::usage!("--ship stores statements by minute: with --server, add --follow (one window a minute)");
    }
    if a.server {
        super::more_than_0("--duration", a.duration)?;
    }
    if let Some(jobs) = a.jobs {
        super::at_least_1("--jobs", jobs as u64)?;
    }
    if a.follow && a.server && (!a.files.is_empty() || a.slow_log_table) {
        super::usage!("--server --follow reads performance_schema minute by minute until Ctrl-C: give no FILE and no --slow-log-table with it");
    }
    let minutes = a.follow && a.server;
    if a.follow && !minutes && (a.files.len() != 1 || a.files[0].as_os_str() == "-") {
        super::usage!(
            "--follow reads one slow-log file, or with --server performance_schema minute by minute (standard input is read to its end anyway)"
        );
    }
    Ok(())
}

/// What is read: the server's digests and slow-log table when asked for,
/// then the files named (standard input for `-`), each file checked.
fn inputs(a: &DigestArgs, conn: &pileup_conn::ConnOptions) -> Result<Vec<Input>> {
    let stop = a.follow.then(super::stop_on_signals);
    let mut inputs: Vec<Input> = a
        .files
        .iter()
        .map(|f| match (&stop, f.as_os_str() == "-") {
            (_, true) => Input::Stdin,
            (Some(s), false) => Input::Follow(f.clone(), s.clone()),
            (None, false) => Input::File(f.clone()),
        })
        .collect();
    if a.slow_log_table {
        inputs.insert(0, Input::Table(Box::new(conn.resolve()?)));
    }
    if a.server && a.follow {
        let stop = stop.clone().unwrap_or_else(super::stop_on_signals);
        inputs.insert(0, Input::DigestMinutes(Box::new(conn.resolve()?), stop));
        if std::io::stderr().is_terminal() {
            note!("reading statement digests minute by minute until Ctrl-C");
        }
    } else if a.server {
        let stop = stop.clone().unwrap_or_else(super::stop_on_signals);
        inputs.insert(0, Input::Digests(Box::new(conn.resolve()?), a.duration, stop));
        if std::io::stderr().is_terminal() {
            note!("reading statement digests for {:.0} s (Ctrl-C ends the window early)", a.duration.as_secs_f64());
        }
    }
    if inputs.iter().filter(|i| matches!(i, Input::Stdin)).count() > 1 {
        super::usage!("\"-\" (standard input) can be given once");
    }
    for i in &inputs {
        if let Input::File(p) | Input::Follow(p, _) = i {
            if let Err(e) = std::fs::metadata(p) {
                bail!("cannot read {}: {e}", p.display());
            }
        }
    }
    Ok(inputs)
}

/// The advisor's options from the flags.
fn advise_options(a: &DigestArgs, d: &pileup_digest::Digest) -> pileup_digest::advise::AdviseOptions {
    // The log's span, for a saving per hour of it.
    let first = d.classes.iter().filter_map(|c| c.first).min();
    let last = d.classes.iter().filter_map(|c| c.last).max();
    let log_hours = first.zip(last).map(|(f, l)| (l - f) as f64 / 3600.0).filter(|h| *h > 0.0);
    pileup_digest::advise::AdviseOptions {
        classes: a.advise_classes.max(1),
        min_rounds: a.advise_runs as usize,
        budget: a.advise_budget,
        min_gain: f64::from(a.advise_min_gain) / 100.0,
        min_ms: a.advise_min_ms,
        log_hours,
        ..Default::default()
    }
}

/// The advisor's line of progress on a terminal: what it does now, through
/// the sink, cleared when the sink is finished.
fn progress_line() -> crate::output::Sink {
    crate::output::Sink::new(false, Some("{spinner} advising: {msg}"))
}

/// `--advise-indexes`: candidates of the top classes of the time and
/// examined rankings, built and timed on a copy in a sandbox.
fn advise_indexes(
    a: &DigestArgs,
    conn: &pileup_conn::ConnOptions,
    d: &pileup_digest::Digest,
) -> Result<pileup_digest::advise::index::IndexAdvice> {
    use pileup_digest::rank::{order, score, Rank};
    let spec = conn.resolve()?;
    let o = advise_options(a, d);
    let mut top: Vec<&pileup_digest::class::Class> = vec![];
    for r in [Rank::Time, Rank::Examined] {
        let ranked = order(&d.classes, r).into_iter().filter(|c| score(c, r).is_some()).take(o.classes);
        for c in ranked {
            if !top.iter().any(|t| std::ptr::eq(*t, c)) {
                top.push(c);
            }
        }
    }
    // Ctrl-C or SIGTERM stops between candidates: the report is written
    // and the copy removed.
    let o = pileup_digest::advise::AdviseOptions { classes: top.len(), stop: Some(super::stop_on_signals()), ..o };
    let mut copier = super::advise_copy::SandboxCopy::new(spec.clone(), a.sample.map(|p| f64::from(p) / 100.0));
    let mut sink = progress_line();
    let mut line = |what: &str| sink.event(&pileup_output::Doing { what: what.to_string() });
    let r = pileup_digest::advise::index::advise_indexes(&spec, &top, &d.classes, &o, &mut copier, &mut line);
    sink.finish();
    Ok(r?)
}

/// `--advise`: the plans of the top classes tried on the server, and what
/// wins; a line of progress on a terminal.
fn advise(
    a: &DigestArgs,
    conn: &pileup_conn::ConnOptions,
    d: &pileup_digest::Digest,
) -> Result<Vec<pileup_digest::advise::Advice>> {
    let spec = conn.resolve()?;
    let top: Vec<&pileup_digest::class::Class> = pileup_digest::rank::order(&d.classes, a.rank)
        .into_iter()
        .filter(|c| pileup_digest::rank::score(c, a.rank).is_some())
        .collect();
    let o = advise_options(a, d);
    let mut sink = progress_line();
    let mut line = |what: &str| sink.event(&pileup_output::Doing { what: what.to_string() });
    let advice = pileup_digest::advise::advise(&spec, &top, &o, &mut line);
    sink.finish();
    Ok(advice?)
}
