//! `pileup captures`: a data directory's captures and the short stalls
//! that had none, oldest first, as the output layer writes them.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::Result;
use crate::evidence::{stamp, stamp_tenths};
use crate::store::Store;

/// One line of the listing; `kind` tells them apart in JSON.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// A capture: when it began, its directory, trigger and verdict, and
    /// whether it was written whole (its completion marker is there).
    Capture { unix: f64, dir: String, trigger: String, verdict: Option<String>, complete: bool },
    /// A stall too short for a capture of its own: a pile-up between
    /// polls, or a stall signature that cleared before its trigger's hold.
    ShortStall { unix: f64, ended_unix: f64, ms: f64, what: String },
}

impl Entry {
    fn unix(&self) -> f64 {
        match self {
            Entry::Capture { unix, .. } | Entry::ShortStall { unix, .. } => *unix,
        }
    }
}

/// A data directory's captures and uncaptured short stalls.
#[derive(Debug, Clone, Serialize)]
pub struct Listing {
    /// The data directory read.
    pub data_dir: PathBuf,
    /// Whether a watcher ever recorded there (its history store exists).
    #[serde(skip)]
    pub recorded: bool,
    /// Captures and short stalls, oldest first.
    pub captures: Vec<Entry>,
}

impl Listing {
    /// Read `dir`'s history store; a directory no watcher recorded in has
    /// no captures, which is an answer, not an error.
    pub fn read(dir: &Path) -> Result<Listing> {
        let mut l = Listing { data_dir: dir.to_path_buf(), recorded: false, captures: vec![] };
        if !dir.join("pileup.db").exists() {
            return Ok(l);
        }
        l.recorded = true;
        let store = Store::open(dir)?;
        let caps = store.captures()?;
        let stalls = store.stalls(f64::MIN, f64::MAX)?;
        let captured = |began: f64, ended: f64| caps.iter().any(|c| c.0 >= began - 0.5 && c.0 <= ended + 2.0);
        l.captures = caps
            .iter()
            .map(|(u, d, t, v)| Entry::Capture {
                unix: *u,
                dir: d.clone(),
                trigger: t.clone(),
                verdict: v.clone(),
                complete: crate::capture_dir::is_complete(Path::new(d)),
            })
            .collect();
        l.captures.extend(stalls.iter().filter(|st| !captured(st.began_unix, st.ended_unix)).map(|st| {
            Entry::ShortStall { unix: st.began_unix, ended_unix: st.ended_unix, ms: st.ms(), what: st.describe() }
        }));
        l.captures.sort_by(|a, b| a.unix().total_cmp(&b.unix()));
        Ok(l)
    }
}

impl pileup_output::Report for Listing {
    fn tool(&self) -> &'static str {
        "captures"
    }
    fn text(&self, _o: &pileup_output::Options, w: &mut dyn Write) -> std::io::Result<()> {
        let dir = self.data_dir.display();
        if self.captures.is_empty() {
            return match self.recorded {
                true => writeln!(w, "no captures in {dir}"),
                false => writeln!(w, "no captures in {dir} (pileup watch --data-dir {dir} records them)"),
            };
        }
        for e in &self.captures {
            if let Entry::Capture { unix, dir, trigger, verdict, complete } = e {
                let cut = if *complete { "" } else { " (cut short: pileup report DIR names what is missing)" };
                writeln!(w, "{}  {trigger}{cut}\n  {}\n  {dir}", stamp(*unix), verdict.as_deref().unwrap_or_default())?;
            }
        }
        let mut short = self.captures.iter().filter(|e| matches!(e, Entry::ShortStall { .. })).peekable();
        if short.peek().is_some() {
            writeln!(w, "\nshort stalls, not captured:")?;
        }
        for e in short {
            if let Entry::ShortStall { unix, ms, what, .. } = e {
                writeln!(w, "{}  {ms:.0} ms  {what}", stamp_tenths(*unix))?;
            }
        }
        Ok(())
    }
}

/// The captures a fleet shipped to a store, newest first (`pileup
/// captures --from`).
#[derive(Debug, Clone, Serialize)]
pub struct RemoteListing {
    /// The store read (s3://BUCKET[/PREFIX]).
    pub store: String,
    /// Its captures.
    pub captures: Vec<pileup_store::RemoteCapture>,
}

impl pileup_output::Report for RemoteListing {
    fn tool(&self) -> &'static str {
        "captures"
    }
    fn text(&self, _o: &pileup_output::Options, w: &mut dyn Write) -> std::io::Result<()> {
        if self.captures.is_empty() {
            return writeln!(w, "no captures in {}", self.store);
        }
        for c in &self.captures {
            let when = c.unix.map(stamp).unwrap_or_else(|| "?".into());
            writeln!(
                w,
                "{when}  {}  {}\n  {}\n  {}",
                c.host.as_deref().unwrap_or("?"),
                c.class.as_deref().unwrap_or("?"),
                c.verdict.as_deref().unwrap_or(""),
                c.url
            )?;
        }
        Ok(())
    }
}

/// The metrics a trigger may use, with their meanings (`pileup watch
/// --list-metrics`).
#[derive(Debug, Clone, Serialize)]
pub struct MetricList {
    /// Each metric, in the order the derivation gives them.
    pub metrics: Vec<Metric>,
}

/// One metric a trigger may use.
#[derive(Debug, Clone, Serialize)]
pub struct Metric {
    pub name: String,
    pub meaning: String,
}

impl MetricList {
    /// Every metric, and the per-statement-kind rates as one pattern.
    pub fn all() -> MetricList {
        let mut metrics: Vec<Metric> =
            crate::derive::metrics_described().into_iter().map(|(name, meaning)| Metric { name, meaning }).collect();
        metrics.push(Metric {
            name: "com_*_rate".into(),
            meaning: "statements of each kind per second (com_select_rate, com_update_rate, ...)".into(),
        });
        MetricList { metrics }
    }
}

impl pileup_output::Report for MetricList {
    fn tool(&self) -> &'static str {
        "watch --list-metrics"
    }
    fn text(&self, _o: &pileup_output::Options, w: &mut dyn Write) -> std::io::Result<()> {
        let width = self.metrics.iter().map(|m| m.name.len()).max().unwrap_or(0);
        for m in &self.metrics {
            writeln!(w, "{:<width$}  {}", m.name, m.meaning)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_no_watcher_recorded_in_lists_no_captures_in_both_formats() {
        let dir = tempfile::tempdir().unwrap();
        let l = Listing::read(dir.path()).unwrap();
        let mut text = vec![];
        pileup_output::render(&l, pileup_output::Format::Text, &Default::default(), &mut text).unwrap();
        assert!(String::from_utf8(text).unwrap().contains("pileup watch --data-dir"));
        let mut json = vec![];
        pileup_output::render(&l, pileup_output::Format::Json, &Default::default(), &mut json).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v["schema_version"], 1);
        assert_eq!(v["captures"], serde_json::json!([]));
    }
}
