//! Store: the metric history in one SQLite file (`<data-dir>/pileup.db`, WAL,
//! mode 0600), one row per poll with raw and derived values as JSON, minute
//! rollups (averages) for long history, and the list of captures.
//! Retention: raw polls by age and by file size, rollups by age.

use std::collections::BTreeMap;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Result, WatchError};
use rusqlite::{params, Connection};

pub struct Store {
    db: Connection,
    pub path: PathBuf,
    /// Held by the one watcher writing this store (see [`Store::claim`]).
    _lock: Option<nix::fcntl::Flock<std::fs::File>>,
}

/// One stored poll.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub unix: f64,
    pub ok: bool,
    pub cost_ms: f64,
    pub error: Option<String>,
    pub derived: BTreeMap<String, f64>,
}

#[derive(Debug, Clone)]
pub struct Retention {
    /// Keep raw polls this many seconds.
    pub raw_secs: f64,
    /// Keep minute rollups this many seconds.
    pub rollup_secs: f64,
    /// Trim the oldest raw polls when the file grows past this.
    pub max_bytes: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention { raw_secs: 2.0 * 86400.0, rollup_secs: 90.0 * 86400.0, max_bytes: 1 << 30 }
    }
}

impl Store {
    pub fn open(dir: &Path) -> Result<Store> {
        std::fs::create_dir_all(dir).map_err(|source| WatchError::creating_dir(dir, source))?;
        let path = dir.join("pileup.db");
        // Create it 0600 ourselves: captures it indexes hold query text.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(|source| WatchError::Create { path: path.clone(), source })?;
        let db = Connection::open(&path).map_err(|source| WatchError::Store { path: path.clone(), source })?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "NORMAL")?;
        db.busy_timeout(std::time::Duration::from_secs(2))?;
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS polls (unix REAL PRIMARY KEY, ok INTEGER NOT NULL, cost_ms REAL, error TEXT, raw TEXT, derived TEXT);
             CREATE TABLE IF NOT EXISTS rollup_1m (minute INTEGER PRIMARY KEY, polls INTEGER, failed INTEGER, derived TEXT);
             CREATE TABLE IF NOT EXISTS captures (unix REAL PRIMARY KEY, dir TEXT NOT NULL, trigger TEXT NOT NULL, verdict TEXT);
             CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS stalls (began REAL NOT NULL, ended REAL NOT NULL, peak INTEGER NOT NULL, baseline INTEGER NOT NULL, what TEXT NOT NULL DEFAULT '', PRIMARY KEY (began, what));",
        )?;
        // A store from before stalls said what they were (keyed by their
        // start alone): the same rows, keyed by start and what.
        let has_what: bool =
            db.query_row("SELECT COUNT(*) FROM pragma_table_info('stalls') WHERE name = 'what'", [], |r| r.get(0))?;
        if !has_what {
            db.execute_batch(
                "BEGIN;
                 ALTER TABLE stalls RENAME TO stalls_before_what;
                 CREATE TABLE stalls (began REAL NOT NULL, ended REAL NOT NULL, peak INTEGER NOT NULL, baseline INTEGER NOT NULL, what TEXT NOT NULL DEFAULT '', PRIMARY KEY (began, what));
                 INSERT INTO stalls (began, ended, peak, baseline) SELECT began, ended, peak, baseline FROM stalls_before_what;
                 DROP TABLE stalls_before_what;
                 COMMIT;",
            )?;
        }
        Ok(Store { db, path, _lock: None })
    }

    /// Take this store for one watcher: only one writes a store at a time.
    pub fn claim(&mut self) -> Result<()> {
        use nix::fcntl::{Flock, FlockArg};
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let lock_path = dir.join("watch.lock");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|source| WatchError::Create { path: lock_path.clone(), source })?;
        let mut f = match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((_, _)) => {
                let who = std::fs::read_to_string(&lock_path).unwrap_or_default();
                return Err(WatchError::InUse {
                    who: if who.trim().is_empty() { String::new() } else { format!(" (pid {})", who.trim()) },
                    dir: dir.into(),
                });
            }
        };
        {
            use std::io::{Seek, Write};
            let _ = f.set_len(0);
            let _ = f.seek(std::io::SeekFrom::Start(0));
            let _ = write!(f, "{}", std::process::id());
        }
        self._lock = Some(f);
        Ok(())
    }

    /// Record that this store is the history of `server` (the server's own
    /// identity: host, port, datadir), or refuse if it holds another's — two
    /// servers' polls interleaved in one timeline would make every rate and
    /// baseline wrong.
    pub fn bind_server(&self, server: &str) -> Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        match self.server() {
            Some(h) if h != server => {
                return Err(WatchError::OtherServer { dir: dir.into(), held: h, server: server.into() })
            }
            Some(_) => {}
            None => {
                self.db.execute("INSERT INTO meta (key, value) VALUES ('server', ?1)", params![server])?;
            }
        }
        Ok(())
    }

    /// The server whose history this is, if a watcher has claimed it.
    pub fn server(&self) -> Option<String> {
        self.db.query_row("SELECT value FROM meta WHERE key = 'server'", [], |r| r.get(0)).ok()
    }

    pub fn insert(&self, p: &crate::poll::Poll, derived: &BTreeMap<String, f64>) -> Result<()> {
        self.db.execute(
            "INSERT OR REPLACE INTO polls (unix, ok, cost_ms, error, raw, derived) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                p.unix,
                p.ok as i64,
                p.cost_ms,
                p.error,
                serde_json::to_string(&p.values)?,
                serde_json::to_string(derived)?
            ],
        )?;
        Ok(())
    }

    /// Polls with `from <= unix <= to`, oldest first.
    pub fn range(&self, from: f64, to: f64) -> Result<Vec<Row>> {
        let mut st = self.db.prepare(
            "SELECT unix, ok, cost_ms, error, derived FROM polls WHERE unix >= ?1 AND unix <= ?2 ORDER BY unix",
        )?;
        let rows = st.query_map(params![from, to], |r| {
            let d: Option<String> = r.get(4)?;
            Ok(Row {
                unix: r.get(0)?,
                ok: r.get::<_, i64>(1)? != 0,
                cost_ms: r.get::<_, Option<f64>>(2)?.unwrap_or(0.0),
                error: r.get(3)?,
                derived: d.and_then(|d| serde_json::from_str(&d).ok()).unwrap_or_default(),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    pub fn count(&self) -> Result<i64> {
        Ok(self.db.query_row("SELECT COUNT(*) FROM polls", [], |r| r.get(0))?)
    }

    pub fn add_capture(&self, unix: f64, dir: &Path, trigger: &str, verdict: &str) -> Result<()> {
        self.db.execute(
            "INSERT OR REPLACE INTO captures (unix, dir, trigger, verdict) VALUES (?1, ?2, ?3, ?4)",
            params![unix, dir.to_string_lossy(), trigger, verdict],
        )?;
        Ok(())
    }

    pub fn captures(&self) -> Result<Vec<(f64, String, String, Option<String>)>> {
        let mut st = self.db.prepare("SELECT unix, dir, trigger, verdict FROM captures ORDER BY unix")?;
        let v = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(v)
    }

    /// A pile-up seen by the thread scan.
    pub fn add_stall(&self, s: &crate::scan::Stall) -> Result<()> {
        self.db.execute(
            "INSERT OR REPLACE INTO stalls (began, ended, peak, baseline, what) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![s.began_unix, s.ended_unix, s.peak_blocked, s.baseline, s.what.as_deref().unwrap_or("")],
        )?;
        Ok(())
    }

    /// Pile-ups that overlap `from..=to`, oldest first.
    pub fn stalls(&self, from: f64, to: f64) -> Result<Vec<crate::scan::Stall>> {
        let mut st = self.db.prepare(
            "SELECT began, ended, peak, baseline, what FROM stalls WHERE ended >= ?1 AND began <= ?2 ORDER BY began",
        )?;
        let v = st
            .query_map(params![from, to], |r| {
                Ok(crate::scan::Stall {
                    began_unix: r.get(0)?,
                    ended_unix: r.get(1)?,
                    peak_blocked: r.get(2)?,
                    baseline: r.get(3)?,
                    what: Some(r.get::<_, String>(4)?).filter(|w| !w.is_empty()),
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(v)
    }

    /// Roll up complete minutes older than `now - 60 s`, then apply retention.
    pub fn maintain(&self, now: f64, r: &Retention) -> Result<()> {
        let last_done: Option<i64> = self.db.query_row("SELECT MAX(minute) FROM rollup_1m", [], |x| x.get(0))?;
        let upto = ((now - 60.0) / 60.0).floor() as i64; // minutes strictly before this are complete
        let first: Option<f64> = self.db.query_row("SELECT MIN(unix) FROM polls", [], |x| x.get(0))?;
        if let Some(first) = first {
            let start = last_done.map(|m| m + 1).unwrap_or((first / 60.0).floor() as i64);
            for minute in start..upto {
                let rows = self.range(minute as f64 * 60.0, minute as f64 * 60.0 + 59.999_999)?;
                if rows.is_empty() {
                    continue;
                }
                let mut sum: BTreeMap<String, (f64, usize)> = BTreeMap::new();
                for row in &rows {
                    for (k, v) in &row.derived {
                        let e = sum.entry(k.clone()).or_default();
                        e.0 += v;
                        e.1 += 1;
                    }
                }
                let avg: BTreeMap<String, f64> = sum.into_iter().map(|(k, (s, n))| (k, s / n as f64)).collect();
                let failed = rows.iter().filter(|r| !r.ok).count();
                self.db.execute(
                    "INSERT OR REPLACE INTO rollup_1m (minute, polls, failed, derived) VALUES (?1, ?2, ?3, ?4)",
                    params![minute, rows.len() as i64, failed as i64, serde_json::to_string(&avg)?],
                )?;
            }
        }
        self.db.execute("DELETE FROM polls WHERE unix < ?1", params![now - r.raw_secs])?;
        self.db.execute("DELETE FROM rollup_1m WHERE minute < ?1", params![((now - r.rollup_secs) / 60.0) as i64])?;
        self.db.execute("DELETE FROM stalls WHERE ended < ?1", params![now - r.rollup_secs])?;
        let size = std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0);
        if size > r.max_bytes {
            // Drop the oldest tenth of the raw history (rollups stay).
            self.db.execute("DELETE FROM polls WHERE unix IN (SELECT unix FROM polls ORDER BY unix LIMIT (SELECT COUNT(*) / 10 + 1 FROM polls))", [])?;
            let _ = self.db.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); VACUUM;");
        }
        Ok(())
    }

    /// Minute rollups in a range (minute start unix, averages).
    pub fn rollups(&self, from: f64, to: f64) -> Result<Vec<(f64, BTreeMap<String, f64>)>> {
        let mut st = self
            .db
            .prepare("SELECT minute, derived FROM rollup_1m WHERE minute >= ?1 AND minute <= ?2 ORDER BY minute")?;
        let v = st
            .query_map(params![(from / 60.0).floor() as i64, (to / 60.0).floor() as i64], |r| {
                let m: i64 = r.get(0)?;
                let d: String = r.get(1)?;
                Ok((m as f64 * 60.0, serde_json::from_str(&d).unwrap_or_default()))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::poll::Poll;

    fn poll(unix: f64, ok: bool, q: f64) -> (Poll, BTreeMap<String, f64>) {
        let p = Poll {
            unix,
            ok,
            cost_ms: 1.0,
            error: (!ok).then(|| "timeout".into()),
            values: [("questions".to_string(), q)].into(),
            conn_tids: None,
            known_tids: None,
        };
        (p, [("questions_rate".to_string(), q)].into())
    }

    #[test]
    fn a_file_where_the_data_directory_goes_is_named_as_a_file() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("afile");
        std::fs::write(&file, "").unwrap();
        for dir in [file.clone(), file.join("below")] {
            let Err(e) = Store::open(&dir) else { panic!("a store in a file") };
            let text = e.to_string();
            assert!(matches!(&e, WatchError::NotADirectory { file: f, .. } if *f == file), "{text}");
            assert!(text.contains("is a file, not a directory") && !text.contains("os error"), "{text}");
        }
    }

    #[test]
    fn a_store_from_before_stalls_said_what_they_were_keeps_its_stalls() {
        let d = tempfile::tempdir().unwrap();
        {
            let db = Connection::open(d.path().join("pileup.db")).unwrap();
            db.execute_batch(
                "CREATE TABLE stalls (began REAL PRIMARY KEY, ended REAL NOT NULL, peak INTEGER NOT NULL, baseline INTEGER NOT NULL);
                 INSERT INTO stalls VALUES (100.0, 100.4, 30, 2);",
            )
            .unwrap();
        }
        let s = Store::open(d.path()).unwrap();
        let st = s.stalls(0.0, 1e9).unwrap();
        assert_eq!(st.len(), 1);
        assert_eq!((st[0].peak_blocked, st[0].what.as_deref()), (30, None));
        let again = crate::scan::Stall { what: Some("lock waits".into()), ..st[0].clone() };
        s.add_stall(&again).unwrap();
        assert_eq!(s.stalls(0.0, 1e9).unwrap().len(), 2, "keyed by start and what now");
        drop(s);
        assert_eq!(Store::open(d.path()).unwrap().stalls(0.0, 1e9).unwrap().len(), 2, "migrated once");
    }

    #[test]
    fn history_survives_reopen_rolls_up_and_expires() {
        let d = tempfile::tempdir().unwrap();
        {
            let s = Store::open(d.path()).unwrap();
            for i in 0..180 {
                let (p, der) = poll(6000.0 + i as f64, i % 60 != 7, i as f64);
                s.insert(&p, &der).unwrap();
            }
        }
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(d.path().join("pileup.db")).unwrap().permissions().mode() & 0o777, 0o600);
        let mut s = Store::open(d.path()).unwrap();
        assert_eq!(s.count().unwrap(), 180, "reopened store keeps history");
        s.claim().unwrap();
        let mut other = Store::open(d.path()).unwrap();
        let e = other.claim().unwrap_err().to_string();
        assert!(e.contains("another pileup watch") && e.contains(&std::process::id().to_string()), "{e}");
        let r = s.range(6010.0, 6012.0).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].derived["questions_rate"], 10.0);
        assert!(!s.range(6007.0, 6007.0).unwrap()[0].ok);
        // now = 6000+180+60 → minutes 100, 101, 102 are complete
        s.maintain(6240.0, &Retention { raw_secs: 100.0, ..Default::default() }).unwrap();
        let ru = s.rollups(0.0, 1e9).unwrap();
        assert_eq!(ru.len(), 3);
        assert_eq!(ru[0].1["questions_rate"], 29.5, "average of 0..59");
        assert_eq!(s.count().unwrap(), 40, "raw polls older than 100 s are gone");
        let st =
            crate::scan::Stall { began_unix: 6100.25, ended_unix: 6100.65, peak_blocked: 30, baseline: 4, what: None };
        s.add_stall(&st).unwrap();
        assert_eq!(s.stalls(6100.5, 6200.0).unwrap(), vec![st.clone()], "overlapping the range");
        // Two triggers' short stalls that began at one poll are both kept.
        let a = crate::scan::Stall { what: Some("lock waits".into()), peak_blocked: 0, baseline: 0, ..st.clone() };
        let b = crate::scan::Stall { what: Some("row-lock waits".into()), ..a.clone() };
        s.add_stall(&a).unwrap();
        s.add_stall(&b).unwrap();
        assert_eq!(s.stalls(6100.5, 6200.0).unwrap().len(), 3);
        assert!(s.stalls(6101.0, 6200.0).unwrap().is_empty());
        drop(s);
        let mut again = Store::open(d.path()).unwrap();
        again.claim().unwrap();
        again.bind_server("db1:3306 /var/lib/mysql/").unwrap();
        again.bind_server("db1:3306 /var/lib/mysql/").unwrap();
        assert_eq!(again.server().as_deref(), Some("db1:3306 /var/lib/mysql/"));
        let e = again.bind_server("db2:3306 /var/lib/mysql/").unwrap_err().to_string();
        assert!(e.contains("holds the history of db1:3306 /var/lib/mysql/, not db2:3306"), "{e}");
    }
}
