//! `pileup prefetch`: keep a replica's applier fed.

use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use pileup_conn::ConnOptions;
use pileup_prefetch::news::{Said, Saying};
use pileup_prefetch::{run, Counters, Options, Warm};

use crate::output::Sink;

#[derive(clap::Args)]
#[command(
    after_long_help = "Runs beside a replica (connect to the replica, not the primary). It reads the relay log files from disk, \
so it must run on the replica's host with read access to its datadir.\n\nExample:\n  pileup prefetch -S /run/mysqld/mysqld.sock --threads 4 --stats-every 10"
)]
pub struct PrefetchArgs {
    /// Connections issuing lookups at once (parallel readers).
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// Stay at most this many events ahead of the SQL thread.
    #[arg(long, default_value_t = 50_000)]
    pub window_events: u64,
    /// Stay at most this many index keys ahead of the SQL thread (default: a
    /// quarter of the buffer pool's old sublist, so warmed pages survive until used).
    #[arg(long)]
    pub window_keys: Option<u64>,
    /// Stay at most this many seconds (of primary time) ahead of the SQL thread.
    #[arg(long, default_value_t = 30)]
    pub window_secs: u32,
    /// Work only while Seconds_Behind_Master is at least this.
    #[arg(long, default_value_t = 1)]
    pub min_lag: u64,
    /// Keys per lookup statement.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Time limit of each lookup, milliseconds.
    #[arg(long, default_value_t = 500)]
    pub query_timeout_ms: u64,
    /// Stop after this long (e.g. 10m); default: until interrupted.
    #[arg(long, value_parser = super::parse_duration)]
    pub duration: Option<Duration>,
    /// Print every counter every this many seconds (stderr; JSON lines on
    /// stdout with --json; default 10). Without it, a terminal gets a status
    /// line every 5 s instead: what the prefetcher does or why it is idle,
    /// how far ahead of the applier, how busy its readers are, how far
    /// behind the applier is and the trend.
    #[arg(long, value_name = "SECONDS")]
    pub stats_every: Option<u64>,
    /// JSON: the counters as JSON lines on stdout (one object every
    /// --stats-every seconds) instead of text on stderr.
    #[command(flatten)]
    pub out: crate::output::FormatArgs,
    /// Serve the counters for Prometheus at /metrics on [HOST:]PORT (a bare port is on
    /// loopback: 9105; another host's scraper needs 0.0.0.0:9105).
    #[arg(long, value_name = "[HOST:]PORT")]
    pub listen: Option<String>,
    /// Who may reach --listen: a web configuration file (exporter-toolkit format) with TLS and
    /// basic auth, re-read when it changes.
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config_file: Option<std::path::PathBuf>,
    /// Warm only the rows (primary-key leaves), not secondary index entries.
    #[arg(long)]
    pub primary_only: bool,
    /// How pages are warmed. `sql`: index-only SELECTs, any index. `pages`:
    /// for indexes whose columns are NOT NULL integers, pileup finds the
    /// leaf page number itself (reading the index's upper levels from its
    /// .ibd file) and has InnoDB read just that page through its buffer
    /// pool load, which latches no index and runs no statement; other
    /// indexes still use SELECTs. `pages` needs read access to the data
    /// files, write access to the server's buffer pool file
    /// (innodb_buffer_pool_filename, put back on exit) and SUPER; InnoDB
    /// logs two lines per load to the error log (a few hundred a second).
    /// With --defer-purge it caught up about twice as fast as the plain
    /// applier on a replica with a 128 MB pool and 2.4 GB of data.
    #[arg(long, value_enum, default_value_t = WarmArg::Sql)]
    pub warm: WarmArg,
    /// While the replica lags, hold InnoDB's purge off (an open read view: no
    /// locks) so the applier does not compete with it for pages, latches and
    /// the device; purge catches up afterwards. This moves purge's work
    /// rather than saving it: the replica catches up sooner, then spends
    /// about as long purging. For a replica catching up
    /// after a stop or a burst, not one that lags for good. The undo
    /// history grows meanwhile: see --max-history.
    #[arg(long)]
    pub defer_purge: bool,
    /// With --defer-purge: let purge run once the history list reaches this
    /// many transactions, and hold it again only below half of that.
    #[arg(long, default_value_t = 1_000_000, requires = "defer_purge")]
    pub max_history: u64,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum WarmArg {
    Sql,
    Pages,
}

pub fn run_prefetch(a: PrefetchArgs, conn: &ConnOptions) -> Result<()> {
    let a_json = a.out.json();
    check_prefetch_args(&a)?;
    let spec = conn.resolve()?;
    let o = prefetch_options(&a);
    let counters = Arc::new(Counters::default());
    if let Some(l) = super::listen_options(a.listen.as_deref(), a.web_config_file.as_deref(), false) {
        let c = counters.clone();
        let at = pileup_watch::expo::serve_fn(&l, move || c.exposition())?;
        note!("pileup prefetch: counters at {}://{}/metrics", if at.tls { "https" } else { "http" }, at.addr);
    }
    let stop = super::stop_on_signals();
    // Every counter for scripts and logs; a status line for a person.
    let status = !a_json && a.stats_every.is_none() && std::io::stderr().is_terminal();
    let every = if status { 5 } else { a.stats_every.unwrap_or(10).max(1) };
    let saying = Saying { status, every, min_lag: a.min_lag, readers: a.threads };
    let printer = {
        let (c, stop) = (counters.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut sink = Sink::new(a_json, None);
            saying.run(&c, &stop, &mut |s| sink.event(s))
        })
    };
    let say: pileup_prefetch::Say = Arc::new(move |m| Sink::new(a_json, None).event(&Said::Note(m)));
    let counters_final = counters.clone();
    let r = run(&spec, &o, counters, stop.clone(), say);
    stop.store(true, Ordering::Relaxed);
    let _ = printer.join();
    // The last counters, for a run that ran (a run that could not start
    // says only why); and a run that read nothing says why not.
    if r.is_ok() {
        let mut sink = Sink::new(a_json, None);
        saying.last(&counters_final, &mut |s| sink.event(s));
    }
    Ok(r?)
}

/// The checks of `pileup prefetch`'s flags that clap does not make.
fn check_prefetch_args(a: &PrefetchArgs) -> Result<()> {
    if a.threads == 0 || a.batch == 0 {
        super::usage!("--threads and --batch must be at least 1");
    }
    if let Some(d) = a.duration {
        super::more_than_0("--duration", d)?;
    }
    if a.defer_purge && a.max_history < 2 {
        super::usage!(
            "--max-history must be at least 2: purge is held only while the history list is below half of it"
        );
    }
    super::check_listen(a.listen.as_deref(), a.web_config_file.as_deref(), false)
}

/// The prefetcher's options from the command line.
fn prefetch_options(a: &PrefetchArgs) -> Options {
    Options {
        readers: a.threads,
        window_events: a.window_events,
        window_keys: a.window_keys,
        window_secs: a.window_secs,
        min_lag: a.min_lag,
        batch: a.batch,
        query_timeout: Duration::from_millis(a.query_timeout_ms.max(1)),
        poll: Duration::from_millis(100),
        duration: a.duration,
        primary_only: a.primary_only,
        defer_purge: a.defer_purge.then_some(a.max_history),
        warm: match a.warm {
            WarmArg::Sql => Warm::Sql,
            WarmArg::Pages => Warm::Pages,
        },
    }
}
