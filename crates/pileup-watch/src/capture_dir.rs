//! The capture directory: one per capture, `<data-dir>/captures/<time>-<trigger>/`,
//! mode 0700, its files 0600 (they hold query text). What each file holds:
//!
//! | file | content |
//! |---|---|
//! | `evidence.json` | trigger, time, verdict, processlist, row and metadata lock waits, open transactions, the lock pile-up and its holder |
//! | `metrics.json` | the metric history around the trigger |
//! | `report.txt` | the text report, verdict first |
//! | `report.html` | the self-contained report ([`crate::report`]) |
//! | `stacks.txt`, `stacks.json`, `flamegraph.svg`, `stacks.pb.gz` | the stall's stacks (pt-pmp, JSON, flame graph, pprof) |
//! | `memory.json`, `memory.svg`, `memory.pb.gz` | for a memory trigger: the growth traced, by statement and stack (JSON, a flame graph by bytes, pprof's heap profile) |
//! | `processlist.txt`, `innodb_status.txt`, `metadata_locks.txt` | as read from the server |
//!
//! Written here ([`write`](fn@write), [`write_metrics`], [`write_report_html`]) and
//! read back here ([`read`]); the report only renders what it is given.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Result, WatchError};
use pileup_output::{render, Format, Options};
use serde::{Deserialize, Serialize};

use crate::evidence::{slug, stamp, Evidence, MetadataLocks, OpenTrx, RowLockWait};
use crate::holder::LockPileup;
use crate::store::Row;

/// What a capture saved besides stacks and metrics (`evidence.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvidenceFile {
    pub trigger: String,
    pub unix: f64,
    /// When the stall began (see [`Evidence::onset_unix`]).
    #[serde(default)]
    pub onset_unix: Option<f64>,
    pub verdict: String,
    pub sql_error: Option<String>,
    /// Which read of the SQL side the evidence is.
    #[serde(default)]
    pub sql_read: Option<String>,
    /// Written by a watcher that ends a capture with its completion
    /// marker (captures of older versions have none, and are not called
    /// cut short for it).
    #[serde(default)]
    pub marked: bool,
    pub stacks_error: Option<String>,
    pub processlist: Vec<BTreeMap<String, String>>,
    pub row_lock_waits: Vec<RowLockWait>,
    pub root_blockers: Vec<(u64, usize)>,
    /// Metadata locks as the server listed them (captures written before
    /// this field existed have none).
    #[serde(default)]
    pub metadata_locks: Option<MetadataLocks>,
    #[serde(default)]
    pub open_transactions: Vec<OpenTrx>,
    /// The lock pile-up and its holder, with how sure it is.
    #[serde(default)]
    pub lock_pileup: Option<LockPileup>,
    /// Stall classes whose signature the capture shows, earliest first.
    #[serde(default)]
    pub stall_classes: Vec<crate::classes::Finding>,
    /// Share of the stack sampling's time the server's tasks were stalled
    /// on I/O, where the kernel tells it for the server's cgroup.
    #[serde(default)]
    pub io_pressure_pct: Option<f64>,
    #[serde(default)]
    pub variables: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MetricRow {
    pub unix: f64,
    pub ok: bool,
    pub cost_ms: f64,
    pub error: Option<String>,
    pub derived: BTreeMap<String, f64>,
}

/// `metrics.json`: the metric history around the trigger.
pub fn write_metrics(dir: &Path, history: &[Row]) -> Result<()> {
    let rows: Vec<MetricRow> = history
        .iter()
        .map(|r| MetricRow {
            unix: r.unix,
            ok: r.ok,
            cost_ms: r.cost_ms,
            error: r.error.clone(),
            derived: r.derived.clone(),
        })
        .collect();
    pileup_files::write_private(&dir.join("metrics.json"), |w| -> Result<()> { Ok(serde_json::to_writer(w, &rows)?) })?;
    Ok(())
}

/// Write a capture directory under `root` for `ev`, its verdict and its
/// text report; returns the directory.
pub fn write(root: &Path, ev: &Evidence, verdict: &str, report_txt: &str) -> Result<PathBuf> {
    let dir = root.join(format!("{}-{}", stamp(ev.unix), slug(&ev.trigger)));
    pileup_files::create_private_dir(&dir)?;
    if let Some(p) = &ev.profile {
        for (name, f) in [
            ("stacks.json", Format::Json),
            ("flamegraph.svg", Format::Svg),
            ("stacks.txt", Format::Text),
            ("stacks.pb.gz", Format::Pprof),
        ] {
            let o = Options { thread_root: f == Format::Svg, ..Default::default() };
            pileup_files::write_private(&dir.join(name), |w| -> Result<()> {
                Ok(render(&pileup_profile::ProfileReport(p), f, &o, w)?)
            })?;
        }
    }
    if let Some(g) = &ev.growth {
        // The trace's fields, and what the resident heap did beside it.
        #[derive(serde::Serialize)]
        struct Memory<'a> {
            #[serde(flatten)]
            growth: &'a pileup_growth::GrowthTrace,
            heap: Option<&'a pileup_growth::procmem::HeapIdentity>,
        }
        pileup_files::write_private(&dir.join("memory.json"), |w| -> Result<()> {
            Ok(serde_json::to_writer_pretty(w, &Memory { growth: g, heap: ev.growth_heap.as_ref() })?)
        })?;
        if let Some(st) = pileup_growth::growth_stacks(g, "Memory growth of the server".into()) {
            pileup_files::write_private(&dir.join("memory.svg"), |w| -> Result<()> { Ok(st.svg(None, w)?) })?;
            pileup_files::write_private(&dir.join("memory.pb.gz"), |w| -> Result<()> {
                Ok(pileup_output::proto::write_gz(&st.pprof(), w)?)
            })?;
        }
    }
    pileup_files::write_private(&dir.join("processlist.txt"), |f| -> Result<()> {
        for r in &ev.processlist {
            writeln!(f, "{}", r.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("\t"))?;
        }
        Ok(())
    })?;
    if let Some(s) = &ev.innodb_status {
        pileup_files::write_private_bytes(&dir.join("innodb_status.txt"), s.as_bytes())?;
    }
    if let Some(m) = &ev.mdl {
        pileup_files::write_private(&dir.join("metadata_locks.txt"), |f| -> Result<()> {
            writeln!(f, "# from {}\nconnection\tmode\tnamespace\tobject\tstatus", m.source)?;
            for l in &m.locks {
                let status = if l.granted { "granted" } else { "waiting" };
                writeln!(f, "{}\t{}\t{}\t{}\t{status}", l.conn, l.mode, l.namespace, l.object)?;
            }
            Ok(())
        })?;
    }
    write_metrics(&dir, &ev.history)?;
    let saved = EvidenceFile {
        trigger: ev.trigger.clone(),
        unix: ev.unix,
        onset_unix: ev.onset_unix,
        verdict: verdict.to_string(),
        sql_error: ev.sql_error.clone(),
        sql_read: ev.sql_read.clone(),
        marked: true,
        stacks_error: ev.stacks_error.clone(),
        processlist: ev.processlist.clone(),
        row_lock_waits: ev.row_lock_waits.clone(),
        root_blockers: crate::verdict::root_blockers(&ev.row_lock_waits),
        metadata_locks: ev.mdl.clone(),
        open_transactions: ev.trx.clone(),
        lock_pileup: crate::holder::analyse(ev),
        stall_classes: crate::classes::findings(ev),
        io_pressure_pct: ev.io_pressure_pct,
        variables: ev.variables.clone(),
    };
    pileup_files::write_private(&dir.join("evidence.json"), |w| -> Result<()> {
        Ok(serde_json::to_writer_pretty(w, &saved)?)
    })?;
    pileup_files::write_private_bytes(&dir.join("report.txt"), report_txt.as_bytes())?;
    write_complete(&dir)?;
    Ok(dir)
}

/// What `complete.json` says: the files the capture wrote before it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Complete {
    pub files: Vec<String>,
}

/// Whether the capture in `dir` was written whole: its marker is there,
/// or it comes from a watcher that wrote none.
pub fn is_complete(dir: &Path) -> bool {
    if dir.join(pileup_store::COMPLETE).exists() {
        return true;
    }
    #[derive(Deserialize)]
    struct Marked {
        #[serde(default)]
        marked: bool,
    }
    let m: Option<Marked> = std::fs::read(dir.join("evidence.json")).ok().and_then(|b| serde_json::from_slice(&b).ok());
    m.is_some_and(|m| !m.marked)
}

/// The completion marker, written last: every file in `dir` so far.
fn write_complete(dir: &Path) -> Result<()> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .map_err(|source| WatchError::Create { path: dir.into(), source })?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| !n.starts_with('.'))
        .collect();
    files.sort();
    pileup_files::write_private(&dir.join(pileup_store::COMPLETE), |w| -> Result<()> {
        Ok(serde_json::to_writer_pretty(w, &Complete { files })?)
    })
}

/// The files a capture lacks: its marker when it was cut short, each file
/// the marker names that is gone, and `metrics.json` when it cannot be
/// read; none for a whole capture.
fn missing_files(dir: &Path, metrics_read: bool, marked: bool) -> Vec<String> {
    let marker: Option<Complete> =
        std::fs::read(dir.join(pileup_store::COMPLETE)).ok().and_then(|b| serde_json::from_slice(&b).ok());
    let mut missing: Vec<String> = match marker {
        None if marked => vec![format!("{} (the capture was cut short)", pileup_store::COMPLETE)],
        None => vec![],
        Some(m) => m.files.into_iter().filter(|f| !dir.join(f).exists()).collect(),
    };
    if !metrics_read && !missing.iter().any(|m| m == "metrics.json") {
        missing.push("metrics.json".into());
    }
    missing
}

/// `stalls.json`: the pile-ups the thread scan saw around the trigger.
pub fn write_stalls(dir: &Path, stalls: &[crate::scan::Stall]) -> Result<()> {
    pileup_files::write_private(&dir.join("stalls.json"), |w| -> Result<()> { Ok(serde_json::to_writer(w, stalls)?) })
}

/// `report.html`.
pub fn write_report_html(dir: &Path, html: &str) -> Result<()> {
    Ok(pileup_files::write_private_bytes(&dir.join("report.html"), html.as_bytes())?)
}

/// A capture directory read back, for the report: as JSON, its evidence,
/// the metrics around it and the stalls.
#[derive(Serialize)]
pub struct Capture {
    pub evidence: EvidenceFile,
    pub metrics: Vec<MetricRow>,
    #[serde(skip)]
    pub flamegraph_svg: Option<Vec<u8>>,
    #[serde(skip)]
    pub stacks_txt: Option<String>,
    #[serde(skip)]
    pub innodb_status: Option<String>,
    pub stalls: Vec<crate::scan::Stall>,
    /// `report.txt`, as the capture wrote it.
    #[serde(skip)]
    pub report_txt: Option<String>,
    /// What the capture lacks (see [`missing_files`]); empty when whole.
    pub missing: Vec<String>,
}

/// Read a capture directory back.
pub fn read(dir: &Path) -> Result<Capture> {
    let evidence: EvidenceFile = serde_json::from_slice(
        &std::fs::read(dir.join("evidence.json")).map_err(|_| WatchError::NotACapture(dir.into()))?,
    )
    .map_err(|source| WatchError::Damaged { path: dir.into(), source })?;
    let metrics: Option<Vec<MetricRow>> =
        std::fs::read(dir.join("metrics.json")).ok().and_then(|b| serde_json::from_slice(&b).ok());
    let missing = missing_files(dir, metrics.is_some(), evidence.marked);
    let text = |n: &str| std::fs::read_to_string(dir.join(n)).ok();
    Ok(Capture {
        evidence,
        metrics: metrics.unwrap_or_default(),
        missing,
        flamegraph_svg: std::fs::read(dir.join("flamegraph.svg")).ok(),
        stacks_txt: text("stacks.txt"),
        report_txt: text("report.txt"),
        innodb_status: text("innodb_status.txt"),
        stalls: std::fs::read(dir.join("stalls.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default(),
    })
}
