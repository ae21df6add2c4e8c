//! The reader pool: connections to the replica that run the lookups, and
//! the [`Batcher`] that feeds them.
//!
//! Keys are deduplicated within the window, batched per (table, index)
//! and looked up with index-only SELECTs ([`crate::sql`]); a statement's
//! rows are read first, then the index entries they name. Each reader's
//! session never waits on the applier ([`pileup_replica::session`]). Jobs
//! the applier passed while they waited are dropped unread.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::Result;
use mysql::prelude::Queryable;
use pileup_replica::schema::Table;

use crate::config::Shared;
use crate::page_warmer::PageSender;
use crate::plan::statement::RowsPlan;
use crate::plan::{Key, Lookup, Recent};
use crate::progress::JobDone;

/// Work for a reader.
enum Work {
    /// A batch of keys of one index of one table.
    Keys { table: Arc<Table>, index: usize, keys: Vec<Key> },
    /// Statements' rows (all of one shape), then the index entries they name.
    Rows(Vec<RowsPlan>),
}

pub struct Job {
    /// Number (in reading order) of the last event whose reads are in it.
    seq: u64,
    work: Work,
}

/// How the readers connect and look up.
#[derive(Debug, Clone)]
pub struct ReaderOptions {
    pub readers: usize,
    /// Keys per lookup statement.
    pub batch: usize,
    /// Bound on each lookup (server-side max_statement_time).
    pub query_timeout: Duration,
}

/// Start the readers; jobs go to the returned sender. Statements' index
/// entries (known once their rows are read) go to the page warmer when it
/// can map them (`pages`).
pub fn start(
    spec: &pileup_conn::ConnSpec,
    o: &ReaderOptions,
    sh: &Shared,
    pages: Option<&mpsc::SyncSender<crate::page_warmer::PageJob>>,
) -> Result<(mpsc::SyncSender<Job>, Vec<JoinHandle<()>>)> {
    let (tx, rx) = mpsc::sync_channel::<Job>(o.readers * 4);
    let rx = Arc::new(Mutex::new(rx));
    let errors = Arc::new(ErrorsSeen::default());
    let mut handles = vec![];
    for slot in 0..o.readers {
        let mut spec = spec.clone();
        spec.timeout = o.query_timeout.max(Duration::from_secs(1));
        let mut c = reader_conn(&spec, o.query_timeout)?;
        sh.reads.reader_connected(slot, &mut c);
        let mut reader = Reader {
            c,
            broken: false,
            batch: o.batch,
            sh: sh.clone(),
            errors: errors.clone(),
            pages: pages.map(|tx| PageSender::new(tx.clone())),
        };
        let (rx, o) = (rx.clone(), o.clone());
        handles.push(std::thread::spawn(move || {
            let mut last_try = Instant::now();
            while !reader.sh.stop.load(Relaxed) {
                let job = match rx.lock().unwrap().recv_timeout(Duration::from_millis(200)) {
                    Ok(j) => j,
                    Err(mpsc::RecvTimeoutError::Timeout) => continue,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                };
                let sh = reader.sh.clone();
                let _done = JobDone { progress: &sh.progress, seq: job.seq };
                // The applier passed these events while the job waited in
                // the queue (the readers fell behind: a flush storm, a slow
                // device): skip it, so the readers get ahead again at once.
                if sh.progress.passed(job.seq) {
                    sh.counters.jobs_stale.fetch_add(1, Relaxed);
                    continue;
                }
                // The server went away (restart): reconnect, at most once a
                // second, dropping the work meanwhile.
                if reader.broken {
                    if last_try.elapsed() < Duration::from_secs(1) {
                        sh.counters.jobs_dropped.fetch_add(1, Relaxed);
                        continue;
                    }
                    last_try = Instant::now();
                    match reader_conn(&spec, o.query_timeout) {
                        Ok(mut n) => {
                            sh.reads.reader_connected(slot, &mut n);
                            reader.c = n;
                            reader.broken = false;
                        }
                        Err(_) => {
                            sh.counters.jobs_dropped.fetch_add(1, Relaxed);
                            continue;
                        }
                    }
                }
                match &job.work {
                    Work::Keys { table, index, keys } => reader.broken = !reader.lookup_keys(table, *index, keys),
                    Work::Rows(plans) => reader.rows(plans, job.seq),
                }
            }
        }));
    }
    Ok((tx, handles))
}

/// A reader's connection, set up never to wait on the applier's locks.
fn reader_conn(spec: &pileup_conn::ConnSpec, query_timeout: Duration) -> Result<mysql::Conn> {
    let mut c = spec.connect()?;
    pileup_replica::session::reader_safe(&mut c, query_timeout);
    Ok(c)
}

/// Did this error lose the connection (rather than fail one statement)?
fn connection_lost(e: &mysql::Error) -> bool {
    !matches!(e, mysql::Error::MySqlError(_))
}

/// Server error codes already said: a systematic failure is said once,
/// then only counted.
#[derive(Default)]
struct ErrorsSeen(Mutex<HashSet<u64>>);

struct Reader {
    c: mysql::Conn,
    /// The connection was lost.
    broken: bool,
    batch: usize,
    sh: Shared,
    errors: Arc<ErrorsSeen>,
    pages: Option<PageSender>,
}

impl Reader {
    fn failed(&mut self, e: &mysql::Error) {
        self.sh.counters.lookup_errors.fetch_add(1, Relaxed);
        let code = match e {
            mysql::Error::MySqlError(m) => m.code as u64,
            _ => 0,
        };
        if self.errors.0.lock().unwrap().insert(code) {
            (self.sh.say)(format!(
                "a lookup failed: {} (further errors with this code are only counted)",
                pileup_conn::plain(e)
            ));
        }
    }

    /// Look up `keys` of one index in batches of at most `batch`, each
    /// padded to a power of two by repeating its last key: a handful of
    /// statement shapes per index, each prepared once (the connection's
    /// statement cache keys them by text). False when the connection was
    /// lost.
    fn lookup_keys(&mut self, table: &Table, index: usize, keys: &[Key]) -> bool {
        for chunk in keys.chunks(self.batch.max(1)) {
            let mut refs: Vec<&Key> = chunk.iter().collect();
            let want = refs.len().next_power_of_two();
            while refs.len() < want {
                refs.push(refs[refs.len() - 1]);
            }
            let (sql, params) = crate::sql::lookup(table, index, &refs);
            self.sh.counters.lookups.fetch_add(1, Relaxed);
            let r = self.c.prep(&sql).and_then(|st| self.c.exec_drop(&st, params));
            if let Err(e) = r {
                self.failed(&e);
                if connection_lost(&e) {
                    return false;
                }
            }
        }
        true
    }

    /// Statements' rows, then the index entries they name.
    fn rows(&mut self, plans: &[RowsPlan], seq: u64) {
        // One round trip for the batch: the statements' SELECTs joined by
        // UNION ALL, each row tagged with its statement (padded to a power
        // of two, like key batches).
        let want = plans.len().next_power_of_two();
        let mut sql = String::new();
        let mut params = vec![];
        for i in 0..want {
            let p = &plans[i.min(plans.len() - 1)];
            if i > 0 {
                sql.push_str(" UNION ALL ");
            }
            sql.push_str(&format!("({})", p.sql.replacen("SELECT ", &format!("SELECT {i} AS pileup_tag, "), 1)));
            params.extend(p.params.iter().cloned());
        }
        self.sh.counters.lookups.fetch_add(1, Relaxed);
        let rows: Result<Vec<mysql::Row>, _> = self.c.prep(&sql).and_then(|st| self.c.exec(&st, params));
        let rows = match rows {
            Ok(rows) => rows,
            Err(e) => {
                self.failed(&e);
                self.broken = connection_lost(&e);
                return;
            }
        };
        self.sh.counters.statement_rows_read.fetch_add(rows.len() as u64, Relaxed);
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
        let table = &plans[0].table;
        if let Some(ps) = self.pages.as_mut() {
            keys.retain(|k| !ps.take(table, k, seq, &self.sh));
        }
        keys.sort_by_key(|k| k.index);
        keys.dedup();
        for group in keys.chunk_by(|a, b| a.index == b.index) {
            if !self.lookup_keys(table, group[0].index, group) {
                self.broken = true;
                break;
            }
        }
    }
}

/// Lookups on their way to the readers: deduplicated within the window,
/// batched per (table, index) and per statement shape.
pub struct Batcher {
    tx: mpsc::SyncSender<Job>,
    sh: Shared,
    pending: HashMap<(usize, usize), (Arc<Table>, Vec<Key>)>,
    /// Statement reads by SELECT text (one shape per batch).
    pending_rows: HashMap<String, Vec<RowsPlan>>,
    recent: Recent,
    batch: usize,
    primary_only: bool,
    /// `--warm pages`: where keys of integer indexes go instead.
    pages: Option<PageSender>,
}

impl Batcher {
    /// Deduplicate within `window_keys` keys: a page warmed longer ago than
    /// that may well have been evicted again.
    pub fn new(
        tx: mpsc::SyncSender<Job>,
        sh: &Shared,
        window_keys: u64,
        batch: usize,
        primary_only: bool,
        pages: Option<PageSender>,
    ) -> Batcher {
        Batcher {
            tx,
            sh: sh.clone(),
            pending: HashMap::new(),
            pending_rows: HashMap::new(),
            recent: Recent::new(window_keys as usize),
            batch,
            primary_only,
            pages,
        }
    }

    /// Issue one lookup for the event numbered `seq`.
    pub fn issue(&mut self, l: Lookup, seq: u64) {
        match l {
            Lookup::Key(table, k) => self.key(&table, k, seq),
            Lookup::Rows(plan) => {
                self.sh.counters.keys_issued.fetch_add(plan.expected_keys(), Relaxed);
                let slot = self.pending_rows.entry(plan.sql.clone()).or_default();
                slot.push(plan);
                if slot.len() >= self.batch {
                    let plans = std::mem::take(slot);
                    self.send(Job { seq, work: Work::Rows(plans) });
                }
            }
        }
    }

    fn key(&mut self, table: &Arc<Table>, k: Key, seq: u64) {
        let counters = &self.sh.counters;
        if self.primary_only && !table.indexes[k.index].is_primary() {
            return;
        }
        if !self.recent.insert(&k) {
            counters.keys_deduplicated.fetch_add(1, Relaxed);
            return;
        }
        counters.keys_issued.fetch_add(1, Relaxed);
        if self.pages.as_mut().is_some_and(|ps| ps.take(table, &k, seq, &self.sh)) {
            return;
        }
        let ix = k.index;
        let slot = self.pending.entry((Arc::as_ptr(table) as usize, ix)).or_insert_with(|| (table.clone(), vec![]));
        slot.1.push(k);
        if slot.1.len() >= self.batch {
            let keys = std::mem::take(&mut slot.1);
            self.send(Job { seq, work: Work::Keys { table: table.clone(), index: ix, keys } });
        }
    }

    /// Send every partly filled batch (as belonging to event `seq`).
    pub fn flush(&mut self, seq: u64) {
        let mut jobs = vec![];
        for plans in self.pending_rows.values_mut() {
            if !plans.is_empty() {
                jobs.push(Job { seq, work: Work::Rows(std::mem::take(plans)) });
            }
        }
        if self.pending_rows.len() > 1000 {
            self.pending_rows.clear();
        }
        for ((_, index), (table, keys)) in self.pending.iter_mut() {
            if !keys.is_empty() {
                jobs.push(Job {
                    seq,
                    work: Work::Keys { table: table.clone(), index: *index, keys: std::mem::take(keys) },
                });
            }
        }
        for j in jobs {
            self.send(j);
        }
    }

    /// Queue a batch for the readers; time spent waiting for a free slot
    /// means the readers cannot keep up.
    fn send(&self, job: Job) {
        let (progress, counters) = (&self.sh.progress, &self.sh.counters);
        progress.job_queued(job.seq);
        let seq = job.seq;
        let job = match self.tx.try_send(job) {
            Ok(()) => return,
            Err(mpsc::TrySendError::Full(j)) => j,
            Err(mpsc::TrySendError::Disconnected(_)) => {
                progress.job_done(seq);
                return;
            }
        };
        let t = Instant::now();
        if self.tx.send(job).is_err() {
            progress.job_done(seq);
        }
        let waited = t.elapsed();
        if waited > Duration::from_millis(20) {
            tracing::debug!(ms = waited.as_millis() as u64, "waited for a free reader");
        }
        counters.readers_busy_ms.fetch_add(waited.as_millis() as u64, Relaxed);
    }
}
