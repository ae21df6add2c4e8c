//! Index advice measured on a copy. MariaDB cannot plan with a
//! hypothetical index, so each candidate ([`candidates`]) is built for
//! real, on a copy of the tables the class reads (made by the caller's
//! [`Copier`]: pileup's dump and load into a sandbox), never on the
//! user's server. Advice is given only when the copy plans the logged
//! statement as the server does; then, with the index built, the
//! statement is timed against itself with the index ignored (`IGNORE
//! INDEX`), in the interleaved rounds of [`super::experiment`], and its
//! rows examined read from `ANALYZE FORMAT=JSON`. The index's size, its
//! build time scaled to the full table, the other top classes whose plan
//! it changes (timed the same way) and the top write classes on the table
//! (replayed and rolled back, before and after the build) go beside it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use pileup_conn::ConnSpec;
use serde_json::Value;

use super::candidates::{self, Candidate, Read};
use super::experiment::Standing;
use super::kept::{self, Index, IndexNote, TableName};
use super::plan::Plan;
use super::session::Session;
use super::variants::{self, ident};
use super::writes::{replay, write_classes, write_cost, Replayed, WriteCost};
use super::{judge, measure, not_run, Advice, AdviseOptions, Variant};
use crate::class::Class;

/// Makes the copy the candidates are built on.
pub trait Copier {
    /// Copy `tables` (database, table; `size` bytes of data and indexes on
    /// the server) into a server of its own and give its endpoint, with
    /// what reading them cost the user's server.
    fn copy(&mut self, tables: &[TableName], size: u64, progress: &mut dyn FnMut(&str)) -> Result<Copied, String>;
}

/// A copy made.
#[derive(Clone, Debug)]
pub struct Copied {
    pub spec: ConnSpec,
    pub cost: CopyCost,
}

/// What the copy cost the user's server: the tables it scanned, the rows
/// and bytes it sent (all, or a sample), and how long.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CopyCost {
    pub tables: usize,
    /// The tables' data and indexes on the server (what it scanned).
    pub scanned_bytes: u64,
    pub rows: u64,
    pub bytes: u64,
    pub seconds: f64,
    /// The share of each table's rows copied (`--sample`), or none for all.
    pub sample: Option<f64>,
    /// How the server was read (threads, lock).
    pub how: String,
}

/// The index advice of one run.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct IndexAdvice {
    /// Why none was tried.
    pub skipped: Option<String>,
    pub copy: Option<CopyCost>,
    pub classes: Vec<ClassTrials>,
    /// Indexes of the tables read that no explained statement of the log
    /// uses, and those another index makes redundant.
    pub unused: Vec<IndexNote>,
    pub redundant: Vec<IndexNote>,
    /// What the reader should know: settings the copy could not take,
    /// tables whose unused indexes are not listed, a run stopped early.
    pub notes: Vec<String>,
}

/// One class's candidates and what each did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ClassTrials {
    pub id: String,
    pub fingerprint: String,
    pub skipped: Option<String>,
    /// The statement's plan on the server and on the copy.
    pub server_plan: Option<String>,
    pub copy_plan: Option<String>,
    pub trials: Vec<Trial>,
}

/// A candidate built on the copy.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Trial {
    /// `db.table` and the index's columns, and why these.
    pub table: String,
    pub columns: Vec<String>,
    pub why: String,
    /// The statement's plan with it, and whether it reads the index.
    pub plan: Option<String>,
    pub chosen: bool,
    /// The statement with the index against the statement with it
    /// ignored: `base_median_ms` is before, `median_ms` after.
    pub timing: Option<Variant>,
    /// Rows examined per run before and after (`ANALYZE`: r_loops × r_rows).
    pub examined_before: Option<f64>,
    pub examined_after: Option<f64>,
    /// The index's size on the copy and scaled to the server's table, and
    /// its build time there and scaled.
    pub size_bytes: Option<u64>,
    pub size_bytes_full: Option<u64>,
    pub build_s: Option<f64>,
    pub build_s_full: Option<f64>,
    /// Other top classes whose plan it changes.
    pub others: Vec<Effect>,
    /// The top write classes on the table, replayed and rolled back.
    pub writes: Vec<WriteCost>,
    /// Settled faster, the same rows, and the copy plans like the server.
    pub advised: bool,
    /// The statement to run on the server.
    pub alter: String,
    pub error: Option<String>,
}

/// Another class's plan changed by the index.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Effect {
    pub id: String,
    pub plan_before: String,
    pub plan_after: String,
    pub timing: Option<Variant>,
}

/// Candidates tried per class, at most.
const PER_CLASS: usize = 3;
/// Statements of the log explained to find the unused indexes, at most.
const EXPLAINED_MAX: usize = 300;

fn server_err(e: impl std::fmt::Display) -> crate::error::Error {
    crate::error::Error::Server(format!("--advise-indexes: {e}"))
}

/// A class's statement and what it reads, with its candidates.
struct Planned<'a> {
    class: &'a Class,
    sql: String,
    db: String,
    reads: Vec<Read>,
    candidates: Vec<Candidate>,
    at: usize,
}

/// Index advice for `top` (in ranking order; `o.classes` of them), from
/// the server `server` reaches and a copy `copier` makes; `all` is every
/// class of the log (write classes, unused indexes).
pub fn advise_indexes(
    server: &ConnSpec,
    top: &[&Class],
    all: &[Class],
    o: &AdviseOptions,
    copier: &mut dyn Copier,
    progress: &mut dyn FnMut(&str),
) -> Result<IndexAdvice, crate::error::Error> {
    let mut srv = Session { conn: server.connect().map_err(|e| server_err(format!("{e:#}")))? };
    let mut out = IndexAdvice::default();
    let (flavor, _) = pileup_conn::flavor(&mut srv.conn).map_err(|e| server_err(format!("{e:#}")))?;
    if flavor != pileup_conn::Flavor::MariaDb {
        out.skipped = Some(super::MARIADB_ONLY.into());
        return Ok(out);
    }
    pileup_conn::keep_out_of_slow_log(&mut srv.conn);
    let mut indexes: BTreeMap<TableName, Vec<Index>> = BTreeMap::new();
    let planned = plan_classes(&mut srv, top, o, &mut indexes, &mut out);
    let tables: Vec<TableName> = indexes.keys().cloned().collect();
    if planned.iter().all(|p| p.candidates.is_empty()) || tables.is_empty() {
        out.skipped.get_or_insert_with(|| "no class has an index candidate".into());
        finish_lists(&mut srv, all, &indexes, &mut out);
        return Ok(out);
    }
    progress(&format!("copying {}", pileup_output::plural(tables.len(), "table", "tables")));
    // What the server scans for the copy: every row, whatever the sample.
    let size = tables.iter().filter_map(|t| table_info(&mut srv, t)).map(|t| t.bytes).sum();
    let copied = match copier.copy(&tables, size, progress) {
        Ok(c) => c,
        Err(e) => {
            out.skipped = Some(format!("no copy to build the candidates on: {e}"));
            finish_lists(&mut srv, all, &indexes, &mut out);
            return Ok(out);
        }
    };
    out.copy = Some(CopyCost { scanned_bytes: size, ..copied.cost.clone() });
    let mut cp = Session { conn: copied.spec.connect().map_err(|e| server_err(format!("the copy: {e:#}")))? };
    out.notes.extend(like_the_server(&mut srv, &mut cp, &tables).map_err(server_err)?);
    let scale = scales(&mut srv, &mut cp, &tables);
    let sampled = copied.cost.sample.is_some();
    for p in planned.iter().filter(|p| !p.candidates.is_empty()) {
        if o.stop.as_ref().is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed)) {
            out.notes.push("stopped: the classes after this one were not tried".into());
            break;
        }
        let ct = &mut out.classes[p.at];
        let cx = Ctx { planned: &planned, all, o, scale: &scale, sampled, indexes: &indexes };
        try_class(&mut srv, &mut cp, p, &cx, ct, progress);
        if ct.skipped.is_some() && srv.conn.ping().is_err() {
            // The trials run on the copy, but each needs the server's plan:
            // the advice so far stands, the rest is not tried.
            let why = ct.skipped.take().unwrap_or_default();
            ct.skipped = Some(format!("the server stopped answering ({why})"));
            out.notes.push(format!("the server stopped answering at {}: the classes after it were not tried", ct.id));
            gone_lists(&indexes, &mut out);
            return Ok(out);
        }
    }
    finish_lists(&mut srv, all, &indexes, &mut out);
    Ok(out)
}

/// The lists once the server is gone: the redundant indexes (read before),
/// and a note that the unused ones cannot be told.
fn gone_lists(indexes: &BTreeMap<TableName, Vec<Index>>, out: &mut IndexAdvice) {
    out.notes.push(
        "unused indexes not listed: the server stopped answering before the log's statements were explained".into(),
    );
    out.redundant = kept::redundant(indexes);
}

/// What every trial reads: the classes planned, every class of the log,
/// the options, each table's rows on the server over the copy's, and
/// whether the copy is a sample.
struct Ctx<'a> {
    planned: &'a [Planned<'a>],
    all: &'a [Class],
    o: &'a AdviseOptions,
    scale: &'a BTreeMap<TableName, f64>,
    sampled: bool,
    indexes: &'a BTreeMap<TableName, Vec<Index>>,
}

/// Each top class's statement, the tables it reads and its candidates;
/// the tables' indexes read into `indexes`.
fn plan_classes<'a>(
    srv: &mut Session,
    top: &[&'a Class],
    o: &AdviseOptions,
    indexes: &mut BTreeMap<TableName, Vec<Index>>,
    out: &mut IndexAdvice,
) -> Vec<Planned<'a>> {
    let mut planned = vec![];
    for c in top.iter().take(o.classes) {
        let sql = String::from_utf8_lossy(&c.sample.query).into_owned();
        let db = String::from_utf8_lossy(c.sample.db()).into_owned();
        let mut ct = ClassTrials {
            id: crate::report::id(&c.fingerprint),
            fingerprint: String::from_utf8_lossy(&c.fingerprint).into_owned(),
            skipped: None,
            server_plan: None,
            copy_plan: None,
            trials: vec![],
        };
        let reads = match not_run(srv, c, &sql).map_or_else(|| candidates::tables_read(&sql), Err) {
            Ok(r) => r,
            Err(why) => {
                ct.skipped = Some(why);
                out.classes.push(ct);
                continue;
            }
        };
        if let Some(why) = unreadable(srv, &reads, &db, indexes) {
            ct.skipped = Some(why);
            out.classes.push(ct);
            continue;
        }
        // The B-tree indexes over whole columns: what a candidate would be.
        let existing = |t: &str| -> Vec<Vec<String>> {
            let r = reads.iter().find(|r| r.table == t);
            let d = r.and_then(|r| r.db.clone()).unwrap_or_else(|| db.clone());
            let ixs = indexes.get(&(d, t.to_string()));
            ixs.map(|v| v.iter().filter(|i| i.plain).map(|i| i.columns.clone()).collect()).unwrap_or_default()
        };
        let mut cands = match candidates::candidates(&sql, &existing) {
            Ok(c) => c,
            Err(e) => {
                ct.skipped = Some(e);
                vec![]
            }
        };
        // Only on the tables the copy will hold (base tables the server has).
        cands.retain(|c| indexes.contains_key(&(c.db.clone().unwrap_or_else(|| db.clone()), c.table.clone())));
        cands.truncate(PER_CLASS);
        if cands.is_empty() && ct.skipped.is_none() {
            ct.skipped = Some("no candidate: the indexes its predicates and order could use exist".into());
        }
        planned.push(Planned { class: c, sql, db, reads, candidates: cands, at: out.classes.len() });
        out.classes.push(ct);
    }
    planned
}

/// Why the class's tables cannot be copied: the statement reads the
/// server's own schemas, names no database where the log gives none, or
/// reads what is not a base table there (a view, a temporary table, a
/// CTE). Otherwise their indexes are read into `indexes`.
fn unreadable(
    srv: &mut Session,
    reads: &[Read],
    db: &str,
    indexes: &mut BTreeMap<TableName, Vec<Index>>,
) -> Option<String> {
    for r in reads {
        let Some(d) = r.db.clone().or_else(|| (!db.is_empty()).then(|| db.to_string())) else {
            return Some(format!("the log does not say which database {} is in", r.table));
        };
        if ["information_schema", "performance_schema", "mysql", "sys"].contains(&d.to_lowercase().as_str()) {
            return Some(format!("it reads the server's own {d}.{}", r.table));
        }
        let key = (d, r.table.clone());
        if indexes.contains_key(&key) {
            continue;
        }
        if !table_info(srv, &key).is_some_and(|t| t.base) {
            return Some(format!(
                "it reads {}.{}, which is not a base table on the server (a view, a temporary table or a CTE)",
                key.0, key.1
            ));
        }
        match kept::indexes(&mut srv.conn, &key.0, &key.1) {
            Ok(ix) => {
                indexes.insert(key, ix);
            }
            Err(e) => return Some(format!("reading the indexes of {}.{}: {e}", key.0, key.1)),
        }
    }
    None
}

/// A table on the server: whether it is a base table, its data and
/// indexes in bytes and its rows (estimates).
struct TableInfo {
    base: bool,
    bytes: u64,
    rows: u64,
}

/// What the server says of `t`; none when it has no such table.
fn table_info(srv: &mut Session, t: &TableName) -> Option<TableInfo> {
    let r: Option<(String, Option<u64>, Option<u64>)> = srv
        .conn
        .exec_first(
            "SELECT TABLE_TYPE, DATA_LENGTH + INDEX_LENGTH, TABLE_ROWS FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (&t.0, &t.1),
        )
        .ok()
        .flatten();
    r.map(|(kind, bytes, rows)| TableInfo {
        base: kind == "BASE TABLE",
        bytes: bytes.unwrap_or(0),
        rows: rows.unwrap_or(0),
    })
}

/// The copy plans with the server's optimizer settings and fresh
/// statistics of its tables; the settings it could not take are returned
/// (a flag the copy's server does not know).
fn like_the_server(srv: &mut Session, cp: &mut Session, tables: &[TableName]) -> Result<Vec<String>, String> {
    let mut notes = vec![];
    for var in [
        "optimizer_switch",
        "optimizer_use_condition_selectivity",
        "optimizer_search_depth",
        "optimizer_prune_level",
        "eq_range_index_dive_limit",
        "use_stat_tables",
        "join_cache_level",
        "in_predicate_conversion_threshold",
        "optimizer_max_sel_arg_weight",
    ] {
        let Ok(Some(v)) = srv.conn.query_first::<mysql::Value, _>(format!("SELECT @@GLOBAL.{var}")) else { continue };
        // Numbers as numbers: a quoted one is refused for a numeric variable.
        let value = match v {
            mysql::Value::Int(_) | mysql::Value::UInt(_) => v.as_sql(false),
            mysql::Value::Bytes(b) => {
                let text = String::from_utf8_lossy(&b);
                match text.parse::<f64>() {
                    Ok(_) => text.into_owned(),
                    Err(_) => format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'")),
                }
            }
            _ => continue,
        };
        let set = format!("SET GLOBAL {var} = {value}");
        match cp.conn.query_drop(&set) {
            Ok(()) => {
                let _ = cp.conn.query_drop(format!("SET SESSION {var} = {value}"));
            }
            Err(e) => notes.push(format!("the copy did not take the server's {var}: {}", pileup_conn::plain(&e))),
        }
    }
    for (db, t) in tables {
        cp.conn
            .query_drop(format!("ANALYZE TABLE {}.{}", ident(db), ident(t)))
            .map_err(|e| format!("ANALYZE TABLE on the copy: {}", pileup_conn::plain(&e)))?;
    }
    Ok(notes)
}

/// Each table's rows on the server (estimate) over its rows on the copy
/// (counted): what a build time and a size on the copy are scaled by.
fn scales(srv: &mut Session, cp: &mut Session, tables: &[TableName]) -> BTreeMap<TableName, f64> {
    let mut out = BTreeMap::new();
    for t in tables {
        let server = table_info(srv, t).map(|i| i.rows);
        let copy: Option<u64> =
            cp.conn.query_first(format!("SELECT COUNT(*) FROM {}.{}", ident(&t.0), ident(&t.1))).ok().flatten();
        if let (Some(s), Some(c)) = (server, copy) {
            if c > 0 {
                out.insert(t.clone(), (s as f64 / c as f64).max(1.0));
            }
        }
    }
    out
}

/// The class's plan on the server and on the copy; when they match, each
/// candidate built, measured and dropped.
#[allow(clippy::too_many_arguments)]
fn try_class(
    srv: &mut Session,
    cp: &mut Session,
    p: &Planned,
    cx: &Ctx,
    ct: &mut ClassTrials,
    progress: &mut dyn FnMut(&str),
) {
    let used = |s: &mut Session| -> Result<Plan, String> {
        if !p.db.is_empty() {
            s.conn.query_drop(format!("USE {}", ident(&p.db))).map_err(|e| pileup_conn::plain(&e))?;
        }
        s.explain(&[], &p.sql, false).map(|j| Plan::of(&j))
    };
    let (server, copy) = match (used(srv), used(cp)) {
        (Ok(s), Ok(c)) => (s, c),
        (Err(e), _) | (_, Err(e)) => {
            ct.skipped = Some(format!("EXPLAIN failed: {e}"));
            return;
        }
    };
    ct.server_plan = Some(server.line());
    ct.copy_plan = Some(copy.line());
    if server != copy {
        ct.skipped = Some(
            "the copy plans the statement otherwise than the server: no index is advised from it (a sample changes \
             the statistics; copy every row)"
                .into(),
        );
        return;
    }
    for (k, cand) in p.candidates.iter().enumerate() {
        if cx.o.stop.as_ref().is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed)) {
            break;
        }
        progress(&format!("{}: building ({}) on the copy", ct.id, cand.columns.join(", ")));
        let name = format!("pileup_advise_{k}");
        let t = trial(cp, p, cand, &name, &copy, cx);
        ct.trials.push(t);
    }
    one_advised(&mut ct.trials, cx.o);
}

/// Of the candidates settled faster, the one advised: the fewest columns
/// among those the best one (the largest saving) does not beat by the
/// advisor's own bar, a saving larger by `--advise-min-ms` and a speed-up
/// whose interval clears this one's by `--advise-min-gain`. A covering
/// index that saves a few lookups more is not worth its columns.
fn one_advised(trials: &mut [Trial], o: &AdviseOptions) {
    let fig = |t: &Trial| {
        let v = t.timing.as_ref();
        let saving = v.and_then(|v| v.saving_ms).unwrap_or(0.0);
        let ratio = v.and_then(|v| v.ratio).unwrap_or(1.0);
        let lo = v.and_then(|v| v.ratio_interval).map_or(0.0, |i| i.0);
        (saving, ratio, lo)
    };
    let Some(best) = trials.iter().filter(|t| t.advised).max_by(|a, b| fig(a).0.total_cmp(&fig(b).0)) else {
        return;
    };
    let (best_saving, _, best_lo) = fig(best);
    let beaten = |t: &Trial| {
        let (saving, ratio, _) = fig(t);
        best_saving - saving >= o.min_ms && best_lo >= ratio * (1.0 + o.min_gain)
    };
    let pick = trials
        .iter()
        .enumerate()
        .filter(|(_, t)| t.advised && !beaten(t))
        .min_by_key(|(_, t)| t.columns.len())
        .map(|(i, _)| i);
    for (i, t) in trials.iter_mut().enumerate() {
        if t.advised && Some(i) != pick {
            t.advised = false;
            t.error.get_or_insert_with(|| {
                "faster too, but another candidate gains as much (within the advisor's bar) with fewer columns".into()
            });
        }
    }
}

/// The name to give the index on the server: `ix_` and its columns.
fn index_name(cols: &[String], taken: &[Index]) -> String {
    // 64 characters at most (a name's limit), cut on a character.
    let base: String = format!("ix_{}", cols.join("_")).chars().take(60).collect();
    let mut n = base.clone();
    let mut k = 2;
    while taken.iter().any(|i| i.name.eq_ignore_ascii_case(&n)) {
        n = format!("{base}_{k}");
        k += 1;
    }
    n
}

/// One candidate: the write classes timed, the index built, the statement
/// and the other classes whose plan it changes timed, the writes timed
/// again, and the index dropped.
fn trial(cp: &mut Session, p: &Planned, cand: &Candidate, name: &str, base: &Plan, cx: &Ctx) -> Trial {
    let db = cand.db.clone().unwrap_or_else(|| p.db.clone());
    let key = (db.clone(), cand.table.clone());
    let full = format!("{}.{}", ident(&db), ident(&cand.table));
    let cols: Vec<String> = cand.columns.iter().map(|c| ident(c)).collect();
    let shown = index_name(&cand.columns, cx.indexes.get(&key).map_or(&[][..], |v| v.as_slice()));
    let mut t = Trial {
        table: format!("{db}.{}", cand.table),
        columns: cand.columns.clone(),
        why: cand.why.clone(),
        plan: None,
        chosen: false,
        timing: None,
        examined_before: None,
        examined_after: None,
        size_bytes: None,
        size_bytes_full: None,
        build_s: None,
        build_s_full: None,
        others: vec![],
        writes: vec![],
        advised: false,
        alter: format!(
            "ALTER TABLE {full} ADD INDEX {} ({}), ALGORITHM=INPLACE, LOCK=NONE",
            ident(&shown),
            cols.join(", ")
        ),
        error: None,
    };
    let writers = write_classes(cx.all, &key);
    let before: Vec<Replayed> = writers.iter().map(|c| replay(cp, &db, c)).collect();
    let t0 = Instant::now();
    if let Err(e) = cp.conn.query_drop(format!("ALTER TABLE {full} ADD INDEX {} ({})", ident(name), cols.join(", "))) {
        t.error = Some(format!("building it on the copy: {}", pileup_conn::plain(&e)));
        return t;
    }
    let build = t0.elapsed().as_secs_f64();
    let scale = cx.scale.get(&key).copied();
    t.build_s = Some(build);
    t.build_s_full = scale.map(|s| build * s);
    let _ = cp.conn.query_drop(format!("ANALYZE TABLE {full}"));
    t.size_bytes = index_size(cp, &key, name);
    t.size_bytes_full = t.size_bytes.zip(scale).map(|(b, s)| (b as f64 * s) as u64);
    measure_statement(cp, p, cand, name, base, cx.o, &mut t);
    if cx.sampled {
        // A sample's saving is not the server's: no rate is put on it.
        if let Some(v) = t.timing.as_mut() {
            v.saving_s_per_hour = None;
        }
    }
    t.others = others(cp, p, cand, name, cx.planned, cx.o);
    let after: Vec<Replayed> = writers.iter().map(|c| replay(cp, &db, c)).collect();
    t.writes = writers.iter().zip(before.into_iter().zip(after)).map(|(c, (b, a))| write_cost(c, b, a, cx.o)).collect();
    let _ = cp.conn.query_drop(format!("ALTER TABLE {full} DROP INDEX {}", ident(name)));
    // Plans name the index as it would be named on the server.
    t.plan = t.plan.map(|p| p.replace(name, &shown));
    for e in &mut t.others {
        e.plan_after = e.plan_after.replace(name, &shown);
    }
    t.advised = t.chosen
        && t.timing.as_ref().is_some_and(|v| v.standing == Some(Standing::Faster) && v.same_rows == Some(true));
    t
}

/// The statement with the index against the statement with it ignored.
fn measure_statement(
    cp: &mut Session,
    p: &Planned,
    cand: &Candidate,
    name: &str,
    base: &Plan,
    o: &AdviseOptions,
    t: &mut Trial,
) {
    let _ = cp.conn.query_drop(format!("USE {}", ident(&p.db)));
    let after = match cp.explain(&[], &p.sql, false) {
        Ok(j) => Plan::of(&j),
        Err(e) => {
            t.error = Some(format!("EXPLAIN with the index: {e}"));
            return;
        }
    };
    t.plan = Some(after.line());
    t.chosen = after.0.iter().any(|s| s.key.as_deref() == Some(name) || s.rowid_filter.as_deref() == Some(name));
    if !t.chosen {
        return;
    }
    let Some(ignored) = ignoring(&p.sql, &p.reads, cand, name) else {
        t.error = Some("the table could not be found in the statement's FROM clause to compare without it".into());
        return;
    };
    match cp.explain(&[], &ignored, false).map(|j| Plan::of(&j)) {
        Ok(b) if b == *base => {}
        Ok(b) => {
            t.error = Some(format!("with the index ignored the copy plans {} (not the server's plan)", b.line()));
            return;
        }
        Err(e) => {
            t.error = Some(format!("EXPLAIN with the index ignored: {e}"));
            return;
        }
    }
    t.examined_before = examined(cp, &ignored);
    t.examined_after = examined(cp, &p.sql);
    t.timing = Some(timed(cp, &ignored, &p.sql, "with the index", p.class, o, o.budget));
}

/// Time `sql` (after) against `before` in interleaved rounds within
/// `budget`: the variant's figures.
fn timed(
    cp: &mut Session,
    before: &str,
    sql: &str,
    change: &str,
    c: &Class,
    o: &AdviseOptions,
    budget: Duration,
) -> Variant {
    let vs = [variants::Variant { change: change.into(), setup: vec![], sql: sql.into() }];
    let mut a = Advice::of(c, vec![Variant::untimed(change.into(), None, false, None)]);
    let bar = o.bar();
    let e = measure(cp, before, &vs, &[0], &bar, budget, &mut a);
    if let Some(why) = a.skipped.take() {
        a.variants[0].error.get_or_insert(why);
    } else {
        judge(&mut a, &e, &[0], &bar, c, o);
    }
    a.variants.remove(0)
}

/// The statement with `IGNORE INDEX (name)` on the candidate's table.
fn ignoring(sql: &str, reads: &[Read], cand: &Candidate, name: &str) -> Option<String> {
    let known: Vec<&str> = reads.iter().filter(|r| r.table == cand.table).map(|r| r.known.as_str()).collect();
    let refs = pileup_sql::table_refs(sql);
    let r = refs.iter().find(|r| known.iter().any(|k| r.plan_name(sql).eq_ignore_ascii_case(k)))?;
    Some(format!("{} IGNORE INDEX ({}){}", &sql[..r.hint_at], ident(name), &sql[r.hint_at..]))
}

/// Rows examined by one run: each table's loops times rows per loop, from
/// `ANALYZE FORMAT=JSON`.
fn examined(cp: &mut Session, sql: &str) -> Option<f64> {
    fn walk(v: &Value, sum: &mut f64) {
        match v {
            Value::Object(m) => {
                if m.contains_key("table_name") {
                    let f = |k: &str| m.get(k).and_then(Value::as_f64);
                    if let (Some(l), Some(r)) = (f("r_loops"), f("r_rows")) {
                        *sum += l * r;
                    }
                }
                m.values().for_each(|x| walk(x, sum));
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, sum)),
            _ => {}
        }
    }
    let j = cp.explain(&[], sql, true).ok()?;
    let mut sum = 0.0;
    walk(&j, &mut sum);
    Some(sum)
}

/// The index's size on the copy (InnoDB's persistent statistics).
fn index_size(cp: &mut Session, t: &TableName, name: &str) -> Option<u64> {
    cp.conn
        .exec_first(
            "SELECT s.stat_value * @@innodb_page_size FROM mysql.innodb_index_stats s \
             WHERE s.database_name = ? AND s.table_name = ? AND s.index_name = ? AND s.stat_name = 'size'",
            (&t.0, &t.1, name),
        )
        .ok()
        .flatten()
}

/// The other top classes reading the table whose plan the index changes,
/// each timed against itself with the index ignored.
fn others(
    cp: &mut Session,
    p: &Planned,
    cand: &Candidate,
    name: &str,
    planned: &[Planned],
    o: &AdviseOptions,
) -> Vec<Effect> {
    let mut out = vec![];
    for q in planned.iter().filter(|q| !std::ptr::eq(q.class, p.class)) {
        let same_table = q.reads.iter().any(|r| {
            r.table == cand.table
                && r.db.clone().unwrap_or_else(|| q.db.clone()) == cand.db.clone().unwrap_or_else(|| p.db.clone())
        });
        let Some(ignored) = ignoring(&q.sql, &q.reads, cand, name).filter(|_| same_table) else { continue };
        let _ = cp.conn.query_drop(format!("USE {}", ident(&q.db)));
        let (Ok(before), Ok(after)) = (cp.explain(&[], &ignored, false), cp.explain(&[], &q.sql, false)) else {
            continue;
        };
        let (before, after) = (Plan::of(&before), Plan::of(&after));
        if before == after {
            continue;
        }
        let timing = timed(cp, &ignored, &q.sql, "with the index", q.class, o, o.budget / 4);
        out.push(Effect {
            id: crate::report::id(&q.class.fingerprint),
            plan_before: before.line(),
            plan_after: after.line(),
            timing: Some(timing),
        });
    }
    let _ = cp.conn.query_drop(format!("USE {}", ident(&p.db)));
    out
}

/// The unused and redundant indexes of the tables read. Unused: every
/// statement of the log that names a table (up to [`EXPLAINED_MAX`]) is
/// explained on the server (`EXPLAIN` runs nothing; a write's in a
/// transaction rolled back all the same); a table some of whose statements
/// could not be explained, or whose plan names what cannot be told, lists
/// no unused index, and a note says so.
fn finish_lists(srv: &mut Session, all: &[Class], indexes: &BTreeMap<TableName, Vec<Index>>, out: &mut IndexAdvice) {
    let known: BTreeSet<kept::Key> = indexes.keys().map(|(d, t)| (d.to_lowercase(), t.to_lowercase())).collect();
    let mut used = BTreeSet::new();
    let mut explained: BTreeMap<kept::Key, usize> = BTreeMap::new();
    let mut incomplete: BTreeSet<kept::Key> = BTreeSet::new();
    let mut seen = 0;
    for c in all.iter() {
        let fp = String::from_utf8_lossy(&c.fingerprint);
        // Statements that read or write rows (SHOW, ANALYZE, DDL use no index).
        let verb = fp.trim_start_matches('(').split([' ', '(']).next().unwrap_or("");
        if !["select", "with", "insert", "replace", "update", "delete"].contains(&verb) {
            continue;
        }
        let named: Vec<&kept::Key> = known.iter().filter(|k| kept::names(&fp, &k.1)).collect();
        if named.is_empty() {
            continue;
        }
        seen += 1;
        let plan = (seen <= EXPLAINED_MAX).then(|| explain_any(srv, c, verb, &fp)).flatten();
        let Some((db, sql, plan)) = plan else {
            if seen <= EXPLAINED_MAX && srv.conn.ping().is_err() {
                return gone_lists(indexes, out);
            }
            incomplete.extend(named.into_iter().cloned());
            continue;
        };
        let (reads, unresolved) = kept::plan_reads(&db, &sql, &plan, &known);
        for k in named {
            *explained.entry(k.clone()).or_default() += 1;
            if unresolved {
                incomplete.insert(k.clone());
            }
        }
        used.extend(reads);
    }
    out.unused = kept::unused(indexes, &used, &explained, &incomplete);
    let left: Vec<String> = incomplete.iter().map(|(d, t)| format!("{d}.{t}")).collect();
    if !left.is_empty() {
        out.notes.push(format!(
            "unused indexes not listed for {}: a statement naming it could not be explained or read",
            left.join(", ")
        ));
    }
    out.redundant = kept::redundant(indexes);
}

/// A class's sample explained on the server, with its database and text:
/// reads and writes alike (`verb`, from the class's fingerprint `fp`),
/// never several statements or an executable comment.
fn explain_any(srv: &mut Session, c: &Class, verb: &str, fp: &str) -> Option<(String, String, Value)> {
    let sql = String::from_utf8_lossy(&c.sample.query).into_owned();
    if sql.trim().is_empty() || sql.contains("/*!") || sql.contains("/*M!") || fp.contains(';') {
        return None;
    }
    let db = String::from_utf8_lossy(c.sample.db()).into_owned();
    if !db.is_empty() && srv.conn.query_drop(format!("USE {}", ident(&db))).is_err() {
        return None;
    }
    let plan = match verb {
        "select" | "with" => srv.explain(&[], &sql, false),
        "insert" | "replace" | "update" | "delete" => srv.explain_write(&sql),
        _ => return None,
    };
    plan.ok().map(|j| (db, sql, j))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_is_ignored_on_its_own_table() {
        let sql = "SELECT o.x FROM orders o JOIN items i ON i.o = o.id WHERE i.sku = 5";
        let reads = candidates::tables_read(sql).unwrap();
        let cand = Candidate { table: "items".into(), db: None, columns: vec!["sku".into()], why: String::new() };
        assert_eq!(
            ignoring(sql, &reads, &cand, "pileup_advise_0").unwrap(),
            "SELECT o.x FROM orders o JOIN items i IGNORE INDEX (`pileup_advise_0`) ON i.o = o.id WHERE i.sku = 5"
        );
        assert_eq!(index_name(&["a".into(), "b".into()], &[]), "ix_a_b");
        // A name the table has already is not reused; a long one is cut
        // on a character.
        let taken = [kept::Index { name: "IX_A_B".into(), unique: false, columns: vec!["x".into()], plain: true }];
        assert_eq!(index_name(&["a".into(), "b".into()], &taken), "ix_a_b_2");
        let long = index_name(&["é".repeat(40)], &[]);
        assert!(long.chars().count() <= 60 && long.starts_with("ix_é"));
    }
}
