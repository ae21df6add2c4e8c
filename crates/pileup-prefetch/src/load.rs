//! Have InnoDB read pages by number: its buffer pool load.
//!
//! `SET GLOBAL innodb_buffer_pool_load_now = ON` makes InnoDB read the
//! pages listed in `innodb_buffer_pool_filename` ("space,page" lines) in the
//! background, each with an asynchronous read that takes no index latch and
//! skips a page already in the pool. Pointed at a short list of the leaves
//! the applier is about to need ([`crate::pages`]), it is a prefetch that
//! never holds up the applier's own descents, and costs the server no
//! statement to parse or execute.
//!
//! Costs and limits (docs/prefetch.md states them for users):
//! - The list is read from the server's own buffer pool file
//!   (`innodb_buffer_pool_filename`, read-only while MariaDB runs) in the
//!   directory InnoDB reads it from (innodb_data_home_dir, else the
//!   datadir), so pileup must be able to write there. The file's content
//!   (the pages the last dump listed, for warming the pool at the next
//!   start) is kept in memory and in `<file>.pileup-saved`, and put back
//!   when pileup stops unless the server wrote a new dump meanwhile; a
//!   dump the server writes while pileup runs (a restart's shutdown dump)
//!   replaces the kept copy, so the newest dump is the one put back. The
//!   lists hold page numbers only, no query text. Should the server stop
//!   uncleanly while pileup runs, its next start warms the pool from
//!   pileup's short list instead of the last dump (the saved copy is beside
//!   it); a clean shutdown dumps the pool afresh anyway. A pileup killed
//!   while it runs leaves the dump in `<file>.pileup-saved` and its last two
//!   lists in `<file>.pileup-lists` (written before each list): the next
//!   start puts the dump back when the file still holds one of those lists,
//!   and keeps a dump the server wrote since.
//! - InnoDB throttles a load to innodb_io_capacity pages a second while the
//!   server is busy, counted in pages listed: each list here is kept
//!   shorter than innodb_io_capacity, so no list is throttled.
//! - InnoDB writes two lines to the error log for every load ("Loading
//!   buffer pool(s) from", "Buffer pool(s) load completed").
//! - Loads run one at a time in the server; asking while one runs starts
//!   the next as soon as it ends, reading the file as it is then. pileup
//!   writes a new list only while no load runs ([`Loader::busy`]), and the
//!   file holds the most recent pages asked for (up to the list's length),
//!   not only the new ones, so a list the server had not opened yet when
//!   the next was written is not lost: a page already loaded costs the
//!   server one hash lookup.

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};

use crate::error::{PrefetchError, Result};
use mysql::prelude::Queryable;

pub struct Loader {
    c: mysql::Conn,
    /// The server's buffer pool file.
    path: PathBuf,
    /// Its content when pileup started (None: there was none).
    saved: Option<Vec<u8>>,
    /// The list pileup wrote last (to tell whether the server replaced it).
    last: Vec<u8>,
    recent: VecDeque<(u32, u32)>,
    in_list: HashSet<(u32, u32)>,
    cap: usize,
    restored: bool,
    /// `<file>.pileup-saved` is this run's (one left by an earlier run that
    /// did not finish is neither replaced nor removed).
    own_backup: bool,
    /// Loads asked for.
    pub loads: u64,
    /// Where problems are said (from Drop too).
    say: crate::config::Say,
}

/// The directory InnoDB reads its buffer pool file from.
fn dump_dir(datadir: &str, home: &str) -> PathBuf {
    let data = Path::new(datadir);
    if home.is_empty() {
        data.to_path_buf()
    } else {
        data.join(home)
    }
}

impl Loader {
    /// Take over the server's buffer pool file for page lists. `c` is a
    /// connection of its own (the loads are asked for on it).
    pub fn start(mut c: mysql::Conn, say: crate::config::Say) -> Result<Loader> {
        let (file, io_capacity, datadir, home): (String, u64, String, Option<String>) = c
            .query_first(
                "SELECT @@innodb_buffer_pool_filename, @@innodb_io_capacity, @@datadir, @@innodb_data_home_dir",
            )
            .map_err(PrefetchError::sql("reading the buffer pool load settings"))?
            .ok_or(PrefetchError::Page("the server reports no buffer pool load settings".into()))?;
        let path = dump_dir(&datadir, home.as_deref().unwrap_or("")).join(file);
        let read = |p: &Path| match std::fs::read(p) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(PrefetchError::BufferPoolFile { path: p.to_path_buf(), source }),
        };
        let mut saved = read(&path)?;
        let backup = backup_path(&path);
        if backup.exists() || lists_path(&path).exists() {
            saved = recover(&path, saved, &say)?;
        }
        let mut own_backup = false;
        if backup.exists() {
            say(format!("{} is there from an earlier run that did not finish; it is left as it is (it may hold the buffer pool dump that run replaced)", backup.display()));
        } else if let Some(b) = &saved {
            pileup_files::write_private_bytes(&backup, b).map_err(|e| {
                PrefetchError::Page(format!(
                    "cannot save a copy of {} beside it ({e}): run pileup as the server's user or root, or use --warm sql",
                    path.display()
                ))
            })?;
            own_backup = true;
        }
        let cap = (io_capacity.saturating_sub(1) as usize).clamp(1, 190);
        Ok(Loader {
            c,
            say,
            path,
            saved,
            last: vec![],
            recent: VecDeque::new(),
            in_list: HashSet::new(),
            cap,
            restored: false,
            own_backup,
            loads: 0,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Pages per list (under innodb_io_capacity, see the module docs).
    pub fn capacity(&self) -> usize {
        self.cap
    }

    fn write(&mut self) -> Result<()> {
        // The server wrote a dump over the last list (a restart's shutdown
        // dump, innodb_buffer_pool_dump_now): that is now what to put back.
        // A file gone missing is not a dump: the kept copy stays.
        if let Some(dump) = std::fs::read(&self.path).ok().filter(|now| !self.last.is_empty() && *now != self.last) {
            let backup = backup_path(&self.path);
            if self.own_backup || !backup.exists() {
                pileup_files::write_private_bytes(&backup, &dump)?;
                self.own_backup = true;
            }
            self.saved = Some(dump);
        }
        let mut text = String::with_capacity(self.recent.len() * 16);
        for (s, p) in &self.recent {
            text.push_str(&format!("{s},{p}\n"));
        }
        // Which lists are pileup's, written before the file is: a run
        // killed after either write is recognised at the next start.
        let mark = [&self.last[..], LISTS_APART, text.as_bytes()].concat();
        pileup_files::write_private_bytes(&lists_path(&self.path), &mark)?;
        replace(&self.path, text.as_bytes())?;
        self.last = text.into_bytes();
        Ok(())
    }

    /// Ask InnoDB to read these pages (space, page number). Pages already in
    /// the current list are not repeated. Returns how many were new.
    pub fn load(&mut self, pages: &[(u32, u32)]) -> Result<usize> {
        let mut new = 0;
        for &p in pages {
            if self.in_list.insert(p) {
                self.recent.push_back(p);
                new += 1;
                if self.recent.len() > self.cap {
                    if let Some(old) = self.recent.pop_front() {
                        self.in_list.remove(&old);
                    }
                }
            }
        }
        if new == 0 {
            return Ok(0);
        }
        self.write()?;
        self.c.query_drop("SET GLOBAL innodb_buffer_pool_load_now = ON")?;
        self.loads += 1;
        Ok(new)
    }

    /// Go on with a new connection (the server restarted).
    pub fn reconnect(&mut self, c: mysql::Conn) {
        self.c = c;
    }

    /// Is a load running in the server now? Writing a new list while one
    /// runs would replace the list it is about to read next: the pages of
    /// the replaced list (beyond the ones the new list repeats) would never
    /// be read.
    pub fn busy(&mut self) -> Result<bool> {
        let v: Option<(String, String)> =
            self.c.query_first("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_load_status'")?;
        Ok(v.is_some_and(|(_, s)| s.starts_with("Loading")))
    }

    /// Put the server's buffer pool file back as it was, unless the server
    /// has written a dump there meanwhile.
    pub fn finish(&mut self) -> Result<()> {
        if self.restored {
            return Ok(());
        }
        self.restored = true;
        let now = std::fs::read(&self.path).ok();
        if now.as_deref() == Some(&self.last[..]) || (now.is_none() && !self.last.is_empty()) {
            match &self.saved {
                Some(b) => replace(&self.path, b)?,
                None => {
                    let _ = std::fs::remove_file(&self.path);
                }
            }
        }
        if self.own_backup {
            let _ = std::fs::remove_file(backup_path(&self.path));
            let _ = std::fs::remove_file(lists_path(&self.path));
        }
        Ok(())
    }
}

/// Between the two lists of `<file>.pileup-lists` (a page list has no `#`).
const LISTS_APART: &[u8] = b"#\n";

/// `<file>.pileup-lists`: the last two lists pileup wrote to the file.
fn lists_path(p: &Path) -> PathBuf {
    beside(p, ".pileup-lists")
}

/// `<file>` with `suffix` after its name, in the same directory.
fn beside(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// A run that did not finish (killed) left the server's dump aside in
/// `<file>.pileup-saved`. When the file still holds one of that run's
/// lists, the dump goes back into it now; when the server has written a
/// dump there since, that one stands (and when there was no dump, the list
/// is removed). Either way the copy and the lists are removed, and what the
/// file holds now is returned. Without the lists (a run of an older
/// pileup), nothing is touched.
fn recover(path: &Path, now: Option<Vec<u8>>, say: &crate::config::Say) -> Result<Option<Vec<u8>>> {
    let (backup, lists) = (backup_path(path), lists_path(path));
    let Ok(mark) = std::fs::read(&lists) else { return Ok(now) };
    let ours =
        now.as_deref().is_some_and(|n| mark.split(|b| *b == b'#').any(|l| l.strip_prefix(b"\n").unwrap_or(l) == n));
    let now = match (ours, std::fs::read(&backup)) {
        (true, Ok(dump)) => {
            replace(path, &dump)?;
            say(format!(
                "put the server's buffer pool dump back into {} from {}, where a run that did not finish left it",
                path.display(),
                backup.display()
            ));
            Some(dump)
        }
        // There was no dump: the list goes.
        (true, Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            let _ = std::fs::remove_file(path);
            None
        }
        (true, Err(source)) => return Err(PrefetchError::BufferPoolFile { path: backup, source }),
        (false, _) => now,
    };
    let _ = std::fs::remove_file(&backup);
    let _ = std::fs::remove_file(&lists);
    Ok(now)
}

fn backup_path(p: &Path) -> PathBuf {
    beside(p, ".pileup-saved")
}

/// Replace a file's content at once (written beside it, renamed over it),
/// keeping its owner and mode: the server may open it at any moment and
/// must see a whole list, and must still be able to replace it with its
/// own dump.
fn replace(path: &Path, content: &[u8]) -> Result<()> {
    pileup_files::write_with(path, pileup_files::Mode::KeepExisting, |w| -> Result<()> {
        w.write_all(content).map_err(|source| pileup_files::FileError::Write { path: path.into(), source })?;
        Ok(())
    })
}

impl Drop for Loader {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            (self.say)(pileup_conn::error_text(&e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_innodb_reads_its_list() {
        assert_eq!(dump_dir("/var/lib/mysql/", ""), PathBuf::from("/var/lib/mysql/"));
        assert_eq!(dump_dir("/var/lib/mysql/", "/data/innodb"), PathBuf::from("/data/innodb"));
        assert_eq!(dump_dir("/var/lib/mysql", "./"), PathBuf::from("/var/lib/mysql/./"));
        assert_eq!(backup_path(Path::new("/d/ib_buffer_pool")), PathBuf::from("/d/ib_buffer_pool.pileup-saved"));
    }
}
