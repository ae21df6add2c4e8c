//! The digest written out: a text report (a profile of the classes with
//! their efficiency columns, then the top classes in detail), JSON
//! (documented in docs/digest.md) and a self-contained report.html.

pub mod hosts;
pub mod html;
pub mod indexes;
pub mod json;
pub mod text;

use crate::attr::{A, ATTRS};
use crate::Digest;

/// What to show.
#[derive(Clone, Debug)]
pub struct View {
    pub rank: crate::rank::Rank,
    /// Classes in the profile table and in detail.
    pub limit: usize,
}

/// An attribute no statement logged, and how to make the server log it.
pub struct Unavailable {
    pub attr: &'static str,
    pub why: &'static str,
}

/// Attributes a ranking or the profile needs that the log lacks.
pub fn unavailable(d: &Digest) -> Vec<Unavailable> {
    let missing = |a: A| !d.seen[a as usize];
    let mut v = vec![];
    if d.events == 0 {
        return v;
    }
    if missing(A::RowsExamined) {
        v.push(Unavailable { attr: ATTRS[A::RowsExamined as usize].name, why: "the log has no Rows_examined" });
    }
    if missing(A::PagesAccessed) && missing(A::PagesDistinct) {
        v.push(Unavailable {
            attr: "pages",
            why: "no page counts: MariaDB 10.6.15+ logs them with log_slow_verbosity=engine (or innodb, full); \
                  Percona Server with log_slow_verbosity=innodb",
        });
    }
    if missing(A::EngineTime) {
        v.push(Unavailable {
            attr: ATTRS[A::OptimizerTime as usize].name,
            why: "no Engine_time to subtract: MariaDB 10.6.15+ logs it with log_slow_verbosity=engine (or full); \
                  MySQL and Percona Server do not log it",
        });
    }
    v
}

/// `2026-11-27T06:52:23Z`
pub fn utc(ts: i64) -> String {
    chrono::DateTime::from_timestamp(ts, 0)
        .map_or_else(|| ts.to_string(), |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// The class id as printed: `0x` and 16 hex digits.
pub fn id(fingerprint: &[u8]) -> String {
    format!("0x{:016X}", pileup_sql::class_id(fingerprint))
}
