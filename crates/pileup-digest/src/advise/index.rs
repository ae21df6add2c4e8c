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

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use pileup_conn::ConnSpec;
use serde_json::Value;

use super::candidates::{self, Candidate, Read};
use super::experiment::{Bar, Standing};
use super::kept::{self, Index, IndexNote, TableName};
use super::plan::Plan;
use super::session::Session;
use super::variants::{self, ident};
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

/// What the copy's reads cost the user's server.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CopyCost {
    pub tables: usize,
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
    /// The index's size on the copy, and its build time there and scaled
    /// to the server's table.
    pub size_bytes: Option<u64>,
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

/// A write class replayed on the copy before and after the build.
#[derive(Clone, Debug, serde::Serialize)]
pub struct WriteCost {
    pub id: String,
    pub runs: usize,
    pub before_ms: Option<f64>,
    pub after_ms: Option<f64>,
    /// After over before (medians), and whether the medians' 95% intervals
    /// are apart (`costlier`, `cheaper`) or not (`within_noise`).
    pub ratio: Option<f64>,
    pub standing: Option<&'static str>,
    pub error: Option<String>,
}

/// Candidates tried per class, at most.
const PER_CLASS: usize = 3;
/// Write classes replayed per table, and runs before and after.
const WRITE_CLASSES: usize = 3;
const WRITE_RUNS: usize = 11;
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
    let _ = srv.conn.query_drop("SET SESSION long_query_time = 31536000");
    let mut indexes: BTreeMap<TableName, Vec<Index>> = BTreeMap::new();
    let planned = plan_classes(&mut srv, top, o, &mut indexes, &mut out);
    if planned.iter().all(|p| p.candidates.is_empty()) {
        out.skipped.get_or_insert_with(|| "no class has an index candidate".into());
        finish_lists(&mut srv, all, &mut indexes, &mut out);
        return Ok(out);
    }
    let mut tables: Vec<TableName> = indexes.keys().cloned().collect();
    tables.dedup();
    progress(&format!("copying {} tables", tables.len()));
    let size = tables.iter().map(|t| table_size(&mut srv, t).unwrap_or(0)).sum();
    let copied = copier.copy(&tables, size, progress).map_err(server_err)?;
    out.copy = Some(copied.cost.clone());
    let mut cp = Session { conn: copied.spec.connect().map_err(|e| server_err(format!("the copy: {e:#}")))? };
    like_the_server(&mut srv, &mut cp, &tables).map_err(server_err)?;
    let scale = scales(&mut srv, &mut cp, &tables);
    for p in planned.iter().filter(|p| !p.candidates.is_empty()) {
        let ct = &mut out.classes[p.at];
        try_class(&mut srv, &mut cp, p, &planned, all, o, &scale, ct, progress);
    }
    finish_lists(&mut srv, all, &mut indexes, &mut out);
    Ok(out)
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
        let db = String::from_utf8_lossy(c.sample.db()).to_lowercase();
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
        let system = |d: &str| ["information_schema", "performance_schema", "mysql", "sys"].contains(&d);
        if let Some(r) = reads.iter().find(|r| system(r.db.as_deref().unwrap_or(&db))) {
            ct.skipped = Some(format!("it reads the server's own {}.{}", r.db.as_deref().unwrap_or(&db), r.table));
            out.classes.push(ct);
            continue;
        }
        for r in &reads {
            let key = (r.db.clone().unwrap_or_else(|| db.clone()), r.table.clone());
            if let std::collections::btree_map::Entry::Vacant(v) = indexes.entry(key.clone()) {
                match kept::indexes(&mut srv.conn, &key.0, &key.1) {
                    Ok(ix) if !ix.is_empty() || table_size(srv, &key).is_some() => {
                        v.insert(ix);
                    }
                    Ok(_) => {}
                    Err(e) => ct.skipped = Some(format!("reading the indexes of {}.{}: {e}", key.0, key.1)),
                }
            }
        }
        let existing = |t: &str| -> Vec<Vec<String>> {
            let r = reads.iter().find(|r| r.table == t);
            let d = r.and_then(|r| r.db.clone()).unwrap_or_else(|| db.clone());
            indexes.get(&(d, t.to_string())).map(|v| v.iter().map(|i| i.columns.clone()).collect()).unwrap_or_default()
        };
        let mut cands = match candidates::candidates(&sql, &existing) {
            Ok(c) => c,
            Err(e) => {
                ct.skipped = Some(e);
                vec![]
            }
        };
        cands.truncate(PER_CLASS);
        if cands.is_empty() && ct.skipped.is_none() {
            ct.skipped = Some("no candidate: the indexes its predicates and order could use exist".into());
        }
        planned.push(Planned { class: c, sql, db, reads, candidates: cands, at: out.classes.len() });
        out.classes.push(ct);
    }
    planned
}

/// A table's data and indexes on the server, bytes; none when the server
/// has no such table.
fn table_size(srv: &mut Session, t: &TableName) -> Option<u64> {
    srv.conn
        .exec_first::<u64, _, _>(
            "SELECT DATA_LENGTH + INDEX_LENGTH FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (&t.0, &t.1),
        )
        .ok()
        .flatten()
}

/// The copy plans with the server's optimizer settings and fresh
/// statistics of its tables.
fn like_the_server(srv: &mut Session, cp: &mut Session, tables: &[TableName]) -> Result<(), String> {
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
        let v: Option<String> = srv.conn.query_first(format!("SELECT @@GLOBAL.{var}")).ok().flatten();
        if let Some(v) = v {
            let quoted = v.replace('\\', "\\\\").replace('\'', "\\'");
            let _ = cp.conn.query_drop(format!("SET GLOBAL {var} = '{quoted}'"));
            let _ = cp.conn.query_drop(format!("SET SESSION {var} = '{quoted}'"));
        }
    }
    for (db, t) in tables {
        cp.conn
            .query_drop(format!("ANALYZE TABLE {}.{}", ident(db), ident(t)))
            .map_err(|e| format!("ANALYZE TABLE on the copy: {}", pileup_conn::plain(&e)))?;
    }
    Ok(())
}

/// Each table's rows on the server (estimate) over its rows on the copy
/// (counted): what a build time on the copy is scaled by.
fn scales(srv: &mut Session, cp: &mut Session, tables: &[TableName]) -> BTreeMap<TableName, f64> {
    let mut out = BTreeMap::new();
    for t in tables {
        let server: Option<u64> = srv
            .conn
            .exec_first(
                "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
                (&t.0, &t.1),
            )
            .ok()
            .flatten();
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
    planned: &[Planned],
    all: &[Class],
    o: &AdviseOptions,
    scale: &BTreeMap<TableName, f64>,
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
        progress(&format!("{}: building ({}) on the copy", ct.id, cand.columns.join(", ")));
        let name = format!("pileup_advise_{k}");
        let t = trial(cp, p, cand, &name, &copy, planned, all, o, scale);
        ct.trials.push(t);
    }
    one_advised(&mut ct.trials);
}

/// Of the candidates settled faster, the one advised: the fewest columns
/// among those whose speed-up is not settled below the best one's.
fn one_advised(trials: &mut [Trial]) {
    let lo = |t: &Trial| t.timing.as_ref().and_then(|v| v.ratio_interval).map_or(0.0, |i| i.0);
    let hi = |t: &Trial| t.timing.as_ref().and_then(|v| v.ratio_interval).map_or(0.0, |i| i.1);
    let best_lo = trials.iter().filter(|t| t.advised).map(lo).fold(0.0, f64::max);
    let pick = trials
        .iter()
        .enumerate()
        .filter(|(_, t)| t.advised && hi(t) >= best_lo)
        .min_by_key(|(_, t)| t.columns.len())
        .map(|(i, _)| i);
    for (i, t) in trials.iter_mut().enumerate() {
        if t.advised && Some(i) != pick {
            t.advised = false;
            t.error.get_or_insert_with(|| "faster too, but another candidate gains as much with fewer columns".into());
        }
    }
}

/// The name to give the index on the server: `ix_` and its columns.
fn index_name(cols: &[String]) -> String {
    let mut n = format!("ix_{}", cols.join("_"));
    n.truncate(64);
    n
}

/// One candidate: the write classes timed, the index built, the statement
/// and the other classes whose plan it changes timed, the writes timed
/// again, and the index dropped.
#[allow(clippy::too_many_arguments)]
fn trial(
    cp: &mut Session,
    p: &Planned,
    cand: &Candidate,
    name: &str,
    base: &Plan,
    planned: &[Planned],
    all: &[Class],
    o: &AdviseOptions,
    scale: &BTreeMap<TableName, f64>,
) -> Trial {
    let db = cand.db.clone().unwrap_or_else(|| p.db.clone());
    let key = (db.clone(), cand.table.clone());
    let full = format!("{}.{}", ident(&db), ident(&cand.table));
    let cols: Vec<String> = cand.columns.iter().map(|c| ident(c)).collect();
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
        build_s: None,
        build_s_full: None,
        others: vec![],
        writes: vec![],
        advised: false,
        alter: format!(
            "ALTER TABLE {full} ADD INDEX {} ({}), ALGORITHM=INPLACE, LOCK=NONE",
            ident(&index_name(&cand.columns)),
            cols.join(", ")
        ),
        error: None,
    };
    let writers = write_classes(all, &key);
    let before: Vec<Result<Vec<f64>, String>> = writers.iter().map(|c| replay(cp, &db, c)).collect();
    let t0 = Instant::now();
    if let Err(e) = cp.conn.query_drop(format!("ALTER TABLE {full} ADD INDEX {} ({})", ident(name), cols.join(", "))) {
        t.error = Some(format!("building it on the copy: {}", pileup_conn::plain(&e)));
        return t;
    }
    let build = t0.elapsed().as_secs_f64();
    t.build_s = Some(build);
    t.build_s_full = scale.get(&key).map(|s| build * s);
    let _ = cp.conn.query_drop(format!("ANALYZE TABLE {full}"));
    t.size_bytes = index_size(cp, &key, name);
    measure_statement(cp, p, cand, name, base, o, &mut t);
    t.others = others(cp, p, cand, name, planned, o);
    let after: Vec<Result<Vec<f64>, String>> = writers.iter().map(|c| replay(cp, &db, c)).collect();
    t.writes = writers.iter().zip(before.into_iter().zip(after)).map(|(c, (b, a))| write_cost(c, b, a, o)).collect();
    let _ = cp.conn.query_drop(format!("ALTER TABLE {full} DROP INDEX {}", ident(name)));
    // Plans name the index as it would be named on the server.
    let shown = index_name(&cand.columns);
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
    let mut a = Advice {
        id: String::new(),
        fingerprint: String::new(),
        skipped: None,
        optimization_ms: None,
        execution_ms: None,
        plan: None,
        rows: None,
        rounds: 0,
        budget_spent: false,
        variants: vec![Variant {
            change: change.into(),
            plan: None,
            same_plan: false,
            standing: None,
            rounds: 0,
            median_ms: None,
            base_median_ms: None,
            ratio: None,
            ratio_interval: None,
            saving_ms: None,
            saving_s_per_hour: None,
            same_rows: None,
            error: None,
        }],
        best: None,
    };
    let bar = Bar {
        ratio: 1.0 + o.min_gain,
        min_ms: o.min_ms,
        min_rounds: o.min_rounds.max(6),
        max_rounds: o.max_rounds.max(o.min_rounds.max(6)),
    };
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

/// The table a write class writes, from its fingerprint.
fn written(fingerprint: &[u8]) -> Option<(Option<String>, String)> {
    let f = String::from_utf8_lossy(fingerprint);
    let rest = ["insert into ", "insert ignore into ", "replace into ", "update ", "delete from "]
        .iter()
        .find_map(|p| f.strip_prefix(p))?;
    let word = rest.split([' ', '(']).next()?.replace('`', "");
    match word.rsplit_once('.') {
        Some((d, t)) => Some((Some(d.to_lowercase()), t.to_lowercase())),
        None => Some((None, word.to_lowercase())),
    }
}

/// The classes writing the table, most time first.
fn write_classes<'a>(all: &'a [Class], t: &TableName) -> Vec<&'a Class> {
    let mut w: Vec<&Class> = all
        .iter()
        .filter(|c| !c.sample.query.is_empty())
        .filter(|c| {
            written(&c.fingerprint).is_some_and(|(d, table)| {
                table == t.1 && d.unwrap_or_else(|| String::from_utf8_lossy(c.sample.db()).to_lowercase()) == t.0
            })
        })
        .collect();
    w.sort_by(|a, b| b.sum(crate::attr::A::QueryTime).total_cmp(&a.sum(crate::attr::A::QueryTime)));
    w.truncate(WRITE_CLASSES);
    w
}

/// A write class's sample run on the copy, each run rolled back.
fn replay(cp: &mut Session, db: &str, c: &Class) -> Result<Vec<f64>, String> {
    let sql = String::from_utf8_lossy(&c.sample.query).into_owned();
    let mut fp = Vec::new();
    pileup_sql::fingerprint(sql.as_bytes(), &mut fp);
    if sql.contains("/*!") || sql.contains("/*M!") || fp.contains(&b';') {
        return Err("not replayed: an executable comment or several statements".into());
    }
    let e = |e: mysql::Error| pileup_conn::plain(&e);
    cp.conn.query_drop(format!("USE {}", ident(db))).map_err(e)?;
    let mut out = vec![];
    for _ in 0..WRITE_RUNS {
        cp.conn.query_drop("START TRANSACTION").map_err(e)?;
        let t0 = Instant::now();
        let r = cp.conn.query_drop(&sql);
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let _ = cp.conn.query_drop("ROLLBACK");
        r.map_err(e)?;
        out.push(ms);
    }
    Ok(out)
}

/// Before and after, as medians with their intervals: costlier (or
/// cheaper) only when the intervals are apart and the difference clears
/// the advisor's gain and floor, since the two blocks run one after the
/// other rather than interleaved.
fn write_cost(
    c: &Class,
    before: Result<Vec<f64>, String>,
    after: Result<Vec<f64>, String>,
    o: &AdviseOptions,
) -> WriteCost {
    let mut w = WriteCost {
        id: crate::report::id(&c.fingerprint),
        runs: 0,
        before_ms: None,
        after_ms: None,
        ratio: None,
        standing: None,
        error: None,
    };
    match (before, after) {
        (Ok(b), Ok(a)) => {
            let (mb, ma) = (pileup_stats::Median::of(&b), pileup_stats::Median::of(&a));
            w.runs = b.len().min(a.len());
            w.before_ms = Some(mb.median);
            w.after_ms = Some(ma.median);
            w.ratio = (mb.median > 0.0).then(|| ma.median / mb.median);
            // Apart only when the intervals are, by the advisor's floors.
            let (gain, floor) = (1.0 + o.min_gain, o.min_ms);
            let apart = (ma.median - mb.median).abs() >= floor;
            w.standing = Some(match (mb.interval, ma.interval) {
                (Some((_, bhi)), Some((alo, _))) if apart && alo > bhi && ma.median >= gain * mb.median => "costlier",
                (Some((blo, _)), Some((_, ahi))) if apart && ahi < blo && mb.median >= gain * ma.median => "cheaper",
                _ => "within_noise",
            });
        }
        (Err(e), _) | (_, Err(e)) => w.error = Some(e),
    }
    w
}

/// The unused and redundant indexes of the tables read.
fn finish_lists(
    srv: &mut Session,
    all: &[Class],
    indexes: &mut BTreeMap<TableName, Vec<Index>>,
    out: &mut IndexAdvice,
) {
    let mut plans = vec![];
    for c in all.iter().filter(|c| !c.sample.query.is_empty()).take(EXPLAINED_MAX) {
        let sql = String::from_utf8_lossy(&c.sample.query).into_owned();
        let explainable = super::refuse(&sql).is_none() || written(&c.fingerprint).is_some();
        if !explainable || sql.contains("/*!") || sql.contains("/*M!") {
            continue;
        }
        let db = String::from_utf8_lossy(c.sample.db()).to_lowercase();
        if !db.is_empty() && srv.conn.query_drop(format!("USE {}", ident(&db))).is_err() {
            continue;
        }
        let plan = if super::refuse(&sql).is_none() { srv.explain(&[], &sql, false) } else { srv.explain_write(&sql) };
        if let Ok(j) = plan {
            plans.push((db, sql, j));
        }
    }
    let used = kept::used(&plans);
    out.unused = kept::unused(indexes, &used, plans.len());
    out.redundant = kept::redundant(indexes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_class_names_its_table() {
        assert_eq!(written(b"insert into t (a, b) values (?+)"), Some((None, "t".into())));
        assert_eq!(written(b"update shop.orders set a = ? where id = ?"), Some((Some("shop".into()), "orders".into())));
        assert_eq!(written(b"delete from t where id = ?"), Some((None, "t".into())));
        assert_eq!(written(b"select * from t"), None);
    }

    #[test]
    fn the_index_is_ignored_on_its_own_table() {
        let sql = "SELECT o.x FROM orders o JOIN items i ON i.o = o.id WHERE i.sku = 5";
        let reads = candidates::tables_read(sql).unwrap();
        let cand = Candidate { table: "items".into(), db: None, columns: vec!["sku".into()], why: String::new() };
        assert_eq!(
            ignoring(sql, &reads, &cand, "pileup_advise_0").unwrap(),
            "SELECT o.x FROM orders o JOIN items i IGNORE INDEX (`pileup_advise_0`) ON i.o = o.id WHERE i.sku = 5"
        );
        assert_eq!(index_name(&["a".into(), "b".into()]), "ix_a_b");
    }
}
