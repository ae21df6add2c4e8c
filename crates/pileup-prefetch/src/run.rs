//! The prefetch loop: follow the relay log ahead of the SQL thread, plan
//! the keys its row events will touch, and hand batched lookups to a pool
//! of readers.
//!
//! One reader thread (this loop) and `readers` fetch threads, each with its
//! own connection. The reader stays within a window ahead of the applier
//! (events and seconds of primary time), works only while the replica lags,
//! and jumps forward when the applier has passed it: a lookup for a row the
//! applier already changed is wasted work.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use mysql::prelude::Queryable;
use pileup_binlog::{et, Decoder, Event, FileReader, ReadError};

use crate::plan::{plan_row, Key, Recent, Skip};
use crate::stmt::{Reads, RowsPlan, StmtSkip, Templates};
use pileup_replica::applier::{Applier, ApplierProbe};
use pileup_replica::schema::Table;

#[derive(Debug, Clone)]
pub struct Options {
    /// Parallel readers.
    pub readers: usize,
    /// Stay at most this many events ahead of the applier…
    pub window_events: u64,
    /// …and this many index keys issued ahead (None: a quarter of the buffer
    /// pool's old sublist, so warmed pages are not evicted before the applier gets
    /// to them).
    pub window_keys: Option<u64>,
    /// …and this many seconds of primary time.
    pub window_secs: u32,
    /// Work only while Seconds_Behind_Master is at least this.
    pub min_lag: u64,
    /// Keys per lookup statement.
    pub batch: usize,
    /// Bound on each lookup (server-side max_statement_time).
    pub query_timeout: Duration,
    /// How often to ask where the applier is.
    pub poll: Duration,
    /// Stop after this long (None: until stopped).
    pub duration: Option<Duration>,
    /// Warm primary-key rows only, not secondary index entries.
    pub primary_only: bool,
    /// Hold purge off while the replica lags, up to this history list
    /// length (see [`crate::purge`]).
    pub defer_purge: Option<u64>,
    /// How keys are warmed.
    pub warm: Warm,
}

/// How the prefetcher has the server read a key's page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Warm {
    /// Index-only SELECTs (every index, every server).
    #[default]
    Sql,
    /// Integer indexes: the leaf's page number from the index's upper
    /// levels ([`crate::pages`]), read by InnoDB's buffer pool load
    /// ([`crate::load`]); other indexes by SELECTs.
    Pages,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            readers: 4,
            window_events: 50_000,
            window_keys: None,
            window_secs: 30,
            min_lag: 1,
            batch: 16,
            query_timeout: Duration::from_millis(500),
            poll: Duration::from_millis(100),
            duration: None,
            primary_only: false,
            defer_purge: None,
            warm: Warm::Sql,
        }
    }
}

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
    /// Sequence number of the event the applier is about to apply, as of
    /// the last poll (readers compare their jobs with it).
    applier_seq: AtomicU64,
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
    /// Jobs queued or running, by the sequence number of their last event.
    pending: std::sync::Mutex<std::collections::BTreeMap<u64, u32>>,
    /// The newest sequence number queued.
    issued_seq: AtomicU64,
    pub lag_secs: AtomicU64,
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
    errors_seen: std::sync::Mutex<std::collections::HashSet<u64>>,
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
];

impl Counters {
    /// Prometheus exposition text: `pileup_prefetch_<name>_total` counters
    /// and `pileup_prefetch_<name>` gauges.
    pub fn exposition(&self) -> String {
        let mut out = String::new();
        for (k, v) in self.snapshot() {
            if GAUGES.contains(&k) {
                out.push_str(&format!("# TYPE pileup_prefetch_{k} gauge\npileup_prefetch_{k} {v}\n"));
            } else {
                out.push_str(&format!("# TYPE pileup_prefetch_{k}_total counter\npileup_prefetch_{k}_total {v}\n"));
            }
        }
        out
    }

    /// Say a lookup error on stderr, once per distinct server error code
    /// (or message), so a systematic failure is visible without flooding.
    pub fn note_error(&self, e: &mysql::Error) {
        let code = match e {
            mysql::Error::MySqlError(m) => m.code as u64,
            _ => 0,
        };
        let mut seen = self.errors_seen.lock().unwrap();
        if seen.insert(code) {
            eprintln!("pileup prefetch: a lookup failed: {e} (further errors with this code are only counted)");
        }
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
        ]
    }

    /// The applier is about to apply event number `seq`.
    fn applier_at(&self, seq: u64) {
        self.applier_seq.store(seq, Ordering::Relaxed);
    }

    /// Has the applier passed every event up to number `seq` (a job's
    /// last event)? The event it is about to apply is not passed.
    fn passed(&self, seq: u64) -> bool {
        seq < self.applier_seq.load(Ordering::Relaxed)
    }

    fn job_queued(&self, seq: u64) {
        *self.pending.lock().unwrap().entry(seq).or_default() += 1;
        self.issued_seq.fetch_max(seq, Ordering::Relaxed);
    }

    fn job_done(&self, seq: u64) {
        let mut p = self.pending.lock().unwrap();
        if let Some(n) = p.get_mut(&seq) {
            *n -= 1;
            if *n == 0 {
                p.remove(&seq);
            }
        }
    }

    /// Every lookup for events up to this sequence number has completed
    /// (jobs finish out of order across readers: the oldest unfinished one
    /// bounds it).
    fn done_through(&self) -> u64 {
        match self.pending.lock().unwrap().keys().next() {
            Some(&oldest) => oldest.saturating_sub(1),
            None => self.issued_seq.load(Ordering::Relaxed),
        }
    }
}

/// Marks a job finished however the reader leaves it (done, dropped,
/// failed).
struct JobDone<'a> {
    counters: &'a Counters,
    seq: u64,
}

impl Drop for JobDone<'_> {
    fn drop(&mut self) {
        self.counters.job_done(self.seq);
    }
}

/// Work for a reader.
enum Work {
    /// A batch of keys of one index of one table.
    Keys { table: Arc<Table>, index: usize, keys: Vec<Key> },
    /// Statements' rows (all of one shape), then the index entries they name.
    Rows(Vec<RowsPlan>),
}

struct Job {
    /// Number (in reading order) of the last event whose reads are in it.
    seq: u64,
    work: Work,
}

/// Look up `keys` of one index in batches of at most `batch`, each padded to
/// a power of two by repeating its last key: a handful of statement shapes
/// per index, each prepared once (the connection's statement cache keys
/// them by text).
/// Returns false when the connection was lost.
fn lookup_keys(
    c: &mut mysql::Conn,
    table: &Table,
    index: usize,
    keys: &[Key],
    batch: usize,
    counters: &Counters,
) -> bool {
    for chunk in keys.chunks(batch.max(1)) {
        let mut refs: Vec<&Key> = chunk.iter().collect();
        let want = refs.len().next_power_of_two();
        while refs.len() < want {
            refs.push(refs[refs.len() - 1]);
        }
        let (sql, params) = crate::sql::lookup(table, index, &refs);
        counters.lookups.fetch_add(1, Ordering::Relaxed);
        let r = c.prep(&sql).and_then(|st| c.exec_drop(&st, params));
        if let Err(e) = r {
            counters.lookup_errors.fetch_add(1, Ordering::Relaxed);
            counters.note_error(&e);
            if connection_lost(&e) {
                return false;
            }
        }
    }
    true
}

/// A reader's connection, set up never to wait on the applier's locks:
/// short metadata-lock waits, a statement time limit, non-locking reads.
fn reader_conn(spec: &pileup_conn::ConnSpec, o: &Options) -> Result<mysql::Conn> {
    let mut c = spec.connect()?;
    let ms = o.query_timeout.as_secs_f64();
    let _ = c.query_drop(format!("SET SESSION max_statement_time = {ms}"));
    let _ = c.query_drop("SET SESSION lock_wait_timeout = 1");
    let _ = c.query_drop("SET SESSION innodb_lock_wait_timeout = 1");
    let _ = c.query_drop("SET SESSION time_zone = '+00:00'");
    let _ = c.query_drop("SET SESSION transaction_read_only = 1");
    // The values read do not matter, only that the pages come into the
    // buffer pool. READ UNCOMMITTED builds no read view: a secondary index
    // entry on a page the applier changed recently is not checked against
    // its clustered record, which would read another page while holding the
    // leaf latch the applier is about to need.
    let _ = c.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED");
    // Point lookups need no row estimates: skip the index dives the range
    // optimizer would otherwise make for every key (CPU and page latches the
    // applier would compete with).
    let _ = c.query_drop("SET SESSION eq_range_index_dive_limit = 1");
    Ok(c)
}

/// Did this error lose the connection (rather than fail one statement)?
fn connection_lost(e: &mysql::Error) -> bool {
    !matches!(e, mysql::Error::MySqlError(_))
}

fn reader_pool(
    spec: &pileup_conn::ConnSpec,
    o: &Options,
    counters: &Arc<Counters>,
    stop: &Arc<AtomicBool>,
    pages: Option<&mpsc::SyncSender<PageJob>>,
) -> Result<(mpsc::SyncSender<Job>, Vec<std::thread::JoinHandle<()>>)> {
    let (tx, rx) = mpsc::sync_channel::<Job>(o.readers * 4);
    let rx = Arc::new(std::sync::Mutex::new(rx));
    let mut handles = vec![];
    for _ in 0..o.readers {
        let mut spec = spec.clone();
        spec.timeout = o.query_timeout.max(Duration::from_secs(1));
        let mut c = reader_conn(&spec, o)?;
        let (rx, counters, stop, batch, o2) = (rx.clone(), counters.clone(), stop.clone(), o.batch, o.clone());
        // Statements' index entries (known once their rows are read) go to
        // the page mapper too, when it can map them.
        let mut pages = pages.map(|tx| PageSender::new(tx.clone()));
        handles.push(std::thread::spawn(move || {
            let mut last_try = Instant::now();
            let mut broken = false;
            while !stop.load(Ordering::Relaxed) {
                let job = match rx.lock().unwrap().recv_timeout(Duration::from_millis(200)) {
                    Ok(j) => j,
                    Err(mpsc::RecvTimeoutError::Timeout) => continue,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                };
                let _done = JobDone { counters: &counters, seq: job.seq };
                // The applier passed these events while the job waited in
                // the queue (the readers fell behind: a flush storm, a slow
                // device): skip it, so the readers get ahead again at once.
                if counters.passed(job.seq) {
                    counters.jobs_stale.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                // The server went away (restart): reconnect, at most once a
                // second, dropping the work meanwhile.
                if broken {
                    if last_try.elapsed() < Duration::from_secs(1) {
                        counters.jobs_dropped.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    last_try = Instant::now();
                    match reader_conn(&spec, &o2) {
                        Ok(n) => {
                            c = n;
                            broken = false;
                        }
                        Err(_) => {
                            counters.jobs_dropped.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    }
                }
                match &job.work {
                    Work::Keys { table, index, keys } => {
                        broken = !lookup_keys(&mut c, table, *index, keys, batch, &counters)
                    }
                    Work::Rows(plans) => {
                        // One round trip for the batch: the statements' SELECTs
                        // joined by UNION ALL, each row tagged with its statement
                        // (padded to a power of two, like key batches).
                        let want = plans.len().next_power_of_two();
                        let mut sql = String::new();
                        let mut params = vec![];
                        for i in 0..want {
                            let p = &plans[i.min(plans.len() - 1)];
                            if i > 0 {
                                sql.push_str(" UNION ALL ");
                            }
                            sql.push_str(&format!(
                                "({})",
                                p.sql.replacen("SELECT ", &format!("SELECT {i} AS pileup_tag, "), 1)
                            ));
                            params.extend(p.params.iter().cloned());
                        }
                        counters.lookups.fetch_add(1, Ordering::Relaxed);
                        let rows: Result<Vec<mysql::Row>, _> = c.prep(&sql).and_then(|st| c.exec(&st, params));
                        match rows {
                            Err(e) => {
                                counters.lookup_errors.fetch_add(1, Ordering::Relaxed);
                                counters.note_error(&e);
                                broken = connection_lost(&e);
                            }
                            Ok(rows) => {
                                counters.statement_rows_read.fetch_add(rows.len() as u64, Ordering::Relaxed);
                                let mut keys: Vec<Key> = vec![];
                                for r in rows {
                                    let mut v = r.unwrap();
                                    let tag = match v.first() {
                                        Some(mysql::Value::Int(i)) => *i as usize,
                                        Some(mysql::Value::UInt(u)) => *u as usize,
                                        _ => continue,
                                    };
                                    if tag < plans.len() {
                                        v.remove(0);
                                        plans[tag].keys_from_row(&v, &mut keys);
                                    }
                                }
                                if let Some(ps) = pages.as_mut() {
                                    let table = &plans[0].table;
                                    keys.retain(|k| !ps.take(table, k, job.seq, &counters));
                                }
                                keys.sort_by_key(|k| k.index);
                                keys.dedup();
                                for group in keys.chunk_by(|a, b| a.index == b.index) {
                                    if !lookup_keys(&mut c, &plans[0].table, group[0].index, group, batch, &counters) {
                                        broken = true;
                                        break;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }));
    }
    Ok((tx, handles))
}

/// Queue a batch for the readers; time spent waiting for a free slot means
/// the readers cannot keep up.
fn send(tx: &mpsc::SyncSender<Job>, job: Job, counters: &Counters) {
    counters.job_queued(job.seq);
    let seq = job.seq;
    let job = match tx.try_send(job) {
        Ok(()) => return,
        Err(mpsc::TrySendError::Full(j)) => j,
        Err(mpsc::TrySendError::Disconnected(_)) => {
            counters.job_done(seq);
            return;
        }
    };
    let t = Instant::now();
    if tx.send(job).is_err() {
        counters.job_done(seq);
    }
    let waited = t.elapsed();
    if waited > Duration::from_millis(20) {
        tracing::debug!(ms = waited.as_millis() as u64, "waited for a free reader");
    }
    counters.readers_busy_ms.fetch_add(waited.as_millis() as u64, Ordering::Relaxed);
}

/// Keys on their way to the readers: deduplicated within the window and
/// batched per (table, index).
struct Batcher {
    pending: HashMap<(usize, usize), (Arc<Table>, Vec<Key>)>,
    /// Statement reads by SELECT text (one shape per batch).
    pending_rows: HashMap<String, Vec<RowsPlan>>,
    recent: Recent,
    batch: usize,
    primary_only: bool,
    /// `--warm pages`: where keys of integer indexes go instead.
    pages: Option<PageSender>,
}

/// A key for the page mapper.
struct PageJob {
    table: Arc<Table>,
    key: Key,
    seq: u64,
}

struct PageSender {
    tx: mpsc::SyncSender<PageJob>,
    /// Can index (table, index) be mapped to pages? Keyed by the table's
    /// address, with the table kept so the address is not reused.
    mappable: HashMap<(usize, usize), (Arc<Table>, bool)>,
    /// The mapper has stopped.
    dead: bool,
}

impl PageSender {
    fn new(tx: mpsc::SyncSender<PageJob>) -> PageSender {
        PageSender { tx, mappable: HashMap::new(), dead: false }
    }

    /// Hand the key to the page mapper if its index can be mapped; false
    /// if it is for the SQL lookups.
    fn take(&mut self, table: &Arc<Table>, k: &Key, seq: u64, counters: &Counters) -> bool {
        if self.dead {
            return false;
        }
        if self.mappable.len() > 10_000 {
            self.mappable.clear();
        }
        let ok = self
            .mappable
            .entry((Arc::as_ptr(table) as usize, k.index))
            .or_insert_with(|| (table.clone(), crate::pages::node_fields(table, k.index).is_some()))
            .1;
        if !ok {
            return false;
        }
        counters.job_queued(seq);
        match self.tx.try_send(PageJob { table: table.clone(), key: k.clone(), seq }) {
            Ok(()) => true,
            Err(mpsc::TrySendError::Full(_)) => {
                counters.job_done(seq);
                counters.keys_dropped_mapper_busy.fetch_add(1, Ordering::Relaxed);
                true
            }
            // The mapper stopped: the SQL lookups take over.
            Err(mpsc::TrySendError::Disconnected(_)) => {
                counters.job_done(seq);
                self.dead = true;
                false
            }
        }
    }
}

impl Batcher {
    fn issue(&mut self, table: &Arc<Table>, k: Key, seq: u64, tx: &mpsc::SyncSender<Job>, counters: &Counters) {
        if self.primary_only && !table.indexes[k.index].is_primary() {
            return;
        }
        if !self.recent.insert(&k) {
            counters.keys_deduplicated.fetch_add(1, Ordering::Relaxed);
            return;
        }
        counters.keys_issued.fetch_add(1, Ordering::Relaxed);
        if self.pages.as_mut().is_some_and(|ps| ps.take(table, &k, seq, counters)) {
            return;
        }
        self.issue_sql(table, k, seq, tx, counters)
    }

    fn issue_sql(&mut self, table: &Arc<Table>, k: Key, seq: u64, tx: &mpsc::SyncSender<Job>, counters: &Counters) {
        let ix = k.index;
        let slot = self.pending.entry((Arc::as_ptr(table) as usize, ix)).or_insert_with(|| (table.clone(), vec![]));
        slot.1.push(k);
        if slot.1.len() >= self.batch {
            let keys = std::mem::take(&mut slot.1);
            send(tx, Job { seq, work: Work::Keys { table: table.clone(), index: ix, keys } }, counters);
        }
    }

    fn rows(&mut self, plan: RowsPlan, seq: u64, tx: &mpsc::SyncSender<Job>, counters: &Counters) {
        let slot = self.pending_rows.entry(plan.sql.clone()).or_default();
        slot.push(plan);
        if slot.len() >= self.batch {
            let plans = std::mem::take(slot);
            send(tx, Job { seq, work: Work::Rows(plans) }, counters);
        }
    }

    /// Send every partly filled batch.
    fn flush(&mut self, tx: &mpsc::SyncSender<Job>, seq: u64, counters: &Counters) {
        for plans in self.pending_rows.values_mut() {
            if !plans.is_empty() {
                send(tx, Job { seq, work: Work::Rows(std::mem::take(plans)) }, counters);
            }
        }
        if self.pending_rows.len() > 1000 {
            self.pending_rows.clear();
        }
        for ((_, index), (table, keys)) in self.pending.iter_mut() {
            if !keys.is_empty() {
                send(
                    tx,
                    Job { seq, work: Work::Keys { table: table.clone(), index: *index, keys: std::mem::take(keys) } },
                    counters,
                );
            }
        }
    }
}

/// A relay log position, ordered across files: (file number, offset).
type RelayPos = (u64, u64);

fn relay_pos(p: &std::path::Path, offset: u64) -> RelayPos {
    (pileup_binlog::reader::file_number(p).unwrap_or(0), offset)
}

/// Is this statement DDL that may change a table's definition?
fn is_ddl(sql: &[u8]) -> bool {
    let s = String::from_utf8_lossy(&sql[..sql.len().min(32)]).trim_start().to_ascii_uppercase();
    ["ALTER", "CREATE", "DROP", "RENAME", "TRUNCATE"].iter().any(|k| s.starts_with(k))
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
            "the {readers} readers are the bottleneck: reading the relay log waited {:.0}% of the last {secs:.0} s for a free reader, and the window holds {keys_ahead} of {window_keys} keys; try --readers {}",
            100.0 * share.min(1.0),
            readers * 2
        )
    })
}

/// The cached upper levels of index `ix` of `t`, if its keys can be mapped
/// to pages; why not is said (once per reason) through `tell`.
/// `Err` when the server is gone (a restart): the index is looked up again
/// once the mapper has reconnected. `Ok(None)`: it cannot be mapped (said
/// on stderr).
fn open_tree(
    meta: &mut mysql::Conn,
    datadir: &std::path::Path,
    page_size: usize,
    t: &Table,
    ix: usize,
    tell: &mut dyn FnMut(String),
) -> Result<Option<crate::pages::Tree>, ()> {
    use crate::pages::{node_fields, IndexLocation, Tree};
    let Some(fields) = node_fields(t, ix) else { return Ok(None) };
    let name = &t.indexes[ix].name;
    Ok(match IndexLocation::find(meta, datadir, &t.schema, &t.name, name) {
        Ok(Some(loc)) => match Tree::open(loc, fields, page_size, Duration::from_secs(5)) {
            Ok(tree) => Some(tree),
            Err(e) => {
                tell(format!("{}.{} index {name}: {e:#}; its keys are not warmed", t.schema, t.name));
                None
            }
        },
        Ok(None) => {
            tell(format!(
                "{}.{} index {name}: not an InnoDB index in a format pileup reads; its keys are not warmed",
                t.schema, t.name
            ));
            None
        }
        Err(_) if meta.ping().is_err() => return Err(()),
        Err(e) => {
            tell(format!(
                "{}.{} index {name}: cannot find it in InnoDB's dictionary ({e}); its keys are not warmed",
                t.schema, t.name
            ));
            None
        }
    })
}

/// The page mapper: keys to leaf page numbers ([`crate::pages`]), handed to
/// InnoDB's buffer pool load ([`crate::load`]) in short lists, a few
/// milliseconds apart. One thread: the trees' caches and the server's one
/// buffer pool file are its own.
fn page_warmer(
    spec: &pileup_conn::ConnSpec,
    counters: &Arc<Counters>,
    stop: &Arc<AtomicBool>,
) -> Result<(mpsc::SyncSender<PageJob>, std::thread::JoinHandle<()>)> {
    use crate::pages::{encode, Tree};
    let mut meta = spec.connect()?;
    let (datadir, page_size): (String, usize) =
        meta.query_first("SELECT @@datadir, @@innodb_page_size")?.context("reading @@datadir")?;
    let mut loader = crate::load::Loader::start(spec.connect()?)?;
    let (tx, rx) = mpsc::sync_channel::<PageJob>(65_536);
    let (counters, stop, spec) = (counters.clone(), stop.clone(), spec.clone());
    let h = std::thread::spawn(move || {
        let datadir = std::path::PathBuf::from(datadir);
        // The server went away (restart): when, to reconnect a second later.
        let mut broken: Option<Instant> = None;
        // By table address and index, with the table kept so the address
        // is not reused while its tree is cached.
        let mut trees: HashMap<(usize, usize), (Arc<Table>, Option<Tree>)> = HashMap::new();
        // Pages mapped and not yet listed, each with its job.
        let mut pending: Vec<((u32, u32), JobDone)> = vec![];
        let mut next_load = Instant::now();
        // At most 64 new pages per list, the next list as soon as the
        // server has finished the last (it waits for a list's reads before
        // it ends): the loads keep at most 64 reads in flight, so the
        // applier's own reads do not queue behind long bursts. Measured
        // (bench/prefetch, ROW, 128 MB pool, 2 rounds each, speed-up over
        // the plain applier): 24 pages 1.07× (the warming fell behind), 48
        // 1.34×, 96 1.29×, 190 every 5 ms 1.20× (device read latency 175,
        // 299, 447 and 600 µs). Each load costs two error-log lines.
        let (load_depth, load_every, busy_wait) =
            (64.min(loader.capacity()), Duration::from_millis(1), Duration::from_millis(1));
        let mut told = std::collections::HashSet::new();
        let mut tell = |what: String| {
            if told.len() < 20 && told.insert(what.clone()) {
                eprintln!("pileup prefetch: {what}");
            }
        };
        while !stop.load(Ordering::Relaxed) {
            if broken.is_some_and(|t| t.elapsed() >= Duration::from_secs(1)) {
                match (spec.connect(), spec.connect()) {
                    (Ok(m), Ok(l)) => {
                        meta = m;
                        loader.reconnect(l);
                        broken = None;
                        // Indexes not found while the server was away: look again.
                        trees.retain(|_, (_, t)| t.is_some());
                    }
                    _ => broken = Some(Instant::now()),
                }
            }
            let first = match rx.recv_timeout(Duration::from_millis(1)) {
                Ok(j) => Some(j),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            for job in first.into_iter().chain(std::iter::from_fn(|| rx.try_recv().ok()).take(256)) {
                // Counted as warmed once its page is asked for.
                let done = JobDone { counters: &counters, seq: job.seq };
                if broken.is_some() {
                    counters.jobs_dropped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                if counters.passed(job.seq) {
                    counters.jobs_stale.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let ix = job.key.index;
                if trees.len() > 10_000 {
                    trees.clear();
                }
                let key = (Arc::as_ptr(&job.table) as usize, ix);
                let (_, tree) = match trees.entry(key) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(v) => {
                        match open_tree(&mut meta, &datadir, page_size, &job.table, ix, &mut tell) {
                            Ok(t) => v.insert((job.table.clone(), t)),
                            // The server went away (a restart): reconnect a
                            // second later, dropping the work meanwhile.
                            Err(()) => {
                                tell("the server went away; trying again every second".into());
                                broken = Some(Instant::now());
                                counters.jobs_dropped.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                        }
                    }
                };
                let Some(tree) = tree.as_mut() else {
                    counters.keys_unmapped.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let before = tree.pages_read;
                let leaf = encode(tree.fields(), &job.key.values)
                    .ok_or_else(|| anyhow::anyhow!("a key value does not fit its column"))
                    .and_then(|k| tree.leaf(&k));
                counters.index_pages_read.fetch_add(tree.pages_read - before, Ordering::Relaxed);
                match leaf {
                    Ok(page) => {
                        counters.keys_mapped.fetch_add(1, Ordering::Relaxed);
                        pending.push(((tree.loc.space, page), done));
                    }
                    Err(e) => {
                        counters.keys_unmapped.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(error = %format!("{e:#}"), "key not mapped to a page");
                        // A cached page may be stale or freed: read the path again.
                        tree.forget();
                    }
                }
            }
            // A list every few milliseconds (InnoDB logs two lines per load),
            // each with the pages mapped since the last one.
            if !pending.is_empty() && Instant::now() >= next_load {
                // Keys the applier has passed meanwhile need no page.
                pending.retain(|(_, job)| {
                    let stale = counters.passed(job.seq);
                    if stale {
                        counters.jobs_stale.fetch_add(1, Ordering::Relaxed);
                    }
                    !stale
                });
                match loader.busy() {
                    // The next tick will look again.
                    Ok(true) => {
                        counters.loads_waited.fetch_add(1, Ordering::Relaxed);
                        next_load = Instant::now() + busy_wait;
                        continue;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tell(format!("reading the buffer pool load status failed: {e:#}; trying again every second"));
                        broken = Some(Instant::now());
                        counters.jobs_dropped.fetch_add(pending.len() as u64, Ordering::Relaxed);
                        pending.clear();
                        continue;
                    }
                }
                let n = pending.len().min(load_depth);
                if n == 0 {
                    continue;
                }
                let pages: Vec<(u32, u32)> = pending[..n].iter().map(|(p, _)| *p).collect();
                match loader.load(&pages) {
                    Ok(new) => {
                        counters.pages_listed.fetch_add(new as u64, Ordering::Relaxed);
                        counters.page_loads.store(loader.loads, Ordering::Relaxed);
                    }
                    Err(e) => {
                        tell(format!("asking InnoDB to load pages failed: {e:#}; trying again every second"));
                        broken = Some(Instant::now());
                    }
                }
                pending.drain(..n);
                next_load = Instant::now() + load_every;
            }
        }
        if let Err(e) = loader.finish() {
            eprintln!("pileup prefetch: {e:#}");
        }
    });
    Ok((tx, h))
}

/// Run until `stop` is set (or the duration passes).
pub fn run(spec: &pileup_conn::ConnSpec, o: &Options, counters: Arc<Counters>, stop: Arc<AtomicBool>) -> Result<()> {
    let mut ctl = spec.connect().context("connecting to the replica")?;
    let mut meta = spec.connect()?;
    let warmer = match o.warm {
        Warm::Sql => None,
        Warm::Pages => Some(page_warmer(spec, &counters, &stop)?),
    };
    let (tx, mut handles) = reader_pool(spec, o, &counters, &stop, warmer.as_ref().map(|w| &w.0))?;
    let pages = warmer.map(|(ptx, h)| {
        handles.push(h);
        PageSender::new(ptx)
    });
    let mut deferral = o.defer_purge.map(|cap| crate::purge::Deferral::new(spec, cap)).transpose()?;
    let t0 = Instant::now();
    let mut tables: HashMap<(String, String), Option<Arc<Table>>> = HashMap::new();

    let mut dec = Decoder::new();
    let mut reader: Option<FileReader> = None;
    // Events read ahead, oldest first: (relay position after the event,
    // primary timestamp, keys issued for it, starts a transaction).
    let mut ahead: VecDeque<(RelayPos, u32, u64, bool)> = VecDeque::new();
    let mut keys_ahead = 0u64;
    let window_keys = match o.window_keys {
        Some(k) => k,
        None => {
            // A page read ahead enters the LRU's old sublist and, if not
            // touched again within innodb_old_blocks_time, is evicted from
            // there. Everyone else's reads enter it too (the applier's
            // misses, purge), and dirty pages in it cannot be evicted: keep
            // the lead within a quarter of it. Measured (bench/prefetch): at
            // half, about a quarter of the warmed pages were evicted unused.
            let (pool, page, old_pct): (u64, u64, u64) = meta
                .query_first("SELECT @@innodb_buffer_pool_size, @@innodb_page_size, @@innodb_old_blocks_pct")?
                .unwrap_or((128 << 20, 16384, 37));
            (pool / page.max(1) * old_pct / 100 / 4).max(64)
        }
    };
    counters.window_keys.store(window_keys, Ordering::Relaxed);
    // Deduplicate within the window only: a page warmed longer ago than
    // that may well have been evicted again.
    let recent = Recent::new(window_keys as usize);
    let mut last_poll = Instant::now() - o.poll;
    let mut probe = ApplierProbe::default();
    let mut ap: Applier = probe.read(&mut ctl)?;
    // With parallel replication the workers run transactions beyond the
    // position the replica reports (the last one committed in order): reads
    // for those would come too late. Plan only past two per worker.
    let in_flight_trx: u64 =
        meta.query_first::<u64, _>("SELECT @@slave_parallel_threads").ok().flatten().map(|t| t * 2).unwrap_or(0);
    counters.in_flight_trx.store(in_flight_trx, Ordering::Relaxed);
    // Transactions (GTID events) among the events in `ahead`.
    let mut trx_ahead = 0u64;
    let mut batcher = Batcher {
        pending: HashMap::new(),
        pending_rows: HashMap::new(),
        recent,
        batch: o.batch,
        primary_only: o.primary_only,
        pages,
    };
    let mut templates = Templates::default();
    let mut lits = vec![];
    // A DDL statement was read: wait until the applier has passed it.
    let mut ddl_pending = false;
    // Events read so far (numbers the events in `ahead`: the newest is `seq`).
    let mut seq = 0u64;
    let (mut keys, mut skipped): (Vec<Key>, Vec<Skip>) = (vec![], vec![]);
    while !stop.load(Ordering::Relaxed) && o.duration.is_none_or(|d| t0.elapsed() < d) {
        if last_poll.elapsed() >= o.poll {
            last_poll = Instant::now();
            let asked = Instant::now();
            let answer = probe.read(&mut ctl);
            if asked.elapsed() > Duration::from_millis(20) {
                tracing::debug!(ms = asked.elapsed().as_millis() as u64, "replica status was slow to answer");
            }
            ap = match answer {
                Ok(a) => a,
                Err(e) => {
                    // The replica went away (restart, failover): wait for it,
                    // then start again from wherever its applier is.
                    eprintln!("pileup prefetch: lost the replica ({e:#}); reconnecting every second");
                    loop {
                        if stop.load(Ordering::Relaxed) || o.duration.is_some_and(|d| t0.elapsed() >= d) {
                            break;
                        }
                        std::thread::sleep(Duration::from_secs(1));
                        if let (Ok(c1), Ok(c2)) = (spec.connect(), spec.connect()) {
                            (ctl, meta) = (c1, c2);
                            probe.forget();
                            counters.reconnects.fetch_add(1, Ordering::Relaxed);
                            eprintln!("pileup prefetch: reconnected");
                            break;
                        }
                    }
                    tables.clear();
                    reader = None;
                    ahead.clear();
                    (keys_ahead, trx_ahead, ddl_pending) = (0, 0, false);
                    last_poll = Instant::now() - o.poll;
                    continue;
                }
            };
            counters.lag_secs.store(ap.lag.unwrap_or(0), Ordering::Relaxed);
            // Forget what the applier has passed.
            let apos = relay_pos(&ap.relay_file, ap.relay_pos);
            while ahead.front().is_some_and(|(end, _, _, _)| *end <= apos) {
                if let Some((_, _, k, trx)) = ahead.pop_front() {
                    keys_ahead -= k;
                    trx_ahead -= u64::from(trx);
                }
            }
            if ddl_pending && ahead.is_empty() {
                ddl_pending = false;
                tables.clear();
            }
            counters.keys_ahead.store(keys_ahead, Ordering::Relaxed);
            counters.distance_events.store(ahead.len() as u64, Ordering::Relaxed);
            tracing::trace!(ahead = ahead.len(), keys_ahead, apos = ap.relay_pos, reader = reader.as_ref().map(|r| r.position()), lag = ?ap.lag, running = ap.sql_running, "poll");
            // seq of the event the applier is about to apply (past all we
            // read when `ahead` is empty).
            let applier_seq = seq + 1 - ahead.len() as u64;
            counters.applier_at(applier_seq);
            if !ahead.is_empty() {
                let done = counters.done_through();
                counters.warmed_ahead_events.store(done.saturating_sub(applier_seq), Ordering::Relaxed);
                if done < applier_seq {
                    counters.late_polls.fetch_add(1, Ordering::Relaxed);
                }
            }
            let behind = match &reader {
                None => true,
                // Behind the applier; or our file was removed under us
                // (RESET SLAVE, relay logs purged and fetched anew after a
                // restart with GTID, when the numbering starts again and
                // the name we read may already hold other events): follow
                // the applier.
                Some(r) => (ahead.is_empty() && relay_pos(r.path(), r.position()) < apos) || r.replaced(),
            };
            if behind {
                if let Some(r) = &reader {
                    counters.jumps.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(reader = %r.path().display(), reader_pos = r.position(), applier = %ap.relay_file.display(), applier_pos = ap.relay_pos, replaced = r.replaced(), "the applier passed the reader: jumping to it");
                }
                // The applier's file may not exist yet (relay logs being
                // fetched anew): try again at the next poll.
                reader =
                    FileReader::open(&ap.relay_file).and_then(|mut r| r.read_format().map(|_| r)).ok().map(|mut r| {
                        r.seek(ap.relay_pos);
                        r
                    });
                ahead.clear();
                keys_ahead = 0;
                trx_ahead = 0;
                // Everything queued so far is behind the applier now.
                counters.applier_at(seq + 1);
            }
        }
        let lagging = ap.sql_running && ap.lag.is_some_and(|l| l >= o.min_lag);
        if let Some(d) = deferral.as_mut() {
            // Caught up means no lag at all, whatever --min-lag says.
            d.tick(lagging && ap.lag.is_some_and(|l| l >= 1), &counters);
        }
        let applier_ts = ahead.front().map(|a| a.1);
        let window_full = ddl_pending
            || ahead.len() as u64 >= o.window_events
            || keys_ahead >= window_keys
            || matches!((applier_ts, ahead.back()), (Some(a), Some(b)) if b.1.saturating_sub(a) > o.window_secs);
        if !lagging || window_full {
            if !lagging {
                counters.idle_polls.fetch_add(1, Ordering::Relaxed);
            }
            batcher.flush(&tx, seq, &counters);
            std::thread::sleep(Duration::from_millis(if lagging { 5 } else { 20 }));
            // A full window moves as soon as the applier does: look again
            // soon (but no more than 50 times a second).
            if lagging && last_poll.elapsed() >= Duration::from_millis(20) {
                last_poll = Instant::now() - o.poll;
            }
            continue;
        }
        let Some(r) = reader.as_mut() else {
            // Nothing to read until the next poll positions the reader.
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        let path = r.path().to_path_buf();
        let got = match r.next_with_format() {
            Ok(Some((ev, f))) => {
                seq += 1;
                ahead.push_back((relay_pos(&path, ev.end()), ev.header.timestamp, 0, false));
                let issued_before = counters.keys_issued.load(Ordering::Relaxed);
                counters.events_read.fetch_add(1, Ordering::Relaxed);
                let t = ev.header.type_code;
                let trx_start =
                    matches!(t, et::MARIADB_GTID | et::MYSQL_GTID | et::MYSQL_ANONYMOUS_GTID | et::MYSQL_GTID_TAGGED);
                if trx_start {
                    trx_ahead += 1;
                    if let Some(last) = ahead.back_mut() {
                        last.3 = true;
                    }
                }
                let in_flight = trx_ahead <= in_flight_trx;
                if in_flight
                    && (t == et::QUERY || t == et::QUERY_COMPRESSED || pileup_binlog::decode::rows_kind(t).is_some())
                {
                    counters.skipped_in_flight.fetch_add(1, Ordering::Relaxed);
                }
                if t == et::QUERY || t == et::QUERY_COMPRESSED {
                    if let Ok(Event::Query(q)) = dec.decode(f, ev.bytes) {
                        if is_ddl(&q.sql) {
                            // Read no further until the applier has run it: no
                            // lookup of ours holds a metadata lock it waits
                            // for, and the tables are re-read afterwards.
                            ddl_pending = true;
                            counters.ddl_pauses.fetch_add(1, Ordering::Relaxed);
                        } else if !in_flight {
                            let db = String::from_utf8_lossy(q.db).into_owned();
                            let r = templates.get(&db, &q.sql, &mut lits);
                            counters.templates_parsed.store(templates.parsed, Ordering::Relaxed);
                            let skip = |s: StmtSkip| match s {
                                StmtSkip::NotAWrite => {}
                                StmtSkip::NotIndexed => {
                                    counters.statements_skipped_not_indexed.fetch_add(1, Ordering::Relaxed);
                                }
                                StmtSkip::Unparsed | StmtSkip::Unsupported => {
                                    counters.statements_skipped_unsupported.fetch_add(1, Ordering::Relaxed);
                                }
                            };
                            if let Err(e) = &r {
                                if *e != StmtSkip::NotAWrite {
                                    tracing::debug!(reason = ?e, sql = %String::from_utf8_lossy(&q.sql[..q.sql.len().min(200)]), "statement skipped");
                                }
                            }
                            match r {
                                Err(e) => skip(e),
                                Ok(tpl) => {
                                    let (schema, name) = tpl.table_name(&db);
                                    let table = tables
                                        .entry((schema.clone(), name.clone()))
                                        .or_insert_with(|| Table::load(&mut meta, &schema, &name).ok().map(Arc::new))
                                        .clone();
                                    match table.map(|t| (tpl.reads(&t, &lits), t)) {
                                        None => {
                                            counters.skipped_no_table.fetch_add(1, Ordering::Relaxed);
                                        }
                                        Some((Err(e), _)) => skip(e),
                                        Some((Ok(Reads::Keys(ks)), table)) => {
                                            counters.statements_planned.fetch_add(1, Ordering::Relaxed);
                                            for k in ks {
                                                batcher.issue(&table, k, seq, &tx, &counters);
                                            }
                                        }
                                        Some((Ok(Reads::Rows(plan)), _)) => {
                                            counters.statements_planned.fetch_add(1, Ordering::Relaxed);
                                            counters.keys_issued.fetch_add(plan.expected_keys(), Ordering::Relaxed);
                                            batcher.rows(plan, seq, &tx, &counters);
                                        }
                                    }
                                }
                            }
                        }
                    }
                } else if (pileup_binlog::decode::rows_kind(t).is_some() && !in_flight) || t == et::TABLE_MAP {
                    if let Ok(Event::Rows(rows, Some(tm))) = dec.decode(f, ev.bytes) {
                        let key = (tm.schema.clone(), tm.table.clone());
                        let table = tables
                            .entry(key)
                            .or_insert_with(|| Table::load(&mut meta, &tm.schema, &tm.table).ok().map(Arc::new))
                            .clone();
                        match table {
                            None => {
                                counters.skipped_no_table.fetch_add(1, Ordering::Relaxed);
                            }
                            Some(table) => {
                                let mut it = rows.iter(&tm);
                                // Images borrow the event buffer: fresh vectors per event.
                                let (mut before, mut after) =
                                    (Vec::with_capacity(tm.columns.len()), Vec::with_capacity(tm.columns.len()));
                                while let Ok(true) = it.next_into(&mut before, &mut after) {
                                    counters.rows_planned.fetch_add(1, Ordering::Relaxed);
                                    keys.clear();
                                    skipped.clear();
                                    plan_row(&table, rows.kind, &before, &after, &mut keys, &mut skipped);
                                    for s in &skipped {
                                        let c = match s {
                                            Skip::ColumnNotInImage => &counters.skipped_not_in_image,
                                            Skip::FloatKey => &counters.skipped_float_key,
                                            Skip::SchemaMismatch => &counters.skipped_schema,
                                        };
                                        c.fetch_add(1, Ordering::Relaxed);
                                    }
                                    for k in keys.drain(..) {
                                        batcher.issue(&table, k, seq, &tx, &counters);
                                    }
                                }
                            }
                        }
                    }
                }
                let issued = counters.keys_issued.load(Ordering::Relaxed) - issued_before;
                if let Some(last) = ahead.back_mut() {
                    last.2 = issued;
                }
                keys_ahead += issued;
                true
            }
            Ok(None) => {
                // The server went on to the next relay log: follow it once
                // this one is read to its end.
                match pileup_binlog::reader::next_started(&path) {
                    Some(n) if matches!(r.next_event(), Ok(None)) => {
                        match FileReader::open(&n).and_then(|mut nr| nr.read_format().map(|_| nr)) {
                            Ok(nr) => {
                                reader = Some(nr);
                                counters.files_followed.fetch_add(1, Ordering::Relaxed);
                                true
                            }
                            // Not a relay log we can read (or gone again, when a
                            // restart purges relay logs): stay here; the next
                            // poll follows the applier once it moves on.
                            Err(e) => {
                                if counters.follow_errors.fetch_add(1, Ordering::Relaxed) < 10 {
                                    eprintln!("pileup prefetch: cannot follow the relay log into the next file: {e}; waiting for the applier");
                                }
                                false
                            }
                        }
                    }
                    _ => false,
                }
            }
            Err(e @ ReadError::Corrupt { .. }) => {
                // Go on at the next event whose checksum verifies; if there
                // is none, from where the applier is (at the next poll).
                let at = r.position();
                let next = r.resync(at).ok().flatten();
                if counters.corrupt_events.fetch_add(1, Ordering::Relaxed) < 10 {
                    match next {
                        Some(n) => eprintln!("pileup prefetch: {e}; reading on at offset {n}"),
                        None => eprintln!("pileup prefetch: {e}; reading on from the applier's position"),
                    }
                }
                if next.is_none() {
                    reader = None;
                }
                next.is_some()
            }
            Err(e) => return Err(e.into()),
        };
        if !got {
            batcher.flush(&tx, seq, &counters);
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    if let Some(d) = deferral.as_mut() {
        d.finish(&counters);
    }
    stop.store(true, Ordering::Relaxed);
    drop(tx);
    drop(batcher);
    for h in handles {
        let _ = h.join();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn advice_only_when_readers_hold_the_window_back() {
        let a = super::reader_advice(4_000, 10.0, 100, 3_000, 4).expect("40% waiting with the window nearly empty");
        assert!(a.contains("--readers 8") && a.contains("waited 40%") && a.contains("holds 100 of 3000 keys"), "{a}");
        assert!(super::reader_advice(1_000, 10.0, 100, 3_000, 4).is_none(), "waiting 10% of the time is fine");
        assert!(super::reader_advice(9_000, 10.0, 2_000, 3_000, 4).is_none(), "a full window: the readers keep up");
        assert!(super::reader_advice(9_000, 0.0, 0, 3_000, 4).is_some(), "no division by zero");
    }

    use super::*;

    #[test]
    fn jobs_the_applier_passed_are_stale() {
        let c = Counters::default();
        assert!(!c.passed(0) && !c.passed(5), "nothing is passed before the first poll");
        c.applier_at(10);
        assert!(c.passed(9), "every event of the job is behind the applier");
        assert!(!c.passed(10), "the applier has not applied its last event yet");
        assert!(!c.passed(11));
        // A jump puts the applier past everything read so far.
        c.applier_at(31);
        assert!(c.passed(30));
    }

    #[test]
    fn warmed_through_the_oldest_unfinished_job() {
        let c = Counters::default();
        assert_eq!(c.done_through(), 0);
        for seq in [10, 20, 20, 30] {
            c.job_queued(seq);
        }
        assert_eq!(c.done_through(), 9, "nothing finished: warm only before the first job");
        // Readers finish out of order: the job for 30 is done, 10 and 20 are not.
        c.job_done(30);
        assert_eq!(c.done_through(), 9);
        c.job_done(10);
        assert_eq!(c.done_through(), 19);
        c.job_done(20);
        assert_eq!(c.done_through(), 19, "one of the two jobs for 20 is still running");
        drop(JobDone { counters: &c, seq: 20 });
        assert_eq!(c.done_through(), 30, "all done: up to the newest queued");
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
        assert!(e.lines().all(|l| l.starts_with("# TYPE ") || l.split(' ').count() == 2));
    }
}
