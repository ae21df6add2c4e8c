//! Capture: when a trigger fires, gather the evidence while the stall lasts
//! and write it to one directory (mode 0700, files 0600: they hold query
//! text): stack samples of every mysqld thread (the stacks engine, no gdb,
//! with SQL annotation and lock owners), the full processlist, InnoDB status,
//! row-lock and metadata-lock waits with who blocks whom, the metric history
//! around the onset, and `report.txt` whose first line is the verdict.
//! If SQL does not answer, the stacks are still captured.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use mysql::prelude::Queryable;
use pileup_conn::ConnSpec;
use pileup_stacks::render::{render, Format, RenderOptions};
use pileup_stacks::{CaptureOptions, Mode, Profile, Sampler, SamplerOptions, SqlSource, ThreadFilter};

use crate::store::Row;

#[derive(Debug, Clone)]
pub struct CaptureSettings {
    /// Stack samples per capture and the time between them.
    pub samples: usize,
    pub interval: Duration,
    pub max_stop: Duration,
    /// Accept a non-mysqld process (tests).
    pub any_process: bool,
}

impl Default for CaptureSettings {
    fn default() -> Self {
        CaptureSettings {
            samples: 5,
            interval: Duration::from_millis(200),
            max_stop: Duration::from_millis(200),
            any_process: false,
        }
    }
}

/// A row-lock wait: who waits, who blocks.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RowLockWait {
    pub waiting_conn: u64,
    pub waiting_query: Option<String>,
    pub blocking_conn: u64,
    pub blocking_query: Option<String>,
    pub blocking_trx_age_s: Option<i64>,
}

/// Everything a capture gathered (also what the verdict is computed from).
#[derive(Default)]
pub struct Evidence {
    pub trigger: String,
    pub unix: f64,
    pub sql_error: Option<String>,
    /// Processlist rows: id, user, host, db, command, time, state, info.
    pub processlist: Vec<BTreeMap<String, String>>,
    pub innodb_status: Option<String>,
    pub row_lock_waits: Vec<RowLockWait>,
    /// (connection id, lock mode, lock type, schema.table) from metadata_lock_info.
    pub mdl: Option<Vec<(u64, String, String, String)>>,
    pub profile: Option<Profile>,
    pub stacks_error: Option<String>,
    pub history: Vec<Row>,
}

/// `YYYYmmdd-HHMMSS` in UTC, from Unix seconds (civil-from-days; a date
/// crate for one format would be out of proportion).
pub fn stamp(unix: f64) -> String {
    let secs = unix.floor() as i64;
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}{m:02}{d:02}-{:02}{:02}{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

fn slug(s: &str) -> String {
    let mut out: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    while out.contains("--") {
        out = out.replace("--", "-");
    }
    out.trim_matches('-').chars().take(40).collect()
}

/// Gather evidence (SQL and stacks) for a fired trigger.
pub fn gather(
    trigger: &str,
    unix: f64,
    spec: Option<&ConnSpec>,
    pid: Option<i32>,
    s: &CaptureSettings,
    history: Vec<Row>,
) -> Evidence {
    let mut ev = Evidence { trigger: trigger.to_string(), unix, history, ..Default::default() };
    // Stacks first: they do not depend on SQL answering.
    if let Some(pid) = pid {
        // Annotation must not delay the stacks of a server that hangs: a
        // short connect budget, and none at all when the poll had failed.
        let sql = spec
            .filter(|_| trigger != "poll_failed" && !trigger.starts_with("poll_failed "))
            .and_then(|sp| {
                let mut quick = sp.clone();
                quick.timeout = quick.timeout.min(Duration::from_millis(500));
                quick.connect().ok()
            })
            .and_then(|c| SqlSource::new(c).ok());
        let opts = SamplerOptions {
            capture: CaptureOptions { mode: Mode::Consistent, stack_bytes: 256 * 1024, max_stop: s.max_stop },
            filter: ThreadFilter::default(),
            any_process: s.any_process,
            debug_info: false,
            sql_refresh: Duration::ZERO,
        };
        match Sampler::new(pid, opts, sql) {
            Ok(mut sampler) => match sampler.run(s.samples.max(1), s.interval, |_, _| {}) {
                Ok(()) => ev.profile = Some(sampler.finish()),
                Err(e) => ev.stacks_error = Some(e.to_string()),
            },
            Err(e) => ev.stacks_error = Some(e.to_string()),
        }
    }
    if let Some(sp) = spec {
        let mut bounded = sp.clone();
        bounded.timeout = bounded.timeout.min(Duration::from_secs(2));
        if let Err(e) = gather_sql(&bounded, &mut ev) {
            ev.sql_error = Some(format!("{e:#}"));
        }
    }
    ev
}

fn gather_sql(spec: &ConnSpec, ev: &mut Evidence) -> Result<()> {
    let mut c = spec.connect()?;
    let rows: Vec<mysql::Row> = c.query(
        "SELECT ID, USER, HOST, DB, COMMAND, TIME, STATE, INFO FROM information_schema.PROCESSLIST ORDER BY TIME DESC",
    )?;
    for r in rows {
        let mut m = BTreeMap::new();
        for (i, col) in r.columns_ref().iter().enumerate() {
            let v: Option<mysql::Value> = r.get(i);
            let s = match v {
                Some(mysql::Value::NULL) | None => continue,
                Some(mysql::Value::Bytes(b)) => String::from_utf8_lossy(&b).into_owned(),
                Some(o) => o.as_sql(true).trim_matches('\'').to_string(),
            };
            m.insert(col.name_str().to_lowercase(), s);
        }
        ev.processlist.push(m);
    }
    ev.innodb_status =
        c.query_first::<mysql::Row, _>("SHOW ENGINE INNODB STATUS").ok().flatten().and_then(|r| r.get::<String, _>(2));
    let waits: Vec<(u64, Option<String>, u64, Option<String>, Option<i64>)> = c
        .query(
            "SELECT r.trx_mysql_thread_id, r.trx_query, b.trx_mysql_thread_id, b.trx_query, TIMESTAMPDIFF(SECOND, b.trx_started, NOW()) \
             FROM information_schema.INNODB_LOCK_WAITS w \
             JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id \
             JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id",
        )
        .unwrap_or_default();
    ev.row_lock_waits = waits
        .into_iter()
        .map(|(w, wq, b, bq, age)| RowLockWait {
            waiting_conn: w,
            waiting_query: wq,
            blocking_conn: b,
            blocking_query: bq,
            blocking_trx_age_s: age,
        })
        .collect();
    let has_mdl: Option<i64> = c
        .query_first("SELECT COUNT(*) FROM information_schema.PLUGINS WHERE PLUGIN_NAME = 'METADATA_LOCK_INFO' AND PLUGIN_STATUS = 'ACTIVE'")
        .unwrap_or(None);
    if has_mdl.unwrap_or(0) > 0 {
        let m: Vec<(u64, String, String, Option<String>, Option<String>)> =
            c.query("SELECT THREAD_ID, LOCK_MODE, LOCK_TYPE, TABLE_SCHEMA, TABLE_NAME FROM information_schema.METADATA_LOCK_INFO").unwrap_or_default();
        ev.mdl = Some(
            m.into_iter()
                .map(|(t, mode, ty, s, n)| {
                    (t, mode, ty, format!("{}.{}", s.unwrap_or_default(), n.unwrap_or_default()))
                })
                .collect(),
        );
    }
    Ok(())
}

/// Blocking transactions that are not themselves waiting (InnoDB also lists
/// waiters queued behind other waiters), with how many distinct transactions
/// wait on each, most first.
pub fn root_blockers(waits: &[RowLockWait]) -> Vec<(u64, usize)> {
    use std::collections::BTreeSet;
    let waiting: BTreeSet<u64> = waits.iter().map(|w| w.waiting_conn).collect();
    let mut by: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    for w in waits {
        by.entry(w.blocking_conn).or_default().insert(w.waiting_conn);
    }
    // All waiters ultimately queue behind a root; count them all for it.
    let mut roots: Vec<(u64, usize)> =
        by.keys().filter(|b| !waiting.contains(b)).map(|&b| (b, waiting.len())).collect();
    if roots.len() > 1 {
        roots = roots.into_iter().map(|(b, _)| (b, by[&b].len())).collect();
    }
    if roots.is_empty() {
        // A cycle (deadlock about to be resolved): fall back to the most blocking.
        roots = by.iter().map(|(b, w)| (*b, w.len())).collect();
    }
    roots.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    roots
}

fn pl_summary(ev: &Evidence, id: u64) -> String {
    match ev.processlist.iter().find(|r| r.get("id").and_then(|v| v.parse::<u64>().ok()) == Some(id)) {
        Some(r) => {
            let g = |k: &str| r.get(k).cloned().unwrap_or_default();
            let info = r
                .get("info")
                .map(|i| format!(" running `{}`", pileup_stacks::annotate::one_line(i, 160)))
                .unwrap_or_else(|| " (idle)".into());
            format!(
                "connection {id} ({}@{}, {} for {}s){info}",
                g("user"),
                g("host").split(':').next().unwrap_or(""),
                g("command"),
                g("time")
            )
        }
        None => format!("connection {id}"),
    }
}

/// The first line of the report: the likely culprit, with its evidence.
pub fn verdict(ev: &Evidence) -> String {
    // 1. Row locks: the transaction most others wait for.
    if let Some((b, n)) = root_blockers(&ev.row_lock_waits).into_iter().next() {
        let w = ev.row_lock_waits.iter().find(|w| w.blocking_conn == b).unwrap();
        let age = w.blocking_trx_age_s.map(|a| format!(", its transaction open {a}s")).unwrap_or_default();
        return format!("row lock convoy: {n} waiting transaction(s) blocked by {}{age}", pl_summary(ev, b));
    }
    // 2. Metadata locks: FTWRL / backup lock or a table lock holder.
    let waiting_grl = ev
        .processlist
        .iter()
        .filter(|r| {
            r.get("state").is_some_and(|s| {
                s.contains("global read lock") || s.contains("backup lock") || s.contains("metadata lock")
            })
        })
        .count();
    if waiting_grl > 0 {
        if let Some(mdl) = &ev.mdl {
            if let Some((holder, mode, _, _)) = mdl.iter().find(|(_, mode, ty, _)| {
                mode.contains("FTWRL") || ty.contains("Global read") || mode.contains("BACKUP_FTWRL")
            }) {
                return format!(
                    "global read lock: {waiting_grl} connection(s) wait, held by {} ({mode}: FLUSH TABLES WITH READ LOCK or a backup)",
                    pl_summary(ev, *holder)
                );
            }
            if let Some((holder, mode, _, obj)) =
                mdl.iter().find(|(_, mode, _, _)| mode.contains("EXCLUSIVE") || mode.contains("SHARED_NO"))
            {
                return format!(
                    "metadata lock: {waiting_grl} connection(s) wait, {obj} locked {mode} by {}",
                    pl_summary(ev, *holder)
                );
            }
        }
        return format!(
            "metadata lock wait: {waiting_grl} connection(s) wait for a global read, backup or metadata lock; the holder is named only with the metadata_lock_info plugin (INSTALL SONAME 'metadata_lock_info')"
        );
    }
    // 3. A pthread mutex with a known holder.
    if let Some(p) = &ev.profile {
        if let Some(l) = p.locks.iter().find(|l| l.owner_tid.is_some() && l.waiters.len() >= 2) {
            let o = l.owner_tid.unwrap();
            let who =
                p.thread(o).and_then(|t| t.sql.as_ref()).map(|s| format!(" ({})", s.summary(160))).unwrap_or_default();
            return format!(
                "{} thread(s) wait on {} 0x{:x} held by tid {o}{who}",
                l.waiters.len(),
                l.kind.describe(),
                l.addr
            );
        }
    }
    // 4. The server does not answer SQL.
    if let Some(e) = &ev.sql_error {
        let top = ev.profile.as_ref().and_then(|p| pileup_stacks::aggregate::group(p).into_iter().next());
        let stack = top
            .map(|g| {
                format!(
                    "; most common stack ({} thread-samples): {}",
                    g.count,
                    g.frames.iter().take(6).cloned().collect::<Vec<_>>().join(",")
                )
            })
            .unwrap_or_default();
        return format!("the server does not answer SQL ({}){stack}", e.lines().next().unwrap_or(""));
    }
    // 5. Otherwise: where threads are.
    if let Some(p) = &ev.profile {
        if let Some(g) = pileup_stacks::aggregate::group(p).into_iter().find(|g| g.statements.iter().any(|_| true)) {
            return format!(
                "no lock culprit found; busiest stack with SQL ({} thread-samples): {}",
                g.count,
                g.frames.iter().take(6).cloned().collect::<Vec<_>>().join(",")
            );
        }
    }
    "no culprit found in locks, SQL or stacks; see the files of this capture".into()
}

/// Write a capture directory under `root` and return its path and verdict.
pub fn write(root: &Path, ev: &Evidence) -> Result<(PathBuf, String)> {
    let dir = root.join(format!("{}-{}", stamp(ev.unix), slug(&ev.trigger)));
    pileup_files::create_private_dir(&dir)?;
    let v = verdict(ev);
    let mut rep = String::new();
    writeln!(rep, "VERDICT: {v}")?;
    writeln!(rep)?;
    writeln!(rep, "trigger: {} at {} UTC", ev.trigger, stamp(ev.unix))?;
    if let Some(e) = &ev.sql_error {
        writeln!(rep, "SQL: did not answer ({e})")?;
    }
    if let Some(e) = &ev.stacks_error {
        writeln!(rep, "stacks: not captured ({e})")?;
    }
    if !ev.row_lock_waits.is_empty() {
        writeln!(
            rep,
            "\nrow lock waits: {} edges; transactions blocking others without waiting themselves:",
            ev.row_lock_waits.len()
        )?;
        for (b, n) in root_blockers(&ev.row_lock_waits) {
            let q = ev.row_lock_waits.iter().find(|w| w.blocking_conn == b).and_then(|w| w.blocking_query.clone());
            writeln!(
                rep,
                "  {} — {n} waiting; its current statement: {}",
                pl_summary(ev, b),
                q.map(|q| format!("`{q}`")).unwrap_or_else(|| "none (idle in transaction)".into())
            )?;
        }
        let mut direct: Vec<String> = ev
            .row_lock_waits
            .iter()
            .map(|w| format!("conn {} `{}`", w.waiting_conn, w.waiting_query.as_deref().unwrap_or("")))
            .collect();
        direct.sort();
        direct.dedup();
        writeln!(rep, "  waiting: {}", direct.iter().take(10).cloned().collect::<Vec<_>>().join("; "))?;
    }
    if !ev.history.is_empty() {
        writeln!(rep, "\nmetrics before the trigger (per poll):")?;
        writeln!(rep, "  {:>19} {:>4} {:>12} {:>8} {:>10}", "time", "ok", "questions/s", "running", "poll ms")?;
        for r in ev.history.iter().rev().take(15).rev() {
            let g = |k: &str| r.derived.get(k).map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into());
            writeln!(
                rep,
                "  {:>19} {:>4} {:>12} {:>8} {:>10.1}",
                stamp(r.unix),
                if r.ok { "yes" } else { "NO" },
                g("questions_rate"),
                g("threads_running"),
                r.cost_ms
            )?;
        }
    }
    if let Some(p) = &ev.profile {
        let mut text = Vec::new();
        render(p, Format::Pmp, &RenderOptions::default(), &mut text)?;
        writeln!(rep, "\nstacks ({} samples, pt-pmp format):\n{}", p.samples.len(), String::from_utf8_lossy(&text))?;
        for (name, f) in [
            ("stacks.json", Format::Json),
            ("flamegraph.svg", Format::Svg),
            ("stacks.txt", Format::Pmp),
            ("stacks.pb.gz", Format::Pprof),
        ] {
            let ro = RenderOptions { thread_root: f == Format::Svg, ..Default::default() };
            pileup_files::write_private(&dir.join(name), |w| render(p, f, &ro, w))?;
        }
    }
    pileup_files::write_private(&dir.join("processlist.txt"), |f| {
        for r in &ev.processlist {
            writeln!(f, "{}", r.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("\t"))?;
        }
        Ok(())
    })?;
    if let Some(s) = &ev.innodb_status {
        pileup_files::write_private_bytes(&dir.join("innodb_status.txt"), s.as_bytes())?;
    }
    if let Some(m) = &ev.mdl {
        pileup_files::write_private(&dir.join("metadata_locks.txt"), |f| {
            for (t, mode, ty, obj) in m {
                writeln!(f, "{t}\t{mode}\t{ty}\t{obj}")?;
            }
            Ok(())
        })?;
    }
    crate::report::write_metrics(&dir, &ev.history)?;
    let saved = crate::report::EvidenceFile {
        trigger: ev.trigger.clone(),
        unix: ev.unix,
        verdict: v.clone(),
        sql_error: ev.sql_error.clone(),
        stacks_error: ev.stacks_error.clone(),
        processlist: ev.processlist.clone(),
        row_lock_waits: ev.row_lock_waits.clone(),
        root_blockers: root_blockers(&ev.row_lock_waits),
        mdl: ev.mdl.clone(),
    };
    pileup_files::write_private(&dir.join("evidence.json"), |w| Ok(serde_json::to_writer_pretty(w, &saved)?))?;
    pileup_files::write_private_bytes(&dir.join("report.txt"), rep.as_bytes())?;
    crate::report::write_html(&dir)?;
    Ok((dir, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_and_slugs() {
        assert_eq!(stamp(0.0), "19700101-000000");
        assert_eq!(stamp(1_795_000_000.0), "20261118-110640");
        assert_eq!(stamp(951_782_400.0), "20000229-000000");
        assert_eq!(slug("threads_running > 32 for 1s"), "threads-running-32-for-1s");
    }

    #[test]
    fn verdict_prefers_row_lock_blocker() {
        let mut ev = Evidence::default();
        ev.processlist.push(
            [
                ("id".to_string(), "7".to_string()),
                ("user".into(), "app".into()),
                ("command".into(), "Sleep".into()),
                ("time".into(), "12".into()),
            ]
            .into(),
        );
        for w in [10, 11, 12] {
            ev.row_lock_waits.push(RowLockWait {
                waiting_conn: w,
                waiting_query: Some("UPDATE t SET a=a+1 WHERE id=1".into()),
                blocking_conn: 7,
                blocking_query: None,
                blocking_trx_age_s: Some(12),
            });
        }
        let v = verdict(&ev);
        assert!(
            v.starts_with(
                "row lock convoy: 3 waiting transaction(s) blocked by connection 7 (app@, Sleep for 12s) (idle)"
            ),
            "{v}"
        );
        assert!(v.contains("open 12s"));
        // Waiters queued behind waiters do not hide the root.
        ev.row_lock_waits.push(RowLockWait { waiting_conn: 11, blocking_conn: 10, ..Default::default() });
        ev.row_lock_waits.push(RowLockWait { waiting_conn: 12, blocking_conn: 10, ..Default::default() });
        ev.row_lock_waits.push(RowLockWait { waiting_conn: 12, blocking_conn: 11, ..Default::default() });
        assert_eq!(root_blockers(&ev.row_lock_waits), vec![(7, 3)]);
        assert!(verdict(&ev).contains("blocked by connection 7 "));
        let ev2 = Evidence { sql_error: Some("timed out".into()), ..Default::default() };
        assert!(verdict(&ev2).starts_with("the server does not answer SQL (timed out)"));
    }
}
