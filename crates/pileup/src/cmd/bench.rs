//! `pileup bench`: wiring for pileup_bench (the lock profile at the
//! knee comes from pileup_locks).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use pileup_bench::{experiments, ExperimentReport, LockProfiler, LockSummary, Name};
use pileup_conn::ConnOptions;

use crate::output::Format;

/// The shortest window measured: the server's CPU is read from /proc in
/// 10 ms ticks, so a window of 1 s counts it to 1% of a core.
const MIN_WINDOW: Duration = Duration::from_secs(1);

#[derive(clap::Args)]
#[command(after_long_help = "Runs small, sharp experiments and reports each as a curve of throughput against \
client threads: the median of several rounds per point with its spread, the server's and the load generator's \
CPU beside it (so a saturated client is never taken for a server limit), the durability settings, the server \
versions and the machine. At the knee of each curve (and at the most threads) pileup profiles the server while \
the load runs: its stacks without stopping a thread, and its lock waits (eBPF, as pileup locks); the report says \
where the time goes and what it cannot name.\n\n\
Experiments:\n  \
hot-row       one row UPDATEd by every client, deadlock detection on and off\n  \
accept        connect and disconnect over TCP as fast as possible; MariaDB beside PostgreSQL (trust, SCRAM)\n  \
table-open    thousands of tables read through a table cache of 10, without statistics (use_stat_tables=NEVER), and all cached\n  \
point-select  primary-key lookups, autocommit against 10 per transaction; PostgreSQL plain and prepared\n  \
range         100-row ranges returned or summed, innodb_thread_concurrency 0 and 8; PostgreSQL\n  \
durability    one-row commits at each durability level, MariaDB beside PostgreSQL at the same one\n  \
all           every experiment above in turn\n  \
recovery      crash recovery: a server killed with SIGKILL under a write load, at each --redo-sizes and --dirty \
page count with --redo-fill of the log written since its checkpoint, timed until it answers again, beside the same crash with the pages flushed first; the recovering \
server's stacks are sampled without stopping it, and its log's recovery figures read as they are written. It \
starts a sandbox of its own for each redo-log size and kills only those\n\n\
The experiments create a schema (pileup_bench), write and churn connections, and set global variables for a \
curve (put back afterwards). They run only on a pileup sandbox: --sandbox starts one (and a throwaway PostgreSQL \
cluster for the comparisons), or point pileup at a sandbox with -S/-P; any other server is refused unless \
--i-know is given. --pg CONNINFO (with --i-know) compares with a PostgreSQL server of yours instead of a \
throwaway cluster.\n\n\
compare A.json B.json prints the second result against the first, point by point, as ratios of medians, marked \
where the spreads overlap.\n\nExamples:\n  \
pileup bench hot-row --sandbox\n  \
pileup bench accept --sandbox --threads 1,8,32,128 -o accept.json -o accept.svg\n  \
pileup bench all --sandbox --duration 5s --rounds 3 -o results/\n  \
pileup bench compare before.json after.json")]
pub struct BenchArgs {
    /// The experiment (hot-row, accept, table-open, point-select, range,
    /// durability, all, recovery), or compare.
    #[arg(value_name = "EXPERIMENT")]
    pub what: String,
    /// For compare: the two JSON results.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Client threads of the curve's points, comma-separated (up to 1000).
    #[arg(long, default_value = "1,10,50,100,200", value_delimiter = ',')]
    pub threads: Vec<u32>,
    /// Each round's counted window.
    #[arg(long, default_value = "10s", value_parser = super::parse_duration)]
    pub duration: Duration,
    /// Connected and running before each window, not counted.
    #[arg(long, default_value = "2s", value_parser = super::parse_duration)]
    pub warmup: Duration,
    /// Rounds per point (the point is their median).
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Start a MariaDB sandbox (and a PostgreSQL cluster for the comparisons)
    /// for the run, and remove them after.
    #[arg(long)]
    pub sandbox: bool,
    /// With --sandbox: the MariaDB sandbox writes a binary log (durability
    /// then flushes it too, sync_binlog=1, beside the redo log).
    #[arg(long, requires = "sandbox")]
    pub binlog: bool,
    /// Run on a server that is not a pileup sandbox (it is written to and
    /// its global variables are changed for a while).
    #[arg(long)]
    pub i_know: bool,
    /// Compare with this PostgreSQL server rather than a throwaway cluster:
    /// libpq key=value pairs or a postgres:// URL, without a password
    /// (PGPASSWORD is read; what it leaves out comes from PGHOST, PGPORT,
    /// PGUSER and PGDATABASE, else the login name and the local socket).
    /// It is written to (schema pileup_bench, dropped after a run that
    /// finishes), so it takes --i-know.
    #[arg(long, value_name = "CONNINFO", conflicts_with = "sandbox")]
    pub pg: Option<String>,
    /// Do not profile the server at the knee.
    #[arg(long)]
    pub no_profile: bool,
    /// Tables of the table-open experiment.
    #[arg(long, default_value_t = 2000)]
    pub tables: u32,
    /// Rows of the point-select, range and durability table (default
    /// 100000), and of recovery's (default: enough for its largest --dirty).
    #[arg(long)]
    pub rows: Option<u32>,
    /// recovery: the redo-log sizes (innodb_log_file_size), a sandbox each.
    #[arg(long, value_delimiter = ',', default_value = "64M,256M", value_parser = super::parse_bytes)]
    pub redo_sizes: Vec<u64>,
    /// recovery: the dirty pages the write load reaches before each kill.
    #[arg(long, value_delimiter = ',', default_value = "1000,8000")]
    pub dirty: Vec<u64>,
    /// recovery: killed under load, the load runs until the redo since the
    /// last checkpoint is this share of the redo log (percent, 1-90).
    #[arg(long, default_value_t = 50, value_name = "PCT")]
    pub redo_fill: u32,
    /// recovery: how long the write load may run to reach a --dirty count
    /// (a small redo log's checkpoints may keep it below).
    #[arg(long, default_value = "120s", value_parser = super::parse_duration)]
    pub fill_within: Duration,
    /// The server's process id on this host (for its CPU and the profile),
    /// "auto" for the one serving the connection, or "none".
    #[arg(long, default_value = "auto", value_name = "PID|auto|none")]
    pub pid: String,
    /// The format on stdout (svg: the plot of one experiment).
    #[command(flatten)]
    pub out: crate::output::FormatArgs,
    /// Write to this file (0600) in the format its extension names: .json,
    /// .svg (the plot), .txt. A directory (ending in /) gets every format
    /// of every experiment, named after it. Repeatable.
    #[arg(short = 'o', long, value_name = "FILE|DIR/")]
    pub output: Vec<PathBuf>,
}

/// The lock profile at the knee, from pileup's locks tool; the waiters'
/// statements read over this connection.
struct Locks(pileup_conn::ConnSpec);

impl LockProfiler for Locks {
    fn profile(&mut self, pid: i32, duration: Duration) -> std::result::Result<LockSummary, String> {
        let opts = pileup_locks::Options {
            pid,
            duration,
            stack_budget: 200,
            any_process: false,
            dwarf: false,
            debug_dirs: pileup_engine::default_debug_dirs(),
            debuginfod: Some(pileup_engine::debug_files::DebuginfodOptions::cache_only()),
            top: 8,
            sql_refresh: Duration::from_secs(1),
            threads: None,
            probe_cost: false,
        };
        let stop = std::sync::atomic::AtomicBool::new(false);
        let sql = self.0.connect().ok().and_then(|c| pileup_annotate::SqlSource::new(c).ok());
        let r = pileup_locks::run(&opts, sql, &stop, |_| {}).map_err(|e| e.to_string())?;
        Ok(LockSummary {
            waits: r.counters.waits,
            locks: r
                .locks
                .iter()
                .take(8)
                .map(|l| pileup_bench::profile::LockShare {
                    name: l.name.clone(),
                    kind: l.kind.to_string(),
                    waits: l.waits,
                    wait_ms: l.total_ms,
                    share: l.share_pct / 100.0,
                    waited_in: l.stacks.first().map(|s| waited_in(&s.frames)).unwrap_or_default(),
                    statements: l.statements.iter().take(3).map(|s| s.fingerprint.clone()).collect(),
                })
                .collect(),
            notes: r.notes,
        })
    }
}

/// The innermost frames of a waiting stack that say where it waited: past
/// the C library's and the futex wait's own frames.
fn waited_in(frames: &[String]) -> Vec<String> {
    let plumbing = |f: &str| {
        f.starts_with("__")
            || f.contains("futex")
            || f.starts_with("pthread_")
            || f.starts_with("lll_")
            || f == "syscall"
    };
    frames.iter().filter(|f| !plumbing(f)).take(3).cloned().collect()
}

pub fn run(a: BenchArgs, conn: &ConnOptions) -> Result<()> {
    if a.what == "compare" {
        return compare(&a);
    }
    if a.what == "recovery" {
        return recovery(&a);
    }
    let names = check_bench_args(&a)?;
    let outputs = outputs(&a.output, names.len())?;
    let format = a.out.format();
    if format == Format::Svg && names.len() > 1 {
        super::usage!("--format svg draws one experiment's plot; give one experiment, or -o DIR/ for every plot");
    }
    let o = bench_options(&a);
    let servers = Servers::open(&a, conn, names.iter().any(|n| n.uses_postgres()))?;
    let mut locks = Locks(servers.maria.spec.clone());
    let mut reports = vec![];
    let mut failed = None;
    for name in names {
        // The result is a document: the sink only moves the bar.
        let mut sink = crate::output::Sink::new(false, Some("{spinner} {msg}"));
        let r = experiments::run(
            name,
            &servers.maria,
            servers.pg.as_ref(),
            &o,
            Some(&mut locks),
            &mut |e: &pileup_bench::Event| {
                sink.event(e);
                // Partial results are kept as they come: a run that stops
                // still leaves every point measured.
                if let pileup_bench::Event::Point { report } = e {
                    let _ = write_outputs(*report, &report.experiment, &outputs, false);
                }
            },
        );
        sink.finish();
        let r = r.with_context(|| format!("pileup bench {}", name.as_str()))?;
        write_outputs(&r, &r.experiment, &outputs, true)?;
        if let Some(why) = &r.stopped {
            failed = Some(format!(
                "pileup bench {} stopped: {why}; the points measured before are in the results",
                name.as_str()
            ));
        }
        reports.push(r);
        if failed.is_some() {
            break;
        }
    }
    write_reports(&reports, format)?;
    drop(servers);
    match failed {
        Some(why) => Err(anyhow::anyhow!(why)),
        None => Ok(()),
    }
}

/// The experiments asked for, once the flags clap does not check are.
fn check_bench_args(a: &BenchArgs) -> Result<Vec<Name>> {
    if !a.files.is_empty() {
        super::usage!("unexpected argument {}: only compare takes files", a.files[0].display());
    }
    let names: Vec<Name> = match a.what.as_str() {
        "all" => Name::ALL.to_vec(),
        w => match Name::parse(w) {
            Some(n) => vec![n],
            None => super::usage!(
                "no experiment \"{w}\": choose hot-row, accept, table-open, point-select, range, durability, all, recovery or compare"
            ),
        },
    };
    if a.threads.is_empty() || a.threads.iter().any(|&t| t == 0 || t > 1000) {
        super::usage!("--threads takes counts from 1 to 1000, comma-separated");
    }
    super::at_least_1("--rounds", a.rounds as u64)?;
    if a.duration < MIN_WINDOW {
        super::usage!(
            "--duration must be at least 1s: the server's CPU is counted in 10 ms ticks, 1% of a core over 1 s; a shorter window measures noise"
        );
    }
    if let Some(info) = &a.pg {
        pileup_bench::target::Pg::check(info, a.i_know).map_err(|e| super::Usage(e.to_string()))?;
    }
    Ok(names)
}

/// The experiments' options from the command line (Ctrl-C from here on
/// ends the window running).
fn bench_options(a: &BenchArgs) -> pileup_bench::Options {
    pileup_bench::Options {
        threads: a.threads.clone(),
        duration: a.duration,
        warmup: a.warmup,
        rounds: a.rounds,
        profile: !a.no_profile,
        tables: a.tables.max(1),
        rows: a.rows.unwrap_or(100_000).max(200),
        // Ctrl-C ends the window running; the settings changed are put
        // back and the points measured are reported.
        stop: Some(super::stop_on_signals()),
    }
}

/// What an experiment says as it runs: its step on the progress bar, and
/// The reports on standard output: one experiment's as itself, several
/// in one result.
fn write_reports(reports: &[ExperimentReport], format: Format) -> Result<()> {
    match reports {
        [one] => crate::output::emit(one, &[(None, format)], &Default::default()),
        many => crate::output::emit(&pileup_bench::output::Experiments(many), &[(None, format)], &Default::default()),
    }
}

/// The servers of a run: given, or sandboxes started for it.
struct Servers {
    maria: pileup_bench::target::Maria,
    pg: Option<pileup_bench::target::Pg>,
    // Dropped last: the sandboxes stop when the run is done.
    _sandbox: Option<pileup_sandbox::Sandbox>,
    _pg_sandbox: Option<pileup_sandbox::pg::PgSandbox>,
}

impl Servers {
    fn open(a: &BenchArgs, conn: &ConnOptions, want_pg: bool) -> Result<Servers> {
        if !a.sandbox {
            let spec = conn.resolve()?;
            let (pid, _) = super::resolve_server_pid(&a.pid, &spec)?;
            let maria = pileup_bench::target::Maria::open(spec, pid, a.i_know)?;
            let pg = match &a.pg {
                Some(info) if want_pg => Some(pileup_bench::target::Pg::given(info, a.i_know)?),
                _ => None,
            };
            return Ok(Servers { maria, pg, _sandbox: None, _pg_sandbox: None });
        }
        let base = pileup_sandbox::base_dir();
        let name = format!("bench-{}", std::process::id());
        let sb = pileup_sandbox::Sandbox::start(pileup_sandbox::Options {
            name: Some(name.clone()),
            base_dir: Some(base.clone()),
            binlog: a.binlog,
            ..Default::default()
        })
        .context("starting the MariaDB sandbox")?;
        let maria = pileup_bench::target::Maria::open(sb.conn_spec(), Some(sb.pid() as i32), false)?;
        let (pg, pg_sb) = if want_pg {
            // A password known only to this run, for the SCRAM curve.
            let password =
                format!("pileup-{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos());
            let mut o = pileup_sandbox::pg::PgOptions::new(base.join(format!("{name}-pg")));
            o.scram_password = Some(password.clone());
            let p = pileup_sandbox::pg::PgSandbox::start(o).context("starting the PostgreSQL cluster")?;
            // The workloads trusted over the socket (as MariaDB's over its
            // own); connections over TCP trusted, and with SCRAM.
            let pg = pileup_bench::target::Pg::open(
                p.socket_config(),
                Some(p.trusted_tcp_config()),
                Some(p.config(Some(&password))),
                Some(p.pid as i32),
            )?;
            (Some(pg), Some(p))
        } else {
            (None, None)
        };
        Ok(Servers { maria, pg, _sandbox: Some(sb), _pg_sandbox: pg_sb })
    }
}

/// Where results go: files by extension, or a directory for every format.
enum Out {
    File(PathBuf, Format),
    Dir(PathBuf),
}

fn outputs(paths: &[PathBuf], experiments: usize) -> Result<Vec<Out>> {
    let mut out = vec![];
    for p in paths {
        let s = p.to_string_lossy();
        if s.ends_with('/') || p.is_dir() {
            pileup_files::create_private_dir(p).with_context(|| format!("-o {}", p.display()))?;
            out.push(Out::Dir(p.clone()));
            continue;
        }
        if experiments > 1 {
            super::usage!(
                "-o {}: several experiments write several files; give a directory (ending in /)",
                p.display()
            );
        }
        let format = match Format::from_path(p) {
            Ok(f) if p.extension().is_some() && crate::output::formats_of("bench").contains(&f) => f,
            _ => super::usage!(
                "-o {}: the extension names the format: .json, .svg or .txt (or give a directory ending in /)",
                p.display()
            ),
        };
        out.push(Out::File(p.clone(), format));
    }
    Ok(out)
}

/// Write a report to every output: the JSON as each point comes, the text
/// and the plot once the run is done.
fn write_outputs<R: pileup_output::Report>(r: &R, name: &str, outs: &[Out], done: bool) -> Result<()> {
    let write = |path: &Path, format: Format| -> Result<()> {
        if format != Format::Json && !done {
            return Ok(());
        }
        crate::output::write_output(Some(path), |w| Ok(pileup_output::render(r, format, &Default::default(), w)?))
            .with_context(|| format!("writing {}", path.display()))
    };
    for o in outs {
        match o {
            Out::File(p, format) => write(p, *format)?,
            Out::Dir(d) => {
                for format in [Format::Json, Format::Svg, Format::Text] {
                    write(&d.join(format!("{name}.{}", format.extension())), format)?;
                }
            }
        }
    }
    Ok(())
}

fn compare(a: &BenchArgs) -> Result<()> {
    let [x, y] = a.files.as_slice() else {
        super::usage!("compare takes two JSON results: pileup bench compare A.json B.json");
    };
    if a.out.format() == Format::Svg {
        super::usage!("compare writes text or json; the plots are each result's own (pileup bench NAME -o DIR/)");
    }
    let read = |p: &Path| -> Result<ExperimentReport> {
        let b = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
        serde_json::from_slice(&b).map_err(|e| anyhow::anyhow!("{} is not a pileup bench result: {e}", p.display()))
    };
    let c = pileup_bench::compare::compare(&read(x)?, &read(y)?).map_err(|e| anyhow::anyhow!(e))?;
    let format = if a.out.json() { Format::Json } else { Format::Text };
    crate::output::emit(&c, &[(None, format)], &Default::default())
}

/// `bench recovery`: its own sandboxes, one per redo-log size; the report
/// written as each point is measured.
fn recovery(a: &BenchArgs) -> Result<()> {
    if !a.files.is_empty() {
        super::usage!("unexpected argument {}: only compare takes files", a.files[0].display());
    }
    if a.i_know || a.pg.is_some() {
        super::usage!("recovery kills its server: it runs only on sandboxes it starts (no --i-know, no --pg)");
    }
    let o = pileup_bench::recovery::RecoveryOptions {
        redo_sizes: a.redo_sizes.clone(),
        dirty: a.dirty.clone(),
        rounds: a.rounds,
        rows: a.rows.map(u64::from),
        redo_fill_pct: a.redo_fill,
        fill_within: a.fill_within,
        profile: !a.no_profile,
        stop: Some(super::stop_on_signals()),
        ..Default::default()
    };
    o.check().map_err(super::Usage)?;
    let outputs = outputs(&a.output, 1)?;
    let format = a.out.format();
    let mut sink = crate::output::Sink::new(false, Some("{spinner} {msg}"));
    let r = pileup_bench::recovery::run(&o, &mut |e: &pileup_bench::recovery::Event| {
        sink.event(e);
        if let pileup_bench::recovery::Event::Point { report } = e {
            let _ = write_outputs(*report, "recovery", &outputs, false);
        }
    });
    sink.finish();
    let r = r.context("pileup bench recovery")?;
    write_outputs(&r, "recovery", &outputs, true)?;
    crate::output::emit(&r, &[(None, format)], &Default::default())?;
    match &r.stopped {
        Some(why) => {
            Err(anyhow::anyhow!("pileup bench recovery stopped: {why}; the points measured before are in the results"))
        }
        None => Ok(()),
    }
}
