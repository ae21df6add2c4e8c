//! `pileup load`: manifest → databases → tables and their data in
//! parallel (largest table first, chunks of one table on every thread,
//! each table created by a job ahead of its chunks and given its deferred
//! indexes and statistics by a job of its own after its last; one more
//! connection creates tables ahead of the loading ones and gives back
//! statistics, DDL that waits on file syncs) → views, routines, triggers
//! and events.
//!
//! Data goes in by MariaDB's bulk execution of a prepared `INSERT` (see
//! [`crate::bulk`]; `LOAD DATA LOCAL INFILE` on MySQL, see
//! [`crate::infile`]), read from the compressed chunk files, in sessions
//! with foreign-key and unique checks off (the data comes from a
//! consistent dump). Both take rows as `LOAD DATA LOCAL` does (a value a
//! column cannot hold converted with a warning, a duplicate key's row
//! skipped); every chunk's row count is checked against the manifest. Nothing global is changed on
//! the server; `--no-binlog` turns the binary log off for these sessions.
//!
//! An InnoDB table loads with `STATS_AUTO_RECALC=0`: otherwise InnoDB
//! recalculates its persistent statistics in the background each time a
//! tenth of its rows has changed, again and again as the table fills (a
//! fifth of the server's CPU in a load measured). When its last chunk is
//! in, the table gets its own setting back and one `ANALYZE TABLE`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use pileup_output::plural;

use crate::error::{bail, Ctx, DumpError, Result};
use mysql::prelude::Queryable;
use pileup_conn::watchdog::Watchdog;
use pileup_conn::ConnSpec;

use crate::indexes::Deferred;
use crate::manifest::{quote, Kind, Manifest, Object, Table, MANIFEST};
use crate::pool::{failures, pool, Heard, Job, Part, Workers};
use crate::stats::{created_with_recalc_off, recalc_back, recalc_off, stats_auto_recalc};

/// What to do with a table that already exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    Refuse,
    Drop,
    Skip,
}

#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub dir: PathBuf,
    pub threads: usize,
    pub existing: Existing,
    /// Load database `from` into `to`.
    pub rename: Vec<(String, String)>,
    pub no_binlog: bool,
    /// Finish an interrupted load of this dump (see [`load_chunk`]).
    pub resume: bool,
    /// Read the loaded tables back and compare them with the dump.
    pub verify: bool,
    /// Send rows with `LOAD DATA LOCAL INFILE` (see [`crate::infile`]), not
    /// by bulk execution (see [`crate::bulk`]), which servers other than
    /// MariaDB 10.2 and later lack.
    pub load_data: bool,
    /// Create InnoDB tables with their primary key only and add their
    /// secondary indexes in one `ALTER TABLE` after their data (see
    /// [`crate::indexes`]).
    pub indexes_after_data: bool,
    /// Probe the server this often on connections of its own while the
    /// load runs, and cut its statements off when it stops answering (two
    /// probes in a row with no answer within the connect timeout): an
    /// index build may run for hours, so their own bound is long.
    pub watchdog: Option<std::time::Duration>,
}

#[derive(Debug, Clone)]
pub enum Event {
    Planned {
        tables: usize,
        rows: u64,
        bytes: u64,
    },
    /// A chunk loaded, or found loaded already (`already`, on resume).
    Chunk {
        table: String,
        rows: u64,
        bytes: u64,
        already: bool,
    },
    /// A table's secondary indexes are being built, in one `ALTER TABLE`
    /// after its data.
    Indexing {
        table: String,
        indexes: usize,
        rows: u64,
    },
    /// A table's index build is done.
    Indexed {
        table: String,
        seconds: f64,
    },
    /// Every chunk is loaded and index builds are what is left: the load's
    /// critical path.
    OnlyIndexing {
        tables: Vec<String>,
    },
    Note(String),
}

pub fn read_manifest(dir: &Path) -> Result<Manifest> {
    let p = dir.join(MANIFEST);
    let b = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "{} is not a complete pileup dump (no {MANIFEST}): the dump was cut short, or this is not a dump directory",
            dir.display()
        ),
        Err(e) => return Err(e).with_ctx(|| format!("cannot read {}", p.display())),
    };
    let m: Manifest = serde_json::from_slice(&b).with_ctx(|| format!("{} is corrupt", p.display()))?;
    Ok(m)
}

fn target<'a>(o: &'a LoadOptions, db: &'a str) -> &'a str {
    o.rename.iter().find(|(f, _)| f == db).map(|(_, t)| t.as_str()).unwrap_or(db)
}

/// `table` of dumped database `db` as the load names it in SQL: its
/// target database, both quoted.
fn quoted(o: &LoadOptions, db: &str, table: &str) -> String {
    format!("{}.{}", quote(target(o, db)), quote(table))
}

/// A loading session (see the module docs).
fn session(c: &mut mysql::Conn, o: &LoadOptions) -> Result<()> {
    c.query_drop("SET SESSION max_statement_time = 0")?;
    c.query_drop("SET SESSION lock_wait_timeout = 31536000")?;
    c.query_drop("SET SESSION foreign_key_checks = 0, unique_checks = 0")?;
    c.query_drop("SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_AUTO_VALUE_ON_ZERO'")?;
    c.query_drop("SET SESSION time_zone = '+00:00'")?;
    if o.no_binlog {
        c.query_drop("SET SESSION sql_log_bin = 0").ctx("--no-binlog needs the privilege to set sql_log_bin")?;
    }
    Ok(())
}
/// What a load finds already there: tables it skips (or, resuming,
/// keeps and checks chunk by chunk), objects it skips, sequences it keeps.
struct AlreadyThere {
    skip: Vec<bool>,
    exists_t: Vec<bool>,
    skip_obj: Vec<bool>,
    keep_seq: Vec<bool>,
}

/// Tables, views, routines, triggers, events and sequences that exist
/// already. A resumed load keeps its own tables (their chunks are checked
/// one by one), the objects it created and its sequences (SETVAL only moves
/// a sequence forward).
fn already_there(
    c: &mut mysql::Conn,
    o: &LoadOptions,
    m: &Manifest,
    on: &mut dyn FnMut(Event),
) -> Result<AlreadyThere> {
    let mut skip = vec![false; m.tables.len()];
    let mut exists_t = vec![false; m.tables.len()];
    let mut skip_obj = vec![false; m.objects.len()];
    let named = m
        .tables
        .iter()
        .map(|t| ("TABLE", t.db.as_str(), t.name.as_str()))
        .chain(m.objects.iter().map(|x| (kind_word(x.kind), x.db.as_str(), x.name.as_str())));
    for (i, (kind, db, name)) in named.enumerate() {
        let what = kind.to_lowercase();
        if found(c, o, &mut *on, &what, &[kind], target(o, db), name, true)? == Found::Kept {
            match (i < skip.len(), o.resume) {
                (true, true) => exists_t[i] = true,
                (true, false) => skip[i] = true,
                (false, _) => skip_obj[i - skip.len()] = true,
            }
        }
    }
    let mut keep_seq = vec![false; m.sequences.len()];
    for (i, q) in m.sequences.iter().enumerate() {
        keep_seq[i] = found(c, o, &mut *on, "sequence", &["SEQUENCE"], target(o, &q.db), &q.name, true)? == Found::Kept;
    }
    Ok(AlreadyThere { skip, exists_t, skip_obj, keep_seq })
}

/// How a table is created: its statement (secondary indexes deferred
/// left out, statistics off where it can say so) in its database, and the
/// `ALTER TABLE` that turns its statistics off where it cannot.
#[derive(Debug, Clone)]
struct Creation {
    db: String,
    create: String,
    recalc_off: Option<String>,
}

impl Creation {
    fn run(&self, c: &mut mysql::Conn, table: &str) -> Result<()> {
        // A worker's session reads names and comments as the dump wrote
        // them.
        c.query_drop("SET NAMES utf8mb4")?;
        c.query_drop(format!("USE {}", quote(&self.db)))?;
        c.query_drop(&self.create).with_ctx(|| format!("creating table {}.{table}", self.db))?;
        if let Some(name) = &self.recalc_off {
            recalc_off(c, name)?;
        }
        Ok(())
    }
}

/// Per table, the `ADD KEY …` clauses still to add after its data.
type Later = Vec<Vec<String>>;

/// Plan the creation of the tables not skipped (those with secondary
/// indexes deferred without them, statistics recalculation off while they
/// load); tables with no data are created here, the others by a job of
/// their own (so that 400 small tables' DDL runs beside other tables'
/// data). Returns, for each table, the indexes still to add after its data
/// and the creation its job runs.
fn create_tables(
    c: &mut mysql::Conn,
    o: &LoadOptions,
    m: &Manifest,
    skip: &[bool],
    exists_t: &[bool],
    waits: &Waits,
) -> Result<(Later, Vec<Option<Creation>>)> {
    let Waits { deferred, existing, recalc } = waits;
    let mut later: Later = vec![vec![]; m.tables.len()];
    let mut creations: Vec<Option<Creation>> = vec![None; m.tables.len()];
    for (i, t) in m.tables.iter().enumerate().filter(|(i, _)| !skip[*i]) {
        let db = target(o, &t.db);
        if exists_t[i] {
            if recalc[i].is_some() {
                recalc_off(c, &quoted(o, &t.db, &t.name))?;
            }
            if let Some(d) = &existing[i] {
                let have: Vec<String> = c.exec(
                    "SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
                    (db, &t.name),
                )?;
                later[i] = d.indexes.iter().filter(|(n, _)| !have.contains(n)).map(|(_, a)| a.clone()).collect();
            }
            continue;
        }
        let create = deferred[i].as_ref().map(|d| d.create.as_str()).unwrap_or(&t.create);
        // Statistics off in the CREATE itself where the text names no
        // setting of its own (one DDL statement instead of two).
        let off = recalc[i].as_deref().filter(|r| *r == "DEFAULT").and_then(|_| created_with_recalc_off(create));
        let creation = Creation {
            db: db.to_string(),
            recalc_off: (recalc[i].is_some() && off.is_none()).then(|| quoted(o, &t.db, &t.name)),
            create: off.unwrap_or_else(|| create.to_string()),
        };
        if t.chunks.is_empty() {
            creation.run(c, &t.name)?;
        } else {
            creations[i] = Some(creation);
        }
        if let Some(d) = &deferred[i] {
            later[i] = d.indexes.iter().map(|(_, a)| a.clone()).collect();
        }
    }
    Ok((later, creations))
}

/// Every database a rename names must be in the dump: a misspelt name
/// would otherwise load under its own name, beside the data it was meant
/// to leave alone.
fn check_renames<'a>(o: &LoadOptions, dumped: impl Iterator<Item = &'a str> + Clone) -> Result<()> {
    for (from, to) in &o.rename {
        if !dumped.clone().any(|d| d == from) {
            let held: Vec<&str> = dumped.clone().collect();
            bail!("rename {from}:{to}: the dump holds no database {from} (it holds {})", held.join(", "));
        }
    }
    Ok(())
}

pub fn load(spec: &ConnSpec, o: &LoadOptions, on: &mut dyn FnMut(Event)) -> Result<()> {
    let dog = o.watchdog.map(|every| Arc::new(Watchdog::start(spec, every, 2)));
    let mydumper = !o.dir.join(MANIFEST).exists() && o.dir.join("metadata").exists();
    let r = if mydumper { load_mydumper(spec, o, on, dog.as_ref()) } else { load_pileup(spec, o, on, dog.as_ref()) };
    match dog.as_ref().and_then(|d| d.hung()) {
        Some(why) if r.is_err() => Err(DumpError::Failed(format!(
            "{why}; the load stopped with the chunks loaded so far kept (pileup load --resume goes on from them)"
        ))),
        _ => r,
    }
}

fn load_pileup(spec: &ConnSpec, o: &LoadOptions, on: &mut dyn FnMut(Event), dog: Option<&Arc<Watchdog>>) -> Result<()> {
    let m = read_manifest(&o.dir)?;
    check_renames(o, m.databases.iter().map(|d| d.name.as_str()))?;
    let mut c = own_connection(spec, o)?;
    let mut watched = dog.map(|d| d.watch(&c));

    let AlreadyThere { skip, exists_t, skip_obj, keep_seq } = already_there(&mut c, o, &m, &mut *on)?;
    create_databases(&mut c, o, &m, &keep_seq)?;
    let version = pileup_conn::flavor(&mut c)?.1;
    let waits = deferred_work(o, &m, bulk_into_empty(&version));
    // Rows by LOAD DATA where the server has no bulk execution.
    let with_load_data = LoadOptions { load_data: o.load_data || !crate::bulk::takes_bulk(&version), ..o.clone() };
    let o = &with_load_data;
    let (later, creations) = create_tables(&mut c, o, &m, &skip, &exists_t, &waits)?;
    let recalc = waits.recalc;
    let todo: Vec<usize> = (0..m.tables.len()).filter(|i| !skip[*i]).collect();
    on(Event::Planned {
        tables: todo.len(),
        rows: todo.iter().flat_map(|&i| &m.tables[i].chunks).map(|c| c.rows).sum(),
        bytes: todo.iter().flat_map(|&i| &m.tables[i].chunks).map(|c| c.bytes).sum(),
    });

    // Largest table first: its creation, its chunks, then its After (its
    // indexes and statistics).
    let mut order = todo.clone();
    order.sort_by_key(|&i| std::cmp::Reverse(m.tables[i].chunks.iter().map(|c| c.bytes).sum::<u64>()));
    let after = |i: usize| !later[i].is_empty() || recalc[i].is_some();
    let jobs: Vec<Job> = order
        .iter()
        .flat_map(|&i| {
            let chunks = (0..m.tables[i].chunks.len()).map(move |k| (i, Part::Chunk(k)));
            let create = creations[i].is_some().then_some((i, Part::Create));
            create.into_iter().chain(chunks).chain(after(i).then_some((i, Part::After)))
        })
        .collect();
    let m = Arc::new(m);
    // The load's own connection is the lane's while the tables load (as
    // many connections as before, one more than --threads).
    drop(watched.take());
    drop(c);
    let failed = load_tables(spec, o, dog, &m, jobs.clone(), (later, creations, recalc.clone()), &mut *on)?;
    let mut c = own_connection(spec, o)?;
    let _watched = dog.map(|d| d.watch(&c));
    // A table that failed gets its own statistics setting back too (a
    // resumed load turns it off again while it loads).
    for ((i, _), _) in &failed {
        if let Some(r) = &recalc[*i] {
            let t = &m.tables[*i];
            let _ = recalc_back(&mut c, &quoted(o, &t.db, &t.name), r, false);
        }
    }
    let objs: Vec<Object> = m.objects.iter().zip(&skip_obj).filter(|(_, s)| !**s).map(|(x, _)| x.clone()).collect();
    let created = create_objects(&mut c, o, &objs, &mut *on).and_then(|_| create_users(&mut c, o, &m.users, &mut *on));
    let bad: Vec<usize> = failed.iter().map(|((i, _), _)| *i).collect();
    // The tables not loaded first: a view or trigger on one of them fails
    // for want of it.
    failures(("table", "tables"), "not loaded (run again with --resume once fixed)", failed, |i| {
        format!("{}.{}", target(o, &m.tables[i].db), m.tables[i].name)
    })?;
    created?;
    if o.verify {
        let chunks = jobs.into_iter().filter(|j| !bad.contains(&j.0) && matches!(j.1, Part::Chunk(_)));
        verify(spec, o, dog, &m, chunks.collect(), on)?;
    }
    Ok(())
}

/// The load's workers: `o.threads` connections in loading sessions (and
/// the lane for light jobs, `lane`).
fn workers<'a>(
    spec: &'a ConnSpec,
    o: &LoadOptions,
    dog: Option<&'a Arc<Watchdog>>,
    lane: Option<crate::pool::Light>,
    hold: Option<Arc<crate::pool::Hold>>,
) -> Workers<'a> {
    let o = o.clone();
    Workers { spec, threads: o.threads, session: Arc::new(move |c| session(c, &o)), dog, lane, hold }
}

/// The load's own connection, in a loading session.
fn own_connection(spec: &ConnSpec, o: &LoadOptions) -> Result<mysql::Conn> {
    let mut c = spec.connect()?;
    session(&mut c, o)?;
    c.query_drop("SET NAMES utf8mb4")?;
    Ok(c)
}

/// What waits for all of a table's chunks: its secondary indexes in one
/// `ALTER TABLE` (`indexes`, its clauses) and its own statistics setting
/// back with one `ANALYZE TABLE` (`recalc`). Returns the seconds the
/// indexes took.
fn after_data(
    w: &mut mysql::Conn,
    o: &LoadOptions,
    t: &Table,
    indexes: &[String],
    recalc: Option<&str>,
) -> Result<f64> {
    let name = quoted(o, &t.db, &t.name);
    let start = Instant::now();
    if !indexes.is_empty() {
        w.query_drop(format!("ALTER TABLE {name} {}", indexes.join(", ")))
            .with_ctx(|| format!("adding the secondary indexes after the data of {}.{}", t.db, t.name))?;
    }
    let built = start.elapsed().as_secs_f64();
    if let Some(r) = recalc {
        recalc_back(w, &name, r, true)
            .with_ctx(|| format!("giving {}.{} its statistics after the data", t.db, t.name))?;
    }
    Ok(built)
}

/// Run the tables' jobs on the workers: each table created by its
/// `Create` (`creations`; on the lane, ahead of the loading connections,
/// unless one of them gets there first), its chunks loaded, then its
/// deferred indexes (`later`) and statistics (`recalc`) given by its
/// `After` (on the lane when it builds no index); what happens is told to
/// `on`.
fn load_tables(
    spec: &ConnSpec,
    o: &LoadOptions,
    dog: Option<&Arc<Watchdog>>,
    m: &Arc<Manifest>,
    jobs: Vec<Job>,
    (later, creations, recalc): (Later, Vec<Option<Creation>>, Vec<Option<String>>),
    on: &mut dyn FnMut(Event),
) -> Result<crate::pool::Failed> {
    let (mm, oo, ll) = (m.clone(), o.clone(), later.clone());
    // Light: a creation, and an After that builds no index.
    let no_index: Vec<bool> = later.iter().map(Vec::is_empty).collect();
    let light: crate::pool::Light =
        Arc::new(move |&(i, p): &Job| p == Part::Create || (p == Part::After && no_index[i]));
    let builds = (0..later.len()).filter(|&i| !later[i].is_empty()).collect();
    let hold = crate::pool::Hold::new(builds, &jobs, |i, k| m.tables[i].chunks[k].bytes);
    let mut path = CriticalPath::new(&jobs);
    pool(
        &workers(spec, o, dog, Some(light), Some(Arc::new(hold))),
        jobs,
        move |w, &(i, part)| match part {
            Part::Create => match &creations[i] {
                Some(creation) => creation.run(w, &mm.tables[i].name).map(|_| (true, 0.0)),
                None => Ok((true, 0.0)),
            },
            Part::Chunk(k) => Ok((load_chunk(w, &oo, &mm, i, k)?, 0.0)),
            Part::After => after_data(w, &oo, &mm.tables[i], &ll[i], recalc[i].as_deref()).map(|s| (true, s)),
        },
        |heard| {
            let name = |i: usize| format!("{}.{}", target(o, &m.tables[i].db), m.tables[i].name);
            match heard {
                Heard::Started((i, Part::After)) if !later[i].is_empty() => {
                    let rows = m.tables[i].chunks.iter().map(|c| c.rows).sum();
                    on(Event::Indexing { table: name(i), indexes: later[i].len(), rows });
                    path.building(i, name(i), &mut *on);
                }
                Heard::Done((i, Part::After), (_, seconds)) if !later[i].is_empty() => {
                    path.gone(i);
                    on(Event::Indexed { table: name(i), seconds });
                }
                Heard::Done((i, Part::Chunk(k)), (loaded, _)) => {
                    let ch = &m.tables[i].chunks[k];
                    on(Event::Chunk { table: name(i), rows: ch.rows, bytes: ch.bytes, already: !loaded });
                    path.chunk_done(i, &mut *on);
                }
                Heard::Failed((i, _)) => path.gone(i),
                Heard::Started(_) | Heard::Done(..) => {}
            }
        },
    )
}

/// Tells when the load waits on index builds alone: every chunk still to
/// load is in and what is left is one `ALTER TABLE` per table, each on one
/// server thread.
struct CriticalPath {
    /// Chunks not loaded yet, per table (a table that failed has none left
    /// to wait for).
    chunks_left: std::collections::HashMap<usize, usize>,
    /// Index builds running: the table and its name.
    building: Vec<(usize, String)>,
    said: bool,
}

impl CriticalPath {
    fn new(jobs: &[Job]) -> CriticalPath {
        let mut chunks_left = std::collections::HashMap::new();
        for (i, _) in jobs.iter().filter(|j| matches!(j.1, Part::Chunk(_))) {
            *chunks_left.entry(*i).or_insert(0) += 1;
        }
        CriticalPath { chunks_left, building: vec![], said: false }
    }

    fn building(&mut self, table: usize, name: String, on: &mut dyn FnMut(Event)) {
        self.building.push((table, name));
        self.check(on);
    }

    /// A table's build is done, or the table failed: nothing of it is left.
    fn gone(&mut self, table: usize) {
        self.building.retain(|(t, _)| *t != table);
        self.chunks_left.remove(&table);
    }

    fn chunk_done(&mut self, table: usize, on: &mut dyn FnMut(Event)) {
        if let Some(n) = self.chunks_left.get_mut(&table) {
            *n = n.saturating_sub(1);
        }
        self.check(on);
    }

    fn check(&mut self, on: &mut dyn FnMut(Event)) {
        if !self.said && !self.building.is_empty() && self.chunks_left.values().all(|n| *n == 0) {
            self.said = true;
            on(Event::OnlyIndexing { tables: self.building.iter().map(|(_, t)| t.clone()).collect() });
        }
    }
}

/// The databases, then the sequences (a column's default may read one):
/// created unless kept, and set to their dumped next value.
fn create_databases(c: &mut mysql::Conn, o: &LoadOptions, m: &Manifest, keep_seq: &[bool]) -> Result<()> {
    for d in &m.databases {
        c.query_drop(format!(
            "CREATE DATABASE IF NOT EXISTS {} CHARACTER SET {} COLLATE {}",
            quote(target(o, &d.name)),
            d.charset,
            d.collation
        ))?;
    }
    // Sequences before the tables: a column's default may read one.
    for (q, keep) in m.sequences.iter().zip(keep_seq) {
        let db = target(o, &q.db);
        if !keep {
            c.query_drop(format!("USE {}", quote(db)))?;
            c.query_drop(&q.create).with_ctx(|| format!("creating sequence {db}.{}", q.name))?;
        }
        if !keep || o.resume {
            c.query_drop(format!("SELECT SETVAL({}.{}, {}, 0)", quote(db), quote(&q.name), q.next))?;
        }
    }
    Ok(())
}

/// What waits for each table's data: the secondary indexes added after it
/// (with `indexes_after_data`), and an InnoDB table's own
/// STATS_AUTO_RECALC, given back after it.
///
/// Indexes wait only for a table loaded in more than one chunk when the
/// server builds an empty table's indexes in bulk (`bulk`, see
/// [`bulk_into_empty`]). A table of one chunk is filled by one statement into an
/// empty table, and there InnoDB, with unique and foreign-key checks off,
/// sorts every index and builds it at the statement's end, as an `ALTER
/// TABLE` would, which would only add a DDL statement's file syncs.
/// Statistics wait for every table with data: left on, InnoDB samples a
/// table again and again as its one statement fills it (on 400 tables of
/// 2,500 rows the server's CPU rose from 7.5 to 12.7 s).
fn deferred_work(o: &LoadOptions, m: &Manifest, bulk: bool) -> Waits {
    let waits = |t: &crate::manifest::Table| t.chunks.len() > 1 || (!bulk && !t.chunks.is_empty());
    // Secondary indexes that can wait for the data; of those, the ones a
    // resumed load still has to add (an existing table tells by its
    // indexes, whichever way an earlier run created it).
    let creates: Vec<&str> = m.tables.iter().map(|t| t.create.as_str()).collect();
    let existing: Vec<Option<Deferred>> = m
        .tables
        .iter()
        .map(|t| {
            (o.indexes_after_data && !t.chunks.is_empty())
                .then(|| crate::indexes::split(&t.create, crate::indexes::referenced(&t.name, &creates)))
                .flatten()
        })
        .collect();
    let deferred = existing.iter().zip(&m.tables).map(|(d, t)| d.clone().filter(|_| waits(t))).collect();
    // InnoDB tables with data: their own STATS_AUTO_RECALC, given back
    // after the data (a resumed load's tables have it off still).
    let recalc: Vec<Option<String>> =
        m.tables.iter().map(|t| (!t.chunks.is_empty()).then(|| stats_auto_recalc(&t.create)).flatten()).collect();
    Waits { deferred, existing, recalc }
}

/// What waits for each table's data (see [`deferred_work`]).
struct Waits {
    /// The secondary indexes a table created now leaves for after its data.
    deferred: Vec<Option<Deferred>>,
    /// Those an existing table may lack (a resumed load adds them).
    existing: Vec<Option<Deferred>>,
    /// The table's own `STATS_AUTO_RECALC`, given back after its data.
    recalc: Vec<Option<String>>,
}

/// Whether the server builds the indexes of an empty InnoDB table in bulk
/// when one statement fills it with unique and foreign-key checks off,
/// sorting each index at the statement's end: MariaDB 10.7 and later
/// (10.6 loads an empty table without undo logging, but into each index
/// row by row); `version` as `SELECT VERSION()` gives it.
fn bulk_into_empty(version: &str) -> bool {
    crate::bulk::mariadb_from(version, (10, 7))
}

/// Read every loaded chunk back as the dump read it, and compare its row
/// count and hash with the manifest's; name every chunk that differs.
fn verify(
    spec: &ConnSpec,
    o: &LoadOptions,
    dog: Option<&Arc<Watchdog>>,
    m: &Arc<Manifest>,
    jobs: Vec<Job>,
    on: &mut dyn FnMut(Event),
) -> Result<()> {
    let (mm, oo) = (m.clone(), o.clone());
    let mut differ = vec![];
    let mut checked = 0u64;
    let failed = pool(
        &workers(spec, o, dog, None, None),
        jobs,
        move |w, &(i, part)| {
            let Part::Chunk(k) = part else { return Ok(Default::default()) };
            w.query_drop("SET NAMES binary")?;
            let t = &mm.tables[i];
            let db = target(&oo, &t.db);
            let sql = crate::copy::select(t, db, &t.chunks[k].range, mm.where_.as_deref());
            crate::copy::stream(w, &sql, &format!("{db}.{}", t.name), |_| Ok(()))
        },
        |heard| {
            let Heard::Done((i, Part::Chunk(k)), got) = heard else { return };
            checked += 1;
            let (t, ch) = (&m.tables[i], &m.tables[i].chunks[k]);
            if (got.rows, got.row_sum) != (ch.rows, ch.row_sum) {
                differ.push(format!(
                    "{}.{} chunk {k} ({}): {} rows loaded, {} dumped{}",
                    target(o, &t.db),
                    t.name,
                    ch.file,
                    got.rows,
                    ch.rows,
                    if got.rows == ch.rows { ", values differ" } else { "" }
                ));
            }
        },
    )?;
    failures(("table", "tables"), "could not be read back", failed, |i| {
        format!("{}.{}", target(o, &m.tables[i].db), m.tables[i].name)
    })?;
    if !differ.is_empty() {
        let differs = if differ.len() == 1 { "differs" } else { "differ" };
        bail!(
            "{} of {} {differs} from the dump: {}",
            differ.len(),
            plural(checked, "chunk", "chunks"),
            differ.join("; ")
        );
    }
    let (chunks, match_) = if checked == 1 { ("chunk", "matches") } else { ("chunks", "match") };
    on(Event::Note(format!("verified: {checked} {chunks} {match_} the dump's row counts and hashes")));
    Ok(())
}

/// A directory mydumper wrote: databases, tables, data in parallel
/// (largest file first), then routines and events, views (in rounds, each
/// after the views it reads) and triggers, as myloader orders them.
fn load_mydumper(
    spec: &ConnSpec,
    o: &LoadOptions,
    on: &mut dyn FnMut(Event),
    dog: Option<&Arc<Watchdog>>,
) -> Result<()> {
    if o.resume || o.verify {
        bail!(
            "--resume and --verify need the row counts of a pileup dump's manifest; {} was written by mydumper",
            o.dir.display()
        );
    }
    let s = crate::mydumper::scan(&o.dir)?;
    check_renames(o, s.databases.iter().map(String::as_str))?;
    let mut c = spec.connect()?;
    let _watched = dog.map(|d| d.watch(&c));
    session(&mut c, o)?;
    let mut skip_tables = vec![];
    let names = s.tables.iter().map(|(d, t, _)| (d, t)).chain(s.views.iter().map(|(d, v, _)| (d, v)));
    for (db, name) in names {
        let db = target(o, db);
        if found(&mut c, o, &mut *on, "table or view", &["TABLE", "VIEW"], db, name, false)? == Found::Kept {
            skip_tables.push((db.to_string(), name.clone()));
        }
    }
    let skipped = |db: &str, t: &str| skip_tables.iter().any(|(d, n)| d == target(o, db) && n == t);
    for db in &s.databases {
        let create = o.dir.join(format!("{db}-schema-create.sql"));
        let text = std::fs::read_to_string(&create).unwrap_or_default();
        let grab = |k: &str| {
            text.split_whitespace()
                .skip_while(|w| !w.eq_ignore_ascii_case(k))
                .nth(1)
                .map(|w| w.trim_end_matches(['*', '/', ';']).to_string())
        };
        let mut sql = format!("CREATE DATABASE IF NOT EXISTS {}", quote(target(o, db)));
        if let Some(cs) = text.contains("CHARACTER SET").then(|| grab("SET")).flatten() {
            sql.push_str(&format!(" CHARACTER SET {cs}"));
        }
        if let Some(co) = grab("COLLATE") {
            sql.push_str(&format!(" COLLATE {co}"));
        }
        c.query_drop(sql)?;
    }
    // InnoDB tables load with STATS_AUTO_RECALC=0 and get their own
    // setting back after the data (see the module's notes).
    let mut recalc: Vec<(String, String)> = vec![];
    for (db, t, p) in s.tables.iter().filter(|(d, t, _)| !skipped(d, t)) {
        crate::mydumper::run_file(&mut c, target(o, db), p).with_ctx(|| format!("creating {}.{t}", target(o, db)))?;
        let name = quoted(o, db, t);
        let create: Option<(String, String)> = c.query_first(format!("SHOW CREATE TABLE {name}"))?;
        if let Some(r) = create.and_then(|(_, sql)| stats_auto_recalc(&sql)) {
            recalc_off(&mut c, &name)?;
            recalc.push((name, r));
        }
    }
    let data: Vec<(String, String, PathBuf, u64)> = s.data.into_iter().filter(|(d, t, _, _)| !skipped(d, t)).collect();
    on(Event::Planned { tables: s.tables.len(), rows: 0, bytes: data.iter().map(|d| d.3).sum() });
    let data = Arc::new(data);
    let (dd, oo) = (data.clone(), o.clone());
    let jobs = (0..data.len()).map(|i| (i, Part::Chunk(0))).collect();
    let failed = pool(
        &workers(spec, o, dog, None, None),
        jobs,
        move |w, &(i, _)| {
            w.query_drop("SET NAMES binary")?;
            crate::mydumper::run_file(w, target(&oo, &dd[i].0), &dd[i].2)
        },
        |heard| {
            let Heard::Done((i, _), rows) = heard else { return };
            on(Event::Chunk {
                table: format!("{}.{}", target(o, &data[i].0), data[i].1),
                rows,
                bytes: data[i].3,
                already: false,
            });
        },
    )?;
    // A table with a data file that failed gets its own setting back
    // without statistics, and an error there does not hide the failure.
    let broken: HashSet<String> = failed.iter().map(|((i, _), _)| quoted(o, &data[*i].0, &data[*i].1)).collect();
    for (name, r) in &recalc {
        if broken.contains(name) {
            let _ = recalc_back(&mut c, name, r, false);
            continue;
        }
        recalc_back(&mut c, name, r, true).with_ctx(|| format!("giving {name} its statistics after the data"))?;
    }
    for (db, p) in &s.post {
        crate::mydumper::run_file(&mut c, target(o, db), p)?;
    }
    let views: Vec<&(String, String, PathBuf)> = s.views.iter().filter(|(d, v, _)| !skipped(d, v)).collect();
    in_rounds(views, |v| crate::mydumper::run_file(&mut c, target(o, &v.0), &v.2).map(|_| ()))?;
    for (db, p) in &s.triggers {
        crate::mydumper::run_file_from(&mut c, Some(db), target(o, db), p)?;
    }
    failures(("data file", "data files"), "not loaded", failed, |i| data[i].2.display().to_string())
}

/// Accounts that do not exist yet, and every account's grants (on renamed
/// databases, the new names). An account that exists keeps its password.
fn create_users(
    c: &mut mysql::Conn,
    o: &LoadOptions,
    users: &[crate::manifest::User],
    on: &mut dyn FnMut(Event),
) -> Result<()> {
    for u in users {
        let create = match u.create.strip_prefix("CREATE USER ") {
            Some(rest) => format!("CREATE USER IF NOT EXISTS {rest}"),
            None => u.create.clone(),
        };
        c.query_drop(&create)
            .map_err(crate::error::DumpError::from)
            .with_ctx(|| format!("creating account '{}'@'{}'", u.user, u.host))?;
        for g in &u.grants {
            let mut g = g.clone();
            for (from, to) in &o.rename {
                g = g.replace(&format!(" ON {}.", quote(from)), &format!(" ON {}.", quote(to)));
            }
            c.query_drop(&g)
                .map_err(crate::error::DumpError::from)
                .with_ctx(|| format!("granting to '{}'@'{}'", u.user, u.host))?;
        }
    }
    if !users.is_empty() {
        on(Event::Note(format!("{} and their grants created", plural(users.len(), "account", "accounts"))));
    }
    Ok(())
}

fn kind_word(k: Kind) -> &'static str {
    match k {
        Kind::View => "VIEW",
        Kind::Procedure => "PROCEDURE",
        Kind::Function => "FUNCTION",
        Kind::Trigger => "TRIGGER",
        Kind::Event => "EVENT",
    }
}

/// What the load does with one of the dump's objects on the server.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// Not there, or dropped (`--existing drop`): create it.
    Create,
    /// There, and kept: `--resume` (when `resumable`) or `--existing skip`.
    Kept,
}

/// Whether `db.name` exists already and, if so, what `--existing` and
/// `--resume` make of it: refuse (an error naming it and the ways on),
/// drop it (as each of `kinds`, with `IF EXISTS`), or keep it. `what`
/// names it to the user; `resumable` is false where `--resume` does not
/// apply.
#[allow(clippy::too_many_arguments)]
fn found(
    c: &mut mysql::Conn,
    o: &LoadOptions,
    on: &mut dyn FnMut(Event),
    what: &str,
    kinds: &[&str],
    db: &str,
    name: &str,
    resumable: bool,
) -> Result<Found> {
    if !exists(c, kinds[0], db, name)? {
        return Ok(Found::Create);
    }
    match (o.resume && resumable, o.existing) {
        (true, _) => Ok(Found::Kept),
        (false, Existing::Refuse) => bail!(
            "{what} {db}.{name} exists already; drop it, or pass --existing drop (replace) or --existing skip (keep it){}",
            if resumable { ", or --resume to finish an interrupted load" } else { "" }
        ),
        (false, Existing::Drop) => {
            for k in kinds {
                c.query_drop(format!("DROP {k} IF EXISTS {}.{}", quote(db), quote(name)))?;
            }
            Ok(Found::Create)
        }
        (false, Existing::Skip) => {
            on(Event::Note(format!("{what} {db}.{name} exists: skipped (--existing skip)")));
            Ok(Found::Kept)
        }
    }
}

fn exists(c: &mut mysql::Conn, kind: &str, db: &str, name: &str) -> Result<bool> {
    let sql = match kind {
        "TABLE" | "VIEW" | "SEQUENCE" => {
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?"
        }
        "TRIGGER" => "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ? AND TRIGGER_NAME = ?",
        "EVENT" => "SELECT COUNT(*) FROM information_schema.EVENTS WHERE EVENT_SCHEMA = ? AND EVENT_NAME = ?",
        _ => "SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = ? AND ROUTINE_NAME = ?",
    };
    let n: Option<u64> = c.exec_first(sql, (db, name))?;
    Ok(n.unwrap_or(0) > 0)
}

/// Load one chunk; `false` when a resumed load finds it loaded already.
/// A chunk is one transaction (one statement with `LOAD DATA`), so in
/// InnoDB it is loaded whole or not at all; a resumed load counts its key
/// range in the table: all its rows there means loaded, none means not,
/// and anything else (a table that is not transactional, cut midway) is
/// deleted and loaded again.
fn load_chunk(w: &mut mysql::Conn, o: &LoadOptions, m: &Manifest, i: usize, k: usize) -> Result<bool> {
    let t = &m.tables[i];
    let ch = &t.chunks[k];
    if o.resume {
        let cond = t.chunk_key.as_ref().and_then(|key| ch.range.condition(&quote(key)));
        let from = quoted(o, &t.db, &t.name);
        let filter = cond.map(|c| format!(" WHERE {c}")).unwrap_or_default();
        let n: u64 = w.query_first(format!("SELECT COUNT(*) FROM {from}{filter}"))?.unwrap_or(0);
        if n == ch.rows && n > 0 {
            return Ok(false);
        }
        if n > 0 {
            w.query_drop(format!("DELETE FROM {from}{filter}"))?;
        }
    }
    let path = o.dir.join(&ch.file);
    let file = crate::files::open(&path)
        .with_ctx(|| format!("cannot open {} (chunk {k} of {}.{})", path.display(), t.db, t.name))?;
    let db = target(o, &t.db);
    let (shown, expect) = (path.display().to_string(), Some((ch.bytes, ch.crc32)));
    let loaded = if o.load_data {
        crate::infile::load_data(w, db, &t.name, Some(&t.columns), file, shown, expect)
    } else {
        crate::bulk::insert(w, db, &t.name, &t.columns, file, &shown, expect)
    }
    .with_ctx(|| format!("chunk {}", ch.file))?;
    if loaded != ch.rows {
        bail!("{} loaded {loaded} rows into {db}.{}, the manifest says {}", ch.file, t.name, ch.rows);
    }
    Ok(true)
}

/// Views (each after the views it reads: created in rounds until none is
/// left), then routines, triggers and events, each under the settings it
/// was created with.
/// Create views in rounds until none is left, each after the views it
/// reads: a round creates what it can, and a round that creates nothing
/// ends with its last error.
fn in_rounds<T>(mut views: Vec<T>, mut create: impl FnMut(&T) -> Result<()>) -> Result<()> {
    while !views.is_empty() {
        let mut left = vec![];
        let mut last_err = None;
        let before = views.len();
        for v in views {
            if let Err(e) = create(&v) {
                last_err = Some(e);
                left.push(v);
            }
        }
        if left.len() == before {
            return Err(last_err.expect("a round that created nothing failed")).ctx("creating views");
        }
        views = left;
    }
    Ok(())
}

fn create_objects(c: &mut mysql::Conn, o: &LoadOptions, objs: &[Object], on: &mut dyn FnMut(Event)) -> Result<()> {
    in_rounds(objs.iter().filter(|x| x.kind == Kind::View).collect(), |v| create(c, o, v))?;
    for x in objs.iter().filter(|x| x.kind != Kind::View) {
        create(c, o, x).with_ctx(|| format!("creating {} {}.{}", kind_word(x.kind), target(o, &x.db), x.name))?;
    }
    if !objs.is_empty() {
        on(Event::Note(format!(
            "{} created (views, routines, triggers and events)",
            plural(objs.len(), "object", "objects")
        )));
    }
    Ok(())
}

fn create(c: &mut mysql::Conn, o: &LoadOptions, x: &Object) -> Result<()> {
    c.query_drop(format!("USE {}", quote(target(o, &x.db))))?;
    let mut set = vec![];
    if let Some(m) = &x.sql_mode {
        set.push(format!("sql_mode = '{}'", m.replace('\'', "''")));
    }
    if let Some(cs) = &x.character_set_client {
        set.push(format!("character_set_client = {cs}"));
    }
    if let Some(cc) = &x.collation_connection {
        set.push(format!("collation_connection = {cc}"));
    }
    if let Some(tz) = &x.time_zone {
        set.push(format!("time_zone = '{}'", tz.replace('\'', "''")));
    }
    if !set.is_empty() {
        c.query_drop(format!("SET SESSION {}", set.join(", ")))?;
    }
    let r = c.query_drop(&x.create).map_err(crate::error::DumpError::from);
    c.query_drop("SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_AUTO_VALUE_ON_ZERO', time_zone = '+00:00'")?;
    c.query_drop("SET NAMES utf8mb4")?;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_mariadb_from_10_7_builds_an_empty_tables_indexes_in_bulk() {
        assert!(bulk_into_empty("10.11.19-MariaDB-0+deb12u1"));
        assert!(bulk_into_empty("10.7.1-MariaDB"));
        assert!(!bulk_into_empty("10.6.16-MariaDB"));
        assert!(bulk_into_empty("11.4.2-MariaDB-log"));
        assert!(!bulk_into_empty("10.5.23-MariaDB"));
        assert!(!bulk_into_empty("8.0.36"));
        assert!(!bulk_into_empty("5.5.5-10.11.6-MariaDB"), "the replication prefix some proxies add is read as 5.5");
    }
}
