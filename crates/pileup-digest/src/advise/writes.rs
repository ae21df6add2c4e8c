//! The cost of an index to writes: the top write classes on its table,
//! replayed on the copy before the index is built and after, each run
//! rolled back.

use std::time::Instant;

use mysql::prelude::Queryable;

use super::kept::TableName;
use super::session::Session;
use super::variants::ident;
use super::AdviseOptions;
use crate::class::Class;

/// Write classes replayed per table, and runs before and after.
const WRITE_CLASSES: usize = 3;
const WRITE_RUNS: usize = 11;

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
pub(super) fn write_classes<'a>(all: &'a [Class], t: &TableName) -> Vec<&'a Class> {
    let mut w: Vec<&Class> = all
        .iter()
        .filter(|c| !c.sample.query.is_empty())
        .filter(|c| {
            written(&c.fingerprint).is_some_and(|(d, table)| {
                table.eq_ignore_ascii_case(&t.1)
                    && d.unwrap_or_else(|| String::from_utf8_lossy(c.sample.db()).into_owned())
                        .eq_ignore_ascii_case(&t.0)
            })
        })
        .collect();
    w.sort_by(|a, b| b.sum(crate::attr::A::QueryTime).total_cmp(&a.sum(crate::attr::A::QueryTime)));
    w.truncate(WRITE_CLASSES);
    w
}

/// A write class replayed: each run's milliseconds.
pub(super) type Replayed = Result<Vec<f64>, String>;

/// A write class's sample run on the copy, each run rolled back, after a
/// first run that is not counted (it brings the pages it touches in). A
/// statement that changes no row on the copy times nothing and is not
/// reported as a cost.
pub(super) fn replay(cp: &mut Session, db: &str, c: &Class) -> Replayed {
    let sql = String::from_utf8_lossy(&c.sample.query).into_owned();
    let mut fp = Vec::new();
    pileup_sql::fingerprint(sql.as_bytes(), &mut fp);
    if sql.contains("/*!") || sql.contains("/*M!") || fp.contains(&b';') {
        return Err("not replayed: an executable comment or several statements".into());
    }
    let e = |e: mysql::Error| pileup_conn::plain(&e);
    cp.conn.query_drop(format!("USE {}", ident(db))).map_err(e)?;
    let mut out = vec![];
    for run in 0..=WRITE_RUNS {
        cp.conn.query_drop("START TRANSACTION").map_err(e)?;
        let t0 = Instant::now();
        let r = cp.conn.query_drop(&sql);
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let changed = cp.conn.affected_rows();
        let _ = cp.conn.query_drop("ROLLBACK");
        r.map_err(|x| format!("not replayed: {}", e(x)))?;
        if run == 0 && changed == 0 {
            return Err("not replayed: it changes no row of the copy (a sample may not hold its rows)".into());
        }
        if run > 0 {
            out.push(ms);
        }
    }
    Ok(out)
}

/// Before and after, as medians with their intervals: costlier (or
/// cheaper) only when the intervals are apart and the difference clears
/// the advisor's gain and floor, since the two blocks run one after the
/// other rather than interleaved.
pub(super) fn write_cost(c: &Class, before: Replayed, after: Replayed, o: &AdviseOptions) -> WriteCost {
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
}
