//! What a dump and a load say as they go, and what they did, as the
//! program's sink writes them (`pileup_output::News`): a line of JSON Lines
//! each (`event`: planned, unlocked, chunk, done), a line for a person, and
//! the progress bar's moves; notes are diagnostics, on stderr.

use std::path::Path;

use pileup_output::{plural, News, Progress};
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use crate::{dump, load, Manifest};

impl Serialize for dump::Event {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        match self {
            dump::Event::Planned { tables, rows, bytes } => {
                m.serialize_entry("event", "planned")?;
                m.serialize_entry("tables", tables)?;
                m.serialize_entry("rows_estimate", rows)?;
                m.serialize_entry("bytes_estimate", bytes)?;
            }
            dump::Event::Unlocked { statement, held_ms, waited_ms, stages_ms, copied } => {
                #[derive(Serialize)]
                struct Stage<'a> {
                    stage: &'a str,
                    ms: f64,
                }
                let stages: Vec<Stage> = stages_ms.iter().map(|(stage, ms)| Stage { stage, ms: *ms }).collect();
                m.serialize_entry("event", "unlocked")?;
                m.serialize_entry("statement", statement)?;
                m.serialize_entry("held_ms", held_ms)?;
                m.serialize_entry("waited_ms", waited_ms)?;
                m.serialize_entry("stages_ms", &stages)?;
                m.serialize_entry("copied_under_lock", copied)?;
            }
            dump::Event::Chunk { table, rows, bytes } => {
                m.serialize_entry("event", "chunk")?;
                m.serialize_entry("table", table)?;
                m.serialize_entry("rows", rows)?;
                m.serialize_entry("bytes", bytes)?;
            }
            dump::Event::Note(text) => {
                m.serialize_entry("event", "note")?;
                m.serialize_entry("text", text)?;
            }
        }
        m.end()
    }
}

impl News for dump::Event {
    fn text(&self) -> Option<String> {
        match self {
            dump::Event::Unlocked { statement, held_ms, waited_ms, copied, .. } => Some(format!(
                "snapshot taken: {statement} held {held_ms:.1} ms (asked for {waited_ms:.1} ms before it was granted){}",
                match copied.is_empty() {
                    true => String::new(),
                    false => format!(
                        ", while copying {}: {}",
                        plural(copied.len(), "non-transactional table", "non-transactional tables"),
                        copied.join(", ")
                    ),
                }
            )),
            dump::Event::Note(s) => Some(format!("note: {s}")),
            dump::Event::Planned { .. } | dump::Event::Chunk { .. } => None,
        }
    }
    fn progress(&self) -> Progress {
        match self {
            dump::Event::Planned { bytes, .. } => Progress::total(*bytes),
            dump::Event::Chunk { rows, bytes, .. } => Progress::advance(*bytes, *rows),
            dump::Event::Unlocked { .. } | dump::Event::Note(_) => Progress::none(),
        }
    }
    fn diagnostic(&self) -> bool {
        matches!(self, dump::Event::Note(_))
    }
}

impl Serialize for load::Event {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        match self {
            load::Event::Planned { tables, rows, bytes } => {
                m.serialize_entry("event", "planned")?;
                m.serialize_entry("tables", tables)?;
                m.serialize_entry("rows", rows)?;
                m.serialize_entry("bytes", bytes)?;
            }
            load::Event::Chunk { table, rows, bytes, already } => {
                m.serialize_entry("event", "chunk")?;
                m.serialize_entry("table", table)?;
                m.serialize_entry("rows", rows)?;
                m.serialize_entry("bytes", bytes)?;
                m.serialize_entry("already_loaded", already)?;
            }
            load::Event::Indexing { table, indexes, rows } => {
                m.serialize_entry("event", "indexing")?;
                m.serialize_entry("table", table)?;
                m.serialize_entry("indexes", indexes)?;
                m.serialize_entry("rows", rows)?;
            }
            load::Event::Indexed { table, seconds } => {
                m.serialize_entry("event", "indexed")?;
                m.serialize_entry("table", table)?;
                m.serialize_entry("seconds", seconds)?;
            }
            load::Event::OnlyIndexing { tables } => {
                m.serialize_entry("event", "only_indexing")?;
                m.serialize_entry("tables", tables)?;
            }
            load::Event::Note(text) => {
                m.serialize_entry("event", "note")?;
                m.serialize_entry("text", text)?;
            }
        }
        m.end()
    }
}

impl News for load::Event {
    fn text(&self) -> Option<String> {
        match self {
            load::Event::Note(s) => Some(format!("note: {s}")),
            load::Event::Indexing { table, indexes, rows } => Some(format!(
                "building {} of {table} ({}) in one ALTER TABLE, on one server thread",
                plural(*indexes, "secondary index", "secondary indexes"),
                plural(*rows, "row", "rows"),
            )),
            load::Event::Indexed { table, seconds } => Some(format!("indexes of {table} built in {seconds:.1} s")),
            load::Event::OnlyIndexing { tables } => Some(format!(
                "every chunk is in; the load now waits on the index {} of {} alone (its critical path)",
                if tables.len() == 1 { "build" } else { "builds" },
                tables.join(", ")
            )),
            load::Event::Planned { .. } | load::Event::Chunk { .. } => None,
        }
    }
    fn progress(&self) -> Progress {
        match self {
            load::Event::Planned { bytes, .. } => Progress::total(*bytes),
            // A chunk loaded before (resume) is counted in the bar's bytes,
            // not in the rows this run loaded.
            load::Event::Chunk { bytes, rows, already, .. } => {
                Progress::advance(*bytes, if *already { 0 } else { *rows })
            }
            load::Event::Note(_)
            | load::Event::Indexing { .. }
            | load::Event::Indexed { .. }
            | load::Event::OnlyIndexing { .. } => Progress::none(),
        }
    }
    fn diagnostic(&self) -> bool {
        matches!(self, load::Event::Note(_))
    }
}

/// What a dump wrote, and where the binary log stood (the `done` event).
pub struct Dumped<'a> {
    /// The dump's directory.
    pub dir: &'a Path,
    /// Its manifest.
    pub manifest: &'a Manifest,
}

impl Dumped<'_> {
    fn rows(&self) -> u64 {
        self.manifest.tables.iter().flat_map(|t| &t.chunks).map(|c| c.rows).sum()
    }
    fn chunks(&self) -> usize {
        self.manifest.tables.iter().map(|t| t.chunks.len()).sum()
    }
}

impl Serialize for Dumped<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (m, pos) = (self.manifest, &self.manifest.position);
        let mut o = s.serialize_map(None)?;
        o.serialize_entry("event", "done")?;
        o.serialize_entry("dir", self.dir)?;
        o.serialize_entry("tables", &m.tables.len())?;
        o.serialize_entry("objects", &m.objects.len())?;
        o.serialize_entry("chunks", &self.chunks())?;
        o.serialize_entry("rows", &self.rows())?;
        o.serialize_entry("binlog_file", &pos.binlog_file)?;
        o.serialize_entry("binlog_pos", &pos.binlog_pos)?;
        o.serialize_entry("gtid_binlog_pos", &pos.gtid_binlog_pos)?;
        o.serialize_entry("lock_held_ms", &m.lock.held_ms)?;
        o.end()
    }
}

impl News for Dumped<'_> {
    fn text(&self) -> Option<String> {
        let (m, pos) = (self.manifest, &self.manifest.position);
        Some(format!(
            "dumped {} ({} in {}) and {} to {}; binlog position {}{}",
            plural(m.tables.len(), "table", "tables"),
            plural(self.rows(), "row", "rows"),
            plural(self.chunks(), "chunk", "chunks"),
            plural(m.objects.len(), "view, routine, trigger or event", "views, routines, triggers and events"),
            self.dir.display(),
            match (&pos.binlog_file, pos.binlog_pos) {
                (Some(f), Some(p)) => format!("{f}:{p}"),
                _ => "none (binary log off)".into(),
            },
            pos.gtid_binlog_pos.as_deref().filter(|g| !g.is_empty()).map(|g| format!(", GTID {g}")).unwrap_or_default(),
        ))
    }
}

/// What a load did (the `done` event).
#[derive(Serialize)]
#[serde(tag = "event", rename = "done")]
pub struct Loaded<'a> {
    /// The dump's directory.
    #[serde(skip)]
    pub dir: &'a Path,
    /// Rows this run loaded.
    pub rows: u64,
    /// Chunks found loaded already (`--resume`).
    pub chunks_already_loaded: u64,
    /// How long the load took.
    pub seconds: f64,
}

impl News for Loaded<'_> {
    fn text(&self) -> Option<String> {
        Some(format!(
            "loaded {} from {} in {:.1} s{}",
            plural(self.rows, "row", "rows"),
            self.dir.display(),
            self.seconds,
            match self.chunks_already_loaded {
                0 => String::new(),
                1 => " (1 chunk was loaded already)".into(),
                n => format!(" ({n} chunks were loaded already)"),
            }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_say_themselves_as_json_text_and_progress() {
        let e = dump::Event::Unlocked {
            statement: "FLUSH TABLES WITH READ LOCK".into(),
            held_ms: 1.5,
            waited_ms: 0.25,
            stages_ms: vec![("BLOCK_COMMIT".into(), 0.5)],
            copied: vec!["db.m".into()],
        };
        let j = serde_json::to_value(&e).unwrap();
        assert_eq!(j["event"], "unlocked");
        assert_eq!(j["stages_ms"], serde_json::json!([{"stage": "BLOCK_COMMIT", "ms": 0.5}]));
        assert_eq!(j["copied_under_lock"], serde_json::json!(["db.m"]));
        assert!(e.text().unwrap().ends_with("while copying 1 non-transactional table: db.m"), "{:?}", e.text());
        let c = load::Event::Chunk { table: "db.t".into(), rows: 10, bytes: 400, already: true };
        assert_eq!(c.progress(), Progress::advance(400, 0));
        assert_eq!(serde_json::to_value(&c).unwrap()["already_loaded"], true);
        let done = Loaded { dir: Path::new("/d"), rows: 1, chunks_already_loaded: 0, seconds: 0.5 };
        assert_eq!(
            serde_json::to_value(&done).unwrap(),
            serde_json::json!({"event": "done", "rows": 1, "chunks_already_loaded": 0, "seconds": 0.5})
        );
        assert_eq!(done.text().unwrap(), "loaded 1 row from /d in 0.5 s");
    }
}
