//! `pileup watch` and `pileup captures`: wiring for pileup_watch.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use pileup_conn::ConnOptions;
use pileup_watch::evidence::CaptureSettings;
use pileup_watch::store::Store;
use pileup_watch::trigger::Trigger;
use pileup_watch::watch::{default_triggers, run, Event, WatchOptions};

/// Default data directory: $PILEUP_DATA_DIR, else ~/.local/state/pileup.
pub fn default_data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PILEUP_DATA_DIR") {
        return d.into();
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| "/var/lib".into());
    home.join(".local/state/pileup")
}

/// Poll the server every interval, keep history, catch stalls and capture
/// the evidence (stacks, processlist, InnoDB status, lock waits) as they happen.
///
/// Default triggers (replace with --trigger, repeatable):
///   poll_failed                                   the server did not answer a poll
///   threads_running > 4×CPUs (at least 16) for 1s a pile-up
///   questions_rate < 0.3 * baseline_5m for 2s     throughput collapsed
///   replica_lag > 300 for 10s                     replica far behind
///   memory_limit_pct > 90 for 5s                  near its memory limit (cgroup, else host)
///
/// Trigger syntax: METRIC [* NUM] (>|<|>=|<=) NUM|METRIC [* baseline_WINDOW] [for DURATION],
/// or poll_failed [for DURATION]. Metrics: lower-case status variables,
/// NAME_rate for counters, and derived values such as rows_read_per_query,
/// rows_read_per_row_sent, bp_miss_ratio, checkpoint_age_pct, os_cpu_busy_pct;
/// --list-metrics lists every one with its meaning. Examples:
///   --trigger 'physical_reads_per_row_read > 0.1 for 5s'
///   --trigger 'questions_rate < 0.5 * baseline_10m for 3s'
///   --trigger 'pl_waiting_global_lock > 4 for 1s'
///
/// Captures go to DATA_DIR/captures/<time>-<trigger>/ (mode 0700, files
/// 0600: they hold query text); history to DATA_DIR/pileup.db (SQLite).
/// DATA_DIR: --data-dir, else $PILEUP_DATA_DIR, else ~/.local/state/pileup.
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub struct WatchArgs {
    /// Server process for OS data and stacks: a pid, "auto" or "none".
    #[arg(long, default_value = "auto", value_name = "PID|auto|none")]
    pub pid: String,
    /// Time between polls (start to start), e.g. 1s, 100ms.
    #[arg(long, default_value = "1s", value_parser = super::parse_duration)]
    pub interval: Duration,
    /// Where history and captures are kept [default: $PILEUP_DATA_DIR, else
    /// ~/.local/state/pileup].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// List every metric a trigger may use, with its meaning, and exit.
    #[arg(long)]
    pub list_metrics: bool,
    /// A stall trigger (repeatable); replaces the defaults.
    #[arg(long = "trigger", value_name = "EXPR")]
    pub triggers: Vec<String>,
    /// Keep the default triggers in addition to --trigger ones.
    #[arg(long)]
    pub with_default_triggers: bool,
    /// No new capture this soon after the previous one.
    #[arg(long, default_value = "30s", value_parser = super::parse_duration)]
    pub cooldown: Duration,
    /// At most this many captures in any hour (a stall that recurs all day
    /// keeps its first captures, not a disk full of copies).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub max_captures_per_hour: usize,
    /// Skip captures when the data dir's disk has less free space (MiB).
    #[arg(long, default_value_t = 1024, value_name = "MIB")]
    pub min_free_mib: u64,
    /// Stack samples per capture.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub capture_samples: usize,
    /// Time between a capture's stack samples.
    #[arg(long, default_value = "200ms", value_parser = super::parse_duration)]
    pub capture_interval: Duration,
    /// For a memory trigger: how long a capture traces the server's memory
    /// growth (as `pileup memory` does, with eBPF) to name the statements
    /// and stacks that grow it.
    #[arg(long, default_value = "3s", value_parser = super::parse_duration)]
    pub capture_memory: Duration,
    /// Stop after this long (default: until interrupted).
    #[arg(long, value_parser = super::parse_duration)]
    pub duration: Option<Duration>,
    /// JSON: every event (polls included) as a JSON line on stdout.
    #[command(flatten)]
    pub out: crate::output::FormatArgs,
    /// Sample a process that is not mariadbd/mysqld.
    #[arg(long)]
    pub any_process: bool,
    /// Serve the derived metrics in Prometheus exposition format at
    /// /metrics on [HOST:]PORT (a bare port is on loopback: 9104; port 0
    /// picks a free one). With --listen-profiles and the server's pid, also
    /// two pprof profiles over N seconds (1-60), for go tool pprof, Parca or
    /// Pyroscope: the server's stacks, on and off CPU, at
    /// /debug/pprof/profile?seconds=N (no thread stopped), and its contended
    /// lock waits, as pileup locks traces them, at
    /// /debug/pprof/locks?seconds=N (root, eBPF).
    #[arg(long, value_name = "[HOST:]PORT")]
    pub listen: Option<String>,
    /// Who may reach --listen, as Prometheus exporters say it: a web configuration file
    /// (exporter-toolkit format) with TLS (tls_server_config: cert_file, key_file, client_ca_file,
    /// client_auth_type, min_version) and basic auth (basic_auth_users: name and bcrypt hash),
    /// re-read when it changes.
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config_file: Option<PathBuf>,
    /// Serve the profile endpoints on --listen (off by default). On an address other hosts
    /// reach, only with TLS and basic auth (--web.config.file); one profile per client at a
    /// time, at most 60 s.
    #[arg(long)]
    pub listen_profiles: bool,
    /// Upload every finished capture to this S3-compatible store
    /// (s3://BUCKET[/PREFIX]), as PREFIX/HOST/CAPTURE.tar.zst with its
    /// host, class and verdict as metadata. Credentials, region and
    /// endpoint as the AWS CLI finds them: AWS_ACCESS_KEY_ID /
    /// AWS_SECRET_ACCESS_KEY, else AWS_PROFILE (or default) in
    /// ~/.aws/credentials and ~/.aws/config; AWS_REGION; AWS_ENDPOINT_URL
    /// or the profile's endpoint_url for a store that is not AWS. Captures
    /// wait in DATA_DIR/ship while the store is down (within
    /// --min-free-mib) and go when it is back; large ones resume where
    /// they stopped.
    #[arg(long, value_name = "URL")]
    pub ship: Option<String>,
    /// The host name under which captures are shipped [default: this
    /// machine's name].
    #[arg(long, value_name = "NAME", requires = "ship")]
    pub ship_host: Option<String>,
    /// Network link speed in Mbit/s, for bytes_sent_link_share.
    #[arg(long, default_value_t = 1000.0, value_name = "MBPS")]
    pub link_mbps: f64,
    /// Fetch the server's missing debug files from this debuginfod server
    /// at start, in the background (repeat for several; default:
    /// DEBUGINFOD_URLS); captures read them from the client cache. A
    /// capture itself never waits on the network.
    #[arg(long = "debuginfod", value_name = "URL")]
    pub debuginfod: Vec<String>,
    /// Fetch nothing from debuginfod servers (the cache is still read).
    #[arg(long, conflicts_with = "debuginfod")]
    pub no_debuginfod: bool,
    /// Install MariaDB's metadata_lock_info plugin at start if it is not
    /// active, so captures name metadata-lock and global-read-lock holders
    /// exactly (without it, or performance_schema's mdl instrument, they
    /// are inferred from timing and say how sure they are). This changes
    /// the server: the plugin stays installed.
    #[arg(long)]
    pub install_plugins: bool,
    /// Time between scans of the server's thread states in /proc (no SQL;
    /// needs the pid). A pile-up of threads held up in lock or disk waits
    /// starts a capture at once and is timed to this interval, short
    /// stalls between polls included. 0 turns the scan off.
    #[arg(long, default_value = "100ms", value_parser = super::parse_duration)]
    pub scan_interval: Duration,
    /// Threads held up (in a futex wait or in disk wait) above their usual
    /// number that make a pile-up (default: 4 per CPU, at least 16, as the
    /// running-threads trigger).
    #[arg(long, value_name = "N")]
    pub pileup_threads: Option<u32>,
}

pub fn run_watch(a: WatchArgs, conn: &ConnOptions) -> Result<()> {
    if a.list_metrics {
        let metrics = pileup_watch::listing::MetricList::all();
        return crate::output::emit(&metrics, &[(None, a.out.format())], &Default::default());
    }
    // The command line first, before any process or server is looked at.
    check_watch_args(&a)?;
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let triggers = triggers(&a.triggers, a.with_default_triggers, cpus)?;
    let json = a.out.json();
    let spec = conn.resolve()?;
    // A trigger on a metric this server cannot have could never fire.
    if let Some(cannot) = pileup_watch::poll::unavailable_metrics(&spec) {
        for t in triggers.iter().take(a.triggers.len()) {
            t.check_available(&cannot).map_err(|e| super::Usage(format!("--trigger {e}")))?;
        }
    }
    let (pid, no_pid_why) = super::resolve_server_pid(&a.pid, &spec)?;
    if let Some(p) = pid {
        pileup_engine::process::check_target(p, a.any_process)?;
    }
    let data_dir = a.data_dir.clone().unwrap_or_else(default_data_dir);
    let ship = ship_options(&a, &data_dir)?;
    let o = watch_options(&a, data_dir, triggers, cpus, ship, &spec);
    // The server's missing debug files, fetched into the debuginfod cache
    // while watching starts; captures read the cache.
    if let Some(p) = pid.filter(|_| !a.no_debuginfod) {
        fill_debug_cache(p, &a.debuginfod, json);
    }
    if a.install_plugins {
        note!("pileup watch: {}", pileup_watch::capture::install_plugins(&spec).context("--install-plugins")?);
    }
    // SIGINT, SIGTERM or a reader gone: finish the current poll and any
    // running capture, then exit.
    let stop = super::stop_on_signals();
    let mut narrator = pileup_watch::narrate::Narrator::new(
        pid.is_none().then(|| no_pid_why.unwrap_or_else(|| "not on this machine".into())),
    );
    let mut sink = crate::output::Sink::new(json, None);
    let mut on = |e: &Event| sink.event(&narrator.tell(e));
    run(spec, pid, &o, &stop, &mut on).map_err(|e| match e {
        // The store's refusals say which flag chooses another.
        pileup_watch::WatchError::InUse { .. } | pileup_watch::WatchError::OtherServer { .. } => {
            anyhow::anyhow!("{e} (--data-dir)")
        }
        e => e.into(),
    })
}

/// The checks of `pileup watch`'s flags that clap does not make.
fn check_watch_args(a: &WatchArgs) -> Result<()> {
    if a.link_mbps.is_nan() || a.link_mbps <= 0.0 {
        super::usage!("--link-mbps must be a positive number");
    }
    if a.interval < Duration::from_millis(50) {
        super::usage!("--interval must be at least 50ms");
    }
    if !a.scan_interval.is_zero() && a.scan_interval < Duration::from_millis(10) {
        super::usage!("--scan-interval must be at least 10ms (or 0 to turn the scan off)");
    }
    if let Some(n) = a.pileup_threads {
        super::at_least_1("--pileup-threads", n as u64)?;
    }
    if let Some(d) = a.duration {
        super::more_than_0("--duration", d)?;
    }
    check_data_dir(a.data_dir.as_deref())?;
    super::at_least_1("--capture-samples", a.capture_samples as u64)?;
    if a.max_captures_per_hour == 0 {
        super::usage!(
            "--max-captures-per-hour must be at least 1: a watch that may never capture has no stall to show"
        );
    }
    if let Some(u) = &a.ship {
        pileup_store::StoreUrl::parse(u).map_err(|e| super::Usage(format!("--ship {e}")))?;
    }
    super::check_listen(a.listen.as_deref(), a.web_config_file.as_deref(), a.listen_profiles)
}

/// The data directory (`--data-dir`, else the default) where it exists: a
/// directory, or a place one can be made, not a file in the way.
fn check_data_dir(given: Option<&std::path::Path>) -> Result<()> {
    let dir = given.map(std::path::Path::to_path_buf).unwrap_or_else(default_data_dir);
    if let Some(file) = dir.ancestors().find(|p| p.exists()).filter(|p| !p.is_dir()) {
        let whose = if file == dir { String::new() } else { format!("{}: ", dir.display()) };
        super::usage!(
            "--data-dir {whose}{} is a file, not a directory; give a directory (pileup creates it where it is missing)",
            file.display()
        );
    }
    Ok(())
}

/// Where and how captures are shipped (`--ship`), spooled under `data_dir`.
fn ship_options(a: &WatchArgs, data_dir: &std::path::Path) -> Result<Option<pileup_store::ship::ShipOptions>> {
    Ok(match &a.ship {
        Some(u) => Some(pileup_store::ship::ShipOptions {
            url: pileup_store::StoreUrl::parse(u).context("--ship")?,
            aws: pileup_store::aws::from_env().context("--ship")?,
            spool_dir: data_dir.join("ship"),
            host: a.ship_host.clone().unwrap_or_else(this_host),
            min_free: a.min_free_mib << 20,
            holds: None,
        }),
        None => None,
    })
}

/// The watcher's options from the command line.
fn watch_options(
    a: &WatchArgs,
    data_dir: PathBuf,
    triggers: Vec<Trigger>,
    cpus: usize,
    ship: Option<pileup_store::ship::ShipOptions>,
    spec: &pileup_conn::ConnSpec,
) -> WatchOptions {
    WatchOptions {
        interval: a.interval,
        data_dir,
        triggers,
        cooldown: a.cooldown,
        max_captures_per_hour: a.max_captures_per_hour,
        min_free_bytes: a.min_free_mib << 20,
        capture: CaptureSettings {
            samples: a.capture_samples,
            interval: a.capture_interval,
            memory_trace: a.capture_memory,
            any_process: a.any_process,
            ..Default::default()
        },
        derive: pileup_watch::derive::DeriveOptions { link_bps: a.link_mbps * 1e6 },
        retention: Default::default(),
        duration: a.duration,
        listen: super::listen_options(a.listen.as_deref(), a.web_config_file.as_deref(), a.listen_profiles),
        scan_interval: a.scan_interval,
        pileup_threads: a.pileup_threads.unwrap_or_else(|| pileup_watch::watch::default_pileup_threads(cpus)),
        ship,
        profiles: vec![locks_profile(spec.clone(), a.any_process)],
    }
}

/// Fetch the server's missing debug files into the debuginfod cache on a
/// thread of their own (from `servers`, else the environment's), saying
/// what was fetched unless `quiet`.
fn fill_debug_cache(pid: i32, servers: &[String], quiet: bool) {
    use pileup_engine::debug_files as d;
    let o = if servers.is_empty() { pileup_debuginfod::from_env() } else { pileup_debuginfod::for_servers(servers) };
    if let Some(o) = o {
        std::thread::spawn(move || {
            for n in d::fill_cache(pid, &pileup_engine::default_debug_dirs(), &o) {
                if !quiet {
                    note!("{n}");
                }
            }
        });
    }
}

/// `/debug/pprof/locks?seconds=N`: the server's contended lock waits
/// traced for N seconds, as `pileup locks` traces them (eBPF, at most
/// 200 stacks a second, every probe detached when the trace ends or
/// pileup exits), as a pprof profile valued by time waited and waits.
fn locks_profile(spec: pileup_conn::ConnSpec, any_process: bool) -> pileup_watch::profiles::Endpoint {
    let take = move |pid: i32, secs: u64| -> std::result::Result<Vec<u8>, String> {
        let opts = pileup_locks::Options {
            pid,
            duration: Duration::from_secs(secs),
            stack_budget: 200,
            any_process,
            dwarf: false,
            debug_dirs: pileup_engine::default_debug_dirs(),
            // Debug files already in the debuginfod cache; nothing fetched.
            debuginfod: Some(pileup_engine::debug_files::DebuginfodOptions::cache_only()),
            top: usize::MAX,
            sql_refresh: Duration::from_secs(1),
            threads: None,
            probe_cost: false,
        };
        // The waiters' statements label their stacks where the server
        // answers; without SQL the profile is still whole.
        let sql = spec.connect().ok().and_then(|c| pileup_annotate::SqlSource::new(c).ok());
        let report = pileup_locks::run(&opts, sql, &AtomicBool::new(false), |_| {}).map_err(|e| e.to_string())?;
        let mut out = vec![];
        pileup_output::render(&report, pileup_output::Format::Pprof, &Default::default(), &mut out)
            .map_err(|e| e.to_string())?;
        Ok(out)
    };
    pileup_watch::profiles::Endpoint { path: "/debug/pprof/locks".into(), take: Arc::new(take) }
}

/// This machine's name, for shipped captures' keys.
pub fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// The triggers given, each parsed and its metrics checked, and the
/// defaults when none is given or they are asked for too.
fn triggers(given: &[String], with_defaults: bool, cpus: usize) -> Result<Vec<Trigger>> {
    let mut triggers = vec![];
    for t in given {
        let t = Trigger::parse(t).map_err(|e| super::Usage(format!("--trigger {e}")))?;
        t.check_metrics().map_err(|e| super::Usage(format!("--trigger {e}")))?;
        triggers.push(t);
    }
    if triggers.is_empty() || with_defaults {
        triggers.extend(default_triggers(cpus));
    }
    Ok(triggers)
}

/// List captures recorded in a data directory, and the short stalls that
/// were not captured.
#[derive(Args)]
pub struct CapturesArgs {
    /// Where `pileup watch` kept its history [default: $PILEUP_DATA_DIR,
    /// else ~/.local/state/pileup].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// JSON: each capture's time, directory, trigger and verdict, and each
    /// short stall not captured (its start, end and what it was), oldest
    /// first; `kind` tells them apart.
    #[command(flatten)]
    pub out: crate::output::FormatArgs,
    /// List the captures a fleet shipped to this store (s3://BUCKET[/PREFIX],
    /// credentials as for `watch --ship`), newest first, instead of a data
    /// directory's.
    #[arg(long, value_name = "URL", conflicts_with = "data_dir")]
    pub from: Option<String>,
}

pub fn run_captures(a: CapturesArgs) -> Result<()> {
    let format = a.out.format();
    if let Some(from) = &a.from {
        let url = pileup_store::StoreUrl::parse(from)?;
        let remote = pileup_store::Remote::open(&url, &pileup_store::aws::from_env()?)?;
        let listing = pileup_watch::listing::RemoteListing { store: url.to_string(), captures: remote.list()? };
        return crate::output::emit(&listing, &[(None, format)], &Default::default());
    }
    check_data_dir(a.data_dir.as_deref())?;
    let dir = a.data_dir.unwrap_or_else(default_data_dir);
    if !dir.exists() {
        bail!("{}: no such directory; give the --data-dir pileup watch used", dir.display());
    }
    let listing = pileup_watch::listing::Listing::read(&dir)?;
    crate::output::emit(&listing, &[(None, format)], &Default::default())
}

/// Rebuild a capture's report.html (with the metrics after the trigger, when
/// the history store it came from is still there).
#[derive(Args)]
pub struct ReportArgs {
    /// A capture directory (DATA_DIR/captures/<time>-<trigger>), or a
    /// shipped capture's s3:// URL (as `pileup captures --from` lists
    /// them): fetched, checked against its SHA-256 and unpacked first.
    pub dir: PathBuf,
    /// Where a capture fetched from a store is unpacked [default:
    /// DATA_DIR/fetched, DATA_DIR as for `pileup watch`].
    #[arg(long, value_name = "DIR")]
    pub to: Option<PathBuf>,
    /// Without these, report.html is rebuilt and its path printed; with
    /// them the capture's report is written too: text (report.txt), json
    /// (its evidence, the metrics around it and the stalls) or html.
    #[command(flatten)]
    pub out: crate::output::OutputArgs,
}

pub fn run_report(mut a: ReportArgs) -> Result<()> {
    let asked = a.out.format().is_some() || !a.out.output.is_empty();
    let targets = a.out.targets("report")?;
    if let Some(u) = a.dir.to_str().filter(|u| u.starts_with("s3://")).map(String::from) {
        // The bucket, and the capture's key as the "prefix".
        let mut url = pileup_store::StoreUrl::parse(&u)?;
        let key = std::mem::take(&mut url.prefix);
        if key.is_empty() {
            super::usage!("{u}: give the capture's s3:// URL, as pileup captures --from lists them");
        }
        let remote = pileup_store::Remote::open(&url, &pileup_store::aws::from_env()?)?;
        let dest = a.to.take().unwrap_or_else(|| default_data_dir().join("fetched"));
        a.dir = remote.fetch(&key, &dest)?;
        pileup_watch::report::rebuild(&a.dir)?;
        return written(&a.dir, asked.then_some(&targets[..]));
    }
    if !a.dir.exists() {
        bail!("{}: no such directory; pileup captures lists the captures", a.dir.display());
    }
    if !a.dir.join("evidence.json").exists() {
        bail!(
            "{} is not a pileup capture directory (it has no evidence.json); pileup captures lists the captures",
            a.dir.display()
        );
    }
    let data_dir = a.dir.parent().and_then(|p| p.parent()).filter(|d| d.join("pileup.db").exists());
    match data_dir {
        Some(d) => pileup_watch::report::refresh(
            &a.dir,
            &Store::open(d)?,
            pileup_watch::watch::BEFORE_SECS,
            pileup_watch::watch::AFTER_SECS,
        )?,
        None => pileup_watch::report::rebuild(&a.dir)?,
    }
    written(&a.dir, asked.then_some(&targets[..]))
}

/// The rebuilt report: its path, or the capture's report in the formats
/// asked for; a capture that lacks files is damaged (exit 3, naming them).
fn written(dir: &std::path::Path, targets: Option<&[crate::output::Target]>) -> Result<()> {
    let capture = pileup_watch::capture_dir::read(dir)?;
    match targets {
        None => out!("{}", dir.join("report.html").display()),
        Some(t) => crate::output::emit(&capture, t, &Default::default())?,
    }
    if !capture.missing.is_empty() {
        let what = capture.missing.join(", ");
        return Err(super::Damaged(format!("{}: missing {what}; the report shows the rest", dir.display())).into());
    }
    Ok(())
}

/// A live terminal view: derived metrics with sparklines, the busiest
/// statements and the stall state (default triggers). q, Esc or Ctrl-C quits.
#[derive(Args)]
pub struct TopArgs {
    /// Server process for OS data: a pid, "auto" or "none".
    #[arg(long, default_value = "auto", value_name = "PID|auto|none")]
    pub pid: String,
    /// Refresh interval.
    #[arg(long, default_value = "1s", value_parser = super::parse_duration)]
    pub interval: Duration,
    /// Print one snapshot (two polls, one interval apart) and exit; it
    /// fails when the server cannot be reached.
    #[arg(long)]
    pub once: bool,
    /// JSON (with --once): the snapshot's metrics, triggers and busiest
    /// statements.
    #[command(flatten)]
    pub out: crate::output::FormatArgs,
    /// A `pileup watch` data directory whose short stalls (those between
    /// its polls too) top lists beside its own [default: $PILEUP_DATA_DIR,
    /// else ~/.local/state/pileup, when a watcher has written there].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

pub fn run_top(a: TopArgs, conn: &ConnOptions) -> Result<()> {
    use std::io::IsTerminal;
    let json = a.out.json();
    if a.interval < Duration::from_millis(100) {
        super::usage!("--interval must be at least 100ms");
    }
    check_data_dir(a.data_dir.as_deref())?;
    if json && !a.once {
        super::usage!("JSON is a snapshot's: add --once");
    }
    if !a.once && !std::io::stdout().is_terminal() {
        super::usage!("top needs a terminal; use --once for a text snapshot");
    }
    let spec = conn.resolve()?;
    let (pid, _) = super::resolve_server_pid(&a.pid, &spec)?;
    if let (Some(p), false) = (pid, a.pid == "auto") {
        pileup_engine::process::check_target(p, false)?;
    }
    if a.once {
        // A snapshot of a server that cannot be reached is an error, not
        // a report of a stall.
        spec.connect()?;
    }
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let data_dir = a.data_dir.unwrap_or_else(default_data_dir);
    if let Some(state) = pileup_watch::top::run(spec, pid, a.interval, default_triggers(cpus), a.once, Some(&data_dir))?
    {
        crate::output::emit(&state, &[(None, a.out.format())], &Default::default())?;
    }
    Ok(())
}
