//! Stall classes: the common ways a server stalls without one lock holder
//! to blame, each recognised by its signature in a capture's evidence —
//! status counters around the onset, the stacks' exported frame names, the
//! processlist and the server's variables — and named with that evidence.
//! Pure functions of the [`Evidence`], tested without a server.
//!
//! The frames are the server's exported functions (named on a stripped
//! binary too: `open_table`, `login_connection`, `mysql_rm_table`) and
//! libc's (`pread64`, `fsync`, `posix_fallocate`); InnoDB's internal ones
//! (`fsp_try_extend_data_file`, `dict_stats_*`, `buf_flush_*`) count
//! where debug information names them, and the counters carry those
//! classes where it does not.

use pileup_engine::frames::{self, FrameClass};

use crate::evidence::{pl_summary, stamp_tenths, Evidence};

/// A kind of stall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StallClass {
    TableOpenStorm,
    ConnectionStorm,
    DropTable,
    FileExtension,
    StatsRecalc,
    FlushStorm,
    RedoLog,
    SlowDisk,
}

impl StallClass {
    pub fn name(self) -> &'static str {
        match self {
            StallClass::TableOpenStorm => "table-open storm",
            StallClass::ConnectionStorm => "connection storm",
            StallClass::DropTable => "DROP or TRUNCATE of a table",
            StallClass::FileExtension => "data file extension",
            StallClass::StatsRecalc => "statistics recalculation",
            StallClass::FlushStorm => "flushing storm",
            StallClass::RedoLog => "redo log writes",
            StallClass::SlowDisk => "slow or saturated disk",
        }
    }
}

/// One class found, with when it first showed and what shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Finding {
    pub class: StallClass,
    /// When its signature first showed (a poll or a stack sample).
    pub first_unix: Option<f64>,
    /// The evidence, for the verdict: counters, threads, statements.
    pub evidence: String,
}

impl Finding {
    pub fn line(&self) -> String {
        format!("{}: {}", self.class.name(), self.evidence)
    }
}

/// Values of `metric` in the metric history, and when, from `from` on.
fn series<'a>(ev: &'a Evidence, metric: &'a str, from: f64) -> impl Iterator<Item = (f64, f64)> + 'a {
    ev.history.iter().filter(move |r| r.unix >= from).filter_map(move |r| r.derived.get(metric).map(|v| (r.unix, *v)))
}

/// The metric around the stall and before it: (highest since shortly before
/// the onset and when it first passed `over`, median of the minutes before).
struct Around {
    peak: f64,
    /// The mean since shortly before the onset, weighted by each poll's
    /// interval: a burst of one short poll interval (a pool opening its
    /// connections) does not make it high.
    mean: f64,
    /// The values since shortly before the onset.
    recent: Vec<f64>,
    first_over: Option<f64>,
    usual: Option<f64>,
    /// The mean of the polls after the highest one, weighted by their
    /// intervals; `None` when the highest is the last: whether a jump
    /// lasted.
    after_peak: Option<f64>,
}

impl Around {
    /// Polls since shortly before the onset at `x` or more: a storm lasts
    /// longer than one poll interval.
    fn polls_at_least(&self, x: f64) -> usize {
        self.recent.iter().filter(|v| **v >= x).count()
    }
}

fn around(ev: &Evidence, metric: &str, over: f64) -> Option<Around> {
    let onset = ev.onset_unix.unwrap_or(ev.unix);
    let all: Vec<(f64, f64)> = series(ev, metric, f64::MIN).collect();
    let from = all.partition_point(|p| p.0 < onset - 3.0);
    let recent = &all[from..];
    let peak = recent.iter().map(|p| p.1).fold(f64::NAN, f64::max);
    if peak.is_nan() {
        return None;
    }
    // A rate covers the interval since the poll before it (polls come
    // every 100 ms to every few seconds); the first one here is weighed as
    // the median interval when no poll comes before it.
    let mut gaps: Vec<f64> = all.windows(2).map(|w| w[1].0 - w[0].0).filter(|g| *g > 0.0).collect();
    gaps.sort_by(f64::total_cmp);
    let typical = gaps.get(gaps.len() / 2).copied().unwrap_or(1.0);
    let gap = |i: usize| {
        let g = if from + i > 0 { recent[i].0 - all[from + i - 1].0 } else { typical };
        if g > 0.0 {
            g
        } else {
            typical
        }
    };
    let weighted = |range: std::ops::Range<usize>| {
        let (sum, span) = range
            .filter(|&i| recent[i].1.is_finite())
            .fold((0.0, 0.0), |(s, w), i| (s + recent[i].1 * gap(i), w + gap(i)));
        (span > 0.0).then(|| sum / span)
    };
    let mean = weighted(0..recent.len()).unwrap_or(peak);
    let peak_at = recent.iter().position(|p| p.1 == peak).unwrap_or(0);
    let after_peak = weighted(peak_at + 1..recent.len());
    let first_over = recent.iter().find(|p| p.1 >= over).map(|p| p.0);
    let mut before: Vec<f64> = series(ev, metric, f64::MIN).filter(|p| p.0 < onset - 5.0).map(|p| p.1).collect();
    before.sort_by(f64::total_cmp);
    let usual = (before.len() >= 5).then(|| before[before.len() / 2]);
    let recent_values = recent.iter().map(|p| p.1).collect();
    Some(Around { peak, mean, recent: recent_values, first_over, usual, after_peak })
}

/// A metric that jumped: at least `floor` and `times` its usual value.
fn jumped(ev: &Evidence, metric: &str, floor: f64, times: f64) -> Option<Around> {
    let a = around(ev, metric, floor)?;
    let usual = a.usual.unwrap_or(0.0);
    (a.peak >= floor && a.peak >= times * usual).then_some(a)
}

/// [`jumped`], judged on the mean since shortly before the onset: for
/// rates that a one-interval burst would make look high.
fn jumped_for_a_while(ev: &Evidence, metric: &str, floor: f64, times: f64) -> Option<Around> {
    let a = around(ev, metric, floor)?;
    let usual = a.usual.unwrap_or(0.0);
    (a.mean >= floor && a.mean >= times * usual).then_some(a)
}

/// One stack sample as the classes read it: when, and its threads.
pub struct SampleView {
    pub unix: f64,
    pub threads: Vec<ThreadView>,
}

/// A thread as the classes read it: OS state, frame labels, the file
/// operation it was in and whether it serves a client connection.
#[derive(Clone, Default)]
pub struct ThreadView {
    pub state: char,
    pub frames: Vec<String>,
    pub file: Option<pileup_engine::process::FileIo>,
    /// A client connection's thread (not the server's own, which
    /// performance_schema also lists with a processlist id).
    pub connection: bool,
    pub tid: i32,
}

impl ThreadView {
    fn has(&self, hit: impl Fn(&str) -> bool) -> bool {
        self.frames.iter().any(|f| hit(f))
    }
}

/// The capture's stack samples as [`SampleView`]s.
pub fn sample_views(ev: &Evidence) -> Vec<SampleView> {
    ev.profile.as_ref().map_or_else(Vec::new, |p| {
        p.samples
            .iter()
            .map(|s| SampleView {
                unix: s.at_unix_ms as f64 / 1000.0,
                threads: s
                    .threads
                    .iter()
                    // pileup's own connections' threads are not the server's work.
                    .filter(|t| !t.sql.as_ref().is_some_and(|q| q.is_pileup))
                    .map(|t| ThreadView {
                        state: t.state,
                        frames: t.frames.iter().map(|f| f.label.clone()).collect(),
                        file: t.file.clone(),
                        connection: t.role == Some(pileup_engine::Role::Connection),
                        tid: t.tid,
                    })
                    .collect(),
            })
            .collect()
    })
}

/// Threads in frames matching `hit`: the most in one sample, and the time
/// of the first sample with at least `min`.
fn in_frames(samples: &[SampleView], min: usize, hit: impl Fn(&str) -> bool) -> (usize, Option<f64>) {
    in_frames_unless(samples, min, hit, |_| false)
}

/// [`in_frames`], leaving out threads with a frame matching `unless`.
fn in_frames_unless(
    samples: &[SampleView],
    min: usize,
    hit: impl Fn(&str) -> bool,
    unless: impl Fn(&str) -> bool,
) -> (usize, Option<f64>) {
    threads_where(samples, min, |t| t.has(&hit) && !t.has(&unless))
}

/// Threads for which `hit` holds: the most in one sample, and the time of
/// the first sample with at least `min`.
fn threads_where(samples: &[SampleView], min: usize, hit: impl Fn(&ThreadView) -> bool) -> (usize, Option<f64>) {
    let mut most = 0;
    let mut first = None;
    for s in samples {
        let n = s.threads.iter().filter(|t| hit(t)).count();
        most = most.max(n);
        if n >= min && first.is_none() {
            first = Some(s.unix);
        }
    }
    (most, first)
}

/// An InnoDB data file (a table's `.ibd`, the system or an undo
/// tablespace), not the redo log or the temporary tablespace.
fn data_file(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.ends_with(".ibd") || name.starts_with("ibdata") || name.starts_with("undo")
}

/// The redo log (`ib_logfile0`; older servers have several, MySQL 8.0.30
/// and later `#innodb_redo/#ib_redoN`).
fn log_file(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("ib_logfile") || name.starts_with("#ib_redo")
}

/// A path as the verdict shows it: the table's `db/name.ibd`, or the file name.
fn short_path(path: &str) -> String {
    let mut parts = path.rsplit('/');
    match (parts.next(), parts.next()) {
        (Some(f), Some(d)) if f.ends_with(".ibd") => format!("{d}/{f}"),
        (Some(f), _) => f.to_string(),
        _ => path.to_string(),
    }
}

/// Writes of at least this many bytes at once by a client's thread to a
/// data file are InnoDB zero-filling it to extend it: on a filesystem where
/// `fallocate` is not supported it writes zeros a megabyte at a time, and
/// a client's thread otherwise writes no data pages.
const ZERO_FILL_BYTES: u64 = 256 * 1024;

/// A thread extending a data file: in `fallocate`, or writing zeros.
fn extending(t: &ThreadView) -> bool {
    let named = t.has(|f| frames::class_of(f) == Some(FrameClass::FileExtend));
    named
        || t.file.as_ref().is_some_and(|io| {
            data_file(&io.path)
                && (io.syscall == "fallocate"
                    || (t.connection
                        && io.syscall.starts_with("pwrite")
                        && io.bytes.is_some_and(|b| b >= ZERO_FILL_BYTES)))
        })
}

/// The files threads matching `hit` work on in the sample with the most of
/// them: "pread64 on db/t.ibd (10), fsync on ibdata1 (2)".
fn files_of(samples: &[SampleView], hit: impl Fn(&ThreadView) -> bool) -> String {
    let Some(s) = samples.iter().max_by_key(|s| s.threads.iter().filter(|t| hit(t) && t.file.is_some()).count()) else {
        return String::new();
    };
    let mut by: std::collections::BTreeMap<(String, &str), usize> = Default::default();
    for io in s.threads.iter().filter(|t| hit(t)).filter_map(|t| t.file.as_ref()) {
        *by.entry((short_path(&io.path), io.syscall)).or_default() += 1;
    }
    let mut v: Vec<_> = by.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.iter().take(4).map(|((p, sc), n)| format!("{sc} on {p} ({n})")).collect::<Vec<_>>().join(", ")
}

/// Threads in disk wait (state D) in the samples: the most in one.
fn in_disk_wait(samples: &[SampleView]) -> usize {
    samples.iter().map(|s| s.threads.iter().filter(|t| t.state == 'D').count()).max().unwrap_or(0)
}

fn processlist_states(ev: &Evidence, hit: impl Fn(&str, &str) -> bool) -> usize {
    ev.processlist
        .iter()
        .filter(|r| {
            hit(r.get("state").map(String::as_str).unwrap_or(""), r.get("user").map(String::as_str).unwrap_or(""))
        })
        .count()
}

/// A connection running a statement, not waiting for a global, metadata,
/// flush or table lock (a DROP queued behind a transaction's metadata lock
/// is the lock holder's stall, not the DROP's).
fn working(r: &std::collections::BTreeMap<String, String>) -> bool {
    r.get("command").is_some_and(|c| c == "Query")
        && r.get("state").is_none_or(|s| crate::holder::LockClass::of_state(s).is_none())
}

fn usual(a: &Around) -> String {
    match a.usual {
        Some(u) => format!(" (usually {u:.0})"),
        None => String::new(),
    }
}

/// ", N threads doing…", or nothing for none.
fn threads_doing(n: usize, what: &str) -> String {
    match n {
        0 => String::new(),
        n => format!(", {} {what}", threads(n)),
    }
}

/// "1 thread", "3 threads".
fn threads(n: usize) -> String {
    pileup_output::plural(n, "thread", "threads")
}

fn var<'a>(ev: &'a Evidence, name: &str) -> Option<&'a str> {
    ev.variables.get(name).map(String::as_str)
}

fn earliest(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Every class whose signature the evidence shows, earliest first.
pub fn findings(ev: &Evidence) -> Vec<Finding> {
    findings_in(ev, &sample_views(ev))
}

/// [`findings`] with the stack samples given.
pub fn findings_in(ev: &Evidence, samples: &[SampleView]) -> Vec<Finding> {
    let classes: [fn(&Evidence, &[SampleView]) -> Option<Finding>; 8] = [
        table_open_storm,
        connection_storm,
        drop_table,
        file_extension,
        stats_recalc,
        flush_storm,
        redo_log,
        slow_disk,
    ];
    let mut out: Vec<Finding> = classes.iter().filter_map(|class| class(ev, samples)).collect();
    out.sort_by(|a, b| a.first_unix.unwrap_or(f64::MAX).total_cmp(&b.first_unix.unwrap_or(f64::MAX)));
    // A table's files dropped, a file being extended, a table's pages read
    // for its statistics, pages flushed in a hurry or the redo log written
    // is why the disk is busy: that cause leads, the busy disk follows it.
    if let Some(i) = out.iter().position(|f| {
        matches!(
            f.class,
            StallClass::DropTable
                | StallClass::FileExtension
                | StallClass::StatsRecalc
                | StallClass::FlushStorm
                | StallClass::RedoLog
        )
    }) {
        if let Some(d) = out[..i].iter().position(|f| f.class == StallClass::SlowDisk) {
            let disk = out.remove(d);
            out.insert(i, disk);
        }
    }
    out
}

/// Table-open storm: tables opened because the cache did not hold them,
/// and threads opening tables.
fn table_open_storm(ev: &Evidence, samples: &[SampleView]) -> Option<Finding> {
    let add = |class, first_unix, evidence: String| Some(Finding { class, first_unix, evidence });
    // Judged on the mean since just before the onset: a pool opening its
    // connections, each opening its tables once, makes one poll's burst;
    // thousands a second in one poll are a storm already when threads are
    // seen opening tables.
    // And it lasts: one poll's jump of thousands followed by a few a
    // second is not a storm, whoever is seen opening tables (the global
    // counter can take in thousands at once: seen as 32 connections start
    // under a write load that opens a hundred tables in all).
    let lasts = |a: &Around| a.after_peak.is_none_or(|m| m >= 100.0) || a.polls_at_least(1000.0) >= 2;
    let opens_of =
        |m| jumped_for_a_while(ev, m, 100.0, 10.0).or_else(|| jumped(ev, m, 1000.0, 10.0)).filter(|a| lasts(a));
    let opens = opens_of("table_open_cache_misses_rate").or_else(|| opens_of("opened_tables_rate"));
    // Threads opening a table, not those waiting there for a metadata or
    // backup lock (FTWRL's waiters sit in open_table too).
    let (opening, opening_at) = in_frames_unless(
        samples,
        2,
        |f| matches!(f, "open_table" | "tdc_acquire_share" | "open_table_from_share" | "open_table_def" | "closefrm"),
        |f| f.starts_with("MDL_context::acquire_lock") || f.starts_with("MDL_wait::timed_wait"),
    );
    let opening_pl = processlist_states(ev, |s, _| s == "Opening tables" || s == "Closing tables");
    // Thousands of opens a second over several polls are a storm by
    // themselves: each takes the table cache's lock, and opens too quick to
    // be caught in a stack still cost a CPU between them. One poll's jump
    // with no thread seen opening a table is not evidence enough: the
    // global counter also takes in, at once, what a thread counted while
    // it was not summed (a background thread's opens when it ends).
    let alone = |a: &Around| a.polls_at_least(1000.0) >= 2 && a.mean >= 250.0;
    if let Some(a) = opens.filter(|a| opening >= 2 || opening_pl >= 4 || alone(a)) {
        let cache = match (var(ev, "table_open_cache"), var(ev, "table_definition_cache")) {
            (Some(t), Some(d)) => format!("; table_open_cache={t}, table_definition_cache={d}"),
            _ => String::new(),
        };
        return add(
            StallClass::TableOpenStorm,
            earliest(a.first_over, opening_at),
            format!(
                "{:.0} tables opened/s{}{}{cache}",
                a.peak,
                usual(&a),
                threads_doing(opening.max(opening_pl), "opening tables (open_table)")
            ),
        );
    }
    None
}

/// Connection storm: connections and new threads per second, threads
/// logging in.
fn connection_storm(ev: &Evidence, samples: &[SampleView]) -> Option<Finding> {
    let add = |class, first_unix, evidence: String| Some(Finding { class, first_unix, evidence });
    let conns = jumped_for_a_while(ev, "connections_rate", 50.0, 5.0);
    let (login, login_at) =
        in_frames(samples, 2, |f| matches!(f, "login_connection" | "acl_authenticate" | "check_connection"));
    let login_pl = processlist_states(ev, |s, u| {
        u == "unauthenticated user" || s.starts_with("login") || (s == "Reading from net" && u.is_empty())
    });
    // A thread started for most new connections (the thread cache not
    // serving them) is a cost by itself, caught in a stack or not.
    let creating = around(ev, "threads_created_rate", 100.0).is_some_and(|t| t.mean >= 100.0);
    if let Some(a) = conns.filter(|_| login >= 2 || login_pl >= 4 || creating) {
        let created = around(ev, "threads_created_rate", 0.0)
            .map(|t| {
                format!(
                    ", {:.0} threads created/s{}",
                    t.mean,
                    var(ev, "thread_cache_size").map(|c| format!(" (thread_cache_size={c})")).unwrap_or_default()
                )
            })
            .unwrap_or_default();
        return add(
            StallClass::ConnectionStorm,
            earliest(a.first_over, login_at),
            format!(
                "{:.0} connections/s{}{created}{}",
                a.mean,
                usual(&a),
                threads_doing(login.max(login_pl), "logging in")
            ),
        );
    }
    None
}

/// DROP / TRUNCATE of a table, running for a while.
fn drop_table(ev: &Evidence, samples: &[SampleView]) -> Option<Finding> {
    let add = |class, first_unix, evidence: String| Some(Finding { class, first_unix, evidence });
    let (dropping, drop_at) = in_frames(samples, 1, |f| {
        matches!(
            f,
            "mysql_rm_table"
                | "mysql_rm_table_no_locks"
                | "ha_delete_table"
                | "Sql_cmd_truncate_table::execute"
                | "Sql_cmd_truncate_table::truncate_table"
                | "row_drop_table_for_mysql"
        )
    });
    let drop_pl = ev.processlist.iter().find(|r| {
        let info = r.get("info").map(|i| i.trim_start().to_ascii_uppercase()).unwrap_or_default();
        (info.starts_with("DROP TABLE") || info.starts_with("TRUNCATE"))
            && working(r)
            && r.get("time").and_then(|t| t.parse::<f64>().ok()).is_some_and(|t| t >= 1.0)
    });
    if dropping >= 1 || drop_pl.is_some() {
        let who = drop_pl
            .map(|r| pl_summary(ev, r.get("id").and_then(|i| i.parse().ok()).unwrap_or(0)))
            .unwrap_or_else(|| format!("{} in mysql_rm_table / ha_delete_table", threads(dropping)));
        return add(
            StallClass::DropTable,
            drop_at,
            format!("{who}: deleting a table's files and its pages from the buffer pool"),
        );
    }
    None
}

/// Data file extension: a thread allocating space in a data file, or
/// writing zeros into it where the filesystem cannot allocate.
fn file_extension(ev: &Evidence, samples: &[SampleView]) -> Option<Finding> {
    let add = |class, first_unix, evidence: String| Some(Finding { class, first_unix, evidence });
    let (extenders, extend_at) = threads_where(samples, 1, extending);
    if extenders >= 1 {
        let files = files_of(samples, extending);
        let zeros = samples
            .iter()
            .flat_map(|s| &s.threads)
            .any(|t| extending(t) && t.file.as_ref().is_some_and(|io| io.syscall.starts_with("pwrite")));
        let system = files.contains("ibdata");
        return add(
            StallClass::FileExtension,
            extend_at,
            format!(
                "{} extending a data file{}{}{}",
                threads(extenders),
                if files.is_empty() { String::new() } else { format!(" ({files})") },
                if zeros { ", writing zeros: the filesystem does not allocate space without them" } else { "" },
                var(ev, "innodb_autoextend_increment")
                    .filter(|_| system)
                    .map(|i| format!("; innodb_autoextend_increment={i} MB"))
                    .unwrap_or_default()
            ),
        );
    }
    None
}

/// Statistics recalculation.
fn stats_recalc(ev: &Evidence, samples: &[SampleView]) -> Option<Finding> {
    let add = |class, first_unix, evidence: String| Some(Finding { class, first_unix, evidence });
    let (stats, stats_at) = in_frames(samples, 1, |f| f.starts_with("dict_stats_"));
    let analyze = ev.processlist.iter().find(|r| {
        r.get("info").is_some_and(|i| i.trim_start().to_ascii_uppercase().starts_with("ANALYZE")) && working(r)
    });
    if stats >= 1 || analyze.is_some() {
        let who = analyze
            .map(|r| pl_summary(ev, r.get("id").and_then(|i| i.parse().ok()).unwrap_or(0)))
            .unwrap_or_else(|| format!("{} in dict_stats_*", threads(stats)));
        return add(StallClass::StatsRecalc, stats_at, format!("{who} recalculating index statistics"));
    }
    None
}

/// Flushing storm: the redo log nearly full, so writes wait for pages to be flushed.
fn flush_storm(ev: &Evidence, samples: &[SampleView]) -> Option<Finding> {
    let add = |class, first_unix, evidence: String| Some(Finding { class, first_unix, evidence });
    let (flush_wait, flush_at) = in_frames(samples, 1, |f| {
        f.starts_with("buf_flush_wait") || f.starts_with("buf_flush_sync") || f.starts_with("log_checkpoint")
    });
    if let Some(a) = around(ev, "checkpoint_age_pct", 85.0).filter(|a| a.peak >= 85.0 || flush_wait >= 1) {
        return add(
            StallClass::FlushStorm,
            earliest(a.first_over, flush_at),
            format!(
                "checkpoint age at {:.0}% of the redo log's capacity{}: writes wait for dirty pages to be flushed{}",
                a.peak,
                a.usual.map(|u| format!(" (usually {u:.0}%)")).unwrap_or_default(),
                var(ev, "innodb_log_file_size")
                    .and_then(|v| v.parse::<f64>().ok())
                    .map(|b| format!("; innodb_log_file_size={:.0} MiB", b / 1048576.0))
                    .unwrap_or_default()
            ),
        );
    }
    None
}

/// Redo log writes holding up commits: one thread writing or syncing
/// the redo log in two samples running (one write or sync lasting the
/// time between samples: a client's thread when the log buffer is full,
/// or a sync every commit waits for), the log the only file threads wait
/// on while the server's tasks stall on I/O, or the log buffer filling. A
/// busy write load has some thread on the log in most samples, each time
/// a short write.
fn redo_log(ev: &Evidence, samples: &[SampleView]) -> Option<Finding> {
    let add = |class, first_unix, evidence: String| Some(Finding { class, first_unix, evidence });
    let on_log = |t: &ThreadView| t.file.as_ref().is_some_and(|io| log_file(&io.path));
    let (log_io, log_at) = threads_where(samples, 1, on_log);
    let lasting = samples.windows(2).any(|w| {
        w[0].threads.iter().filter(|t| on_log(t)).any(|a| w[1].threads.iter().any(|b| b.tid == a.tid && on_log(b)))
    });
    let full = around(ev, "innodb_log_waits_rate", 1.0).filter(|a| a.peak >= 1.0);
    // With innodb_flush_log_at_trx_commit=0 a commit waits for no log
    // write: only a full log buffer holds writers up.
    let trx_commit = var(ev, "innodb_flush_log_at_trx_commit").map(str::trim);
    let commits_wait = trx_commit != Some("0");
    // The server's tasks stalled on I/O for a while, and the redo log the
    // only file any thread was caught in I/O on, in a call commits wait
    // for: the log's write, and with innodb_flush_log_at_trx_commit=1 (or
    // MariaDB's 3) its sync (with 2 a sync is the background's, or the
    // page cleaner's before it writes pages). Commits wait on it even when
    // one sample alone catches it: a slowed device hands the next write to
    // another group commit leader between samples. The data pages' writes
    // go through asynchronous I/O, seen on no thread.
    let sync_too = trx_commit.is_none_or(|v| matches!(v, "1" | "3"));
    let files = || samples.iter().flat_map(|s| &s.threads).filter_map(|t| t.file.as_ref());
    let commit_io = |io: &pileup_engine::process::FileIo| {
        log_file(&io.path) && (sync_too || io.syscall.starts_with("pwrite") || io.syscall.starts_with("write"))
    };
    let device_holds_the_log = files().all(|io| log_file(&io.path))
        && files().any(commit_io)
        && stalled_on_io(ev).is_some_and(|a| stalled_for_a_while(ev, &a));
    if log_io >= 1 && (((lasting || device_holds_the_log) && commits_wait) || full.is_some()) {
        let biggest = samples
            .iter()
            .flat_map(|s| &s.threads)
            .filter(|t| on_log(t))
            .filter_map(|t| t.file.as_ref().and_then(|io| io.bytes.map(|b| (b, t.connection))))
            .max();
        let mut e =
            vec![format!("{} writing or syncing the redo log ({})", threads(log_io), files_of(samples, on_log))];
        if let Some((b, client)) = biggest.filter(|b| b.0 >= 1 << 20) {
            e.push(format!(
                "{} wrote {:.0} MiB at once",
                if client { "a client's thread" } else { "a thread" },
                b as f64 / 1048576.0
            ));
        }
        if let Some(f) = &full {
            e.push(format!("the log buffer was full {:.0} times a second", f.peak));
        }
        // Seen once while the device held the server up: the device is what to
        // look at, beside the log's settings.
        if !lasting && full.is_none() {
            e.push("while the server's tasks stalled on I/O".into());
        }
        let vars: Vec<String> = ["innodb_log_buffer_size", "innodb_flush_log_at_trx_commit"]
            .iter()
            .filter_map(|v| {
                var(ev, v).map(|x| match (*v, x.parse::<f64>()) {
                    ("innodb_log_buffer_size", Ok(b)) => format!("{v}={:.0} MiB", b / 1048576.0),
                    _ => format!("{v}={x}"),
                })
            })
            .collect();
        let vars = if vars.is_empty() { String::new() } else { format!("; {}", vars.join(", ")) };
        return add(
            StallClass::RedoLog,
            earliest(log_at, full.and_then(|f| f.first_over)),
            format!("{}{vars}", e.join(", ")),
        );
    }
    None
}

/// Tasks stalled on I/O most of the time where they seldom were (the
/// kernel's pressure stall information): a volume throttled below the
/// device, even for writes that InnoDB issues asynchronously and counts
/// nowhere as pending. It cannot pass 100%: judged by how far above the
/// usual it rose. The capture's own measurement counts too: a capture
/// early in a stall can be written before a poll's whole second shows it.
fn stalled_on_io(ev: &Evidence) -> Option<Around> {
    around(ev, "io_pressure_pct", 30.0)
        .map(|mut a| {
            if let Some(c) = ev.io_pressure_pct.filter(|c| *c > a.peak) {
                a.peak = c;
                a.first_over = a.first_over.or((c >= 30.0).then_some(ev.unix));
            }
            a
        })
        .filter(|a| a.peak >= 30.0 + a.usual.unwrap_or(0.0))
}

/// The server's own tasks stalled on I/O (its cgroup's pressure, never the
/// host's) far above their usual in two readings: the server waiting for
/// its device, whatever the stacks catch.
fn stalled_for_a_while(ev: &Evidence, stalled: &Around) -> bool {
    let line = 30.0 + stalled.usual.unwrap_or(0.0);
    stalled.polls_at_least(line) + usize::from(ev.io_pressure_pct.is_some_and(|c| c >= line)) >= 2
}

/// A slow or saturated disk: the datadir's device busy or slow, or
/// InnoDB's I/O requests queueing (a device throttled below the host,
/// as a cloud volume or a cgroup limit is, looks idle from here), with
/// threads waiting for it.
fn slow_disk(ev: &Evidence, samples: &[SampleView]) -> Option<Finding> {
    let add = |class, first_unix, evidence: String| Some(Finding { class, first_unix, evidence });
    let busy = around(ev, "disk_busy_pct", 90.0).filter(|b| b.peak >= 90.0);
    let slow = jumped(ev, "disk_await_ms", 20.0, 4.0);
    let pending = ["innodb_data_pending_reads", "innodb_data_pending_writes", "innodb_data_pending_fsyncs"]
        .iter()
        .filter_map(|m| around(ev, m, 4.0))
        .max_by(|a, b| a.peak.total_cmp(&b.peak))
        .filter(|p| p.peak >= 4.0);
    let stalled = stalled_on_io(ev);
    let d = in_disk_wait(samples);
    // In the I/O call itself: the C library's read, write or sync. Not an
    // asynchronous I/O wait: InnoDB's completion threads sit there even when
    // the server is idle.
    let in_io = |f: &str| {
        matches!(frames::class_of(f), Some(FrameClass::DiskRead | FrameClass::DiskWrite | FrameClass::DiskSync))
    };
    let (io, io_at) = in_frames(samples, 2, in_io);
    // A device that all but stops under writes holds InnoDB's page writes
    // in its asynchronous I/O while the writers wait for them in condition
    // waits: no thread is seen in a read, write or sync.
    let sustained = stalled.as_ref().is_some_and(|a| stalled_for_a_while(ev, a));
    let device = busy.is_some() || slow.is_some() || pending.is_some() || stalled.is_some();
    if (device && (d >= 2 || io >= 2)) || sustained {
        let mut e = Vec::new();
        if let Some(b) = &busy {
            e.push(format!("the datadir's device {:.0}% busy", b.peak));
        }
        if let Some(s) = &slow {
            e.push(format!(
                "{:.0} ms per I/O{}",
                s.peak,
                s.usual.map(|u| format!(" (usually {u:.1})")).unwrap_or_default()
            ));
        }
        if let Some(p) = &pending {
            e.push(format!("{:.0} InnoDB I/O requests pending", p.peak));
        }
        if let Some(s) = &stalled {
            e.push(format!(
                "tasks stalled on I/O {:.0}% of the time{}",
                s.peak,
                s.usual.map(|u| format!(" (usually {u:.0}%)")).unwrap_or_default()
            ));
        }
        let files = files_of(samples, |t| t.state == 'D');
        let (aio, _) = in_frames(samples, 1, |f| frames::class_of(f) == Some(FrameClass::AsyncIoWait));
        match (d.max(io), aio) {
            (0, 0) => e.push("no thread caught in a read, write or sync".into()),
            (0, _) => e.push(
                "no thread caught in a read, write or sync (InnoDB writes pages through asynchronous I/O)".into(),
            ),
            (n, _) => e.push(format!(
                "{} waiting for the disk{}",
                threads(n),
                if files.is_empty() { String::new() } else { format!(" ({files})") }
            )),
        }
        let first = [
            busy.and_then(|b| b.first_over),
            slow.and_then(|s| s.first_over),
            pending.and_then(|p| p.first_over),
            stalled.and_then(|s| s.first_over),
            io_at,
        ]
        .into_iter()
        .fold(None, earliest);
        return add(StallClass::SlowDisk, first, e.join(", "));
    }
    None
}

/// The findings as the verdict's words: the first class, its evidence, and
/// the others in the order they showed.
pub fn describe(found: &[Finding]) -> Option<String> {
    let first = found.first()?;
    let mut s = first.line();
    if found.len() > 1 {
        let rest: Vec<String> = found[1..].iter().map(|f| f.class.name().to_string()).collect();
        let earliest = found.iter().filter_map(|f| f.first_unix).fold(f64::MAX, f64::min);
        let when = first
            .first_unix
            .filter(|&t| t <= earliest)
            .map(|t| format!(" (it came first, at {} UTC)", stamp_tenths(t)))
            .unwrap_or_default();
        let then = if when.is_empty() { "also" } else { "then" };
        s += &format!("{when}; {then} {}", rest.join(", "));
    }
    Some(s)
}

/// For tests: an evidence history row.
#[cfg(test)]
fn row(unix: f64, kv: &[(&str, f64)]) -> crate::store::Row {
    crate::store::Row {
        unix,
        ok: true,
        cost_ms: 1.0,
        error: None,
        derived: kv.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(metric: &str, usual: f64, stall: f64) -> Vec<crate::store::Row> {
        (0..60).map(|i| row(1000.0 + i as f64, &[(metric, if i >= 57 { stall } else { usual })])).collect()
    }

    fn pl(state: &str, user: &str) -> std::collections::BTreeMap<String, String> {
        [("id", "9"), ("user", user), ("command", "Query"), ("time", "0"), ("state", state)]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn table_open_storm_needs_the_counter_and_threads_or_thousands() {
        let mut ev = Evidence { unix: 1059.0, onset_unix: Some(1057.2), ..Default::default() };
        ev.history = history("table_open_cache_misses_rate", 3.0, 400.0);
        assert!(findings(&ev).is_empty(), "a few hundred a second alone is not a stall");
        ev.history = history("table_open_cache_misses_rate", 3.0, 2400.0);
        for _ in 0..6 {
            ev.processlist.push(pl("Opening tables", "app"));
        }
        ev.variables.insert("table_open_cache".into(), "10".into());
        ev.variables.insert("table_definition_cache".into(), "400".into());
        let f = findings(&ev);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].class, StallClass::TableOpenStorm);
        assert_eq!(f[0].first_unix, Some(1057.0));
        assert_eq!(
            f[0].line(),
            "table-open storm: 2400 tables opened/s (usually 3), 6 threads opening tables (open_table); table_open_cache=10, table_definition_cache=400"
        );
        // A steady high rate is the workload, not a stall.
        ev.history = history("table_open_cache_misses_rate", 2000.0, 2400.0);
        assert!(findings(&ev).is_empty());
        // 32 new connections opening their 4 tables each: one poll's burst
        // of 130 with threads in open_table is a workload starting.
        ev.history = (0..60)
            .map(|i| row(1000.0 + i as f64, &[("opened_tables_rate", if i == 57 { 131.0 } else { 0.0 })]))
            .collect();
        assert!(findings(&ev).is_empty(), "{:?}", findings(&ev).iter().map(Finding::line).collect::<Vec<_>>());
        // Polls every second, then every 250 ms from the onset; one 250 ms
        // poll's jump of 7,000 opens that no thread is seen making (the
        // counter taking in a thread's count at once) is not a storm.
        let mut rows: Vec<_> = (0..57).map(|i| row(1000.0 + i as f64, &[("opened_tables_rate", 0.0)])).collect();
        for i in 0..12 {
            let v = if i == 3 {
                29161.0
            } else if i == 1 {
                500.0
            } else {
                0.0
            };
            rows.push(row(1057.0 + 0.25 * i as f64, &[("opened_tables_rate", v)]));
        }
        ev = Evidence { unix: 1059.0, onset_unix: Some(1057.0), history: rows.clone(), ..Default::default() };
        assert!(findings(&ev).is_empty(), "{:?}", findings(&ev).iter().map(Finding::line).collect::<Vec<_>>());
        // Nor with threads caught opening tables (connections starting)
        // when the polls after it fall back to a few a second.
        for _ in 0..4 {
            ev.processlist.push(pl("Opening tables", "app"));
        }
        assert!(findings(&ev).is_empty(), "{:?}", findings(&ev).iter().map(Finding::line).collect::<Vec<_>>());
        // The same jump in the last poll, with them, is one as it begins.
        let mut begins = rows[..61].to_vec();
        begins[60].derived.insert("opened_tables_rate".into(), 29161.0);
        ev.history = begins.clone();
        ev.unix = 1057.75;
        assert_eq!(findings(&ev).first().map(|f| f.class), Some(StallClass::TableOpenStorm));
        // And when it stopped at its highest after thousands a second over
        // several polls.
        let mut stopped = rows[..57].to_vec();
        for (i, v) in [1000.0, 2000.0, 4000.0, 6000.0, 0.0].iter().enumerate() {
            stopped.push(row(1057.0 + 0.25 * i as f64, &[("opened_tables_rate", *v)]));
        }
        ev.history = stopped;
        assert_eq!(findings(&ev).first().map(|f| f.class), Some(StallClass::TableOpenStorm));
        // And while the polls after it stay in the hundreds.
        for (i, r) in rows.iter().enumerate().skip(61) {
            begins.push(row(r.unix, &[("opened_tables_rate", if i % 2 == 0 { 900.0 } else { 200.0 })]));
        }
        ev.history = begins;
        ev.unix = 1059.0;
        assert_eq!(findings(&ev).first().map(|f| f.class), Some(StallClass::TableOpenStorm));
        // Thousands a second over several polls are one without them.
        ev.processlist.clear();
        for r in rows.iter_mut().skip(60).take(6) {
            r.derived.insert("opened_tables_rate".into(), 3000.0);
        }
        ev.history = rows;
        assert_eq!(findings(&ev).first().map(|f| f.class), Some(StallClass::TableOpenStorm));
    }

    #[test]
    fn several_classes_say_which_came_first() {
        let mut ev = Evidence { unix: 1059.0, onset_unix: Some(1057.0), ..Default::default() };
        ev.history = (0..60)
            .map(|i| {
                let stall = i >= 57;
                row(
                    1000.0 + i as f64,
                    &[
                        ("connections_rate", if stall { 900.0 } else { 5.0 }),
                        ("threads_created_rate", if stall { 880.0 } else { 0.0 }),
                        ("disk_busy_pct", if i >= 58 { 100.0 } else { 10.0 }),
                        ("disk_await_ms", if i >= 58 { 80.0 } else { 0.5 }),
                    ],
                )
            })
            .collect();
        for _ in 0..5 {
            ev.processlist.push(pl("login", "unauthenticated user"));
        }
        assert_eq!(findings(&ev).len(), 1, "the disk is busy but nothing waits for it");
        let reading = ThreadView {
            state: 'D',
            frames: vec!["pread64".to_string()],
            file: Some(pileup_engine::process::FileIo {
                syscall: "pread64",
                path: "/data/db/t1.ibd".into(),
                bytes: Some(16384),
            }),
            connection: true,
            tid: 0,
        };
        let samples = [SampleView { unix: 1058.3, threads: vec![reading; 3] }];
        ev.variables.insert("thread_cache_size".into(), "0".into());
        let f = findings_in(&ev, &samples);
        assert_eq!(
            f.iter().map(|f| f.class).collect::<Vec<_>>(),
            vec![StallClass::ConnectionStorm, StallClass::SlowDisk]
        );
        let d = describe(&f).unwrap();
        assert!(
            d.starts_with("connection storm: 452 connections/s (usually 5), 440 threads created/s (thread_cache_size=0), 5 threads logging in (it came first, at "),
            "{d}"
        );
        assert!(d.ends_with("; then slow or saturated disk"), "{d}");
        assert_eq!(
            f[1].evidence,
            "the datadir's device 100% busy, 80 ms per I/O (usually 0.5), 3 threads waiting for the disk (pread64 on db/t1.ibd (3))"
        );
    }

    #[test]
    fn a_client_writing_zeros_into_a_data_file_is_extending_it() {
        let ev = Evidence { unix: 1059.0, onset_unix: Some(1057.0), ..Default::default() };
        let io = |path: &str, bytes| {
            Some(pileup_engine::process::FileIo { syscall: "pwrite64", path: path.into(), bytes: Some(bytes) })
        };
        let t = |file, connection| ThreadView { state: 'D', frames: vec!["pwrite64".into()], file, connection, tid: 0 };
        // The page cleaner's doublewrite batch and a client's page write are not.
        let samples = [SampleView {
            unix: 1058.0,
            threads: vec![t(io("/d/ibdata1", 1 << 20), false), t(io("/d/db/t.ibd", 16384), true)],
        }];
        assert!(findings_in(&ev, &samples).is_empty());
        let samples = [SampleView { unix: 1058.1, threads: vec![t(io("/d/ibdata1", 1 << 20), true)] }];
        let mut ev = ev;
        ev.variables.insert("innodb_autoextend_increment".into(), "64".into());
        let f = findings_in(&ev, &samples);
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0].line(),
            "data file extension: 1 thread extending a data file (pwrite64 on ibdata1 (1)), writing zeros: the filesystem does not allocate space without them; innodb_autoextend_increment=64 MB"
        );
        // fallocate on a table's file, named by its frame.
        let samples = [SampleView {
            unix: 1058.1,
            threads: vec![ThreadView {
                state: 'S',
                frames: vec!["fallocate64".into(), "mariadbd+0x1234".into()],
                file: Some(pileup_engine::process::FileIo {
                    syscall: "fallocate",
                    path: "/d/db/t.ibd".into(),
                    bytes: None,
                }),
                connection: true,
                tid: 0,
            }],
        }];
        assert_eq!(
            findings_in(&ev, &samples)[0].evidence,
            "1 thread extending a data file (fallocate on db/t.ibd (1))"
        );
        // The disk, busy since before, follows the extension that keeps it busy.
        ev.history =
            (0..60).map(|i| row(1000.0 + i as f64, &[("disk_busy_pct", if i >= 57 { 100.0 } else { 5.0 })])).collect();
        let mut samples = samples;
        samples[0].threads.push(ThreadView { state: 'D', frames: vec!["pwrite64".into()], ..Default::default() });
        samples[0].threads.push(ThreadView { state: 'D', frames: vec!["fsync".into()], ..Default::default() });
        let f = findings_in(&ev, &samples);
        assert_eq!(
            f.iter().map(|f| f.class).collect::<Vec<_>>(),
            vec![StallClass::FileExtension, StallClass::SlowDisk]
        );
        let d = describe(&f).unwrap();
        assert!(d.ends_with("; also slow or saturated disk") && !d.contains("came first"), "{d}");
    }

    #[test]
    fn a_volume_slow_for_writes_is_seen_by_the_tasks_stalled_on_it() {
        // Throttled below the device: the device's counters and InnoDB's
        // pending counts stay at 0, the kernel sees tasks stalled on I/O.
        let mut ev = Evidence { unix: 1059.0, onset_unix: Some(1057.0), ..Default::default() };
        ev.history = (0..60)
            .map(|i| {
                row(1000.0 + i as f64, &[("io_pressure_pct", if i >= 57 { 95.0 } else { 0.4 }), ("disk_busy_pct", 0.0)])
            })
            .collect();
        let syncing = |path: &str| ThreadView {
            state: 'D',
            frames: vec!["__GI_fdatasync".into()],
            file: Some(pileup_engine::process::FileIo { syscall: "fdatasync", path: path.into(), bytes: None }),
            connection: false,
            tid: 0,
        };
        let samples =
            [SampleView { unix: 1057.4, threads: vec![syncing("/d/ib_logfile0"), syncing("/d/sbtest/sbtest1.ibd")] }];
        let f = findings_in(&ev, &samples);
        assert_eq!(f.iter().map(|f| f.class).collect::<Vec<_>>(), vec![StallClass::SlowDisk]);
        assert_eq!(
            f[0].evidence,
            "tasks stalled on I/O 95% of the time (usually 0%), 2 threads waiting for the disk (fdatasync on ib_logfile0 (1), fdatasync on sbtest/sbtest1.ibd (1))"
        );
        // Always this stalled: the usual state of this host, not a stall.
        for r in &mut ev.history {
            r.derived.insert("io_pressure_pct".into(), 95.0);
        }
        assert!(findings_in(&ev, &samples).is_empty());
        // Usually stalled a third of the time (a sync every commit), then
        // nearly always: a stall, though not four times the usual.
        for (i, r) in ev.history.iter_mut().enumerate() {
            r.derived.insert("io_pressure_pct".into(), if i >= 57 { 98.0 } else { 33.0 });
        }
        assert_eq!(findings_in(&ev, &samples).len(), 1);
    }

    #[test]
    fn the_servers_tasks_stalled_on_io_in_two_readings_are_a_slow_disk_whatever_the_stacks_catch() {
        // The device all but stopped under writes: InnoDB's page writes wait
        // in its asynchronous I/O, the writers wait for them in condition
        // waits, no thread is seen in a read, write or sync.
        let mut ev = Evidence { unix: 1059.0, onset_unix: Some(1057.0), ..Default::default() };
        ev.history = history("io_pressure_pct", 1.0, 55.0);
        let thread = |frame: &str| ThreadView { state: 'S', frames: vec![frame.into()], ..Default::default() };
        let samples = [SampleView {
            unix: 1057.5,
            threads: vec![
                thread("__io_uring_get_cqe"),
                thread("__GI___pthread_cond_wait"),
                thread("__GI___pthread_cond_wait"),
            ],
        }];
        let f = findings_in(&ev, &samples);
        assert_eq!(f.iter().map(|f| f.class).collect::<Vec<_>>(), vec![StallClass::SlowDisk]);
        assert_eq!(
            f[0].evidence,
            "tasks stalled on I/O 55% of the time (usually 1%), no thread caught in a read, write or sync (InnoDB writes pages through asynchronous I/O)"
        );
        assert_eq!(f[0].first_unix, Some(1057.0));
        // One reading alone (the capture's own, the polls at the usual): a
        // moment's stall, not the server waiting for its device.
        for r in &mut ev.history {
            r.derived.insert("io_pressure_pct".into(), 1.0);
        }
        ev.io_pressure_pct = Some(55.0);
        assert!(findings_in(&ev, &samples).is_empty());
        // The same stacks with the server's tasks stalled as usual: no stall.
        ev.io_pressure_pct = None;
        assert!(findings_in(&ev, &samples).is_empty());
        // A busy device is not this server's stall by one thread reading,
        // nor by its completion thread waiting; two threads reading are.
        for (i, r) in ev.history.iter_mut().enumerate() {
            r.derived.insert("disk_busy_pct".into(), if i >= 57 { 99.0 } else { 10.0 });
        }
        let one = [SampleView { unix: 1057.5, threads: vec![thread("__io_uring_get_cqe"), thread("__GI___pread64")] }];
        assert!(findings_in(&ev, &samples).is_empty());
        assert!(findings_in(&ev, &one).is_empty());
        let two = [SampleView { unix: 1057.5, threads: vec![thread("__GI___pread64"), thread("__GI___pread64")] }];
        assert!(findings_in(&ev, &two)[0].evidence.starts_with("the datadir's device 99% busy, 2 threads"));
    }

    #[test]
    fn a_capture_early_in_a_disk_stall_sees_it_by_its_own_measurement() {
        // The throttle began in the last poll's second: the polls show 12%,
        // the second of stack sampling that followed 90%.
        let mut ev = Evidence { unix: 1059.0, onset_unix: Some(1058.6), ..Default::default() };
        ev.history =
            (0..60).map(|i| row(1000.0 + i as f64, &[("io_pressure_pct", if i == 59 { 12.0 } else { 0.4 })])).collect();
        let waiting = ThreadView { state: 'D', frames: vec!["__GI___pwrite64".into()], ..Default::default() };
        let samples = [SampleView { unix: 1059.2, threads: vec![waiting.clone(), waiting] }];
        assert!(findings_in(&ev, &samples).is_empty());
        ev.io_pressure_pct = Some(90.0);
        let f = findings_in(&ev, &samples);
        assert_eq!(f.iter().map(|f| f.class).collect::<Vec<_>>(), vec![StallClass::SlowDisk]);
        assert!(f[0].evidence.starts_with("tasks stalled on I/O 90% of the time (usually 0%)"), "{}", f[0].evidence);
        // The capture's 20% is no stall.
        ev.io_pressure_pct = Some(20.0);
        assert!(findings_in(&ev, &samples).is_empty());
    }

    #[test]
    fn a_client_writing_the_redo_log_for_two_samples_holds_up_commits() {
        let mut ev = Evidence { unix: 1059.0, onset_unix: Some(1057.0), ..Default::default() };
        ev.variables.insert("innodb_log_buffer_size".into(), "16777216".into());
        ev.variables.insert("innodb_flush_log_at_trx_commit".into(), "2".into());
        let writer = ThreadView {
            state: 'D',
            frames: vec!["__GI___pwrite64".into()],
            file: Some(pileup_engine::process::FileIo {
                syscall: "pwrite64",
                path: "/d/ib_logfile0".into(),
                bytes: Some(16 << 20),
            }),
            connection: true,
            tid: 7,
        };
        let waiter = ThreadView { state: 'S', frames: vec!["syscall".into()], connection: true, ..Default::default() };
        let sample = |unix| SampleView { unix, threads: vec![writer.clone(), waiter.clone(), waiter.clone()] };
        // Seen once, with the log buffer never full: a write, not a stall;
        // nor is a different thread on the log in each sample (a busy write
        // load's group commit leaders).
        assert!(findings_in(&ev, &[sample(1057.1)]).is_empty());
        let mut other = sample(1057.3);
        other.threads[0].tid = 8;
        assert!(findings_in(&ev, &[sample(1057.1), other]).is_empty());
        let f = findings_in(&ev, &[sample(1057.1), sample(1057.3)]);
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0].line(),
            "redo log writes: 1 thread writing or syncing the redo log (pwrite64 on ib_logfile0 (1)), a client's thread wrote 16 MiB at once; innodb_log_buffer_size=16 MiB, innodb_flush_log_at_trx_commit=2"
        );
        assert_eq!(f[0].first_unix, Some(1057.1));
        // Commits that wait for no log write (innodb_flush_log_at_trx_commit=0):
        // the background write holds nobody up unless the buffer fills.
        ev.variables.insert("innodb_flush_log_at_trx_commit".into(), "0".into());
        assert!(findings_in(&ev, &[sample(1057.1), sample(1057.3)]).is_empty());
        ev.history = history("innodb_log_waits_rate", 0.0, 30.0);
        assert_eq!(findings_in(&ev, &[sample(1057.1), sample(1057.3)]).len(), 1);
    }

    #[test]
    fn a_log_sync_seen_once_holds_up_commits_when_the_device_stalls_the_server_and_nothing_else_waits() {
        // A throttled device: the server's tasks stalled on I/O, the clients
        // in condition waits, one sample catching a thread syncing the log
        // (the next sync is another leader's, or ends between samples).
        let mut ev = Evidence { unix: 1059.0, onset_unix: Some(1057.0), ..Default::default() };
        ev.variables.insert("innodb_flush_log_at_trx_commit".into(), "2".into());
        ev.history = history("io_pressure_pct", 1.0, 98.0);
        let io = |syscall: &'static str, path: &str| ThreadView {
            state: 'D',
            frames: vec!["fdatasync".into()],
            file: Some(pileup_engine::process::FileIo { syscall, path: path.into(), bytes: None }),
            connection: true,
            tid: 7,
        };
        let waiter = ThreadView { state: 'S', frames: vec!["syscall".into()], connection: true, ..Default::default() };
        let with = |t: ThreadView| {
            [
                SampleView { unix: 1057.2, threads: vec![waiter.clone(), waiter.clone()] },
                SampleView { unix: 1057.4, threads: vec![t, waiter.clone(), waiter.clone()] },
            ]
        };
        let classes = |samples: &[SampleView], ev: &Evidence| {
            findings_in(ev, samples).iter().map(|f| f.class).collect::<Vec<_>>()
        };
        // With innodb_flush_log_at_trx_commit=2 a commit waits for the log's
        // write, not its sync: a sync is the background's.
        let once = with(io("fdatasync", "/d/ib_logfile0"));
        assert_eq!(classes(&once, &ev), vec![StallClass::SlowDisk]);
        let written = with(io("pwrite64", "/d/ib_logfile0"));
        assert_eq!(classes(&written, &ev), vec![StallClass::RedoLog, StallClass::SlowDisk]);
        ev.variables.insert("innodb_flush_log_at_trx_commit".into(), "1".into());
        assert_eq!(classes(&once, &ev), vec![StallClass::RedoLog, StallClass::SlowDisk]);
        assert_eq!(
            findings_in(&ev, &once)[0].evidence,
            "1 thread writing or syncing the redo log (fdatasync on ib_logfile0 (1)), while the server's tasks stalled on I/O; innodb_flush_log_at_trx_commit=1"
        );
        // MariaDB's 3 syncs at commit as 1 does.
        ev.variables.insert("innodb_flush_log_at_trx_commit".into(), "3".into());
        assert_eq!(classes(&once, &ev), vec![StallClass::RedoLog, StallClass::SlowDisk]);
        ev.variables.insert("innodb_flush_log_at_trx_commit".into(), "1".into());
        // One poll of the stall, the capture's own reading unknown: a
        // moment's stall, not the device holding the log.
        let saved = std::mem::replace(
            &mut ev.history,
            (0..60).map(|i| row(1000.0 + i as f64, &[("io_pressure_pct", if i == 59 { 98.0 } else { 1.0 })])).collect(),
        );
        assert!(classes(&once, &ev).is_empty());
        ev.history = saved;
        // A thread also caught reading a table: the device is slow for
        // everything, the log one of its waits.
        let mut both = with(io("fdatasync", "/d/ib_logfile0"));
        both[0].threads.push(io("pread64", "/d/sbtest/sbtest1.ibd"));
        assert_eq!(classes(&both, &ev), vec![StallClass::SlowDisk]);
        // Commits that wait for no log write.
        ev.variables.insert("innodb_flush_log_at_trx_commit".into(), "0".into());
        assert_eq!(classes(&once, &ev), vec![StallClass::SlowDisk]);
        ev.variables.insert("innodb_flush_log_at_trx_commit".into(), "1".into());
        // The server's tasks stalled on I/O as usual: a sync, not a stall.
        ev.history = history("io_pressure_pct", 1.0, 1.0);
        assert!(classes(&once, &ev).is_empty());
    }

    #[test]
    fn drop_table_and_flush_storm() {
        let mut ev = Evidence { unix: 1059.0, onset_unix: Some(1057.0), ..Default::default() };
        let mut r = pl("checking permissions", "app");
        r.insert("info".into(), "DROP TABLE big".into());
        r.insert("time".into(), "4".into());
        ev.processlist.push(r);
        ev.history = history("checkpoint_age_pct", 20.0, 93.0);
        ev.variables.insert("innodb_log_file_size".into(), "100663296".into());
        let f = findings(&ev);
        assert_eq!(f.iter().map(|f| f.class).collect::<Vec<_>>(), vec![StallClass::FlushStorm, StallClass::DropTable]);
        assert_eq!(
            f[0].evidence,
            "checkpoint age at 93% of the redo log's capacity (usually 20%): writes wait for dirty pages to be flushed; innodb_log_file_size=96 MiB"
        );
        assert!(
            f[1].evidence.starts_with("connection 9 (app@, Query for 4s) running `DROP TABLE big`"),
            "{}",
            f[1].evidence
        );
        // The DROP's file deletion stalls the server's tasks on I/O: the
        // DROP is why, and leads the slow disk it causes.
        ev.history = history("io_pressure_pct", 1.0, 80.0);
        let f = findings(&ev);
        assert_eq!(f.iter().map(|f| f.class).collect::<Vec<_>>(), vec![StallClass::DropTable, StallClass::SlowDisk]);
        // A DROP waiting for a metadata lock is not deleting anything yet.
        ev.history = history("checkpoint_age_pct", 20.0, 93.0);
        ev.processlist[0].insert("state".into(), "Waiting for table metadata lock".into());
        assert_eq!(findings(&ev).iter().map(|f| f.class).collect::<Vec<_>>(), vec![StallClass::FlushStorm]);
    }
}
