//! Derived metrics: from two consecutive `SHOW GLOBAL STATUS` snapshots to
//! rates per second, gauges and the read-workload ratios DBAs tune by
//! ("rows shown to the user as close as possible to rows read", "physical
//! I/Os per row as close to 0 as possible"). Names are the status variable
//! in lower case, with `_rate` for per-second rates.

use std::collections::BTreeMap;

/// One poll's raw values (status variable names in lower case).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Seconds (monotonic clock of the poller).
    pub at: f64,
    pub values: BTreeMap<String, f64>,
}

impl Snapshot {
    pub fn get(&self, k: &str) -> Option<f64> {
        self.values.get(k).copied()
    }
}

/// Counters whose per-second rate is derived (besides every `com_*`).
pub const COUNTERS: &[&str] = &[
    "questions",
    "queries",
    "connections",
    "aborted_clients",
    "aborted_connects",
    "bytes_sent",
    "bytes_received",
    "rows_sent",
    "innodb_rows_read",
    "innodb_rows_inserted",
    "innodb_rows_updated",
    "innodb_rows_deleted",
    "innodb_buffer_pool_reads",
    "innodb_buffer_pool_read_requests",
    "innodb_data_reads",
    "innodb_data_writes",
    "innodb_pages_read",
    "innodb_pages_written",
    "innodb_log_writes",
    "innodb_os_log_fsyncs",
    "innodb_log_waits",
    "innodb_data_fsyncs",
    "slow_queries",
    "created_tmp_disk_tables",
    "select_full_join",
    "select_scan",
    "sort_merge_passes",
    "mysqld_read_bytes",
    "mysqld_write_bytes",
    "disk_reads",
    "disk_writes",
    "innodb_row_lock_waits",
    "innodb_row_lock_time",
    "opened_tables",
    "opened_table_definitions",
    "table_open_cache_misses",
    "threads_created",
];

/// Values reported as they are.
pub const GAUGES: &[&str] = &[
    "threads_running",
    "threads_connected",
    "innodb_data_pending_reads",
    "innodb_data_pending_writes",
    "innodb_data_pending_fsyncs",
    "innodb_history_list_length",
    "innodb_checkpoint_age",
    "innodb_buffer_pool_pages_dirty",
    "innodb_buffer_pool_pages_free",
    "replica_lag",
    "mysqld_rss_bytes",
    "memory_limit_bytes",
    "disk_in_flight",
    "innodb_row_lock_current_waits",
    "pl_threads",
    "pl_sleeping",
    "pl_active",
    "pl_active_longest_s",
    "pl_waiting_lock",
    "pl_waiting_mdl",
    "pl_waiting_global_lock",
    "poll_ok",
    "poll_cost_ms",
    "cost_status_ms",
    "cost_processlist_ms",
    "cost_replica_ms",
    "cost_innodb_metrics_ms",
    "cost_os_ms",
];

/// Ratios and OS-derived values `derive` computes (besides rates and gauges).
pub const COMPUTED: &[&str] = &[
    "rows_read_rate",
    "bp_read_requests_per_row",
    "physical_reads_per_row_read",
    "rows_read_per_query",
    "rows_read_per_row_sent",
    "bp_miss_ratio",
    "os_cpu_busy_pct",
    "os_cpu_iowait_pct",
    "mysqld_cpu_cores",
    "disk_busy_pct",
    "disk_await_ms",
    "io_pressure_pct",
    "checkpoint_age_pct",
    "mysqld_rss_growth_rate",
    "memory_limit_pct",
    "bytes_sent_link_share",
];

/// Every metric name `derive` can produce: the rates of [`COUNTERS`],
/// [`GAUGES`], [`COMPUTED`] (and `com_*_rate`, which depends on the server).
pub fn metric_names() -> Vec<String> {
    let mut v: Vec<String> = COUNTERS.iter().map(|c| format!("{c}_rate")).collect();
    v.extend(GAUGES.iter().chain(COMPUTED).map(|s| s.to_string()));
    v
}

/// What each gauge and derived value means, for `watch --list-metrics`
/// (rates say what they count: `NAME_rate` is status counter NAME per second).
const MEANINGS: &[(&str, &str)] = &[
    ("threads_running", "statements executing now (not counting pileup's own poll)"),
    ("threads_connected", "open connections"),
    ("innodb_data_pending_reads", "read requests waiting on the storage"),
    ("innodb_data_pending_writes", "write requests waiting on the storage"),
    ("innodb_data_pending_fsyncs", "fsyncs waiting on the storage"),
    ("innodb_history_list_length", "undo not yet purged"),
    ("innodb_checkpoint_age", "redo bytes not yet checkpointed"),
    ("innodb_buffer_pool_pages_dirty", "buffer pool pages changed and not yet written"),
    ("innodb_buffer_pool_pages_free", "free buffer pool pages"),
    ("replica_lag", "Seconds_Behind_Master, worst channel"),
    ("mysqld_rss_bytes", "the server's resident memory"),
    ("memory_limit_bytes", "the memory the server may use: its cgroup's memory.max, else the host's"),
    ("mysqld_rss_growth_rate", "how fast the server's resident memory grows, bytes per second (negative: shrinks)"),
    ("memory_limit_pct", "the server's resident memory as a share of memory_limit_bytes, %"),
    ("disk_in_flight", "I/Os in flight on the datadir's device"),
    ("innodb_row_lock_current_waits", "transactions waiting for a row lock now"),
    ("pl_threads", "connections and server threads in the processlist"),
    ("pl_sleeping", "idle client connections"),
    ("pl_active", "client connections running a command"),
    ("pl_active_longest_s", "the longest-running command, seconds"),
    ("pl_waiting_lock", "connections waiting for a metadata, table or global lock"),
    ("pl_waiting_mdl", "connections waiting for a metadata lock"),
    ("pl_waiting_global_lock", "connections waiting for the global read or backup lock"),
    ("poll_ok", "1 when the poll answered, 0 when it failed"),
    ("poll_cost_ms", "what the poll cost, ms"),
    ("cost_status_ms", "SHOW GLOBAL STATUS's share of the poll, ms"),
    ("cost_processlist_ms", "the processlist's share of the poll, ms"),
    ("cost_replica_ms", "replica status's share of the poll, ms"),
    ("cost_innodb_metrics_ms", "INNODB_METRICS' share of the poll (MySQL), ms"),
    ("cost_os_ms", "the OS counters' share of the poll, ms"),
    ("rows_read_rate", "rows the server read from tables per second"),
    ("bp_read_requests_per_row", "buffer pool page requests per row touched"),
    ("physical_reads_per_row_read", "pages read from disk per row read (as close to 0 as possible)"),
    ("rows_read_per_query", "rows read per statement"),
    ("rows_read_per_row_sent", "rows read per row sent to clients (close to 1 is best)"),
    ("bp_miss_ratio", "buffer pool page requests that went to disk"),
    ("os_cpu_busy_pct", "host CPU busy, % of all CPUs"),
    ("os_cpu_iowait_pct", "host CPU in I/O wait, % of all CPUs"),
    ("mysqld_cpu_cores", "CPU the server process used, in cores"),
    ("disk_busy_pct", "time the datadir's device had I/O in flight, %"),
    ("disk_await_ms", "mean time of an I/O on the datadir's device, queueing included, ms"),
    ("io_pressure_pct", "time some task of the server's cgroup was stalled on I/O, %"),
    ("checkpoint_age_pct", "checkpoint age as a share of its maximum, %"),
    ("bytes_sent_link_share", "bytes sent as a share of the network link"),
];

/// Every metric with its meaning, in the order [`metric_names`] gives.
pub fn metrics_described() -> Vec<(String, String)> {
    metric_names()
        .into_iter()
        .map(|m| {
            let d = meaning(&m).unwrap_or_default();
            (m, d)
        })
        .collect()
}

/// What a metric means (a rate: the status counter it is of, per second).
pub fn meaning(metric: &str) -> Option<String> {
    match MEANINGS.iter().find(|(n, _)| *n == metric) {
        Some((_, d)) => Some(d.to_string()),
        None => metric.strip_suffix("_rate").map(|c| format!("status counter {c} per second")),
    }
}

/// Is `name` a metric `derive` can produce?
pub fn is_metric(name: &str) -> bool {
    (name.starts_with("com_") && name.ends_with("_rate")) || metric_names().iter().any(|m| m == name)
}

/// The known metric closest to a misspelt `name`: one that contains it or
/// that it contains, else the one with the fewest edits (if few).
pub fn suggest(name: &str) -> Option<String> {
    let names = metric_names();
    if let Some(m) = names
        .iter()
        .filter(|m| m.contains(name) || name.contains(m.as_str()))
        .min_by_key(|m| m.len().abs_diff(name.len()))
    {
        return Some(m.clone());
    }
    names.into_iter().map(|m| (edits(&m, name), m)).filter(|(d, _)| *d <= 3).min().map(|(_, m)| m)
}

/// Levenshtein distance (short strings; not worth a crate).
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for j in 0..b.len() {
            let cur = row[j + 1];
            row[j + 1] = if ca == b[j] { prev } else { 1 + prev.min(row[j]).min(row[j + 1]) };
            prev = cur;
        }
    }
    row[b.len()]
}

/// The handler's row reads: every server version counts them.
pub const HANDLER_READS: &[&str] = &[
    "handler_read_first",
    "handler_read_key",
    "handler_read_last",
    "handler_read_next",
    "handler_read_prev",
    "handler_read_rnd",
    "handler_read_rnd_next",
];

/// Rows read in the interval, from the counters this server has: `Rows_read`
/// (MariaDB: rows read from tables, temporary tables apart), else
/// `Innodb_rows_read` (MySQL; MariaDB 10.11 has none, MDEV-28539), else the
/// sum of `Handler_read_*` (every version; index probes count too).
pub fn rows_read_delta(delta: &impl Fn(&str) -> Option<f64>) -> Option<f64> {
    delta("rows_read")
        .or_else(|| delta("innodb_rows_read"))
        .or_else(|| HANDLER_READS.iter().map(|k| delta(k)).try_fold(0.0, |acc, d| d.map(|d| acc + d)))
}

/// A metric this server cannot give, and why; or where a metric's figures
/// come from on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Availability {
    pub metrics: &'static str,
    pub why: &'static str,
}

/// What the server's counters allow, judged from the metrics derived from
/// them (`has`: is this metric derived?), said once at start by `top` and
/// in each capture's report.
pub fn availability(has: impl Fn(&str) -> bool) -> Vec<Availability> {
    let mut v = vec![];
    if !has("innodb_rows_read_rate") {
        v.push(Availability {
            metrics:
                "innodb_rows_read_rate, innodb_rows_inserted_rate, innodb_rows_updated_rate, innodb_rows_deleted_rate",
            why: "this server has no Innodb_rows_* counters (MariaDB removed them in 10.11, MDEV-28539); \
                  rows_read_rate and the read ratios use Rows_read, or the Handler_read_* counters",
        });
    }
    if !has("rows_read_rate") {
        v.push(Availability {
            metrics: "rows_read_rate, rows_read_per_query, rows_read_per_row_sent, physical_reads_per_row_read",
            why: "this server counts no rows read (no Rows_read, Innodb_rows_read or Handler_read_* in SHOW GLOBAL STATUS)",
        });
    }
    v
}

/// The metrics a server cannot give, judged from the names of its status
/// counters (`counter("innodb_rows_read")`: does SHOW GLOBAL STATUS list
/// it, in lower case?), before any metric is derived.
pub fn unavailable(counter: &dyn Fn(&str) -> bool) -> Vec<Availability> {
    availability(|m| match m {
        "innodb_rows_read_rate" => counter("innodb_rows_read"),
        "rows_read_rate" => rows_read_delta(&|k| counter(k).then_some(0.0)).is_some(),
        _ => true,
    })
}

/// Kernel clock ticks per second (USER_HZ; 100 on every Linux ABI pileup runs on).
const TICKS: f64 = 100.0;

/// Settings that shape derived values.
#[derive(Debug, Clone, PartialEq)]
pub struct DeriveOptions {
    /// Network link speed in bits per second, for `bytes_sent_link_share`.
    pub link_bps: f64,
}

impl Default for DeriveOptions {
    fn default() -> Self {
        DeriveOptions { link_bps: 1e9 }
    }
}

/// Rates, gauges and ratios between two snapshots. A counter that went
/// backwards (server restart, FLUSH STATUS) yields no rate rather than a
/// negative one; ratios whose denominator did not move are left out.
pub fn derive(prev: &Snapshot, cur: &Snapshot, o: &DeriveOptions) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let dt = cur.at - prev.at;
    let delta = |k: &str| -> Option<f64> {
        let (a, b) = (prev.get(k)?, cur.get(k)?);
        (b >= a).then_some(b - a)
    };
    if dt > 0.0 {
        let com = cur.values.keys().filter(|k| k.starts_with("com_")).map(String::as_str);
        for k in COUNTERS.iter().copied().chain(com) {
            if let Some(d) = delta(k) {
                out.insert(format!("{k}_rate"), d / dt);
            }
        }
    }
    // pileup's own statements (its polls, top's queries) are not the
    // server's work.
    if let (Some(own), true) = (delta("own_statements"), dt > 0.0) {
        for k in ["questions_rate", "queries_rate"] {
            if let Some(v) = out.get_mut(k) {
                *v = (*v - own / dt).max(0.0);
            }
        }
    }
    for k in GAUGES {
        if let Some(v) = cur.get(k) {
            out.insert((*k).to_string(), v);
        }
    }
    let ratio = |num: Option<f64>, den: Option<f64>| match (num, den) {
        (Some(n), Some(d)) if d > 0.0 => Some(n / d),
        _ => None,
    };
    let sum = |keys: &[&str]| keys.iter().map(|k| delta(k)).try_fold(0.0, |acc, d| d.map(|d| acc + d));
    let rows_read = rows_read_delta(&delta);
    let rows_touched = sum(&["innodb_rows_read", "innodb_rows_inserted", "innodb_rows_updated", "innodb_rows_deleted"])
        .or_else(|| Some(rows_read? + sum(&["handler_write", "handler_update", "handler_delete"])?));
    if let (Some(r), true) = (rows_read, dt > 0.0) {
        out.insert("rows_read_rate".into(), r / dt);
    }
    let pairs: [(&str, Option<f64>); 5] = [
        // Logical page reads per row touched: how much of the buffer pool one row costs.
        ("bp_read_requests_per_row", ratio(delta("innodb_buffer_pool_read_requests"), rows_touched)),
        // Physical reads per row read: as close to 0 as possible.
        ("physical_reads_per_row_read", ratio(delta("innodb_buffer_pool_reads"), rows_read)),
        // Rows read per query.
        ("rows_read_per_query", ratio(rows_read, delta("questions"))),
        // Rows read per row sent to the client: as close to 1 as possible.
        ("rows_read_per_row_sent", ratio(rows_read, delta("rows_sent"))),
        // Buffer pool miss ratio.
        ("bp_miss_ratio", ratio(delta("innodb_buffer_pool_reads"), delta("innodb_buffer_pool_read_requests"))),
    ];
    for (k, v) in pairs {
        if let Some(v) = v {
            out.insert(k.to_string(), v);
        }
    }
    if dt > 0.0 {
        if let (Some(busy), Some(total)) = (delta("os_cpu_busy_ticks"), delta("os_cpu_ticks")) {
            if total > 0.0 {
                out.insert("os_cpu_busy_pct".into(), 100.0 * busy / total);
                if let Some(w) = delta("os_cpu_iowait_ticks") {
                    out.insert("os_cpu_iowait_pct".into(), 100.0 * w / total);
                }
            }
        }
        if let Some(t) = delta("mysqld_cpu_ticks") {
            // cores' worth of CPU the server used
            out.insert("mysqld_cpu_cores".into(), t / TICKS / dt);
        }
        // Share of the interval in which some task of the server's cgroup was
        // stalled waiting for I/O: the kernel's pressure stall information,
        // which sees a volume throttled below the device (a cgroup limit)
        // that the device's own counters do not.
        if let Some(us) = delta("io_pressure_some_us") {
            out.insert("io_pressure_pct".into(), io_pressure_pct(us, dt));
        }
        if let Some(ms) = delta("disk_io_ms") {
            out.insert("disk_busy_pct".into(), (100.0 * ms / (dt * 1000.0)).min(100.0));
        }
        // Mean time an I/O completed in this interval took, queueing included.
        if let (Some(r), Some(w), Some(rms), Some(wms)) =
            (delta("disk_reads"), delta("disk_writes"), delta("disk_read_ms"), delta("disk_write_ms"))
        {
            if r + w > 0.0 {
                out.insert("disk_await_ms".into(), (rms + wms) / (r + w));
            }
        }
    }
    // How full the redo log is: InnoDB flushes furiously as this nears 100%.
    if let Some(p) = ratio(cur.get("innodb_checkpoint_age"), cur.get("innodb_checkpoint_max_age")) {
        out.insert("checkpoint_age_pct".into(), 100.0 * p);
    }
    // Memory: the server's growth, and how near it is to its limit.
    if let (Some(a), Some(b), true) = (prev.get("mysqld_rss_bytes"), cur.get("mysqld_rss_bytes"), dt > 0.0) {
        out.insert("mysqld_rss_growth_rate".into(), (b - a) / dt);
    }
    if let (Some(rss), Some(limit)) = (cur.get("mysqld_rss_bytes"), cur.get("memory_limit_bytes").filter(|l| *l > 0.0))
    {
        out.insert("memory_limit_pct".into(), 100.0 * rss / limit);
    }
    if let Some(r) = out.get("bytes_sent_rate").copied() {
        if o.link_bps > 0.0 {
            out.insert("bytes_sent_link_share".into(), r * 8.0 / o.link_bps);
        }
    }
    out
}

/// Share (%) of `dt` seconds in which some task was stalled on I/O, from
/// the growth `us` of an `io.pressure` total (microseconds).
pub fn io_pressure_pct(us: f64, dt: f64) -> f64 {
    (100.0 * us / (dt * 1e6)).clamp(0.0, 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_growth_and_its_share_of_the_limit() {
        let gib = (1u64 << 30) as f64;
        let a = snap(0.0, &[("mysqld_rss_bytes", 1.0 * gib), ("memory_limit_bytes", 4.0 * gib)]);
        let b = snap(2.0, &[("mysqld_rss_bytes", 3.0 * gib), ("memory_limit_bytes", 4.0 * gib)]);
        let d = derive(&a, &b, &DeriveOptions::default());
        assert_eq!(d["mysqld_rss_growth_rate"], gib);
        assert_eq!(d["memory_limit_pct"], 75.0);
        assert_eq!(d["memory_limit_bytes"], 4.0 * gib);
    }

    #[test]
    fn pileups_own_statements_are_left_out_of_the_rates() {
        let a = snap(0.0, &[("questions", 1000.0), ("queries", 1000.0), ("own_statements", 10.0)]);
        let b = snap(2.0, &[("questions", 1204.0), ("queries", 1204.0), ("own_statements", 14.0)]);
        let d = derive(&a, &b, &DeriveOptions::default());
        assert_eq!(d["questions_rate"], 100.0);
        assert_eq!(d["queries_rate"], 100.0);
        // An idle server: only pileup's own statements, a rate of 0.
        let c = snap(3.0, &[("questions", 1208.0), ("queries", 1208.0), ("own_statements", 18.0)]);
        assert_eq!(derive(&b, &c, &DeriveOptions::default())["questions_rate"], 0.0);
    }

    #[test]
    fn every_metric_has_a_meaning() {
        let all = metrics_described();
        assert_eq!(all.len(), metric_names().len());
        for (m, d) in &all {
            assert!(!d.is_empty(), "{m} has no meaning");
        }
        assert!(MEANINGS.iter().all(|(n, _)| is_metric(n)), "a meaning for a metric that does not exist");
    }

    fn snap(at: f64, kv: &[(&str, f64)]) -> Snapshot {
        Snapshot { at, values: kv.iter().map(|(k, v)| (k.to_string(), *v)).collect() }
    }

    #[test]
    fn rates_gauges_and_ratios() {
        let a = snap(
            10.0,
            &[
                ("questions", 1000.0),
                ("com_select", 500.0),
                ("innodb_rows_read", 10_000.0),
                ("innodb_buffer_pool_reads", 10.0),
                ("innodb_buffer_pool_read_requests", 50_000.0),
                ("rows_sent", 100.0),
                ("bytes_sent", 0.0),
                ("threads_running", 3.0),
            ],
        );
        let b = snap(
            12.0,
            &[
                ("questions", 3000.0),
                ("com_select", 1500.0),
                ("innodb_rows_read", 50_000.0),
                ("innodb_buffer_pool_reads", 50.0),
                ("innodb_buffer_pool_read_requests", 250_000.0),
                ("rows_sent", 2100.0),
                ("bytes_sent", 250_000_000.0),
                ("threads_running", 7.0),
            ],
        );
        let d = derive(&a, &b, &DeriveOptions::default());
        assert_eq!(d["questions_rate"], 1000.0);
        assert_eq!(d["com_select_rate"], 500.0);
        assert_eq!(d["threads_running"], 7.0);
        assert_eq!(d["rows_read_per_query"], 20.0);
        assert_eq!(d["physical_reads_per_row_read"], 0.001);
        assert_eq!(d["rows_read_per_row_sent"], 20.0);
        assert_eq!(d["bp_miss_ratio"], 40.0 / 200_000.0);
        assert_eq!(d["bytes_sent_link_share"], 1.0, "125 MB/s on a 1 Gbit/s link");
        assert!(!d.contains_key("bp_read_requests_per_row"), "needs all four row counters");
        for k in d.keys() {
            assert!(is_metric(k), "{k} is derived but not in the catalogue");
        }
    }

    #[test]
    fn every_derived_name_is_catalogued_and_typos_get_a_suggestion() {
        let all: Vec<(&str, f64)> = COUNTERS
            .iter()
            .chain(GAUGES)
            .map(|k| (*k, 1.0))
            .chain([
                ("os_cpu_ticks", 1.0),
                ("os_cpu_busy_ticks", 1.0),
                ("os_cpu_iowait_ticks", 1.0),
                ("mysqld_cpu_ticks", 1.0),
                ("disk_io_ms", 1.0),
                ("io_pressure_some_us", 1.0),
                ("disk_read_ms", 1.0),
                ("disk_write_ms", 1.0),
                ("innodb_checkpoint_max_age", 10.0),
                ("rows_read", 1.0),
                ("innodb_rows_read", 1.0),
            ])
            .collect();
        let a = snap(0.0, &all);
        let b = snap(1.0, &all.iter().map(|(k, v)| (*k, v * 2.0)).collect::<Vec<_>>());
        let d = derive(&a, &b, &DeriveOptions::default());
        for k in d.keys() {
            assert!(is_metric(k), "{k} is derived but not in the catalogue");
        }
        for m in COMPUTED {
            assert!(d.contains_key(*m), "{m} is catalogued but never derived");
        }
        assert_eq!(suggest("data_pending_reads").as_deref(), Some("innodb_data_pending_reads"));
        assert_eq!(suggest("threads_runing").as_deref(), Some("threads_running"));
        assert_eq!(suggest("zzzz_qqqq_xxxx"), None);
        assert!(is_metric("com_select_rate") && !is_metric("questions"));
    }

    #[test]
    fn os_values() {
        let a = snap(
            0.0,
            &[
                ("os_cpu_ticks", 1000.0),
                ("os_cpu_busy_ticks", 500.0),
                ("os_cpu_iowait_ticks", 10.0),
                ("mysqld_cpu_ticks", 0.0),
                ("disk_io_ms", 0.0),
                ("io_pressure_some_us", 5_000_000.0),
            ],
        );
        let b = snap(
            2.0,
            &[
                ("os_cpu_ticks", 1400.0),
                ("os_cpu_busy_ticks", 800.0),
                ("os_cpu_iowait_ticks", 50.0),
                ("mysqld_cpu_ticks", 300.0),
                ("disk_io_ms", 1000.0),
                ("io_pressure_some_us", 6_800_000.0),
            ],
        );
        let d = derive(&a, &b, &DeriveOptions::default());
        assert_eq!(d["os_cpu_busy_pct"], 75.0);
        assert_eq!(d["os_cpu_iowait_pct"], 10.0);
        assert_eq!(d["mysqld_cpu_cores"], 1.5);
        assert_eq!(d["disk_busy_pct"], 50.0);
        assert!((d["io_pressure_pct"] - 90.0).abs() < 1e-9, "1.8 s stalled of 2 s");
    }

    #[test]
    fn read_ratios_use_the_counters_each_server_has() {
        // MariaDB 10.11: Rows_read, no Innodb_rows_*.
        let maria = |at: f64, k: f64| {
            snap(
                at,
                &[
                    ("questions", 100.0 * k),
                    ("rows_read", 1000.0 * k),
                    ("rows_sent", 500.0 * k),
                    ("innodb_buffer_pool_reads", 10.0 * k),
                    ("innodb_buffer_pool_read_requests", 3000.0 * k),
                    ("handler_write", 100.0 * k),
                    ("handler_update", 0.0),
                    ("handler_delete", 0.0),
                ],
            )
        };
        let d = derive(&maria(0.0, 1.0), &maria(1.0, 2.0), &DeriveOptions::default());
        assert_eq!(d["rows_read_rate"], 1000.0);
        assert_eq!(d["rows_read_per_query"], 10.0);
        assert_eq!(d["rows_read_per_row_sent"], 2.0);
        assert_eq!(d["physical_reads_per_row_read"], 0.01);
        assert_eq!(d["bp_read_requests_per_row"], 3000.0 / 1100.0);
        let notes = availability(|m| d.contains_key(m));
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].metrics.starts_with("innodb_rows_read_rate") && notes[0].why.contains("MDEV-28539"));
        // Neither: the handler's reads.
        let handler = |at: f64, k: f64| {
            let mut kv: Vec<(&str, f64)> = HANDLER_READS.iter().map(|h| (*h, 10.0 * k)).collect();
            kv.push(("questions", 7.0 * k));
            snap(at, &kv)
        };
        let d = derive(&handler(0.0, 1.0), &handler(1.0, 2.0), &DeriveOptions::default());
        assert_eq!(d["rows_read_rate"], 70.0);
        assert_eq!(d["rows_read_per_query"], 10.0);
        // Nothing at all: said, not silently missing.
        let d = derive(&snap(0.0, &[("questions", 1.0)]), &snap(1.0, &[("questions", 2.0)]), &DeriveOptions::default());
        assert_eq!(availability(|m| d.contains_key(m)).len(), 2);
    }

    #[test]
    fn counter_reset_gives_no_rate() {
        let a = snap(1.0, &[("questions", 5000.0), ("innodb_rows_read", 10.0)]);
        let b = snap(2.0, &[("questions", 10.0), ("innodb_rows_read", 20.0)]);
        let d = derive(&a, &b, &DeriveOptions::default());
        assert!(!d.contains_key("questions_rate"));
        assert!(!d.contains_key("rows_read_per_query"));
        assert_eq!(d["innodb_rows_read_rate"], 10.0);
    }
}
