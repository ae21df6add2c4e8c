//! `pileup dump`: list → lock → snapshots → plan chunks → copy → manifest.
//!
//! Every thread opens its snapshot while commits are blocked
//! ([`crate::snapshot`]); tables that are not transactional are copied in
//! that window by the locking connection, and the lock is released. The
//! threads then take work from one queue, largest table first: planning a
//! table (its key's bounds in the snapshot) puts its chunks at the front of
//! the queue, so one large table is copied by every thread. Each chunk is
//! one file, compressed, 0600, written under a temporary name and renamed;
//! the manifest is written last, so a dump cut short is never complete.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{bail, Ctx, DumpError, Result};
use mysql::prelude::Queryable;
use pileup_conn::watchdog::{Watchdog, Watched};
use pileup_conn::ConnSpec;

use crate::chunk::{self, Range};
use crate::files::{Compress, Encoder};
use crate::manifest::{file_part, quote, Chunk, LockHeld, Manifest, Table, FORMAT, MANIFEST};
use crate::schema::{self, Filter, Listed};
use crate::snapshot::{self, LockOptions};

/// The layout written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// pileup's own: `LOAD DATA` text chunks and a manifest with row counts
    /// and checksums (resume, verify).
    Pileup,
    /// mydumper 0.10.1's, which myloader loads as it is.
    Mydumper,
}

#[derive(Debug, Clone)]
pub struct DumpOptions {
    pub dir: PathBuf,
    pub threads: usize,
    pub filter: Filter,
    /// Extra condition on every table's rows.
    pub where_: Option<String>,
    pub chunk_rows: u64,
    pub compress: Compress,
    pub format: Format,
    pub lock: LockOptions,
    /// Also dump accounts and their grants (pileup format).
    pub users: bool,
    /// Keep the dump's own statements out of the server's slow log (a
    /// session `long_query_time`): for copies whose reads would otherwise
    /// be taken for the application's by the next digest of that log.
    pub unlogged: bool,
    /// Probe the server this often on connections of its own while the
    /// dump runs, and cut the dump's statements off when it stops
    /// answering (two probes in a row with no answer within the connect
    /// timeout): its statements may otherwise wait as long as their bound.
    pub watchdog: Option<std::time::Duration>,
}

/// What the dump reports as it goes.
#[derive(Debug, Clone)]
pub enum Event {
    /// Tables chosen, with their estimated rows and bytes.
    Planned {
        tables: usize,
        rows: u64,
        bytes: u64,
    },
    /// The lock is released: how long it was held.
    Unlocked {
        statement: String,
        held_ms: f64,
        waited_ms: f64,
        /// Each BACKUP STAGE statement's time (ms), MariaDB.
        stages_ms: Vec<(String, f64)>,
        copied: Vec<String>,
    },
    Chunk {
        table: String,
        rows: u64,
        bytes: u64,
    },
    Note(String),
}

enum Job {
    Plan(usize),
    Copy(usize, usize, Range),
}

struct Done {
    table: usize,
    seq: usize,
    chunk: Chunk,
}

/// The server's clock, as mydumper's `metadata` shows times.
fn server_now(c: &mut mysql::Conn) -> String {
    c.query_first("SELECT DATE_FORMAT(NOW(), '%Y-%m-%d %H:%i:%s')").ok().flatten().unwrap_or_default()
}

fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A worker's session: binary column values as they are stored, UTC
/// timestamps, no statement time limit (a chunk may take long), and table
/// locks waited for as long as it takes (a table being altered is read
/// once the change is done).
fn session(c: &mut mysql::Conn) -> Result<()> {
    c.query_drop("SET SESSION max_statement_time = 0, lock_wait_timeout = 86400")?;
    c.query_drop("SET NAMES binary")?;
    c.query_drop("SET SESSION time_zone = '+00:00'")?;
    Ok(())
}

/// The dump's directory, made private, unless it holds a dump already or
/// the options cannot be written in its format.
fn prepare_dir(o: &DumpOptions) -> Result<()> {
    if o.dir.join(MANIFEST).exists() || o.dir.join("metadata").exists() {
        bail!("{} already holds a complete dump; choose an empty directory", o.dir.display());
    }
    if o.format == Format::Mydumper && matches!(o.compress, Compress::Zstd(_)) {
        bail!("myloader 0.10.1 reads plain or gzip files only: with --layout mydumper use --compress gzip or none");
    }
    pileup_files::create_private_dir(&o.dir)?;
    if o.format == Format::Pileup {
        pileup_files::create_private_dir(&o.dir.join("data"))?;
    }
    Ok(())
}

pub fn dump(spec: &ConnSpec, o: &DumpOptions, on: &mut dyn FnMut(Event)) -> Result<Manifest> {
    prepare_dir(o)?;
    let dog = o.watchdog.map(|every| Watchdog::start(spec, every, 2));
    let r = dump_watched(spec, o, on, dog.as_ref());
    match dog.as_ref().and_then(Watchdog::hung) {
        Some(why) if r.is_err() => {
            let marker = if o.format == Format::Pileup { MANIFEST } else { "metadata" };
            Err(DumpError::Failed(format!("{why}; the dump in {} is incomplete (no {marker})", o.dir.display())))
        }
        _ => r,
    }
}

fn dump_watched(
    spec: &ConnSpec,
    o: &DumpOptions,
    on: &mut dyn FnMut(Event),
    dog: Option<&Watchdog>,
) -> Result<Manifest> {
    let mut m = Manifest { format: FORMAT.into(), started: now_unix(), where_: o.where_.clone(), ..Default::default() };
    let mut c = spec.connect()?;
    let mut watched: Vec<Watched> = dog.map(|d| d.watch(&c)).into_iter().collect();
    let unlogged = |c: &mut mysql::Conn| {
        if o.unlogged {
            pileup_conn::keep_out_of_slow_log(c);
        }
    };
    unlogged(&mut c);
    let (flavor, version) = pileup_conn::flavor(&mut c)?;
    m.server_version = version;
    m.started_at = server_now(&mut c);
    c.query_drop("SET SESSION max_statement_time = 0")?;
    c.query_drop("SET NAMES utf8mb4")?;
    let (listed, view_columns) = read_definitions(&mut c, o, &mut m, on)?;
    on(Event::Planned {
        tables: listed.len(),
        rows: listed.iter().map(|t| t.rows).sum(),
        bytes: listed.iter().map(|t| t.size).sum(),
    });

    // Workers connect before the lock, so the window holds only the
    // snapshots' opening.
    let n = o.threads.max(1);
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let mut w = spec.connect()?;
        session(&mut w)?;
        unlogged(&mut w);
        watched.extend(dog.map(|d| d.watch(&w)));
        conns.push(w);
    }
    let mariadb = flavor == pileup_conn::Flavor::MariaDb;
    let mut early = snapshot_window(&mut c, &mut conns, mariadb, &listed, &mut m, o, on)?;
    for d in &early {
        on(Event::Chunk { table: table_name(&m.tables[d.table]), rows: d.chunk.rows, bytes: d.chunk.bytes });
    }

    let first_error = copy_tables(conns, listed, &m.tables, o, on, &mut early);
    let marker = if o.format == Format::Pileup { MANIFEST } else { "metadata" };
    if let Some(e) = first_error {
        return Err(e.ctx(format!("the dump in {} is incomplete (no {marker})", o.dir.display())));
    }
    early.sort_by_key(|d| (d.table, d.seq));
    for d in early {
        m.tables[d.table].chunks.push(d.chunk);
    }
    // Sequences after the data: every value a dumped row holds was handed
    // out before this (values are not transactional).
    for q in m.sequences.iter_mut() {
        q.next = schema::sequence_next(&mut c, q)?;
    }
    m.finished = now_unix();
    m.finished_at = spec.connect().map(|mut c| server_now(&mut c)).unwrap_or_default();
    write_manifest(o, &m, &view_columns)?;
    Ok(m)
}

/// The columns of each view, for mydumper's layout.
type ViewColumns = std::collections::BTreeMap<(String, String), Vec<String>>;

/// Read the definitions into `m`, refusing what the format has no place
/// for; with `--users`, the accounts too. Returns the tables to copy and,
/// for mydumper's layout, each view's columns.
fn read_definitions(
    c: &mut mysql::Conn,
    o: &DumpOptions,
    m: &mut Manifest,
    on: &mut dyn FnMut(Event),
) -> Result<(Vec<Listed>, ViewColumns)> {
    // Definitions first: reading them takes no global lock, but a table
    // being created or altered keeps them waiting (named, as for the lock).
    c.query_drop("SET SESSION lock_wait_timeout = 1")?;
    let (listed, dbs, tables, objects, sequences) =
        snapshot::guarded(c, &o.lock, "reading the definitions", &mut |s| on(Event::Note(s)), |c| {
            definitions(c, &o.filter)
        })?;
    m.databases = dbs;
    m.tables = tables;
    m.objects = objects;
    m.sequences = sequences;
    if o.format == Format::Mydumper && !m.sequences.is_empty() {
        bail!(
            "{} selected, which mydumper 0.10.1's format has no place for; dump them in pileup's format or --exclude them",
            pileup_output::plural(m.sequences.len(), "sequence", "sequences")
        );
    }
    if o.users {
        if o.format == Format::Mydumper {
            bail!("--users is written in pileup's format only (mydumper 0.10.1 has no place for accounts)");
        }
        m.users = schema::users(c).ctx("reading accounts (--users needs SELECT on mysql.user)")?;
    }
    let mut view_columns = ViewColumns::new();
    if o.format == Format::Mydumper {
        for x in m.objects.iter().filter(|x| x.kind == crate::manifest::Kind::View) {
            view_columns
                .insert((x.db.clone(), x.name.clone()), schema::written(&schema::table_columns(c, &x.db, &x.name)?));
        }
    }
    Ok((listed, view_columns))
}

/// The snapshot window: the lock taken, every worker's snapshot opened and
/// the position read under it, and the tables that are not transactional
/// copied while nothing commits; the lock is released before this returns
/// (an error included). Returns the chunks copied under the lock.
fn snapshot_window(
    c: &mut mysql::Conn,
    conns: &mut [mysql::Conn],
    mariadb: bool,
    listed: &[Listed],
    m: &mut Manifest,
    o: &DumpOptions,
    on: &mut dyn FnMut(Event),
) -> Result<Vec<Done>> {
    session(c)?;
    if o.lock.unlocked {
        conns.iter_mut().try_for_each(snapshot::open).ctx("opening the threads' snapshots")?;
        // Recorded as what it is: no lock, no single point, no position.
        m.lock = LockHeld { statement: "none: each thread in its own snapshot".into(), ..Default::default() };
        let mut early = vec![];
        for (i, _) in listed.iter().enumerate().filter(|(_, t)| !t.transactional()) {
            early.push(copy_chunk_now(c, &o.dir, &m.tables[i], i, Range::ALL, o)?);
        }
        return Ok(early);
    }
    let held = snapshot::lock(c, mariadb, &o.lock, &mut |s| on(Event::Note(s)))?;
    let opened: Result<()> = conns.iter_mut().try_for_each(snapshot::open);
    m.position = snapshot::position(c);
    // Tables that are not transactional are copied now, while nothing commits.
    let mut copied = vec![];
    let mut early: Vec<Done> = vec![];
    if opened.is_ok() {
        for (i, t) in listed.iter().enumerate().filter(|(_, t)| !t.transactional()) {
            match copy_chunk_now(c, &o.dir, &m.tables[i], i, Range::ALL, o) {
                Ok(d) => {
                    copied.push(format!("{}.{} ({})", t.db, t.name, t.engine));
                    early.push(d);
                }
                Err(e) => {
                    held.release(c);
                    return Err(e);
                }
            }
        }
    }
    let statement = held.statement.to_string();
    let waited_ms = held.waited.as_secs_f64() * 1e3;
    let stages_ms: Vec<(String, f64)> =
        held.stages.iter().map(|(s, d)| (s.to_string(), d.as_secs_f64() * 1e3)).collect();
    let held_for = held.release(c);
    opened.ctx("opening the threads' snapshots")?;
    m.lock = LockHeld {
        statement: statement.clone(),
        held_ms: held_for.as_secs_f64() * 1e3,
        waited_ms,
        copied_under_lock: copied.clone(),
    };
    on(Event::Unlocked { statement, held_ms: m.lock.held_ms, waited_ms, stages_ms, copied });
    Ok(early)
}

/// The dump's manifest (pileup's layout), or mydumper's schema files and
/// `metadata`.
fn write_manifest(o: &DumpOptions, m: &Manifest, view_columns: &ViewColumns) -> Result<()> {
    match o.format {
        Format::Pileup => {
            let json = serde_json::to_vec_pretty(m)?;
            pileup_files::write_private_bytes(&o.dir.join(MANIFEST), &json)?;
        }
        Format::Mydumper => {
            crate::mydumper::write_schema(&o.dir, m, view_columns, o.compress)?;
            crate::mydumper::write_metadata(&o.dir, m)?;
        }
    }
    Ok(())
}

/// Copy the transactional tables on the workers' connections (each in its
/// snapshot), largest first, a table planned into chunks by the first
/// worker free; chunks copied are synced and named here, off the workers'
/// connections, then added to `early` and told. Returns the first error,
/// after every worker has stopped.
fn copy_tables(
    conns: Vec<mysql::Conn>,
    listed: Vec<Listed>,
    tables: &[crate::manifest::Table],
    o: &DumpOptions,
    on: &mut dyn FnMut(Event),
    early: &mut Vec<Done>,
) -> Option<DumpError> {
    // The queue: transactional tables, largest first.
    let queue: Arc<Mutex<VecDeque<Job>>> = Arc::new(Mutex::new(
        listed.iter().enumerate().filter(|(_, t)| t.transactional()).map(|(i, _)| Job::Plan(i)).collect(),
    ));
    let tables = Arc::new(tables.to_vec());
    let listed = Arc::new(listed);
    let failed = Arc::new(AtomicBool::new(false));
    // Bounded: a worker waits rather than run ahead of the device by more
    // than a few chunks.
    let (tx, rx) = mpsc::sync_channel::<Result<(Done, pileup_files::Staged)>>(2 * conns.len());
    let mut handles = vec![];
    for mut w in conns {
        let (queue, tables, listed, failed, tx, o) =
            (queue.clone(), tables.clone(), listed.clone(), failed.clone(), tx.clone(), o.clone());
        handles.push(std::thread::spawn(move || {
            while !failed.load(Ordering::Relaxed) {
                let Some(job) = queue.lock().unwrap().pop_front() else { break };
                let r = match job {
                    Job::Plan(i) => plan(&mut w, &tables[i], &listed[i], o.chunk_rows).map(|ranges| {
                        let mut q = queue.lock().unwrap();
                        for (seq, r) in ranges.into_iter().enumerate().rev() {
                            q.push_front(Job::Copy(i, seq, r));
                        }
                    }),
                    Job::Copy(i, seq, r) => match copy_chunk(&mut w, &o.dir, &tables[i], i, seq, r, &o) {
                        Ok(d) => {
                            let _ = tx.send(Ok(d));
                            Ok(())
                        }
                        Err(e) => Err(e),
                    },
                };
                if let Err(e) = r {
                    failed.store(true, Ordering::Relaxed);
                    let _ = tx.send(Err(e));
                    break;
                }
            }
            let _ = w.query_drop("COMMIT");
        }));
    }
    drop(tx);
    let mut first_error = None;
    for r in rx {
        // Past the first error the dump has failed: a chunk still sent is
        // dropped (its temporary file removed), not synced.
        let r = match (r, &first_error) {
            (Ok(_), Some(_)) => continue,
            (r, _) => r,
        };
        match r.and_then(|(d, staged)| Ok(staged.finish().map(|()| d)?)) {
            Ok(d) => {
                on(Event::Chunk { table: table_name(&tables[d.table]), rows: d.chunk.rows, bytes: d.chunk.bytes });
                early.push(d);
            }
            Err(e) => {
                failed.store(true, Ordering::Relaxed);
                first_error.get_or_insert(e);
            }
        }
    }
    for h in handles {
        if h.join().is_err() && first_error.is_none() {
            // A worker that panicked sent nothing for its chunk: the dump
            // is not whole.
            first_error = Some(DumpError::Failed("a dump worker stopped on an internal error".into()));
        }
    }
    first_error
}

type Definitions = (
    Vec<Listed>,
    Vec<crate::manifest::Database>,
    Vec<Table>,
    Vec<crate::manifest::Object>,
    Vec<crate::manifest::Sequence>,
);

/// The tables and views chosen and every definition the load needs.
fn definitions(c: &mut mysql::Conn, f: &Filter) -> Result<Definitions> {
    let schema::Listing { tables: listed, views, sequences: seqs, in_db } = schema::list(c, f)?;
    if listed.is_empty() && views.is_empty() && seqs.is_empty() {
        bail!("no table matches the selection; check --databases, --include and --exclude");
    }
    let mut names: Vec<String> = listed
        .iter()
        .map(|t| t.db.clone())
        .chain(views.iter().map(|v| v.0.clone()))
        .chain(seqs.iter().map(|s| s.0.clone()))
        .collect();
    names.sort();
    names.dedup();
    let mut dbs = vec![];
    for db in &names {
        dbs.push(schema::database(c, db)?);
    }
    // A database's columns and index columns in one statement each when
    // at least half its tables are chosen (the server opens every table of
    // it either way); else a table's at a time.
    let mut batched = std::collections::HashMap::new();
    for db in &names {
        let chosen = listed.iter().filter(|t| &t.db == db).count();
        if chosen >= 2 && chosen * 2 >= in_db.get(db).copied().unwrap_or(0) {
            batched.insert(db.clone(), (schema::db_columns(c, db)?, schema::db_index_columns(c, db)?));
        }
    }
    let mut tables = vec![];
    for t in &listed {
        // First its definition: a table being created or altered keeps
        // SHOW CREATE waiting, up to the session's lock_wait_timeout, and
        // the caller names what keeps it (information_schema waits for it
        // longer, and then leaves the table out).
        let create = schema::create_table(c, &t.db, &t.name)?;
        // A table the database's statement left out is asked about alone.
        let found = batched.get_mut(&t.db).and_then(|(columns, index_columns)| {
            let columns = columns.remove(&t.name)?;
            Some((columns, index_columns.remove(&t.name).unwrap_or_default()))
        });
        let (columns, ix) = match found {
            Some(f) => f,
            None => {
                let columns = schema::table_columns(c, &t.db, &t.name)?;
                let ix = if t.transactional() { schema::table_index_columns(c, &t.db, &t.name)? } else { vec![] };
                (columns, ix)
            }
        };
        let chunk_key = if t.transactional() { schema::choose_chunk_key(&ix, &columns) } else { None };
        if columns.is_empty() {
            bail!("table {}.{} vanished during the dump", t.db, t.name);
        }
        tables.push(Table {
            db: t.db.clone(),
            name: t.name.clone(),
            engine: t.engine.clone(),
            create,
            columns: schema::written(&columns),
            chunk_key,
            chunks: vec![],
            size_estimate: t.size,
        });
    }
    let objects = schema::objects(c, &names, &views, &|db, t| listed.iter().any(|l| l.db == db && l.name == t))?;
    let sequences = seqs.iter().map(|(db, s)| schema::sequence(c, db, s)).collect::<Result<Vec<_>>>()?;
    Ok((listed, dbs, tables, objects, sequences))
}

fn table_name(t: &Table) -> String {
    format!("{}.{}", t.db, t.name)
}

/// A table's chunks, from its key's bounds in this worker's snapshot.
fn plan(w: &mut mysql::Conn, t: &Table, l: &Listed, chunk_rows: u64) -> Result<Vec<Range>> {
    let Some(k) = &t.chunk_key else { return Ok(vec![Range::ALL]) };
    if l.rows <= chunk_rows {
        return Ok(vec![Range::ALL]);
    }
    let k = quote(k);
    let (min, max): (Option<String>, Option<String>) = w
        .query_first(format!("SELECT MIN({k}), MAX({k}) FROM {}.{}", quote(&t.db), quote(&t.name)))?
        .unwrap_or((None, None));
    let parse = |s: Option<String>| s.and_then(|s| s.parse::<i128>().ok());
    Ok(match (parse(min), parse(max)) {
        (Some(a), Some(b)) => chunk::ranges(a, b, l.rows, chunk_rows),
        _ => vec![Range::ALL],
    })
}

/// Copy one chunk to its file, synced and under its name.
fn copy_chunk_now(w: &mut mysql::Conn, dir: &Path, t: &Table, table: usize, r: Range, o: &DumpOptions) -> Result<Done> {
    let (done, staged) = copy_chunk(w, dir, t, table, 0, r, o)?;
    staged.finish()?;
    Ok(done)
}

/// Copy one chunk to its file, left for the caller to sync and name
/// ([`pileup_files::Staged::finish`]), so that the connection can go on to
/// its next chunk meanwhile.
fn copy_chunk(
    w: &mut mysql::Conn,
    dir: &Path,
    t: &Table,
    table: usize,
    seq: usize,
    r: Range,
    o: &DumpOptions,
) -> Result<(Done, pileup_files::Staged)> {
    let sql = crate::copy::select(t, &t.db, &r, o.where_.as_deref());
    let file = match o.format {
        Format::Pileup => {
            format!("data/{}.{}.{seq:05}.tsv{}", file_part(&t.db), file_part(&t.name), o.compress.suffix())
        }
        Format::Mydumper => crate::mydumper::data_file(t, (r != Range::ALL).then_some(seq), o.compress),
    };
    let path = dir.join(&file);
    let (mut bytes, mut crc, mut tally) = (0u64, crc32fast::Hasher::new(), Default::default());
    let staged = pileup_files::write_private_staged_direct(&path, |out| -> Result<()> {
        let mut z = Encoder::new(out, o.compress)?;
        let mut sink = |b: &[u8]| -> Result<()> {
            crc.update(b);
            bytes += b.len() as u64;
            Ok(z.write_all(b)?)
        };
        tally = match o.format {
            Format::Pileup => crate::copy::stream(w, &sql, &table_name(t), &mut sink)?,
            Format::Mydumper => {
                sink(crate::mydumper::HEADER.as_bytes())?;
                let mut ins = crate::mydumper::Inserts::new(t);
                let tally = crate::copy::stream_as(w, &sql, &table_name(t), |b, v| ins.row(b, v), &mut sink)?;
                sink(ins.end())?;
                tally
            }
        };
        z.finish()?;
        Ok(())
    })?;
    let crate::copy::Tally { rows, row_sum } = tally;
    let chunk = Chunk { file, range: r, rows, row_sum, bytes, crc32: crc.finalize() };
    Ok((Done { table, seq, chunk }, staged))
}
