//! pileup-lag: where a replica's apply time goes ("replication lag
//! composition").
//!
//! Data flow: sample (the stacks engine, focused on the applier threads —
//! the SQL thread and parallel workers — with their processlist state read
//! at every sample) → [`classify`] (each thread sample → a [`Category`] and
//! the table being applied) → [`Tally`] (shares overall and per table, and
//! folded stacks rooted at category and table for a flame graph) → render
//! (text table, JSON, FlameGraph folded or SVG).
//!
//! Alongside, the replica's own progress over the same period: transactions
//! applied (from `gtid_slave_pos`), lag at start and end, and, where
//! performance_schema is on, the applier threads' instrumented waits
//! ([`ps`]), which name the latch a stack sample can only call a futex;
//! and the storage side ([`io`], from pileup-replica): what the device holding the datadir did
//! and how many bytes the applier threads read from and wrote to storage
//! themselves.

pub mod classify;
mod error;
pub use pileup_replica::device as io;
pub mod ps;
pub mod stall;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use serde::Serialize;

pub use classify::{classify, table_of, Category};
pub use error::LagError;
use pileup_annotate::SqlSource;
use pileup_engine::{CaptureOptions, Mode, Sampler, SamplerOptions, ThreadFilter};

/// How to sample.
#[derive(Debug, Clone)]
pub struct LagOptions {
    pub duration: Duration,
    pub interval: Duration,
    /// Longest the applier may stay stopped per sample.
    pub max_stop: Duration,
    /// A position held at least this long while there was work is a stall.
    pub stall: Duration,
}

/// Samples by category, overall and per table.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Tally {
    pub samples: u64,
    pub by_category: BTreeMap<Category, u64>,
    pub by_table: BTreeMap<String, BTreeMap<Category, u64>>,
    /// Samples by category and the row operation (`handler::ha_*` call)
    /// they were inside: does the applier wait to find rows or to change
    /// their secondary index entries?
    pub by_operation: BTreeMap<Category, BTreeMap<String, u64>>,
    /// The applier's processlist states, as sampled.
    pub states: BTreeMap<String, u64>,
    /// Samples by where their table came from: "statement" (the applier's
    /// statement text), "worker transaction" (the transaction a parallel
    /// worker is on, from performance_schema and the relay log), "applier
    /// position" (the transaction at the replica's relay position), "none".
    pub table_from: BTreeMap<String, u64>,
    #[serde(skip)]
    pub folded: HashMap<String, u64>,
}

impl Tally {
    /// Add one thread sample; `frames` innermost first.
    pub fn add(&mut self, cat: Category, table: Option<&str>, frames: &[&str]) {
        self.samples += 1;
        *self.by_category.entry(cat).or_default() += 1;
        let table = table.unwrap_or("(no table)");
        *self.by_table.entry(table.to_string()).or_default().entry(cat).or_default() += 1;
        if let Some(op) = classify::row_operation(frames) {
            *self.by_operation.entry(cat).or_default().entry(op.to_string()).or_default() += 1;
        }
        let mut stack = format!("{};{}", cat.label(), table);
        for f in frames.iter().rev() {
            stack.push(';');
            stack.push_str(&f.replace(';', ":"));
        }
        *self.folded.entry(stack).or_default() += 1;
    }

    pub fn share(&self, cat: Category) -> f64 {
        100.0 * *self.by_category.get(&cat).unwrap_or(&0) as f64 / self.samples.max(1) as f64
    }
}

/// What `pileup lag` found.
#[derive(Debug, Clone, Serialize)]
pub struct LagReport {
    pub seconds: f64,
    pub samples: usize,
    pub applier_threads: usize,
    /// Transactions the replica applied meanwhile (gtid_slave_pos).
    pub transactions: Option<u64>,
    pub lag_start_s: Option<u64>,
    pub lag_end_s: Option<u64>,
    pub tally: Tally,
    /// Stretches in which the applier had work and did not move.
    pub stalls: stall::Stalls,
    /// The applier threads' instrumented waits over the period, longest
    /// first (empty when performance_schema is off: see `notes`).
    pub waits: Vec<ps::PsWait>,
    /// The device holding the datadir over the period (None when it has
    /// no block device or is not on this host: see `notes`).
    pub device: Option<io::DeviceReport>,
    /// Bytes the applier threads read from storage themselves.
    pub applier_read_bytes: Option<u64>,
    /// Bytes the applier threads wrote to storage themselves: pages they
    /// had to flush because the buffer pool had no free page, or log
    /// writes they made (the page cleaner's flushing is not counted here).
    pub applier_write_bytes: Option<u64>,
    /// InnoDB page size, to turn those bytes into pages.
    pub page_size: Option<u64>,
    /// Pages the whole buffer pool read over the period (the applier's,
    /// purge's, anyone's: Innodb_buffer_pool_reads).
    pub pool_reads: Option<u64>,
    /// InnoDB's history list length at the start and end of the period:
    /// whether purge kept up with the applier (and so read and latched
    /// pages beside it) or fell behind.
    pub history: Option<(u64, u64)>,
    pub notes: Vec<String>,
}

/// What to say about purge, from the history list at the start and end of
/// the period: None when there is nothing worth saying.
pub fn purge_line(history: (u64, u64), transactions: Option<u64>, lag_end_s: Option<u64>) -> Option<String> {
    let (a, b) = history;
    let t = transactions.filter(|t| *t > 0)?;
    if b > a + (t / 2).max(1000) {
        return Some(format!("  purge: the history list grew {a} → {b}: purge fell behind the applier (it catches up once the applier is idle)\n"));
    }
    // Kept up while the replica still lags: it removed what the applier
    // changed as fast as it was applied, reading and latching those pages
    // beside the applier.
    let still_lagging = lag_end_s.is_some_and(|l| l > 0);
    Some(format!(
        "  purge: the history list went {a} → {b} over {t} applied transactions: purge kept up, reading and latching pages beside the applier{}\n",
        if still_lagging { " (on an I/O-bound replica, `pileup prefetch --defer-purge` holds it off until caught up, and purge does that work afterwards)" } else { "" }
    ))
}

impl LagReport {
    /// Pages the applier threads read from storage themselves.
    pub fn applier_pages(&self) -> Option<u64> {
        Some(self.applier_read_bytes? / self.page_size.unwrap_or(16384).max(1))
    }
}

fn replica_status(c: &mut mysql::Conn) -> Result<Option<mysql::Row>, LagError> {
    c.query_first("SHOW SLAVE STATUS").map_err(LagError::sql("reading SHOW SLAVE STATUS"))
}

/// `domain-server-seq` lists → per-domain sequence numbers.
fn gtid_seqs(pos: &str) -> HashMap<u32, u64> {
    pos.split(',')
        .filter_map(|g| {
            let mut p = g.trim().split('-');
            let d = p.next()?.parse().ok()?;
            let _server = p.next()?;
            let n = p.next()?.parse().ok()?;
            Some((d, n))
        })
        .collect()
}

/// Transactions between two gtid_slave_pos values.
pub fn transactions_between(before: &str, after: &str) -> u64 {
    let (b, a) = (gtid_seqs(before), gtid_seqs(after));
    a.iter().map(|(d, n)| n.saturating_sub(*b.get(d).unwrap_or(&0))).sum()
}

/// Sample the applier threads of the server `pid` (reached through `spec`).
pub fn sample(
    pid: i32,
    spec: &pileup_conn::ConnSpec,
    o: &LagOptions,
    progress: impl FnMut(usize, usize),
) -> Result<LagReport, LagError> {
    let mut c = spec.connect()?;
    let st0 = replica_status(&mut c)?.ok_or_else(|| LagError::NotAReplica(spec.describe()))?;
    let lag_start_s: Option<u64> = st0.get::<Option<u64>, _>("Seconds_Behind_Master").flatten();
    let pos0 = gtid_pos(&mut c)?;
    let mut notes: Vec<String> = Vec::new();
    // performance_schema's view of the same period, where it is on.
    let ps0 = ps_start(&mut c, &mut notes);
    // The storage side: the datadir's device and every thread's storage I/O.
    let (datadir, page_size): (Option<String>, Option<u64>) = c
        .query_first("SELECT @@datadir, @@innodb_page_size")
        .map_err(LagError::sql("reading @@datadir"))?
        .unwrap_or((None, None));
    let disk0 = datadir.as_deref().and_then(|d| io::device_of(pid, d));
    let io0 = io::thread_io(pid);
    let pool_reads = |c: &mut mysql::Conn| pileup_conn::global_status(c, "Innodb_buffer_pool_reads").ok().flatten();
    let (reads0, history0) = (pool_reads(&mut c), pileup_replica::history::history_length(&mut c).ok());
    let sql = SqlSource::new(spec.connect()?)?;
    let opts = sampler_options(o);
    let mut s = Sampler::new(pid, opts, Some(Box::new(sql)))?;
    let n = (o.duration.as_secs_f64() / o.interval.as_secs_f64().max(1e-3)).ceil().max(1.0) as usize;
    let t0 = Instant::now();
    // Where the applier is after each sample: its relay log position names
    // the transaction, and the transaction's events the table (MariaDB's
    // row-event states do not).
    let mut pc = spec.connect()?;
    let mut positions: Vec<Option<(std::path::PathBuf, u64)>> = Vec::with_capacity(n);
    let mut times: Vec<f64> = Vec::with_capacity(n);
    let mut progress = progress;
    let mut probe = pileup_replica::applier::ApplierProbe::default();
    // Parallel replication: the transaction each worker is on, by OS thread
    // id (performance_schema only; without it every worker gets the
    // driver's position, which is the oldest transaction not yet committed).
    let mut workers = ps0.is_some().then(ps::WorkerGtids::default);
    let mut worker_gtids: Vec<HashMap<i32, String>> = Vec::with_capacity(n);
    s.run(n, o.interval, |i, total| {
        positions.push(probe.read(&mut pc).ok().map(|a| (a.relay_file, a.relay_pos)));
        times.push(t0.elapsed().as_secs_f64());
        worker_gtids.push(workers.as_mut().map(|w| w.read(&mut pc)).unwrap_or_default());
        progress(i, total)
    })?;
    // Which table each of those transactions writes, read from the relay log
    // forward of the first position seen.
    let wanted: std::collections::HashSet<String> = worker_gtids.iter().flat_map(|m| m.values().cloned()).collect();
    let gtid_tables = match positions.iter().flatten().next() {
        Some((file, pos)) if !wanted.is_empty() => tables_of_gtids(file, *pos, &wanted, 5_000_000),
        _ => HashMap::new(),
    };
    let seconds = t0.elapsed().as_secs_f64();
    // The window ends when the server does: said, and what it can no
    // longer be asked is left out rather than the samples lost.
    let gone = !pileup_engine::process::alive(pid);
    if gone {
        notes.push(format!(
            "the server (pid {pid}) exited {seconds:.1} s into the window; the report covers until then (no end-of-window figures: lag, transactions, page reads, waits)"
        ));
    }
    let disk1 = datadir.as_deref().and_then(|d| io::device_of(pid, d));
    let io1 = if gone { Default::default() } else { io::thread_io(pid) };
    let (reads1, history1) =
        if gone { (None, None) } else { (pool_reads(&mut c), pileup_replica::history::history_length(&mut c).ok()) };
    let st1 = if gone { None } else { replica_status(&mut c)? };
    let pos1 = if gone { String::new() } else { gtid_pos(&mut c)? };
    let waits = if gone { vec![] } else { ps_waits(&mut c, ps0.as_ref(), &mut notes) };
    let profile = s.finish();
    let (tally, tids, cats) = tally_samples(&profile, &positions, &worker_gtids, &gtid_tables);
    let idle: Vec<bool> = cats.iter().map(|c| c.iter().all(|x| *x == Category::RelayWait)).collect();
    let ranges = stall::find(&times, &positions, &idle, o.stall.as_secs_f64());
    let stalls = stall::summarize(&times, &ranges, &cats, o.stall.as_millis() as u64);
    // The stacks engine's notes that matter here (not the io_uring workers:
    // they are not applier threads).
    notes.extend(profile.notes.iter().filter(|n| !n.contains("io_uring")).cloned());
    let device = device_between(&disk0, &disk1, datadir.as_deref(), seconds, &mut notes);
    let applier_io =
        (!gone && !io0.is_empty() && !tids.is_empty()).then(|| io::io_between(&io0, &io1, tids.iter().copied()));
    let (applier_read_bytes, applier_write_bytes) = (applier_io.map(|x| x.read), applier_io.map(|x| x.write));
    notes.extend(sampling_notes(tids.is_empty(), profile.named_pct));
    Ok(LagReport {
        seconds,
        samples: profile.samples.len(),
        applier_threads: tids.len(),
        transactions: (!pos0.is_empty() && !pos1.is_empty()).then(|| transactions_between(&pos0, &pos1)),
        lag_start_s,
        lag_end_s: st1.and_then(|r| r.get::<Option<u64>, _>("Seconds_Behind_Master").flatten()),
        tally,
        stalls,
        waits,
        device,
        applier_read_bytes,
        applier_write_bytes,
        page_size,
        pool_reads: reads0.zip(reads1).map(|(a, b)| b.saturating_sub(a)),
        history: history0.zip(history1),
        notes,
    })
}

/// The replica's @@gtid_slave_pos.
fn gtid_pos(c: &mut mysql::Conn) -> Result<String, LagError> {
    Ok(c.query_first("SELECT @@gtid_slave_pos").map_err(LagError::sql("reading @@gtid_slave_pos"))?.unwrap_or_default())
}

/// The applier threads' performance_schema waits since `ps0` (none when
/// performance_schema was not read; a note when the second read fails).
fn ps_waits(c: &mut mysql::Conn, ps0: Option<&(Vec<u64>, ps::Snapshot)>, notes: &mut Vec<String>) -> Vec<ps::PsWait> {
    match ps0 {
        Some((ids, before)) => match ps::snapshot(c, ids) {
            Ok(after) => ps::between(before, &after),
            Err(e) => {
                notes.push(format!("performance_schema waits not read: {e}"));
                Vec::new()
            }
        },
        None => Vec::new(),
    }
}

/// What the datadir's device did between two reads of its counters, or a
/// note saying why there is none.
fn device_between(
    disk0: &Option<(String, io::DiskCounters)>,
    disk1: &Option<(String, io::DiskCounters)>,
    datadir: Option<&str>,
    seconds: f64,
    notes: &mut Vec<String>,
) -> Option<io::DeviceReport> {
    match (disk0, disk1) {
        (Some((name, a)), Some((_, b))) => Some(io::DeviceReport::between(name, a, b, seconds)),
        _ => {
            notes.push(format!(
                "no block device statistics for the datadir ({}): on a filesystem without one (tmpfs) or a server on another host",
                datadir.unwrap_or("unknown")
            ));
            None
        }
    }
}

/// What the samples leave the user to know: no applier thread found,
/// frames mostly unnamed.
fn sampling_notes(no_threads: bool, named_pct: f64) -> Vec<String> {
    let mut notes = vec![];
    if no_threads {
        notes.push("no applier thread was found: is the replica's SQL thread running (START SLAVE)?".into());
    }
    if named_pct < 50.0 {
        notes.push(format!(
            "only {:.0}% of frames have names (no debug symbols for the server): categories rely on exported names and processlist states",
            named_pct
        ));
    }
    notes
}

/// performance_schema's waits of the applier threads at the start, where
/// it is on (why not, in `notes`, where it is not).
fn ps_start(c: &mut mysql::Conn, notes: &mut Vec<String>) -> Option<(Vec<u64>, ps::Snapshot)> {
    match ps::applier_threads(c) {
        Ok(Ok(ids)) => match ps::snapshot(c, &ids) {
            Ok(snap) => Some((ids, snap)),
            Err(e) => {
                notes.push(format!("performance_schema waits not read: {e}"));
                None
            }
        },
        Ok(Err(why)) => {
            notes.push(why);
            None
        }
        Err(e) => {
            notes.push(format!("performance_schema waits not read: {e}"));
            None
        }
    }
}

/// How the applier threads are sampled.
fn sampler_options(o: &LagOptions) -> SamplerOptions {
    SamplerOptions {
        capture: CaptureOptions {
            mode: Mode::Consistent,
            stack_bytes: 256 * 1024,
            max_stop: o.max_stop,
            ..Default::default()
        },
        filter: ThreadFilter::parse("sql-thread").expect("a role name"),
        any_process: false,
        debug_info: false,
        // The applier's state names the table it is on: read it every sample.
        sql_refresh: o.interval,
        sql_bracket: false,
        // Each sample's threads are read against the applier's position then.
        keep_samples: usize::MAX,
        debug_dirs: pileup_engine::default_debug_dirs(),
        // Debug files already in the debuginfod cache; nothing fetched
        // before a capture that must not wait.
        debuginfod: Some(pileup_engine::debug_files::DebuginfodOptions::cache_only()),
        debuginfod_wait: true,
    }
}

/// Each sampled applier thread counted: its category, its table (from its
/// statement, the transaction its worker is on, or the transaction at the
/// applier's position) and its frames; returns the tally, the applier
/// threads seen and each sample's categories (for the stalls).
fn tally_samples(
    profile: &pileup_engine::Profile,
    positions: &[Option<(std::path::PathBuf, u64)>],
    worker_gtids: &[HashMap<i32, String>],
    gtid_tables: &HashMap<String, String>,
) -> (Tally, std::collections::BTreeSet<i32>, Vec<Vec<Category>>) {
    let mut group_tables: HashMap<(std::path::PathBuf, u64), Option<String>> = HashMap::new();
    let mut tally = Tally::default();
    let mut tids = std::collections::BTreeSet::new();
    // Each sample's categories, for the stalls.
    let mut cats: Vec<Vec<Category>> = vec![vec![]; profile.samples.len()];
    for (k, smp) in profile.samples.iter().enumerate() {
        let at = positions.get(k).cloned().flatten();
        for t in &smp.threads {
            tids.insert(t.tid);
            let frames: Vec<&str> = t.labels().collect();
            let state = t.sql.as_ref().and_then(|q| q.state.as_deref());
            let info = t.sql.as_ref().and_then(|q| q.info.as_deref());
            let db = t.sql.as_ref().and_then(|q| q.db.as_deref());
            let cat = classify(&frames, t.state, t.syscall.as_deref(), state);
            cats[k].push(cat);
            *tally.states.entry(state.unwrap_or("(none)").to_string()).or_default() += 1;
            // Where the table comes from, most direct first: the statement
            // itself, the transaction this worker is on, the transaction at
            // the applier's relay position.
            let (table, source) = if matches!(cat, Category::RelayWait) {
                (None, "none")
            } else if let Some(t) = table_of(state, info, db) {
                (Some(t), "statement")
            } else if let Some(t) =
                worker_gtids.get(k).and_then(|m| m.get(&t.tid)).and_then(|g| gtid_tables.get(&gtid_key(g)))
            {
                (Some(t.clone()), "worker transaction")
            } else if let Some(t) = at
                .as_ref()
                .and_then(|a| group_tables.entry(a.clone()).or_insert_with(|| table_in_group(&a.0, a.1)).clone())
            {
                (Some(t), "applier position")
            } else {
                (None, "none")
            };
            *tally.table_from.entry(source.to_string()).or_default() += 1;
            tally.add(cat, table.as_deref(), &frames);
        }
    }
    (tally, tids, cats)
}

/// The table the transaction starting at `pos` of a relay log writes first
/// (its first table map, or its first statement's table).
pub fn table_in_group(path: &std::path::Path, pos: u64) -> Option<String> {
    use pileup_binlog::{Decoder, Event, Follower, Step};
    let mut f = Follower::open_at(path, pos).ok()?.one_file();
    let mut dec = Decoder::new();
    for _ in 0..64 {
        let Step::Event(ev, fmt) = f.step() else { return None };
        match dec.decode(fmt, ev.bytes) {
            Ok(Event::TableMap(tm)) => return Some(format!("{}.{}", tm.schema, tm.table)),
            Ok(Event::Query(q)) => {
                let db = String::from_utf8_lossy(q.db).into_owned();
                if let Some(t) = table_of(None, Some(&String::from_utf8_lossy(&q.sql)), Some(&db)) {
                    return Some(t);
                }
            }
            Ok(Event::Xid(_)) => return None,
            _ => {}
        }
    }
    None
}

/// A GTID as a key that both performance_schema and the relay log give the
/// same way: MariaDB's `domain-server-seq` → `domain-seq` (the server id of
/// a transaction is not needed to find it), MySQL's `uuid:gno` as it is.
pub fn gtid_key(g: &str) -> String {
    let p: Vec<&str> = g.trim().split('-').collect();
    match p.as_slice() {
        [d, _server, n] if d.parse::<u32>().is_ok() && n.parse::<u64>().is_ok() => format!("{d}-{n}"),
        _ => g.trim().to_ascii_lowercase(),
    }
}

/// The first table each wanted transaction writes, found by reading the
/// relay log from `path` at `pos` forward (following the next files) until
/// all are found or `max_events` were read. Keys as [`gtid_key`].
pub fn tables_of_gtids(
    path: &std::path::Path,
    pos: u64,
    wanted: &std::collections::HashSet<String>,
    max_events: u64,
) -> HashMap<String, String> {
    use pileup_binlog::{Decoder, Event, Follower, Step};
    let wanted: std::collections::HashSet<String> = wanted.iter().map(|g| gtid_key(g)).collect();
    let mut found: HashMap<String, String> = HashMap::new();
    let Ok(mut f) = Follower::open_at(path, pos.max(4)) else { return found };
    let mut dec = Decoder::new();
    let mut read = 0u64;
    // The transaction being read (None after a damaged event: in no group).
    let mut current: Option<String> = None;
    loop {
        let skip_file = match f.step() {
            Step::Event(ev, fmt) => {
                read += 1;
                match dec.decode(fmt, ev.bytes) {
                    Ok(Event::MariaGtid(g)) => current = Some(format!("{}-{}", g.domain_id, g.seq_no)),
                    Ok(Event::MysqlGtid { uuid, gno }) => {
                        current = Some(format!("{}:{gno}", uuid.to_ascii_lowercase()))
                    }
                    Ok(Event::TableMap(tm)) => {
                        if let Some(g) = current.take().filter(|g| wanted.contains(g)) {
                            found.entry(g).or_insert_with(|| format!("{}.{}", tm.schema, tm.table));
                        }
                    }
                    Ok(Event::Query(q)) => {
                        let db = String::from_utf8_lossy(q.db).into_owned();
                        if let Some(t) = table_of(None, Some(&String::from_utf8_lossy(&q.sql)), Some(&db)) {
                            if let Some(g) = current.take().filter(|g| wanted.contains(g)) {
                                found.entry(g).or_insert(t);
                            }
                        }
                    }
                    _ => {}
                }
                if found.len() == wanted.len() || read >= max_events {
                    break;
                }
                false
            }
            // A damaged event: go on at the next sound one, in no group.
            Step::Rotated | Step::Corrupt { resumed_at: Some(_), .. } => {
                current = None;
                false
            }
            Step::End | Step::CannotFollow { .. } => break,
            Step::Corrupt { .. } | Step::Failed(_) => true,
        };
        if skip_file {
            // Nothing sound follows in this file: go on in the next one.
            match pileup_binlog::reader::next_started(f.path()).and_then(|n| Follower::open_at(&n, 4).ok()) {
                Some(next) => {
                    f = next;
                    current = None;
                }
                None => break,
            }
        }
    }
    found
}

fn bar(pct: f64) -> String {
    "█".repeat((pct / 4.0).round() as usize)
}

/// The report as text: overall shares, then per table.
pub fn render_text(r: &LagReport) -> String {
    let mut s = format!(
        "pileup lag: {:.1} s, {} of {}\n",
        r.seconds,
        pileup_output::plural(r.samples as u64, "sample", "samples"),
        pileup_output::plural(r.applier_threads as u64, "applier thread", "applier threads")
    );
    if let Some(t) = r.transactions {
        let applied = pileup_output::plural(t, "transaction", "transactions");
        s.push_str(&format!("applied {applied} ({:.0}/s)", t as f64 / r.seconds.max(1e-9)));
        if let (Some(a), Some(b)) = (r.lag_start_s, r.lag_end_s) {
            s.push_str(&format!("; lag {a} s → {b} s"));
        }
        s.push('\n');
    }
    s.push_str("\nwhere apply time goes\n");
    for c in Category::ALL {
        let pct = r.tally.share(c);
        if pct > 0.0 {
            s.push_str(&format!("  {:<26} {:5.1}%  {}\n", c.label(), pct, bar(pct)));
        }
    }
    s.push_str(&stalls_line(r));
    s.push_str(&by_table_text(r));
    s.push_str(&operations_text(r));
    if !r.tally.states.is_empty() {
        s.push_str("\napplier states seen (processlist)\n");
        let mut st: Vec<(&String, &u64)> = r.tally.states.iter().collect();
        st.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (name, n) in st.iter().take(8) {
            s.push_str(&format!(
                "  {:5.1}%  {}\n",
                100.0 * **n as f64 / r.tally.samples.max(1) as f64,
                if name.is_empty() { "(empty)" } else { name }
            ));
        }
    }
    if !r.waits.is_empty() {
        s.push_str("\ninstrumented waits of the applier threads (performance_schema)\n");
        let wall = r.seconds.max(1e-9) * r.applier_threads.max(1) as f64;
        for w in r.waits.iter().take(10) {
            s.push_str(&format!(
                "  {:8.2} s {:5.1}% {:>10}  {}\n",
                w.seconds,
                100.0 * w.seconds / wall,
                w.count,
                w.event
            ));
        }
    }
    s.push_str(&storage_text(r));
    for n in &r.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}

/// The categories' shares by table (the 20 tables sampled most), and where
/// the table names came from.
fn by_table_text(r: &LagReport) -> String {
    let mut s = String::new();
    let used: Vec<Category> = Category::ALL.into_iter().filter(|c| r.tally.share(*c) > 0.0).collect();
    if r.tally.by_table.len() > 1 || r.tally.by_table.keys().any(|t| t != "(no table)") {
        s.push_str("\nby table (% of all samples)\n");
        s.push_str(&format!("  {:<30} {:>6}", "table", "total"));
        for c in &used {
            s.push_str(&format!(" {:>10}", c.key()));
        }
        s.push('\n');
        let mut rows: Vec<(&String, &BTreeMap<Category, u64>)> = r.tally.by_table.iter().collect();
        rows.sort_by_key(|(_, m)| std::cmp::Reverse(m.values().sum::<u64>()));
        let total = r.tally.samples.max(1) as f64;
        for (t, m) in rows.iter().take(20) {
            s.push_str(&format!("  {:<30} {:>5.1}%", t, 100.0 * m.values().sum::<u64>() as f64 / total));
            for c in &used {
                s.push_str(&format!(" {:>9.1}%", 100.0 * *m.get(c).unwrap_or(&0) as f64 / total));
            }
            s.push('\n');
        }
    }
    if r.tally.table_from.keys().any(|k| k != "none") {
        let total = r.tally.samples.max(1) as f64;
        let parts: Vec<String> = r
            .tally
            .table_from
            .iter()
            .filter(|(k, _)| *k != "none")
            .map(|(k, n)| format!("{k} {:.0}%", 100.0 * *n as f64 / total))
            .collect();
        s.push_str(&format!("  (table from: {})\n", parts.join(", ")));
    }
    s
}

/// Inside which row operation each of the page-read, latch-wait and CPU
/// categories' samples fell (operations of 2% of the category or more).
fn operations_text(r: &LagReport) -> String {
    let mut s = String::new();
    let ops: Vec<String> = [Category::PageRead, Category::LatchWait, Category::Cpu]
        .iter()
        .filter_map(|c| {
            let m = r.tally.by_operation.get(c)?;
            let n = *r.tally.by_category.get(c)? as f64;
            let mut v: Vec<(&String, &u64)> = m.iter().collect();
            v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let parts: Vec<String> = v
                .iter()
                .filter(|(_, k)| **k as f64 >= n * 0.02)
                .map(|(op, k)| {
                    let l = classify::operation_label(op);
                    format!(
                        "{op} {:.0}%{}",
                        100.0 * **k as f64 / n.max(1.0),
                        if l.is_empty() { String::new() } else { format!(" ({l})") }
                    )
                })
                .collect();
            (!parts.is_empty()).then(|| format!("  {:<26} {}\n", c.label(), parts.join(", ")))
        })
        .collect();
    if !ops.is_empty() {
        s.push_str("\ninside which row operation (% of the category's samples; the rest were outside one)\n");
        s.extend(ops);
    }
    s
}

/// The stalls, in a sentence or two.
fn stalls_line(r: &LagReport) -> String {
    let st = &r.stalls;
    if st.count == 0 {
        return format!(
            "  stalls: none (the applier never stood still {} ms or more while it had work)\n",
            st.threshold_ms
        );
    }
    let mut parts: Vec<(f64, &str)> =
        Category::ALL.iter().map(|c| (st.share(*c), c.label())).filter(|(p, _)| *p >= 1.0).collect();
    parts.sort_by(|a, b| b.0.total_cmp(&a.0));
    let what: Vec<String> = parts.iter().map(|(p, l)| format!("{l} {p:.0}%")).collect();
    format!(
        "  stalls: the applier stood still {} for {} ms or more while it had work (longest {} ms; {:.1} s in all, {:.0}% of the period); meanwhile: {}\n",
        if st.count == 1 { "once".to_string() } else { format!("{} times", st.count) },
        st.threshold_ms,
        st.longest_ms,
        st.seconds,
        100.0 * st.seconds / r.seconds.max(1e-9),
        what.join(", ")
    )
}

/// The report's storage section: pages the applier read and wrote, the
/// buffer pool's reads, purge, and the datadir's device.
fn storage_text(r: &LagReport) -> String {
    let mut s = String::new();
    if r.device.is_some() || r.applier_read_bytes.is_some() || r.pool_reads.is_some() || r.history.is_some() {
        s.push_str("\nstorage\n");
    }
    if let (Some(b), Some(pages)) = (r.applier_read_bytes, r.applier_pages()) {
        s.push_str(&format!(
            "  the applier threads read {pages} pages ({:.1} MB) from storage: {:.0}/s",
            b as f64 / 1e6,
            pages as f64 / r.seconds.max(1e-9)
        ));
        if let Some(t) = r.transactions.filter(|t| *t > 0) {
            s.push_str(&format!(", {:.2} per transaction", pages as f64 / t as f64));
        }
        s.push('\n');
    }
    if let Some(b) = r.applier_write_bytes.filter(|b| *b > 0) {
        s.push_str(&format!(
            "  the applier threads wrote {:.1} MB themselves ({:.1} MB/s): pages flushed because the buffer pool had no free page, or log writes \
             (a large figure means the page cleaner falls behind: innodb_lru_scan_depth, innodb_io_capacity)\n",
            b as f64 / 1e6,
            b as f64 / 1e6 / r.seconds.max(1e-9)
        ));
    }
    if let Some(n) = r.pool_reads {
        s.push_str(&format!("  the buffer pool read {n} pages in all ({:.0}/s", n as f64 / r.seconds.max(1e-9)));
        if let Some(t) = r.transactions.filter(|t| *t > 0) {
            s.push_str(&format!(", {:.2} per transaction", n as f64 / t as f64));
        }
        s.push(')');
        if let Some(own) = r.applier_pages() {
            s.push_str(&format!(
                ", {} of them by other threads than the applier's (purge, a prefetcher, read-ahead)",
                n.saturating_sub(own)
            ));
        }
        s.push('\n');
    }
    if let Some(line) = r.history.and_then(|h| purge_line(h, r.transactions, r.lag_end_s)) {
        s.push_str(&line);
    }
    if let Some(d) = &r.device {
        s.push_str(&format!(
            "  device {} (holds the datadir): {:.0} reads/s, {:.0} writes/s, {:.1} MB/s written, a read took {:.0} µs on average, busy {:.0}%\n",
            d.device,
            d.reads_per_s,
            d.writes_per_s,
            d.mb_written_per_s,
            d.mean_read_us,
            100.0 * d.busy
        ));
    }
    s
}

impl pileup_output::Report for LagReport {
    fn tool(&self) -> &'static str {
        "lag"
    }

    fn text(&self, _o: &pileup_output::Options, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        w.write_all(render_text(self).as_bytes())
    }

    /// The applier's samples, rooted at their category, then their table.
    fn stacks(&self, _o: &pileup_output::Options) -> Option<pileup_output::Stacks> {
        let stacks = self
            .tally
            .folded
            .iter()
            .map(|(s, &n)| pileup_output::Stack {
                frames: s.split(';').map(String::from).collect(),
                values: vec![n as i64],
                ..Default::default()
            })
            .collect();
        Some(pileup_output::Stacks {
            title: "pileup lag: where apply time goes".into(),
            subtitle: format!("{} samples over {:.1} s; root: category, then table", self.samples, self.seconds),
            sample_types: vec![("samples".into(), "count".into())],
            count_name: "samples".into(),
            stacks,
            duration_ms: (self.seconds * 1e3) as u64,
            comment: "pileup lag".into(),
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gtid_keys_match_between_performance_schema_and_relay_log() {
        assert_eq!(gtid_key("0-1-1234"), "0-1234");
        assert_eq!(gtid_key(" 2-77-9 "), "2-9");
        assert_eq!(gtid_key("3E11FA47-71CA-11E1-9E33-C80AA9429562:23"), "3e11fa47-71ca-11e1-9e33-c80aa9429562:23");
    }

    #[test]
    fn gtid_progress_counts_every_domain() {
        assert_eq!(transactions_between("0-1-100,1-2-5", "0-1-250,1-2-9,2-3-4"), 150 + 4 + 4);
        assert_eq!(transactions_between("", "0-1-7"), 7);
    }

    #[test]
    fn tally_shares_tables_and_folded_roots() {
        let mut t = Tally::default();
        t.add(Category::PageRead, Some("d.t"), &["pread64", "handler::ha_rnd_pos", "handle_slave_sql"]);
        t.add(Category::Cpu, Some("d.t"), &["Field_long::unpack", "handle_slave_sql"]);
        t.add(Category::RelayWait, None, &["pthread_cond_wait", "handle_slave_sql"]);
        t.add(Category::PageRead, Some("d.u"), &["pread64", "handler::ha_rnd_pos", "handle_slave_sql"]);
        assert_eq!(t.share(Category::PageRead), 50.0);
        assert_eq!(t.by_table["d.t"][&Category::Cpu], 1);
        let r = LagReport {
            seconds: 2.0,
            samples: 4,
            applier_threads: 1,
            transactions: Some(10),
            lag_start_s: Some(5),
            lag_end_s: Some(3),
            tally: t,
            stalls: stall::Stalls { threshold_ms: 200, ..Default::default() },
            waits: vec![],
            device: None,
            applier_read_bytes: None,
            applier_write_bytes: None,
            page_size: None,
            pool_reads: None,
            history: None,
            notes: vec![],
        };
        let lines = pileup_output::Report::stacks(&r, &Default::default()).unwrap().folded_lines();
        assert!(
            lines.contains(&"page reads;d.t;handle_slave_sql;handler::ha_rnd_pos;pread64 1".to_string()),
            "{lines:?}"
        );
        let text = render_text(&r);
        assert!(
            text.contains("page reads")
                && text.contains("50.0%")
                && text.contains("d.u")
                && text.contains("lag 5 s → 3 s"),
            "{text}"
        );
        assert!(text.contains("stalls: none (the applier never stood still 200 ms"), "{text}");
        assert!(
            text.contains("inside which row operation")
                && text.contains("page reads                 ha_rnd_pos 100% (finding the row by its primary key)"),
            "{text}"
        );
        let stalled = LagReport {
            stalls: stall::Stalls {
                threshold_ms: 200,
                count: 3,
                seconds: 0.9,
                longest_ms: 450,
                by_category: [(Category::LatchWait, 12), (Category::PageRead, 4)].into(),
            },
            ..r.clone()
        };
        let text = render_text(&stalled);
        assert!(
            text.contains("stood still 3 times for 200 ms or more")
                && text.contains("longest 450 ms; 0.9 s in all, 45% of the period")
                && text.contains("meanwhile: lock/latch waits 75%, page reads 25%"),
            "{text}"
        );
        assert!(!text.contains("instrumented waits"), "no section without performance_schema: {text}");
        assert!(!text.contains("storage"), "no storage section without figures: {text}");
        let io = LagReport {
            applier_read_bytes: Some(3 * 16384),
            applier_write_bytes: Some(4_000_000),
            page_size: Some(16384),
            ..r.clone()
        };
        let text = render_text(&io);
        assert!(
            text.contains("read 3 pages")
                && text.contains("0.30 per transaction")
                && text.contains("wrote 4.0 MB themselves (2.0 MB/s)"),
            "{text}"
        );
        let text = render_text(&LagReport { applier_write_bytes: Some(0), ..io.clone() });
        assert!(!text.contains("wrote"), "nothing to say about zero writes: {text}");
        let text = render_text(&LagReport { pool_reads: Some(30), history: Some((100, 120)), ..io });
        assert!(
            text.contains(
                "the buffer pool read 30 pages in all (15/s, 3.00 per transaction), 27 of them by other threads"
            ),
            "{text}"
        );
        assert!(
            text.contains("purge: the history list went 100 → 120 over 10 applied transactions: purge kept up")
                && text.contains("--defer-purge"),
            "{text}"
        );
        let w = ps::PsWait { event: "wait/synch/sxlock/innodb/index_tree_rw_lock".into(), count: 1200, seconds: 0.5 };
        let r = LagReport { waits: vec![w], ..r };
        let text = render_text(&r);
        assert!(
            text.contains("instrumented waits")
                && text.contains("index_tree_rw_lock")
                && text.contains("25.0%")
                && text.contains("1200"),
            "{text}"
        );
        assert!(!r.tally.folded.is_empty());
        // Every format but the page, which lag does not write.
        for f in pileup_output::FORMATS.into_iter().filter(|f| *f != pileup_output::Format::Html) {
            let mut out = vec![];
            pileup_output::render(&r, f, &Default::default(), &mut out).unwrap();
            assert!(!out.is_empty(), "{f}");
            if f == pileup_output::Format::Svg {
                assert!(String::from_utf8_lossy(&out).contains("<svg"));
            }
        }
    }

    #[test]
    fn purge_kept_up_or_fell_behind() {
        let kept = purge_line((200, 400), Some(30_000), Some(9)).unwrap();
        assert!(kept.contains("purge kept up") && kept.contains("--defer-purge"), "{kept}");
        let caught_up = purge_line((200, 400), Some(30_000), Some(0)).unwrap();
        assert!(
            caught_up.contains("purge kept up") && !caught_up.contains("--defer-purge"),
            "no advice once caught up: {caught_up}"
        );
        let behind = purge_line((200, 30_200), Some(30_000), Some(9)).unwrap();
        assert!(behind.contains("grew 200 → 30200") && behind.contains("fell behind"), "{behind}");
        assert!(purge_line((200, 400), Some(0), Some(9)).is_none(), "nothing applied, nothing to say");
        assert!(purge_line((200, 400), None, Some(9)).is_none());
    }
}
