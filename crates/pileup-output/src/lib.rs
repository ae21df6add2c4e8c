//! `pileup-output`: every format every tool writes, in one place.
//!
//! A tool's result implements [`Report`]: its own text, its JSON (serde),
//! and, when it has stacks, those stacks as a [`Stacks`] (weighted frames,
//! root first). [`render`] then writes any [`Format`]:
//!
//! ```text
//! Report ─▶ text   (the tool's own: pt-pmp for stacks, lockstat-like for locks)
//!        ─▶ json   (serde)
//!        ─▶ Stacks ─▶ folded (FlameGraph, inferno, speedscope)
//!                  ─▶ svg    (flame graph, inferno)
//!                  ─▶ dot    (Graphviz call graph)
//!                  ─▶ pprof  (gzipped profile.proto, its sample types from the tool)
//!        ─▶ html, svg (documents the tool draws itself: a report page, a plot)
//! ```
//!
//! The same `-o` extensions mean the same format for every tool
//! ([`Format::from_path`]); a format a tool has no data for is an error
//! ([`OutputError::Unsupported`]), never a file of the wrong kind.
//!
//! Every JSON object a tool writes at the top level (a result, a line of
//! JSON Lines, an error) starts with `schema_version` ([`SCHEMA_VERSION`]):
//! [`render`] and [`json_line`] put it there, so no tool can forget it.

mod dot;
mod format;
mod news;
pub mod proto;
mod report;
mod stacks;

use std::io::Write;

pub use format::{Format, OutputError, FORMATS};
pub use news::{Doing, News, Progress, Step};
pub use report::{Options, Report};
pub use stacks::{Stack, Stacks};

/// The version of the JSON every tool writes, in each top-level object as
/// `schema_version`: raised when a field changes meaning or goes away, not
/// when one is added.
pub const SCHEMA_VERSION: u32 = 1;

/// `t` with `schema_version` as its first field. `t` must serialize as an
/// object (a struct or a map); its fields are written as they come, with no
/// copy of them made.
#[derive(serde::Serialize)]
pub struct Versioned<'a, T: serde::Serialize + ?Sized> {
    schema_version: u32,
    #[serde(flatten)]
    inner: &'a T,
}

/// `t`, versioned ([`Versioned`]).
pub fn versioned<T: serde::Serialize + ?Sized>(t: &T) -> Versioned<'_, T> {
    Versioned { schema_version: SCHEMA_VERSION, inner: t }
}

/// `n` and the noun that goes with it: `1 table`, `2 tables`, `0 tables`.
pub fn plural(n: impl Count, one: &str, many: &str) -> String {
    let n = n.count();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A count [`plural`] takes: any unsigned integer.
pub trait Count {
    /// The count as a u64.
    fn count(self) -> u64;
}

macro_rules! count {
    ($($t:ty),*) => {$(impl Count for $t {
        fn count(self) -> u64 {
            self as u64
        }
    })*};
}
count!(u8, u16, u32, u64, usize);

/// One line of JSON Lines: `t` as one versioned object on one line.
pub fn json_line<T: serde::Serialize + ?Sized>(t: &T, w: &mut dyn Write) -> Result<(), OutputError> {
    serde_json::to_writer(&mut *w, &versioned(t)).map_err(std::io::Error::from)?;
    writeln!(w)?;
    Ok(())
}

/// Write `r` in format `f`.
pub fn render<R: Report + ?Sized>(r: &R, f: Format, o: &Options, w: &mut dyn Write) -> Result<(), OutputError> {
    match f {
        Format::Text => r.text(o, w)?,
        Format::Json => {
            serde_json::to_writer_pretty(&mut *w, &versioned(r)).map_err(std::io::Error::from)?;
            writeln!(w)?;
        }
        Format::Pprof => match r.pprof(o) {
            Some(p) => proto::write_gz(&p, w)?,
            None => proto::write_gz(&stacks_of(r, f, o)?.pprof(), w)?,
        },
        Format::Folded => stacks_of(r, f, o)?.folded(w)?,
        Format::Svg => match r.svg(o, w) {
            Some(done) => done?,
            None => stacks_of(r, f, o)?.svg(o.title.as_deref(), w)?,
        },
        Format::Html => r.html(o, w).ok_or(OutputError::Unsupported { tool: r.tool(), format: f })??,
        Format::Dot => dot::dot(&stacks_of(r, f, o)?, o, w)?,
    }
    Ok(())
}

fn stacks_of<R: Report + ?Sized>(r: &R, format: Format, o: &Options) -> Result<Stacks, OutputError> {
    r.stacks(o).ok_or(OutputError::Unsupported { tool: r.tool(), format })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    struct Event {
        event: &'static str,
        rows: u64,
    }

    #[test]
    fn every_object_starts_with_its_schema_version() {
        let mut out = vec![];
        json_line(&Event { event: "chunk", rows: 3 }, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "{\"schema_version\":1,\"event\":\"chunk\",\"rows\":3}\n");
        let mut m = serde_json::Map::new();
        m.insert("a".into(), 1.into());
        let v = serde_json::to_value(versioned(&m)).unwrap();
        assert_eq!(v, serde_json::json!({"schema_version": 1, "a": 1}));
    }

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(plural(1u64, "table", "tables"), "1 table");
        assert_eq!(plural(0u64, "table", "tables"), "0 tables");
        assert_eq!(plural(2u32, "entry", "entries"), "2 entries");
    }

    #[test]
    fn an_array_cannot_be_versioned_and_says_so() {
        assert!(serde_json::to_string(&versioned(&[1, 2])).is_err());
    }
}
