//! What a capture gathered: the evidence every analysis reads and every
//! report renders, with the names and stamps of capture directories.

use std::collections::BTreeMap;
use std::time::Duration;

use pileup_engine::Profile;

use crate::store::Row;

#[derive(Debug, Clone)]
pub struct CaptureSettings {
    /// Stack samples per capture and the time between them.
    pub samples: usize,
    pub interval: Duration,
    pub max_stop: Duration,
    /// Accept a non-mysqld process (tests).
    pub any_process: bool,
    /// The watcher's own poll connection (0: none): it goes idle after
    /// each poll and must never be taken for a lock's idle holder.
    pub own_connection: u64,
    /// For a memory trigger: how long the server's growth is traced (eBPF,
    /// `pileup memory`'s tracer), beside its stacks.
    pub memory_trace: Duration,
}

impl Default for CaptureSettings {
    fn default() -> Self {
        CaptureSettings {
            samples: 5,
            interval: Duration::from_millis(200),
            max_stop: Duration::from_millis(200),
            any_process: false,
            own_connection: 0,
            memory_trace: Duration::from_secs(3),
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

/// A metadata lock as the server lists it: granted, or (performance_schema
/// only) still waited for.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MdlLock {
    pub conn: u64,
    /// The lock mode without `MDL_`: `BACKUP_FTWRL2`, `SHARED_READ`, `EXCLUSIVE`…
    pub mode: String,
    /// What is locked: `BACKUP` (the global read and backup lock), `TABLE`, `SCHEMA`…
    pub namespace: String,
    /// `schema.name` for tables and routines, empty for the backup lock.
    pub object: String,
    pub granted: bool,
}

/// The metadata locks held (and waited for) when the capture ran, and where
/// they were read from: `information_schema.METADATA_LOCK_INFO` (the
/// metadata_lock_info plugin, granted locks only) or
/// `performance_schema.metadata_locks` (granted and pending).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MetadataLocks {
    pub source: String,
    pub locks: Vec<MdlLock>,
}

/// An open InnoDB transaction (`information_schema.INNODB_TRX`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OpenTrx {
    pub conn: u64,
    /// Seconds since it started (the server keeps whole seconds).
    pub age_s: i64,
    pub state: String,
    pub query: Option<String>,
    pub tables_locked: u64,
    pub rows_locked: u64,
}

/// Everything a capture gathered (also what the verdict is computed from).
#[derive(Default)]
pub struct Evidence {
    pub trigger: String,
    pub unix: f64,
    /// When the stall began: the trigger's condition first held, or the
    /// thread scan first saw the pile-up (to its 100 ms).
    pub onset_unix: Option<f64>,
    pub sql_error: Option<String>,
    /// Which read of the SQL side the evidence is (a capture reads it at
    /// its start, while the stall lasts, and again during a long capture).
    pub sql_read: Option<String>,
    /// Processlist rows: id, user, host, db, command, time, state, info, and
    /// on MariaDB time_ms and tid; the capture's own connection left out.
    pub processlist: Vec<BTreeMap<String, String>>,
    /// When the processlist was read (Unix seconds).
    pub processlist_unix: Option<f64>,
    /// What idle connections that may hold a lock others wait for last
    /// ran, read from the server's memory
    /// ([`crate::last_statement`]), by connection id.
    pub last_statements: BTreeMap<u64, crate::last_statement::LastStatement>,
    /// Why no last statement could be read at all, when none could.
    pub last_statements_error: Option<String>,
    pub innodb_status: Option<String>,
    pub row_lock_waits: Vec<RowLockWait>,
    /// Metadata locks, when the server lists them.
    pub mdl: Option<MetadataLocks>,
    /// Open InnoDB transactions, oldest first.
    pub trx: Vec<OpenTrx>,
    /// The server variables the stall classes quote ([`crate::classes::VARIABLES`]).
    pub variables: BTreeMap<String, String>,
    pub profile: Option<Profile>,
    /// Share of the stack sampling's time some task of the server's cgroup
    /// was stalled on I/O (the kernel's pressure stall information): the
    /// disk as it was during the capture, which a capture early in a stall
    /// sees before a poll's second has shown it.
    pub io_pressure_pct: Option<f64>,
    pub stacks_error: Option<String>,
    pub history: Vec<Row>,
    /// For a memory trigger: the server's growth, traced and charged to
    /// statements and stacks, or why it could not be.
    pub growth: Option<pileup_growth::GrowthTrace>,
    pub growth_error: Option<String>,
    /// What the resident heap did over the trace (start + grown − given
    /// back = end), from walks of the server's mappings at its start, where
    /// the heap peaked and at its end.
    pub growth_heap: Option<pileup_growth::procmem::HeapIdentity>,
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

/// `YYYYmmdd-HHMMSS.s` in UTC: [`stamp`] with tenths of a second.
pub fn stamp_tenths(unix: f64) -> String {
    let tenths = ((unix - unix.floor()) * 10.0).floor() as u8;
    format!("{}.{}", stamp(unix), tenths.min(9))
}

pub fn slug(s: &str) -> String {
    let mut out: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    while out.contains("--") {
        out = out.replace("--", "-");
    }
    out.trim_matches('-').chars().take(40).collect()
}

/// Server variables the classes quote, read by the capture.
pub const VARIABLES: &[&str] = &[
    "table_open_cache",
    "table_definition_cache",
    "thread_cache_size",
    "max_connections",
    "innodb_log_file_size",
    "innodb_log_buffer_size",
    "innodb_flush_log_at_trx_commit",
    "innodb_autoextend_increment",
];

/// A connection as the processlist shows it: user, host, command, time,
/// statement.
pub fn pl_summary(ev: &Evidence, id: u64) -> String {
    match ev.processlist.iter().find(|r| r.get("id").and_then(|v| v.parse::<u64>().ok()) == Some(id)) {
        Some(r) => {
            let g = |k: &str| r.get(k).cloned().unwrap_or_default();
            let info = r
                .get("info")
                .map(|i| format!(" running `{}`", pileup_engine::one_line(i, 160)))
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

/// Blocking transactions that are not themselves waiting (InnoDB also lists
/// waiters queued behind other waiters), with how many distinct transactions
/// wait on each, most first.
pub fn root_blockers(waits: &[RowLockWait]) -> Vec<(u64, usize)> {
    use std::collections::{BTreeMap, BTreeSet};
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_and_slugs() {
        assert_eq!(stamp(0.0), "19700101-000000");
        assert_eq!(stamp(1_795_000_000.0), "20261118-110640");
        assert_eq!(stamp(951_782_400.0), "20000229-000000");
        assert_eq!(stamp_tenths(951_782_400.37), "20000229-000000.3");
        assert_eq!(slug("threads_running > 32 for 1s"), "threads-running-32-for-1s");
    }
}
