//! What the prefetcher did, as counters and gauges: atomics the stages
//! add to, a snapshot for the status lines and JSON, and Prometheus
//! exposition. Nothing here coordinates the stages (see [`crate::progress`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// What the prefetcher did.
#[derive(Debug, Default)]
pub struct Counters {
    pub events_read: AtomicU64,
    pub rows_planned: AtomicU64,
    pub keys_issued: AtomicU64,
    pub keys_deduplicated: AtomicU64,
    pub lookups: AtomicU64,
    pub lookup_errors: AtomicU64,
    pub skipped_not_in_image: AtomicU64,
    pub skipped_float_key: AtomicU64,
    pub skipped_schema: AtomicU64,
    pub skipped_no_table: AtomicU64,
    /// Parallel replication: transactions the workers may be running beyond
    /// the reported position, and events skipped for being among them.
    pub in_flight_trx: AtomicU64,
    pub skipped_in_flight: AtomicU64,
    /// Work dropped while a reader's connection was down, and times the
    /// control connection was re-established (replica restarted).
    pub jobs_dropped: AtomicU64,
    pub reconnects: AtomicU64,
    /// Corrupt events met.
    pub corrupt_events: AtomicU64,
    /// Relay log files the reader went on into (rotation).
    pub files_followed: AtomicU64,
    /// Times the next relay log file could not be opened (see stderr).
    pub follow_errors: AtomicU64,
    /// Times the applier had passed the reader and it jumped ahead.
    pub jumps: AtomicU64,
    /// Jobs a reader took from the queue after the applier had passed every
    /// event in them, and dropped (their pages were already read by the
    /// applier: looking them up again would only delay the jobs behind).
    pub jobs_stale: AtomicU64,
    /// Events between the applier and the reader at the last poll.
    pub distance_events: AtomicU64,
    /// Events between the applier and the newest event up to which every
    /// lookup has completed, at the last poll (0 when they are behind it).
    pub warmed_ahead_events: AtomicU64,
    /// Polls at which the lookups completed were behind the applier.
    pub late_polls: AtomicU64,
    /// Time the relay-log reader waited for a free reader (the readers are
    /// the bottleneck when this grows).
    pub readers_busy_ms: AtomicU64,
    /// Statement events turned into reads, and skipped (predicted to scan;
    /// not expressible as reads: multi-table, subqueries, INSERT … SELECT).
    pub statements_planned: AtomicU64,
    pub statements_skipped_not_indexed: AtomicU64,
    pub statements_skipped_unsupported: AtomicU64,
    /// Rows the statement reads returned.
    pub statement_rows_read: AtomicU64,
    /// Statement shapes parsed (the rest were template-cache hits).
    pub templates_parsed: AtomicU64,
    /// DDL statements the reader waited at until the applier passed them.
    pub ddl_pauses: AtomicU64,
    pub lag_secs: AtomicU64,
    /// The relay log beyond the applier in bytes, and how far behind the
    /// applier is in seconds ([`crate::gate::behind_secs`]; 0 when unknown).
    pub backlog_bytes: AtomicU64,
    pub backlog_seconds: AtomicU64,
    /// What the prefetcher is doing ([`crate::gate::State::code`]).
    pub state: AtomicU64,
    /// Keys issued for events the applier has not reached yet.
    pub keys_ahead: AtomicU64,
    pub window_keys: AtomicU64,
    /// Polls with the replica not lagging (prefetch idle).
    pub idle_polls: AtomicU64,
    /// `--defer-purge`: whether purge is held off now, times it was held,
    /// times a hold ended at the history cap, time held, and the history
    /// list length at the last look.
    pub purge_held: AtomicU64,
    pub purge_holds: AtomicU64,
    pub purge_released_at_cap: AtomicU64,
    pub purge_held_ms: AtomicU64,
    pub history_length: AtomicU64,
    /// `--warm pages`: keys mapped to leaf pages, pages asked for (new in
    /// the list), buffer pool loads asked for, keys that could not be
    /// mapped (and were not read), keys dropped because the page mapper
    /// was behind, and the indexes' upper-level pages read from their files.
    pub keys_mapped: AtomicU64,
    pub pages_listed: AtomicU64,
    pub page_loads: AtomicU64,
    pub keys_unmapped: AtomicU64,
    pub keys_dropped_mapper_busy: AtomicU64,
    pub index_pages_read: AtomicU64,
    /// Times a list waited because the server was still loading the last.
    pub loads_waited: AtomicU64,
    /// Bytes the applier's threads read from storage themselves, and bytes
    /// the readers read for them ([`crate::reads`]; both stay 0 when the
    /// server's threads cannot be seen from here).
    pub applier_read_bytes: AtomicU64,
    pub prefetch_read_bytes: AtomicU64,
    /// 1 when the prefetcher's reads are all its readers' (so the share can
    /// be told): the server's threads are seen, and no `--warm pages`.
    pub reads_attributed: AtomicU64,
}

/// Counters that are levels, not running totals (Prometheus gauges).
const GAUGES: &[&str] = &[
    "distance_events",
    "warmed_ahead_events",
    "lag_seconds",
    "keys_ahead",
    "window_keys",
    "in_flight_trx",
    "templates_parsed",
    "purge_held",
    "history_length",
    "backlog_bytes",
    "backlog_seconds",
    "state",
    "reads_attributed",
];

/// What each counter and gauge means, for the exposition's HELP.
const HELP: &[(&str, &str)] = &[
    ("events_read", "relay log events read"),
    ("rows_planned", "row images turned into reads"),
    ("keys_issued", "keys looked up ahead of the applier"),
    ("keys_deduplicated", "keys not looked up again (already in the window)"),
    ("lookups", "lookup statements run by the readers"),
    ("lookup_errors", "lookup statements that failed"),
    ("skipped_not_in_image", "rows skipped: the key is not in the row image"),
    ("skipped_float_key", "rows skipped: a floating-point key cannot be looked up exactly"),
    ("skipped_schema_mismatch", "rows skipped: the table's columns differ from the event's"),
    ("skipped_no_table", "rows skipped: the table is not on the replica"),
    ("statements_planned", "statement events turned into reads"),
    ("statements_skipped_not_indexed", "statement events skipped: predicted to scan"),
    ("statements_skipped_unsupported", "statement events skipped: not expressible as reads"),
    ("statement_rows_read", "rows the statement reads returned"),
    ("templates_parsed", "statement shapes parsed (the rest were cache hits)"),
    ("ddl_pauses", "DDL statements the reader waited at until the applier passed them"),
    ("jumps", "times the applier had passed the reader and it jumped ahead"),
    ("jobs_stale", "jobs dropped because the applier had passed them"),
    ("follow_errors", "times the next relay log file could not be opened"),
    ("files_followed", "relay log files the reader went on into"),
    ("corrupt_events", "corrupt events met"),
    ("jobs_dropped", "work dropped while a reader's connection was down"),
    ("reconnects", "times the control connection was re-established"),
    ("in_flight_trx", "transactions parallel workers may be running beyond the reported position"),
    ("skipped_in_flight", "events skipped for being in flight in a parallel worker"),
    ("distance_events", "events between the applier and the reader"),
    ("warmed_ahead_events", "events between the applier and the newest event whose lookups completed"),
    ("late_polls", "polls at which the completed lookups were behind the applier"),
    ("readers_busy", "time the relay log reader waited for a free reader, in seconds"),
    ("lag_seconds", "the replica's lag as the server reports it"),
    ("backlog_bytes", "relay log beyond the applier"),
    ("backlog_seconds", "how far behind the applier is"),
    (
        "state",
        "what the prefetcher is doing: 0 warming, 1 ahead of a stopped applier, 2 idle with nothing ahead, \
         3 idle under --min-lag, 4 idle with the SQL thread stopped, 5 idle with no lag reported",
    ),
    ("keys_ahead", "keys issued for events the applier has not reached"),
    ("window_keys", "keys in the window ahead of the applier"),
    ("idle_polls", "polls with the replica not lagging"),
    ("purge_held", "1 while purge is held off (--defer-purge)"),
    ("purge_holds", "times purge was held off"),
    ("purge_released_at_cap", "holds of purge ended at the history cap"),
    ("purge_held_ms", "time purge was held off, in seconds"),
    ("history_length", "InnoDB's history list length at the last look"),
    ("keys_mapped", "keys mapped to leaf pages (--warm pages)"),
    ("pages_listed", "pages asked for (--warm pages)"),
    ("page_loads", "buffer pool loads asked for (--warm pages)"),
    ("keys_unmapped", "keys that could not be mapped to a page"),
    ("keys_dropped_mapper_busy", "keys dropped because the page mapper was behind"),
    ("index_pages_read", "indexes' upper-level pages read from their files"),
    ("loads_waited", "times a page list waited for the server's last load"),
    ("applier_read_bytes", "bytes the applier's threads read from storage themselves"),
    ("prefetch_read_bytes", "bytes the readers read for the applier"),
    ("reads_attributed", "1 when the prefetcher's reads can be told from the applier's"),
];

impl Counters {
    /// Prometheus exposition text: `pileup_prefetch_<name>_total` counters
    /// and `pileup_prefetch_<name>` gauges, each with HELP, times in
    /// seconds (the `_ms` counters are exposed as `_seconds_total`).
    pub fn exposition(&self) -> String {
        let mut out = String::new();
        for (k, v) in self.snapshot() {
            let (name, value) = match k.strip_suffix("_ms") {
                Some(b) => (format!("{b}_seconds"), v as f64 / 1000.0),
                None => (k.to_string(), v as f64),
            };
            let gauge = GAUGES.contains(&k);
            let full = if gauge { format!("pileup_prefetch_{name}") } else { format!("pileup_prefetch_{name}_total") };
            let help = HELP.iter().find(|(n, _)| *n == k || Some(*n) == k.strip_suffix("_ms")).map_or(k, |(_, h)| *h);
            let kind = if gauge { "gauge" } else { "counter" };
            out.push_str(&format!("# HELP {full} {help}\n# TYPE {full} {kind}\n{full} {value}\n"));
        }
        out
    }

    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("events_read", g(&self.events_read)),
            ("rows_planned", g(&self.rows_planned)),
            ("keys_issued", g(&self.keys_issued)),
            ("keys_deduplicated", g(&self.keys_deduplicated)),
            ("lookups", g(&self.lookups)),
            ("lookup_errors", g(&self.lookup_errors)),
            ("skipped_not_in_image", g(&self.skipped_not_in_image)),
            ("skipped_float_key", g(&self.skipped_float_key)),
            ("skipped_schema_mismatch", g(&self.skipped_schema)),
            ("skipped_no_table", g(&self.skipped_no_table)),
            ("statements_planned", g(&self.statements_planned)),
            ("statements_skipped_not_indexed", g(&self.statements_skipped_not_indexed)),
            ("statements_skipped_unsupported", g(&self.statements_skipped_unsupported)),
            ("statement_rows_read", g(&self.statement_rows_read)),
            ("templates_parsed", g(&self.templates_parsed)),
            ("ddl_pauses", g(&self.ddl_pauses)),
            ("jumps", g(&self.jumps)),
            ("jobs_stale", g(&self.jobs_stale)),
            ("follow_errors", g(&self.follow_errors)),
            ("files_followed", g(&self.files_followed)),
            ("corrupt_events", g(&self.corrupt_events)),
            ("jobs_dropped", g(&self.jobs_dropped)),
            ("reconnects", g(&self.reconnects)),
            ("in_flight_trx", g(&self.in_flight_trx)),
            ("skipped_in_flight", g(&self.skipped_in_flight)),
            ("distance_events", g(&self.distance_events)),
            ("warmed_ahead_events", g(&self.warmed_ahead_events)),
            ("late_polls", g(&self.late_polls)),
            ("readers_busy_ms", g(&self.readers_busy_ms)),
            ("lag_seconds", g(&self.lag_secs)),
            ("backlog_bytes", g(&self.backlog_bytes)),
            ("backlog_seconds", g(&self.backlog_seconds)),
            ("state", g(&self.state)),
            ("keys_ahead", g(&self.keys_ahead)),
            ("window_keys", g(&self.window_keys)),
            ("idle_polls", g(&self.idle_polls)),
            ("purge_held", g(&self.purge_held)),
            ("purge_holds", g(&self.purge_holds)),
            ("purge_released_at_cap", g(&self.purge_released_at_cap)),
            ("purge_held_ms", g(&self.purge_held_ms)),
            ("history_length", g(&self.history_length)),
            ("keys_mapped", g(&self.keys_mapped)),
            ("pages_listed", g(&self.pages_listed)),
            ("page_loads", g(&self.page_loads)),
            ("keys_unmapped", g(&self.keys_unmapped)),
            ("keys_dropped_mapper_busy", g(&self.keys_dropped_mapper_busy)),
            ("index_pages_read", g(&self.index_pages_read)),
            ("loads_waited", g(&self.loads_waited)),
            ("applier_read_bytes", g(&self.applier_read_bytes)),
            ("prefetch_read_bytes", g(&self.prefetch_read_bytes)),
            ("reads_attributed", g(&self.reads_attributed)),
        ]
    }
}

/// The human status line: what the prefetcher is doing (or why not), how
/// far ahead of the applier it is, how busy its readers are, and whether
/// the applier is catching up. `now` and `before` are snapshots `secs`
/// apart.
pub fn status_line(now: &[(&str, u64)], before: &[(&str, u64)], secs: f64, min_lag: u64) -> String {
    let (n, b) = (|k| value(now, k), |k| value(before, k));
    let behind = n("backlog_seconds");
    let state = state_of(now, min_lag);
    let mut parts = vec![state.describe()];
    if state.is_warming() {
        parts.push(format!(
            "{} events ({} of {} keys) ahead of the applier, warmed {} events ahead",
            n("distance_events"),
            n("keys_ahead"),
            n("window_keys"),
            n("warmed_ahead_events")
        ));
        let busy = (n("readers_busy_ms") - b("readers_busy_ms")) as f64 / (secs.max(1e-3) * 1000.0);
        parts.push(format!("reading the relay log waited {:.0}% for a free reader", 100.0 * busy.min(1.0)));
    }
    let read = |k| n(k).saturating_sub(b(k));
    let (ahead, own) = (read("prefetch_read_bytes"), read("applier_read_bytes"));
    let mbps = |x: u64| x as f64 / 1e6 / secs.max(1e-3);
    match share_taken(ahead, own) {
        Some(share) if n("reads_attributed") == 1 => parts.push(format!(
            "took {:.0}% of the applier's page reads ({:.1} MB/s read ahead, {:.1} MB/s left to it)",
            100.0 * share,
            mbps(ahead),
            mbps(own)
        )),
        _ if own > 0 => parts.push(format!("the applier read {:.1} MB/s itself", mbps(own))),
        _ => {}
    }
    let trend = (b("backlog_seconds") as f64 - behind as f64) / secs.max(1e-3);
    let backlog = n("backlog_bytes");
    if backlog > 0 || behind > 0 {
        let mut t = format!("{behind} s ({:.1} MB) behind", backlog as f64 / 1e6);
        // A trend needs an earlier measure (none before the first poll).
        let measured = b("backlog_bytes") > 0 || b("events_read") > 0;
        if measured && trend > 0.05 {
            t.push_str(&format!(", catching up {trend:.1} s/s"));
        } else if measured && trend < -0.05 {
            t.push_str(&format!(", falling behind {:.1} s/s", -trend));
        }
        parts.push(t);
    }
    parts.push(format!(
        "{} events read, {} keys, {} lookups",
        n("events_read"),
        n("keys_issued"),
        n("lookups") + n("page_loads")
    ));
    parts.join(" · ")
}

/// The whole run's share of the applier's page reads the prefetcher took
/// away, for the line at exit (None when neither side read anything, or
/// the server's threads could not be seen).
pub fn run_share_line(snap: &[(&str, u64)]) -> Option<String> {
    let (ahead, own) = (value(snap, "prefetch_read_bytes"), value(snap, "applier_read_bytes"));
    if value(snap, "reads_attributed") != 1 {
        return (own > 0).then(|| format!("the applier read {:.1} MB from storage itself", own as f64 / 1e6));
    }
    let share = share_taken(ahead, own)?;
    Some(format!(
        "the readers read {:.1} MB for the applier and it read {:.1} MB itself: {:.0}% of its page reads taken away",
        ahead as f64 / 1e6,
        own as f64 / 1e6,
        100.0 * share
    ))
}

/// A counter's value in a [`Counters::snapshot`] (0 when absent).
pub fn value(snap: &[(&str, u64)], name: &str) -> u64 {
    snap.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v)
}

/// What the prefetcher was doing at a [`Counters::snapshot`].
pub fn state_of(snap: &[(&str, u64)], min_lag: u64) -> crate::gate::State {
    crate::gate::State::from_code(value(snap, "state"), value(snap, "backlog_seconds"), min_lag)
}

/// Advice when the readers are what holds the prefetcher back: over the
/// last `secs`, the relay-log reader waited `busy_ms` for a free reader
/// (more than a quarter of the time) while the window was less than half
/// full. Measured (bench/prefetch, 512 MB pool): 4 readers left the reader
/// waiting ~9 s of a 21 s catch-up; 8 cut that to ~2 s.
pub fn reader_advice(busy_ms: u64, secs: f64, keys_ahead: u64, window_keys: u64, readers: usize) -> Option<String> {
    let share = busy_ms as f64 / (secs.max(1e-3) * 1000.0);
    (share > 0.25 && keys_ahead * 2 < window_keys).then(|| {
        format!(
            "the {readers} readers are the bottleneck: reading the relay log waited {:.0}% of the last {secs:.0} s for a free reader, and the window holds {keys_ahead} of {window_keys} keys; try --threads {}",
            100.0 * share.min(1.0),
            readers * 2
        )
    })
}

/// The share of the applier's page reads the prefetcher took away, from
/// what each read over a period: None when neither read anything.
pub fn share_taken(prefetch_bytes: u64, applier_bytes: u64) -> Option<f64> {
    let all = prefetch_bytes + applier_bytes;
    (all > 0).then(|| prefetch_bytes as f64 / all as f64)
}

#[cfg(test)]
mod tests {
    /// Every counter and gauge has HELP and a base unit (promtool itself
    /// reads the exposition in the fleet tests).
    #[test]
    fn every_counter_has_help_and_a_base_unit() {
        let c = Counters::default();
        c.readers_busy_ms.store(1500, Ordering::Relaxed);
        let body = c.exposition();
        assert!(body.contains("\npileup_prefetch_readers_busy_seconds_total 1.5\n"), "{body}");
        for (k, _) in c.snapshot() {
            let key = k.strip_suffix("_ms").unwrap_or(k);
            assert!(HELP.iter().any(|(n, _)| *n == k || *n == key), "{k} has no HELP");
        }
    }

    use super::*;

    #[test]
    fn share_of_the_reads() {
        assert_eq!(share_taken(0, 0), None);
        assert_eq!(share_taken(3, 1), Some(0.75));
        assert_eq!(share_taken(0, 5), Some(0.0));
    }

    #[test]
    fn advice_only_when_readers_hold_the_window_back() {
        let a = reader_advice(4_000, 10.0, 100, 3_000, 4).expect("40% waiting with the window nearly empty");
        assert!(a.contains("--threads 8") && a.contains("waited 40%") && a.contains("holds 100 of 3000 keys"), "{a}");
        assert!(reader_advice(1_000, 10.0, 100, 3_000, 4).is_none(), "waiting 10% of the time is fine");
        assert!(reader_advice(9_000, 10.0, 2_000, 3_000, 4).is_none(), "a full window: the readers keep up");
        assert!(reader_advice(9_000, 0.0, 0, 3_000, 4).is_some(), "no division by zero");
    }

    #[test]
    fn the_status_line_says_what_it_does_and_why_not() {
        let c = Counters::default();
        let before = c.snapshot();
        c.state.store(0, Ordering::Relaxed);
        c.distance_events.store(1200, Ordering::Relaxed);
        c.keys_ahead.store(2310, Ordering::Relaxed);
        c.window_keys.store(3031, Ordering::Relaxed);
        c.readers_busy_ms.store(600, Ordering::Relaxed);
        c.backlog_bytes.store(50_000_000, Ordering::Relaxed);
        c.backlog_seconds.store(90, Ordering::Relaxed);
        let mut b = before.clone();
        for (k, v) in b.iter_mut() {
            if *k == "backlog_seconds" {
                *v = 100;
            }
            if *k == "backlog_bytes" {
                *v = 60_000_000;
            }
        }
        let s = status_line(&c.snapshot(), &b, 5.0, 1);
        assert!(s.starts_with("warming · 1200 events (2310 of 3031 keys) ahead"), "{s}");
        assert!(s.contains("waited 12%") && s.contains("90 s (50.0 MB) behind, catching up 2.0 s/s"), "{s}");
        c.state.store(crate::gate::State::Idle(crate::gate::Idle::NothingAhead).code(), Ordering::Relaxed);
        c.backlog_bytes.store(0, Ordering::Relaxed);
        c.backlog_seconds.store(0, Ordering::Relaxed);
        let s = status_line(&c.snapshot(), &c.snapshot(), 5.0, 1);
        assert!(s.starts_with("idle: the relay log holds nothing beyond the applier"), "{s}");
        assert!(!s.contains("behind") && !s.contains("waited"), "{s}");
        // The first line has no earlier measure: no trend.
        c.backlog_bytes.store(50_000_000, Ordering::Relaxed);
        c.backlog_seconds.store(90, Ordering::Relaxed);
        let s = status_line(&c.snapshot(), &before, 5.0, 1);
        assert!(s.contains("90 s (50.0 MB) behind ·"), "{s}");
        assert!(!s.contains("page reads"), "nothing read on either side: no share: {s}");
        // What each side read over the period.
        c.prefetch_read_bytes.store(30_000_000, Ordering::Relaxed);
        c.applier_read_bytes.store(10_000_000, Ordering::Relaxed);
        // Not every read of the prefetcher is its readers' (--warm pages):
        // only the applier's own.
        let s = status_line(&c.snapshot(), &before, 5.0, 1);
        assert!(s.contains("the applier read 2.0 MB/s itself") && !s.contains("took"), "{s}");
        assert_eq!(run_share_line(&c.snapshot()).unwrap(), "the applier read 10.0 MB from storage itself");
        c.reads_attributed.store(1, Ordering::Relaxed);
        let s = status_line(&c.snapshot(), &before, 5.0, 1);
        assert!(s.contains("took 75% of the applier's page reads (6.0 MB/s read ahead, 2.0 MB/s left to it)"), "{s}");
        let run = run_share_line(&c.snapshot()).unwrap();
        assert!(run.contains("read 30.0 MB for the applier and it read 10.0 MB itself: 75%"), "{run}");
        assert_eq!(run_share_line(&before), None);
    }

    #[test]
    fn counters_as_prometheus_exposition() {
        let c = Counters::default();
        c.statements_planned.store(5, Ordering::Relaxed);
        c.lag_secs.store(42, Ordering::Relaxed);
        let e = c.exposition();
        assert!(
            e.contains(
                "# TYPE pileup_prefetch_statements_planned_total counter\npileup_prefetch_statements_planned_total 5\n"
            ),
            "{e}"
        );
        assert!(e.contains("# TYPE pileup_prefetch_lag_seconds gauge\npileup_prefetch_lag_seconds 42\n"), "{e}");
        // Every line is a comment or `name value`.
        assert!(e.lines().all(|l| l.starts_with("# ") || l.split(' ').count() == 2));
    }
}
