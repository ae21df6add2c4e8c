//! The digest written out: a text report (a profile of the classes with
//! their efficiency columns, then the top classes in detail), JSON
//! (documented in docs/digest.md) and a self-contained report.html.

pub mod html;
pub mod json;
pub mod text;

use crate::attr::{A, ATTRS};
use crate::Digest;

/// A digest as the output layer writes it: text (the profile and the top
/// classes in detail, then the advice), JSON, or a self-contained HTML page.
pub struct DigestReport<'a> {
    /// The classes read.
    pub digest: &'a Digest,
    /// Their order and how many the text and page show.
    pub view: View,
    /// What `--advise` measured, when it ran.
    pub advice: Option<&'a [crate::advise::Advice]>,
}

impl pileup_output::Report for DigestReport<'_> {
    fn tool(&self) -> &'static str {
        "digest"
    }
    fn text(&self, _o: &pileup_output::Options, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        w.write_all(text::render(self.digest, &self.view).as_bytes())?;
        if let Some(adv) = self.advice {
            w.write_all(text::render_advice(adv).as_bytes())?;
        }
        Ok(())
    }
    fn html(&self, _o: &pileup_output::Options, w: &mut dyn std::io::Write) -> Option<std::io::Result<()>> {
        Some(w.write_all(html::render(self.digest, &self.view, self.advice).as_bytes()))
    }
}

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
