//! The plan advisor: for the top classes, run the sample on a server the
//! user names (a replica or a copy) and try variants of it: each index hint
//! it carries removed, other indexes forced or ignored, optimizer settings.
//! A variant is timed only when its plan (`EXPLAIN FORMAT=JSON`: access
//! type, index, key parts, join order, rowid filter) differs from the
//! statement's, or when choosing the plan is most of the statement's time
//! (a variant with the same plan then saves the optimizer's work); it is
//! timed against the statement in interleaved rounds
//! until the difference is settled or the class's budget is spent
//! ([`experiment`]); it is advised only when it returns the same rows, the
//! 95% interval of its speed-up clears the gain asked for, and it saves
//! enough per execution. Otherwise the report says "within noise", with
//! the figures.
//!
//! It runs only `SELECT`s that neither lock nor write (refused: `FOR
//! UPDATE`, `LOCK IN SHARE MODE`, `FOR SHARE`, `INTO`, `GET_LOCK`,
//! `SLEEP`…), inside a read-only transaction, each bounded by the
//! connection's statement time limit, and changes only its own session.

pub mod candidates;
pub mod experiment;
pub mod index;
pub mod kept;
pub mod plan;
mod session;
pub mod variants;
pub mod writes;

use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use pileup_conn::ConnSpec;

use crate::class::Class;
use crate::rank;
use experiment::{Bar, Experiment, Standing};
use plan::Plan;
use session::Session;
use variants::ident;

pub use plan::{split, TableRead};

/// How to advise.
#[derive(Clone, Debug)]
pub struct AdviseOptions {
    /// Classes, from the top of the ranking, whose samples are examined.
    pub classes: usize,
    /// Rounds before a variant is settled (an interval needs 6), and at most.
    pub min_rounds: usize,
    pub max_rounds: usize,
    /// Time spent timing one class's variants, at most.
    pub budget: Duration,
    /// The speed-up asked for (0.10: the interval's lower bound at 1.10).
    pub min_gain: f64,
    /// The median saving per execution asked for, milliseconds.
    pub min_ms: f64,
    /// Without a hint to remove, variants are tried when the optimizer's
    /// share of the time is at least this (0..1)…
    pub optimizer_share: f64,
    /// …or rows examined per row returned at least this.
    pub examined_per_row: f64,
    /// Hours the log spans: a saving per execution becomes seconds per
    /// hour of the log.
    pub log_hours: Option<f64>,
    /// Set (by a signal) to stop between candidates: what was measured is
    /// reported, and the copy is removed.
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Default for AdviseOptions {
    fn default() -> Self {
        AdviseOptions {
            classes: 5,
            min_rounds: 6,
            max_rounds: 200,
            budget: Duration::from_secs(20),
            min_gain: 0.10,
            min_ms: 0.5,
            optimizer_share: 0.5,
            examined_per_row: 100.0,
            log_hours: None,
            stop: None,
        }
    }
}

impl AdviseOptions {
    /// The bar a variant is settled against.
    fn bar(&self) -> Bar {
        let min_rounds = self.min_rounds.max(6);
        Bar { ratio: 1.0 + self.min_gain, min_ms: self.min_ms, min_rounds, max_rounds: self.max_rounds.max(min_rounds) }
    }
}

/// One variant, and what the experiment made of it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Variant {
    /// What changes, as a user would write it (`FROM dive FORCE INDEX (b)`,
    /// `without FORCE INDEX (b)`, `SET SESSION eq_range_index_dive_limit = 10`).
    pub change: String,
    /// Its plan in one line, and whether it is the statement's.
    pub plan: Option<String>,
    pub same_plan: bool,
    /// `faster`, `within_noise` or `slower`; none when it was not timed
    /// (the same plan, other rows, an error).
    pub standing: Option<Standing>,
    /// Rounds it ran in; its median time and the statement's over them.
    pub rounds: usize,
    pub median_ms: Option<f64>,
    pub base_median_ms: Option<f64>,
    /// The statement's time over the variant's, per round: the median and
    /// its 95% interval.
    pub ratio: Option<f64>,
    pub ratio_interval: Option<(f64, f64)>,
    /// Milliseconds saved per execution (medians), and seconds per hour of
    /// the log at the class's rate.
    pub saving_ms: Option<f64>,
    pub saving_s_per_hour: Option<f64>,
    /// Whether it returned the statement's rows (unknown until run).
    pub same_rows: Option<bool>,
    /// Why it could not be explained or run.
    pub error: Option<String>,
}

impl Variant {
    /// A variant before it is timed: its plan (if read) and whether it is
    /// the statement's, or why it could not be read.
    fn untimed(change: String, plan: Option<String>, same_plan: bool, error: Option<String>) -> Variant {
        Variant {
            change,
            plan,
            same_plan,
            standing: None,
            rounds: 0,
            median_ms: None,
            base_median_ms: None,
            ratio: None,
            ratio_interval: None,
            saving_ms: None,
            saving_s_per_hour: None,
            same_rows: None,
            error,
        }
    }
}

/// What the advisor found for one class.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Advice {
    pub id: String,
    pub fingerprint: String,
    /// Why no variant was tried, when none was.
    pub skipped: Option<String>,
    /// From `ANALYZE FORMAT=JSON` (MariaDB): optimization and execution.
    pub optimization_ms: Option<f64>,
    pub execution_ms: Option<f64>,
    /// The statement's plan in one line.
    pub plan: Option<String>,
    pub rows: Option<usize>,
    /// Rounds run, and whether the budget ended them before every variant
    /// was settled.
    pub rounds: usize,
    pub budget_spent: bool,
    pub variants: Vec<Variant>,
    /// Index into `variants` of the advice: settled faster with the same
    /// rows, the largest speed-up.
    pub best: Option<usize>,
}

/// What the advisor says on MySQL, where it runs nothing.
pub const MARIADB_ONLY: &str = "not run: the advisor is MariaDB's (it reads MariaDB's EXPLAIN FORMAT=JSON plans and \
     splits time with ANALYZE FORMAT=JSON, which MySQL does not have)";

impl Advice {
    /// Nothing found yet for class `c`, with these variants.
    fn of(c: &Class, variants: Vec<Variant>) -> Advice {
        Advice {
            id: crate::report::id(&c.fingerprint),
            fingerprint: String::from_utf8_lossy(&c.fingerprint).into_owned(),
            skipped: None,
            optimization_ms: None,
            execution_ms: None,
            plan: None,
            rows: None,
            rounds: 0,
            budget_spent: false,
            variants,
            best: None,
        }
    }
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
    // Its own runs stay out of the server's slow log (a log read again
    // would take the advisor's variants for the application's statements).
    pileup_conn::keep_out_of_slow_log(&mut s.conn);
    let mut out = vec![];
    let mut gone = false;
    for c in classes.iter().take(o.classes) {
        if gone {
            // Said once, where it happened; the rest is not tried.
            let mut a = Advice::of(c, vec![]);
            a.skipped = Some(format!("not tried: {GONE}"));
            out.push(a);
            continue;
        }
        let mut a = advise_one(&mut s, flavor, c, o, progress);
        if s.conn.ping().is_err() {
            gone = true;
            // What was measured before the server went stands; what was
            // cut short is not advice.
            let why = a.skipped.take().or_else(|| a.variants.iter().find_map(|v| v.error.clone()));
            a.best = None;
            a.skipped = Some(match why {
                Some(w) => format!("{GONE} ({w})"),
                None => GONE.into(),
            });
        }
        out.push(a);
    }
    Ok(out)
}

/// Why a class was cut short or not tried: the server stopped answering.
const GONE: &str = "the server stopped answering";

/// What one class's statement does, and which variant of it (if any) is
/// settled faster with the same rows.
fn advise_one(
    s: &mut Session,
    flavor: pileup_conn::Flavor,
    c: &Class,
    o: &AdviseOptions,
    progress: &mut dyn FnMut(&str),
) -> Advice {
    let sql = String::from_utf8_lossy(&c.sample.query).into_owned();
    let mut a = Advice::of(c, vec![]);
    if flavor != pileup_conn::Flavor::MariaDb {
        a.skipped = Some(MARIADB_ONLY.into());
        return a;
    }
    if let Some(why) = not_run(s, c, &sql) {
        a.skipped = Some(why);
        return a;
    }
    progress(&format!("{}: ANALYZE", a.id));
    let tables = match s.explain(&[], &sql, true) {
        Ok(j) => {
            let (opt, exec, t) = split(&j);
            (a.optimization_ms, a.execution_ms) = (opt, exec);
            t
        }
        Err(e) => {
            a.skipped = Some(format!("ANALYZE failed: {e}"));
            return a;
        }
    };
    let base_plan = match s.explain(&[], &sql, false) {
        Ok(j) => Plan::of(&j),
        Err(e) => {
            a.skipped = Some(format!("EXPLAIN failed: {e}"));
            return a;
        }
    };
    a.plan = Some(base_plan.line());
    let hinted = !pileup_sql::hints(&sql).is_empty();
    if !hinted {
        if let Some(why) = no_reason_to_try(&a, c, o) {
            a.skipped = Some(why);
            return a;
        }
    }
    let vs = variants::variants_of(&sql, &tables);
    let timed = explain_variants(s, &vs, &base_plan, o, &mut a);
    if timed.is_empty() {
        return a;
    }
    progress(&format!("{}: timing the statement and {} variants with other plans", a.id, timed.len()));
    let bar = o.bar();
    let e = measure(s, &sql, &vs, &timed, &bar, o.budget, &mut a);
    if a.skipped.is_none() {
        judge(&mut a, &e, &timed, &bar, c, o);
    }
    a
}

/// Each variant's plan, read into `a.variants`; the ones to time. One the
/// statement already has is timed only when choosing the plan is most of
/// the statement's time (index dives on a long IN list), which a variant
/// with the same plan can save.
fn explain_variants(
    s: &mut Session,
    vs: &[variants::Variant],
    base_plan: &Plan,
    o: &AdviseOptions,
    a: &mut Advice,
) -> Vec<usize> {
    let optimizer_bound = match (a.optimization_ms, a.execution_ms) {
        (Some(x), Some(e)) => x >= o.min_ms && x >= o.optimizer_share * (x + e),
        _ => false,
    };
    let mut timed = vec![];
    for v in vs {
        let (plan, error) = match s.explain(&v.setup, &v.sql, false) {
            Ok(j) => (Some(Plan::of(&j)), None),
            Err(e) => (None, Some(e)),
        };
        let same_plan = plan.as_ref() == Some(base_plan);
        if plan.is_some() && (!same_plan || optimizer_bound) {
            timed.push(a.variants.len());
        }
        a.variants.push(Variant::untimed(v.change.clone(), plan.map(|p| p.line()), same_plan, error));
    }
    timed
}

/// Why the class's statement is not run at all: none logged, not a plain
/// read, its database gone.
fn not_run(s: &mut Session, c: &Class, sql: &str) -> Option<String> {
    if sql.trim().is_empty() {
        return Some("no sample statement (performance_schema on MariaDB keeps only the digest)".into());
    }
    if let Some(why) = refuse(sql) {
        return Some(format!("not run: {why}"));
    }
    let db = String::from_utf8_lossy(c.sample.db()).into_owned();
    if !db.is_empty() {
        if let Err(e) = s.conn.query_drop(format!("USE {}", ident(&db))) {
            return Some(format!("database {db}: {}", pileup_conn::plain(&e)));
        }
    }
    None
}

/// A statement without hints is tried only when the optimizer's share of
/// its time, or the rows it examines per row it returns, says a plan
/// could do better.
fn no_reason_to_try(a: &Advice, c: &Class, o: &AdviseOptions) -> Option<String> {
    let opt_share = match (a.optimization_ms, a.execution_ms) {
        (Some(x), Some(e)) if x + e > 0.0 => Some(x / (x + e)),
        _ => rank::optimizer_share(c),
    };
    let examined = rank::examined_per_row(c).unwrap_or(0.0);
    (opt_share.unwrap_or(0.0) < o.optimizer_share && examined < o.examined_per_row).then(|| {
        format!(
            "no variant tried: optimization {:.0}% of the time, {:.0} rows examined per row",
            opt_share.unwrap_or(0.0) * 100.0,
            examined
        )
    })
}

/// The rounds: the statement, then each variant still in question, until
/// every one is settled, the rounds are spent or the budget is.
fn measure(
    s: &mut Session,
    sql: &str,
    vs: &[variants::Variant],
    timed: &[usize],
    bar: &Bar,
    budget: Duration,
    a: &mut Advice,
) -> Experiment {
    let ordered = session::is_ordered(sql);
    let mut e = Experiment::new(timed.len());
    let mut base_sum = None;
    let started = Instant::now();
    while !e.done(bar) {
        if started.elapsed() >= budget {
            a.budget_spent = true;
            break;
        }
        let base = match s.run(&[], sql, ordered) {
            Ok(r) => r,
            Err(err) => {
                a.skipped = Some(format!("the statement failed: {err}"));
                break;
            }
        };
        a.rows = Some(base.rows);
        let base_sum = *base_sum.get_or_insert(base.checksum);
        let mut times = vec![None; timed.len()];
        for k in e.next_round() {
            let v = &vs[timed[k]];
            let out = &mut a.variants[timed[k]];
            match s.run(&v.setup, &v.sql, ordered) {
                Ok(r) if r.checksum == base_sum => {
                    out.same_rows = Some(true);
                    times[k] = Some(r.ms);
                }
                Ok(_) => {
                    out.same_rows = Some(false);
                    e.drop_arm(k);
                }
                Err(err) => {
                    out.error = Some(err);
                    e.drop_arm(k);
                }
            }
        }
        e.record(base.ms, &times, bar);
    }
    a.rounds = e.base.len();
    e
}

/// Each timed variant's figures and standing, and the advice: the largest
/// settled speed-up with the same rows.
fn judge(a: &mut Advice, e: &Experiment, timed: &[usize], bar: &Bar, c: &Class, o: &AdviseOptions) {
    let per_hour = o.log_hours.filter(|h| *h > 0.0).map(|h| c.count as f64 / h);
    for (k, &i) in timed.iter().enumerate() {
        let v = &mut a.variants[i];
        v.rounds = e.arms[k].iter().filter(|t| t.is_finite()).count();
        if v.rounds == 0 || v.same_rows != Some(true) || v.error.is_some() {
            continue;
        }
        let (base, var) = e.medians(k);
        let r = e.ratio(k);
        v.median_ms = Some(var);
        v.base_median_ms = Some(base);
        v.ratio = Some(r.median);
        v.ratio_interval = r.interval;
        v.saving_ms = Some(base - var);
        v.saving_s_per_hour = per_hour.map(|n| (base - var) / 1000.0 * n);
        v.standing = Some(e.verdict(k, bar));
    }
    a.best = a
        .variants
        .iter()
        .enumerate()
        .filter(|(_, v)| v.standing == Some(Standing::Faster) && v.same_rows == Some(true))
        .max_by(|x, y| x.1.ratio.unwrap_or(0.0).total_cmp(&y.1.ratio.unwrap_or(0.0)))
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
}
