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
use crate::replica::{applier, Applier};
use crate::schema::Table;

#[derive(Debug, Clone)]
pub struct Options {
    /// Parallel readers.
    pub readers: usize,
    /// Stay at most this many events ahead of the applier…
    pub window_events: u64,
    /// …and this many index keys issued ahead (None: half the buffer pool's
    /// old sublist, so warmed pages are not evicted before the applier gets
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
}

impl Default for Options {
    fn default() -> Self {
        Options { readers: 4, window_events: 50_000, window_keys: None, window_secs: 30, min_lag: 1, batch: 16, query_timeout: Duration::from_millis(500), poll: Duration::from_millis(100), duration: None }
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
    /// Times the applier had passed the reader and it jumped ahead.
    pub jumps: AtomicU64,
    /// Events between the applier and the reader at the last poll.
    pub distance_events: AtomicU64,
    pub lag_secs: AtomicU64,
    /// Keys issued for events the applier has not reached yet.
    pub keys_ahead: AtomicU64,
    pub window_keys: AtomicU64,
    /// Polls with the replica not lagging (prefetch idle).
    pub idle_polls: AtomicU64,
}

impl Counters {
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
            ("jumps", g(&self.jumps)),
            ("distance_events", g(&self.distance_events)),
            ("lag_seconds", g(&self.lag_secs)),
            ("keys_ahead", g(&self.keys_ahead)),
            ("window_keys", g(&self.window_keys)),
            ("idle_polls", g(&self.idle_polls)),
        ]
    }
}

/// A batch of keys of one index of one table.
struct Job {
    table: Arc<Table>,
    index: usize,
    keys: Vec<Key>,
}

fn reader_pool(spec: &pileup_conn::ConnSpec, o: &Options, counters: &Arc<Counters>, stop: &Arc<AtomicBool>) -> Result<(mpsc::SyncSender<Job>, Vec<std::thread::JoinHandle<()>>)> {
    let (tx, rx) = mpsc::sync_channel::<Job>(o.readers * 4);
    let rx = Arc::new(std::sync::Mutex::new(rx));
    let mut handles = vec![];
    for _ in 0..o.readers {
        let mut spec = spec.clone();
        spec.timeout = o.query_timeout.max(Duration::from_secs(1));
        let mut c = spec.connect()?;
        // Never wait on the applier's locks: short metadata-lock waits, a
        // statement time limit, consistent (non-locking) reads.
        let ms = o.query_timeout.as_secs_f64();
        let _ = c.query_drop(format!("SET SESSION max_statement_time = {ms}"));
        let _ = c.query_drop("SET SESSION lock_wait_timeout = 1");
        let _ = c.query_drop("SET SESSION innodb_lock_wait_timeout = 1");
        let _ = c.query_drop("SET SESSION time_zone = '+00:00'");
        let _ = c.query_drop("SET SESSION transaction_read_only = 1");
        let (rx, counters, stop) = (rx.clone(), counters.clone(), stop.clone());
        handles.push(std::thread::spawn(move || {
            let mut prepared: HashMap<String, mysql::Statement> = HashMap::new();
            while !stop.load(Ordering::Relaxed) {
                let job = match rx.lock().unwrap().recv_timeout(Duration::from_millis(200)) {
                    Ok(j) => j,
                    Err(mpsc::RecvTimeoutError::Timeout) => continue,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                };
                let refs: Vec<&Key> = job.keys.iter().collect();
                let (sql, params) = crate::sql::lookup(&job.table, job.index, &refs);
                let st = match prepared.get(&sql) {
                    Some(s) => s.clone(),
                    None => match c.prep(&sql) {
                        Ok(s) => {
                            if prepared.len() > 500 {
                                prepared.clear();
                            }
                            prepared.insert(sql.clone(), s.clone());
                            s
                        }
                        Err(_) => {
                            counters.lookup_errors.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    },
                };
                counters.lookups.fetch_add(1, Ordering::Relaxed);
                if c.exec_drop(&st, params).is_err() {
                    counters.lookup_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    Ok((tx, handles))
}

/// Send every partly filled batch.
fn flush(pending: &mut HashMap<(usize, usize), (Arc<Table>, Vec<Key>)>, tx: &mpsc::SyncSender<Job>) {
    for ((_, index), (table, keys)) in pending.iter_mut() {
        if !keys.is_empty() {
            let _ = tx.send(Job { table: table.clone(), index: *index, keys: std::mem::take(keys) });
        }
    }
}

/// Is this statement DDL that may change a table's definition?
fn is_ddl(sql: &[u8]) -> bool {
    let s = String::from_utf8_lossy(&sql[..sql.len().min(32)]).trim_start().to_ascii_uppercase();
    ["ALTER", "CREATE", "DROP", "RENAME", "TRUNCATE"].iter().any(|k| s.starts_with(k))
}

/// Run until `stop` is set (or the duration passes).
pub fn run(spec: &pileup_conn::ConnSpec, o: &Options, counters: Arc<Counters>, stop: Arc<AtomicBool>) -> Result<()> {
    let mut ctl = spec.connect().context("connecting to the replica")?;
    let mut meta = spec.connect()?;
    let (tx, handles) = reader_pool(spec, o, &counters, &stop)?;
    let t0 = Instant::now();
    let mut tables: HashMap<(String, String), Option<Arc<Table>>> = HashMap::new();

    let mut dec = Decoder::new();
    let mut reader: Option<FileReader> = None;
    // Events read ahead, oldest first: (file, offset after the event, primary timestamp, keys issued for it).
    let mut ahead: VecDeque<(std::path::PathBuf, u64, u32, u64)> = VecDeque::new();
    let mut keys_ahead = 0u64;
    let window_keys = match o.window_keys {
        Some(k) => k,
        None => {
            // A page read ahead enters the LRU's old sublist and, if not
            // touched again within innodb_old_blocks_time, is evicted from
            // there: keep the lead within half of that sublist.
            let (pool, page, old_pct): (u64, u64, u64) =
                meta.query_first("SELECT @@innodb_buffer_pool_size, @@innodb_page_size, @@innodb_old_blocks_pct")?.unwrap_or((128 << 20, 16384, 37));
            (pool / page.max(1) * old_pct / 100 / 2).max(64)
        }
    };
    counters.window_keys.store(window_keys, Ordering::Relaxed);
    // Deduplicate within the window only: a page warmed longer ago than
    // that may well have been evicted again.
    let mut recent = Recent::new(window_keys as usize);
    let mut last_poll = Instant::now() - o.poll;
    let mut ap: Applier = applier(&mut ctl)?;
    let mut pending: HashMap<(usize, usize), (Arc<Table>, Vec<Key>)> = HashMap::new();
    let (mut keys, mut skipped): (Vec<Key>, Vec<Skip>) = (vec![], vec![]);
    while !stop.load(Ordering::Relaxed) && o.duration.is_none_or(|d| t0.elapsed() < d) {
        if last_poll.elapsed() >= o.poll {
            last_poll = Instant::now();
            ap = applier(&mut ctl)?;
            counters.lag_secs.store(ap.lag.unwrap_or(0), Ordering::Relaxed);
            // Forget what the applier has passed.
            while ahead.front().is_some_and(|(f, end, _, _)| *f != ap.relay_file || *end <= ap.relay_pos) {
                if ahead.front().is_some_and(|(f, _, _, _)| *f != ap.relay_file) && !ahead.iter().any(|(f, _, _, _)| *f == ap.relay_file) {
                    // The applier is in a file we have not read: we are behind it.
                    ahead.clear();
                    keys_ahead = 0;
                    break;
                }
                if let Some((_, _, _, k)) = ahead.pop_front() {
                    keys_ahead -= k;
                }
            }
            counters.keys_ahead.store(keys_ahead, Ordering::Relaxed);
            counters.distance_events.store(ahead.len() as u64, Ordering::Relaxed);
            let behind = match &reader {
                None => true,
                Some(r) => ahead.is_empty() && (r.path() != ap.relay_file || r.position() < ap.relay_pos),
            };
            if behind {
                if reader.is_some() {
                    counters.jumps.fetch_add(1, Ordering::Relaxed);
                }
                let mut r = FileReader::open(&ap.relay_file).map_err(anyhow::Error::from)?;
                r.read_format().map_err(anyhow::Error::from)?;
                r.seek(ap.relay_pos);
                reader = Some(r);
                ahead.clear();
                keys_ahead = 0;
            }
        }
        let lagging = ap.sql_running && ap.lag.is_some_and(|l| l >= o.min_lag);
        let applier_ts = ahead.front().map(|a| a.2);
        let window_full = ahead.len() as u64 >= o.window_events || keys_ahead >= window_keys || matches!((applier_ts, ahead.back()), (Some(a), Some(b)) if b.2.saturating_sub(a) > o.window_secs);
        if !lagging || window_full {
            if !lagging {
                counters.idle_polls.fetch_add(1, Ordering::Relaxed);
            }
            flush(&mut pending, &tx);
            std::thread::sleep(Duration::from_millis(if lagging { 5 } else { 20 }));
            // A full window moves as soon as the applier does: look again
            // soon (but no more than 50 times a second).
            if lagging && last_poll.elapsed() >= Duration::from_millis(20) {
                last_poll = Instant::now() - o.poll;
            }
            continue;
        }
        let r = reader.as_mut().unwrap();
        let path = r.path().to_path_buf();
        let got = match r.next_with_format() {
            Ok(Some((ev, f))) => {
                ahead.push_back((path.clone(), ev.end(), ev.header.timestamp, 0));
                let issued_before = counters.keys_issued.load(Ordering::Relaxed);
                counters.events_read.fetch_add(1, Ordering::Relaxed);
                let t = ev.header.type_code;
                if t == et::QUERY || t == et::QUERY_COMPRESSED {
                    if let Ok(Event::Query(q)) = dec.decode(f, ev.bytes) {
                        if is_ddl(&q.sql) {
                            tables.clear();
                        }
                    }
                } else if pileup_binlog::decode::rows_kind(t).is_some() || t == et::TABLE_MAP {
                    if let Ok(Event::Rows(rows, Some(tm))) = dec.decode(f, ev.bytes) {
                        let key = (tm.schema.clone(), tm.table.clone());
                        let table = tables.entry(key).or_insert_with(|| Table::load(&mut meta, &tm.schema, &tm.table).ok().map(Arc::new)).clone();
                        match table {
                            None => {
                                counters.skipped_no_table.fetch_add(1, Ordering::Relaxed);
                            }
                            Some(table) => {
                                let mut it = rows.iter(&tm);
                                // Images borrow the event buffer: fresh vectors per event.
                                let (mut before, mut after) = (Vec::with_capacity(tm.columns.len()), Vec::with_capacity(tm.columns.len()));
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
                                        if !recent.insert(&k) {
                                            counters.keys_deduplicated.fetch_add(1, Ordering::Relaxed);
                                            continue;
                                        }
                                        counters.keys_issued.fetch_add(1, Ordering::Relaxed);
                                        let (slot_key, ix) = ((Arc::as_ptr(&table) as usize, k.index), k.index);
                                        let slot = pending.entry(slot_key).or_insert_with(|| (table.clone(), vec![]));
                                        slot.1.push(k);
                                        if slot.1.len() >= o.batch {
                                            let ks = std::mem::take(&mut slot.1);
                                            let _ = tx.send(Job { table: table.clone(), index: ix, keys: ks });
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                let issued = counters.keys_issued.load(Ordering::Relaxed) - issued_before;
                if let Some(last) = ahead.back_mut() {
                    last.3 = issued;
                }
                keys_ahead += issued;
                true
            }
            Ok(None) => false,
            Err(ReadError::Corrupt { .. }) => {
                // Resynchronise where the server itself is: the applier's position.
                reader = None;
                false
            }
            Err(e) => return Err(e.into()),
        };
        if !got {
            flush(&mut pending, &tx);
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    stop.store(true, Ordering::Relaxed);
    drop(tx);
    for h in handles {
        let _ = h.join();
    }
    Ok(())
}
