//! Capture: when a trigger fires, gather the evidence while the stall lasts
//! and write it to one directory (mode 0700, files 0600: they hold query
//! text): stack samples of every mysqld thread (the stacks engine, no gdb,
//! with SQL annotation and lock owners), the full processlist, InnoDB status,
//! row-lock and metadata-lock waits with who blocks whom, the metric history
//! around the onset, and `report.txt` whose first line is the verdict.
//! If SQL does not answer, the stacks are still captured.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use mysql::prelude::Queryable;
use pileup_conn::ConnSpec;
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

pub fn slug(s: &str) -> String {
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
            capture: CaptureOptions {
                mode: Mode::Consistent,
                stack_bytes: 256 * 1024,
                max_stop: s.max_stop,
                ..Default::default()
            },
            filter: ThreadFilter::default(),
            any_process: s.any_process,
            debug_info: false,
            sql_refresh: Duration::ZERO,
            keep_samples: pileup_stacks::KEEP_SAMPLES,
            debug_dirs: pileup_stacks::default_debug_dirs(),
            // Debug files already in the debuginfod cache; nothing fetched
            // before a capture that must not wait.
            debuginfod: Some(pileup_stacks::debuginfod::DebuginfodOptions::cache_only()),
            debuginfod_wait: true,
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
}
