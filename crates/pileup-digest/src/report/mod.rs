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
    /// The profile alone, of the figures it needs ([`profile_attributes`]):
    /// no class in detail, its maximum time in place of its p95.
    pub profile_only: bool,
}

/// What the profile alone (`View::profile_only`) shows of a class beyond
/// its count: its statement time and rows examined, and what `rank`
/// scores by. Attributes, and plan flags (indices of
/// [`crate::attr::FLAGS`]).
pub fn profile_attributes(rank: crate::rank::Rank) -> (Vec<A>, &'static [usize]) {
    let (by, flags) = rank.reads();
    let mut attrs = vec![A::QueryTime, A::RowsExamined];
    attrs.extend(by.iter().filter(|a| !matches!(a, A::QueryTime | A::RowsExamined)));
    (attrs, flags)
}

/// An attribute no statement logged, and how to make the server log it.
pub struct Unavailable {
    pub attr: &'static str,
    pub why: &'static str,
    /// The attributes it is about.
    about: &'static [A],
}

/// Attributes a ranking or the profile needs that the log lacks; of the
/// profile alone, only those it shows (a fleet's narrow read has not read
/// the others).
pub fn unavailable(d: &Digest, v: &View) -> Vec<Unavailable> {
    let all = unavailable_of(d);
    if !v.profile_only {
        return all;
    }
    let (shown, _) = profile_attributes(v.rank);
    all.into_iter().filter(|u| shown.iter().any(|a| u.about.contains(a))).collect()
}

fn unavailable_of(d: &Digest) -> Vec<Unavailable> {
    let missing = |a: A| !d.seen[a as usize];
    let mut v = vec![];
    if d.events == 0 {
        return v;
    }
    if missing(A::RowsExamined) {
        v.push(Unavailable {
            attr: ATTRS[A::RowsExamined as usize].name,
            why: "the log has no Rows_examined",
            about: &[A::RowsExamined],
        });
    }
    if missing(A::PagesAccessed) && missing(A::PagesDistinct) {
        v.push(Unavailable {
            attr: "pages",
            about: &[A::PagesAccessed, A::PagesDistinct],
            why: "no page counts: MariaDB 10.6.15+ logs them with log_slow_verbosity=engine (or innodb, full); \
                  Percona Server with log_slow_verbosity=innodb",
        });
    }
    if missing(A::EngineTime) {
        v.push(Unavailable {
            attr: ATTRS[A::OptimizerTime as usize].name,
            about: &[A::OptimizerTime, A::EngineTime],
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
