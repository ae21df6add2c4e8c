//! The plan advisor: for the top classes, run the sample on a server the
//! user names (a replica or a copy) with `ANALYZE FORMAT=JSON`, split its
//! time into optimization and execution, and where optimization dominates
//! or rows examined per row returned is high, time variants of it — FORCE
//! INDEX on the index chosen and on each other candidate, IGNORE INDEX on
//! each other candidate, a session `eq_range_index_dive_limit`,
//! `optimizer_switch` flags — each against the statement as logged, in
//! alternating runs, medians; keep a variant only when it returns the same
//! rows (checksum).
//!
//! It runs only `SELECT`s that neither lock nor write (refused: `FOR
//! UPDATE`, `LOCK IN SHARE MODE`, `FOR SHARE`, `INTO`, `GET_LOCK`,
//! `SLEEP`…), inside a read-only transaction, each bounded by the
//! connection's statement time limit, and changes only its own session.

use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use pileup_conn::ConnSpec;

use crate::class::Class;
use crate::rank;

/// How to advise.
#[derive(Clone, Debug)]
pub struct AdviseOptions {
    /// Classes, from the top of the ranking, whose samples are examined.
    pub classes: usize,
    /// Timed runs of the statement and of each variant.
    pub runs: usize,
    /// Variants are tried when the optimizer's share of the time is at
    /// least this (0..1)…
    pub optimizer_share: f64,
    /// …or rows examined per row returned at least this.
    pub examined_per_row: f64,
}

impl Default for AdviseOptions {
    fn default() -> Self {
        AdviseOptions { classes: 5, runs: 5, optimizer_share: 0.5, examined_per_row: 100.0 }
    }
}

/// One variant, measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Variant {
    /// What changes, as a user would write it (`FROM dive FORCE INDEX (b)`,
    /// `SET SESSION eq_range_index_dive_limit = 10`).
    pub change: String,
    /// Median wall time of a run, milliseconds (statement and its rows).
    pub median_ms: f64,
    /// The statement's median divided by this one's.
    pub gain: f64,
    /// The same rows as the statement as logged.
    pub same_rows: bool,
    /// From its ANALYZE: optimization and execution, milliseconds.
    pub optimization_ms: Option<f64>,
    pub execution_ms: Option<f64>,
    /// The index the plan chose.
    pub key: Option<String>,
    /// When it could not be run.
    pub error: Option<String>,
}

/// What the advisor found for one class.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Advice {
    pub id: String,
    pub fingerprint: String,
    /// Why no variant was tried, when none was.
    pub skipped: Option<String>,
    pub optimization_ms: Option<f64>,
    pub execution_ms: Option<f64>,
    /// Tables read and the index chosen for each.
    pub plan: Vec<(String, Option<String>)>,
    pub rows: Option<usize>,
    pub median_ms: Option<f64>,
    pub variants: Vec<Variant>,
    /// Index into `variants` of the fastest that returned the same rows and
    /// gained at least 10%.
    pub best: Option<usize>,
}

/// Why a statement is not run: it is not a plain read.
pub fn refuse(sql: &str) -> Option<&'static str> {
    // The fingerprint drops comments, but the server runs executable ones.
    if sql.contains("/*!") || sql.contains("/*M!") {
        return Some("it holds an executable comment");
    }
    let mut fp = Vec::new();
    pileup_sql::fingerprint(sql.as_bytes(), &mut fp);
    let fp = String::from_utf8_lossy(&fp);
    if !(fp.starts_with("select ") || fp.starts_with("(select ")) {
        return Some("not a SELECT");
    }
    if fp.contains(';') {
        return Some("it is several statements");
    }
    for (needle, why) in [
        (" for update", "it locks rows (FOR UPDATE)"),
        (" lock in share mode", "it locks rows (LOCK IN SHARE MODE)"),
        (" for share", "it locks rows (FOR SHARE)"),
        (" into ", "it writes (INTO)"),
        ("get_lock(", "it takes a user lock"),
        ("release_lock(", "it releases a user lock"),
        ("release_all_locks(", "it releases user locks"),
        ("sleep(", "it sleeps"),
        ("benchmark(", "it runs BENCHMARK()"),
        ("nextval(", "it advances a sequence"),
        ("next value for", "it advances a sequence"),
        ("setval(", "it sets a sequence"),
        ("master_pos_wait(", "it waits for replication"),
        ("source_pos_wait(", "it waits for replication"),
        ("master_gtid_wait(", "it waits for replication"),
        ("wait_for_executed_gtid_set(", "it waits for replication"),
        ("wait_until_sql_thread_after_gtids(", "it waits for replication"),
        ("is_free_lock(", "it inspects user locks"),
        ("is_used_lock(", "it inspects user locks"),
    ] {
        if fp.contains(needle) {
            return Some(why);
        }
    }
    None
}

/// Rows' checksum: order-independent unless the statement orders them.
fn checksum(rows: &[mysql::Row], ordered: bool) -> u64 {
    let mut hs: Vec<u64> = rows
        .iter()
        .map(|r| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            for v in r.clone().unwrap() {
                v.as_sql(false).hash(&mut h);
            }
            h.finish()
        })
        .collect();
    if !ordered {
        hs.sort_unstable();
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    hs.hash(&mut h);
    h.finish()
}

/// A session and the statement run on it.
struct Session {
    conn: mysql::Conn,
}

impl Session {
    /// In a read-only transaction, with `setup` applied to the session for
    /// this run only: whatever fails, the transaction is rolled back and
    /// the settings put back.
    fn within<T>(
        &mut self,
        setup: &[String],
        f: impl FnOnce(&mut mysql::Conn) -> Result<T, String>,
    ) -> Result<T, String> {
        let r =
            self.conn.query_drop("START TRANSACTION READ ONLY").map_err(|e| pileup_conn::plain(&e)).and_then(|()| {
                for s in setup {
                    self.conn.query_drop(s).map_err(|e| pileup_conn::plain(&e))?;
                }
                f(&mut self.conn)
            });
        let _ = self.conn.query_drop("ROLLBACK");
        self.reset(setup);
        r
    }

    /// One timed run: milliseconds, rows, their checksum (in order when
    /// `ordered`).
    fn run(&mut self, setup: &[String], sql: &str, ordered: bool) -> Result<(f64, usize, u64), String> {
        self.within(setup, |c| {
            let t0 = Instant::now();
            let rows: Vec<mysql::Row> = c.query(sql).map_err(|e| pileup_conn::plain(&e))?;
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            Ok((ms, rows.len(), checksum(&rows, ordered)))
        })
    }

    /// Undo a variant's session settings.
    fn reset(&mut self, setup: &[String]) {
        for s in setup {
            if let Some(var) = s.strip_prefix("SET SESSION ").and_then(|r| r.split_once(" = ")).map(|(v, _)| v) {
                let _ = self.conn.query_drop(format!("SET SESSION {var} = DEFAULT"));
            }
        }
    }

    fn analyze(&mut self, setup: &[String], sql: &str) -> Result<serde_json::Value, String> {
        let text = self.within(setup, |c| {
            let r: Option<String> =
                c.query_first(format!("ANALYZE FORMAT=JSON {sql}")).map_err(|e| pileup_conn::plain(&e))?;
            r.ok_or_else(|| "ANALYZE returned nothing".to_string())
        })?;
        serde_json::from_str(&text).map_err(|e| format!("ANALYZE FORMAT=JSON: {e}"))
    }
}

/// Does the statement order its rows (so a variant must return them in the
/// same order)?
fn is_ordered(sql: &str) -> bool {
    let mut fp = Vec::new();
    pileup_sql::fingerprint(sql.as_bytes(), &mut fp);
    String::from_utf8_lossy(&fp).contains(" order by ")
}

/// A table a plan reads: (name, the index chosen, the indexes it could use).
pub type TableRead = (String, Option<String>, Vec<String>);

/// Optimization and execution milliseconds, and each table with its chosen
/// index and the indexes it could use, from `ANALYZE FORMAT=JSON`.
pub fn split(j: &serde_json::Value) -> (Option<f64>, Option<f64>, Vec<TableRead>) {
    fn tables(v: &serde_json::Value, out: &mut Vec<TableRead>) {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(t) = m.get("table_name").and_then(|t| t.as_str()) {
                    let keys = m
                        .get("possible_keys")
                        .and_then(|p| p.as_array())
                        .map(|a| a.iter().filter_map(|k| k.as_str().map(String::from)).collect())
                        .unwrap_or_default();
                    out.push((t.to_string(), m.get("key").and_then(|k| k.as_str()).map(String::from), keys));
                }
                for x in m.values() {
                    tables(x, out);
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| tables(x, out)),
            _ => {}
        }
    }
    let opt = j.pointer("/query_optimization/r_total_time_ms").and_then(|v| v.as_f64());
    let exec = j.pointer("/query_block/r_total_time_ms").and_then(|v| v.as_f64());
    let mut t = vec![];
    tables(j, &mut t);
    (opt, exec, t)
}

fn ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// Advise on `classes` (in ranking order) on the server `spec` reaches.
/// `progress` hears what is being measured.
pub fn advise(
    spec: &ConnSpec,
    classes: &[&Class],
    o: &AdviseOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Advice>, crate::error::Error> {
    let conn = spec.connect().map_err(|e| crate::error::Error::Server(format!("--advise: {e:#}")))?;
    let mut s = Session { conn };
    let (flavor, _) =
        pileup_conn::flavor(&mut s.conn).map_err(|e| crate::error::Error::Server(format!("--advise: {e:#}")))?;
    let mut out = vec![];
    for c in classes.iter().take(o.classes) {
        out.push(advise_one(&mut s, flavor, c, o, progress));
    }
    Ok(out)
}

/// What one class's statement does, and which variant of it (if any) runs
/// faster with the same rows.
fn advise_one(
    s: &mut Session,
    flavor: pileup_conn::Flavor,
    c: &Class,
    o: &AdviseOptions,
    progress: &mut dyn FnMut(&str),
) -> Advice {
    let sql = String::from_utf8_lossy(&c.sample.query).into_owned();
    let mut a = Advice {
        id: crate::report::id(&c.fingerprint),
        fingerprint: String::from_utf8_lossy(&c.fingerprint).into_owned(),
        skipped: None,
        optimization_ms: None,
        execution_ms: None,
        plan: vec![],
        rows: None,
        median_ms: None,
        variants: vec![],
        best: None,
    };
    if sql.trim().is_empty() {
        a.skipped = Some("no sample statement (performance_schema on MariaDB keeps only the digest)".into());
        return a;
    }
    if let Some(why) = refuse(&sql) {
        a.skipped = Some(format!("not run: {why}"));
        return a;
    }
    let db = String::from_utf8_lossy(c.sample.db()).into_owned();
    if !db.is_empty() {
        if let Err(e) = s.conn.query_drop(format!("USE {}", ident(&db))) {
            a.skipped = Some(format!("database {db}: {}", pileup_conn::plain(&e)));
            return a;
        }
    }
    progress(&format!("{}: ANALYZE", a.id));
    let plan = if flavor == pileup_conn::Flavor::MariaDb {
        s.analyze(&[], &sql).map(|j| split(&j))
    } else {
        Err(String::new())
    };
    let tables = match plan {
        Ok((opt, exec, t)) => {
            a.optimization_ms = opt;
            a.execution_ms = exec;
            a.plan = t.iter().map(|(n, k, _)| (n.clone(), k.clone())).collect();
            t
        }
        Err(e) if !e.is_empty() => {
            a.skipped = Some(format!("ANALYZE failed: {e}"));
            return a;
        }
        Err(_) => vec![],
    };
    let opt_share = match (a.optimization_ms, a.execution_ms) {
        (Some(o), Some(e)) if o + e > 0.0 => Some(o / (o + e)),
        _ => rank::optimizer_share(c),
    };
    let examined = rank::examined_per_row(c).unwrap_or(0.0);
    if opt_share.unwrap_or(0.0) < o.optimizer_share && examined < o.examined_per_row {
        a.skipped = Some(format!(
            "no variant tried: optimization {:.0}% of the time, {:.0} rows examined per row",
            opt_share.unwrap_or(0.0) * 100.0,
            examined
        ));
        return a;
    }
    let variants = variants_of(&sql, &tables);
    // Timed: the statement and each variant in turn, `runs` rounds.
    progress(&format!("{}: timing the statement and {} variants", a.id, variants.len()));
    let (base_ms, base_sum, times, sums) = time_rounds(s, &sql, &variants, o.runs, &mut a);
    if a.skipped.is_some() {
        return a;
    }
    judge(s, &mut a, &variants, &base_ms, base_sum, &times, &sums);
    a
}

/// A variant: what it changes, the session settings it runs under, and
/// its statement.
type Variants = Vec<(String, Vec<String>, String)>;

/// The variants tried: on a single table, FORCE INDEX on the index chosen
/// first and on each other candidate, each other candidate ignored; and
/// two optimizer settings.
fn variants_of(sql: &str, tables: &[(String, Option<String>, Vec<String>)]) -> Variants {
    let mut variants: Variants = vec![];
    let single = pileup_sql::single_table(sql.as_bytes());
    if let (Some(t), [(table, chosen, possible)]) = (&single, tables) {
        let with = |hint: &str| format!("{} {hint}{}", &sql[..t.hint_at], &sql[t.hint_at..]);
        let name = &sql[t.name.clone()];
        // FORCE INDEX on the index chosen first (the same plan without
        // the other indexes' dives), then on each other candidate, then
        // each other candidate ignored.
        let others: Vec<&String> = possible.iter().filter(|k| Some(*k) != chosen.as_ref()).take(4).collect();
        for k in chosen.iter().chain(others.iter().copied()) {
            let h = format!("FORCE INDEX ({})", ident(k));
            variants.push((format!("FROM {name} {h}"), vec![], with(&h)));
        }
        for k in &others {
            let h = format!("IGNORE INDEX ({})", ident(k));
            variants.push((format!("FROM {name} {h}"), vec![], with(&h)));
        }
        let _ = table;
    }
    for (var, val) in [("eq_range_index_dive_limit", "10"), ("optimizer_switch", "'rowid_filter=off'")] {
        let set = format!("SET SESSION {var} = {val}");
        variants.push((set.clone(), vec![set], sql.to_string()));
    }
    variants
}

/// Per-round timings of the statement and of each variant
/// (`runs` rounds, a minute at most).
type Timed = (Vec<f64>, Option<u64>, Vec<Vec<f64>>, Vec<Option<Result<u64, String>>>);

/// Time the statement and each variant in turn, `runs` rounds; a variant
/// whose first run took over three times the statement's is not run again.
fn time_rounds(s: &mut Session, sql: &str, variants: &Variants, runs: usize, a: &mut Advice) -> Timed {
    let ordered = is_ordered(sql);
    let mut base_ms = vec![];
    let mut base_sum = None;
    let mut times: Vec<Vec<f64>> = vec![vec![]; variants.len()];
    let mut sums: Vec<Option<Result<u64, String>>> = vec![None; variants.len()];
    let deadline = Instant::now() + Duration::from_secs(60);
    for _round in 0..runs.max(1) {
        match s.run(&[], sql, ordered) {
            Ok((ms, rows, sum)) => {
                base_ms.push(ms);
                a.rows = Some(rows);
                base_sum.get_or_insert(sum);
            }
            Err(e) => {
                a.skipped = Some(format!("the statement failed: {e}"));
                break;
            }
        }
        for (i, (_, setup, vsql)) in variants.iter().enumerate() {
            if matches!(sums[i], Some(Err(_))) {
                continue;
            }
            // A variant whose first run took over three times the
            // statement's cannot win: not run again.
            if times[i].first().is_some_and(|&t| t > 3.0 * base_ms[0]) {
                continue;
            }
            match s.run(setup, vsql, ordered) {
                Ok((ms, _, sum)) => {
                    times[i].push(ms);
                    sums[i].get_or_insert(Ok(sum));
                }
                Err(e) => sums[i] = Some(Err(e)),
            }
        }
        if Instant::now() > deadline {
            break;
        }
    }
    (base_ms, base_sum, times, sums)
}

/// Each variant's median, gain over the statement and rows, and the best
/// one (the same rows, at least 1.1 times as fast).
fn judge(
    s: &mut Session,
    a: &mut Advice,
    variants: &Variants,
    base_ms: &[f64],
    base_sum: Option<u64>,
    times: &[Vec<f64>],
    sums: &[Option<Result<u64, String>>],
) {
    let base = crate::median(base_ms);
    a.median_ms = Some(base);
    for (i, (change, setup, vsql)) in variants.iter().enumerate() {
        let (opt, exec, key) = match s.analyze(setup, vsql).map(|j| split(&j)) {
            Ok((o, e, t)) => (o, e, t.first().and_then(|x| x.1.clone())),
            Err(_) => (None, None, None),
        };
        let (same, error) = match &sums[i] {
            Some(Ok(h)) => (Some(*h) == base_sum, None),
            Some(Err(e)) => (false, Some(e.clone())),
            None => (false, Some("not run".into())),
        };
        let m = crate::median(&times[i]);
        a.variants.push(Variant {
            change: change.clone(),
            median_ms: m,
            gain: if m > 0.0 { base / m } else { 0.0 },
            same_rows: same,
            optimization_ms: opt,
            execution_ms: exec,
            key,
            error,
        });
    }
    a.best = a
        .variants
        .iter()
        .enumerate()
        .filter(|(_, v)| v.same_rows && v.error.is_none() && v.gain >= 1.1)
        .max_by(|x, y| x.1.gain.total_cmp(&y.1.gain))
        .map(|(i, _)| i);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_reads_are_run() {
        assert_eq!(refuse("SELECT id FROM t WHERE a IN (1,2)"), None);
        assert_eq!(refuse("(select 1) union (select 2)"), None);
        assert!(refuse("select * from t where id = 1 for update").is_some());
        assert!(refuse("SELECT * FROM t LOCK IN SHARE MODE").is_some());
        assert!(refuse("select a into @x from t").is_some());
        assert!(refuse("select get_lock('x', 10)").is_some());
        assert!(refuse("SELECT SLEEP(5)").is_some());
        assert!(refuse("update t set a = 1").is_some());
        assert!(refuse("with x as (select 1) delete from t").is_some());
        // What the fingerprint would hide: executable comments, a second
        // statement.
        assert!(refuse("SELECT * FROM t /*!50000 FOR UPDATE */").is_some());
        assert!(refuse("SELECT a /*!, GET_LOCK('x',10) */ FROM t").is_some());
        assert!(refuse("select 1; commit; delete from t").is_some());
        assert!(refuse("select next value for s").is_some());
        assert!(refuse("select master_pos_wait('f', 4)").is_some());
    }

    #[test]
    fn analyze_json_splits_into_optimization_execution_and_the_chosen_index() {
        let j: serde_json::Value = serde_json::from_str(
            r#"{"query_optimization": {"r_total_time_ms": 8.8}, "query_block": {"select_id": 1, "r_total_time_ms": 3.6,
               "nested_loop": [{"table": {"table_name": "t", "access_type": "range", "possible_keys": ["a", "b", "a_2"], "key": "b"}}]}}"#,
        )
        .unwrap();
        let (o, e, t) = split(&j);
        assert_eq!((o, e), (Some(8.8), Some(3.6)));
        assert_eq!(t, vec![("t".to_string(), Some("b".to_string()), vec!["a".into(), "b".into(), "a_2".into()])]);
    }
}
