//! How much work sits in the relay log ahead of the applier, read from the
//! relay log itself: bytes (the files on disk beyond the applier's
//! position) and primary time (the timestamps of the event the applier is
//! about to apply and of the newest event written).
//!
//! `Seconds_Behind_Master` cannot say this alone: it is NULL while the IO
//! thread is stopped or the SQL thread is not running (a catch-up after a
//! restart with `skip-slave-start`, a failover, an operator holding the IO
//! thread), 0 while a backlog waits when the clocks disagree, and large
//! after an idle primary with nothing to apply. Both timestamps come from
//! the primary's events, so clock skew between the hosts cancels out.

use std::path::{Path, PathBuf};

use pileup_binlog::{et, FileReader, Follower, Step};

/// The work ahead of the applier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Relay log bytes beyond the applier's position (None: the relay log
    /// index or the applier's file cannot be read).
    pub bytes: Option<u64>,
    /// Relay log files those bytes are in (the applier's included).
    pub files: u32,
    /// Primary time from the event the applier is about to apply to the
    /// newest one written (None: not known). A burst the primary wrote in a
    /// second shows as 0 here however long it takes to apply: see `age`.
    pub secs: Option<u32>,
    /// How old the event the applier is about to apply is, by this host's
    /// clock (what `Seconds_Behind_Master` measures, without needing the
    /// IO thread; off by any clock skew between the hosts).
    pub age: Option<u64>,
}

/// The relay log files in the index file's order. Names in the index are
/// relative to the data directory or absolute; only the file name counts
/// here, found in `dir`, where the relay logs are.
pub fn relay_files(index_text: &str, dir: &Path) -> Vec<PathBuf> {
    index_text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter_map(|l| Path::new(l).file_name().map(|n| dir.join(n)))
        .collect()
}

/// Bytes beyond `pos` in `file`, given the relay log files in order with
/// their sizes: the rest of the applier's file and every later one. None
/// when the applier's file is not among them.
pub fn bytes_ahead(files: &[(PathBuf, u64)], file: &Path, pos: u64) -> Option<(u64, u32)> {
    let name = file.file_name()?;
    let at = files.iter().position(|(p, _)| p.file_name() == Some(name))?;
    let rest = &files[at..];
    let bytes = rest[0].1.saturating_sub(pos) + rest[1..].iter().map(|(_, s)| s).sum::<u64>();
    Some((bytes, rest.len() as u32))
}

/// Does this event carry a transaction's primary timestamp? (The relay
/// log's own format description and rotate events carry the replica's
/// time, or none.)
fn primary_time(type_code: u8) -> bool {
    !matches!(
        type_code,
        et::FORMAT_DESCRIPTION
            | et::ROTATE
            | et::STOP
            | et::MARIADB_GTID_LIST
            | et::BINLOG_CHECKPOINT
            | et::MYSQL_PREVIOUS_GTIDS
            | et::START_ENCRYPTION
    )
}

/// Bytes read back from the end of the newest file to find its newest
/// event when checksums let the reader find an event boundary there.
const TAIL_BACK: u64 = 256 << 10;

/// `path` opened for reading its newest events: near its end when an
/// event boundary can be found there (checksums verify it), else from its
/// start.
fn open_near_end(path: &Path) -> Option<FileReader> {
    let mut r = FileReader::open(path).ok()?;
    r.read_format().ok()?;
    let len = std::fs::metadata(path).ok()?.len();
    if len > TAIL_BACK + 4 && !matches!(r.resync(len - TAIL_BACK), Ok(Some(_))) {
        r.seek(4);
    }
    Some(r)
}

/// Read `r` to the end of what is written, keeping in `newest` the primary
/// timestamp of the last transaction event met.
fn read_to_end(r: &mut FileReader, newest: &mut Option<u32>) {
    while let Ok(Some(at)) = r.advance() {
        if primary_time(at.header.type_code) && at.header.timestamp != 0 {
            *newest = Some(at.header.timestamp);
        }
    }
}

/// Measures the backlog at each poll; keeps the newest file open and reads
/// only what was written since the last look.
#[derive(Default)]
pub struct BacklogProbe {
    /// The newest relay log file, read to its end, and the newest primary
    /// timestamp seen in it.
    tail: Option<(FileReader, Option<u32>)>,
    /// Reading on from the applier's position: the file and position it
    /// started at, and what it found (kept open: the applier moves a little
    /// each poll).
    head: Option<(Follower, (PathBuf, u64), Head)>,
}

/// What lies at the applier's position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Head {
    /// A transaction, with its primary timestamp.
    At(u32),
    /// No transaction: only the relay log's own events, up to its end.
    Nothing,
    /// Not known (unreadable, or no transaction within the first events).
    Unknown,
}

impl BacklogProbe {
    /// The backlog beyond (`file`, `pos`), the applier's position, with the
    /// relay log index at `index` and the relay logs in `dir`.
    pub fn measure(&mut self, index: &Path, dir: &Path, file: &Path, pos: u64) -> Backlog {
        let Ok(text) = std::fs::read_to_string(index) else { return Backlog::default() };
        let files: Vec<(PathBuf, u64)> = relay_files(&text, dir)
            .into_iter()
            .filter_map(|p| std::fs::metadata(&p).ok().map(|m| (p, m.len())))
            .collect();
        let Some((bytes, n)) = bytes_ahead(&files, file, pos) else { return Backlog::default() };
        let none = Backlog { bytes: Some(0), files: n, secs: Some(0), age: Some(0) };
        if bytes == 0 {
            return none;
        }
        match self.next_at(file, pos) {
            // What follows is the relay log's own bookkeeping (a new file's
            // format description): no work.
            Head::Nothing => none,
            Head::Unknown => Backlog { bytes: Some(bytes), files: n, secs: None, age: None },
            Head::At(next) => {
                let newest = self.newest(&files);
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
                Backlog {
                    bytes: Some(bytes),
                    files: n,
                    secs: newest.map(|b| b.saturating_sub(next)),
                    age: Some(now.saturating_sub(u64::from(next))),
                }
            }
        }
    }

    /// The primary timestamp of the newest transaction in the relay log
    /// `files` (in order).
    fn newest(&mut self, files: &[(PathBuf, u64)]) -> Option<u32> {
        let last = &files.last()?.0;
        let stale = self.tail.as_ref().is_none_or(|(r, _)| r.path() != last || r.replaced());
        if stale {
            // A file just begun holds no transaction yet: the newest time
            // stays the last file's until it does.
            let before = self.tail.take().and_then(|t| t.1);
            self.tail = open_near_end(last).map(|r| (r, before));
        }
        let (r, newest) = self.tail.as_mut()?;
        read_to_end(r, newest);
        if newest.is_none() {
            // The newest file holds only the relay log's own events (the
            // server began it at a restart or a rotation): the newest
            // transaction is in an earlier one.
            *newest = files.iter().rev().skip(1).take(3).find_map(|(p, _)| {
                let mut ts = None;
                read_to_end(&mut open_near_end(p)?, &mut ts);
                ts
            });
        }
        *newest
    }

    /// The first transaction event at or after `pos` in `file` (the event
    /// the applier is about to apply), reading on into later files.
    fn next_at(&mut self, file: &Path, pos: u64) -> Head {
        if let Some((_, at, head)) = &self.head {
            if at.0 == file && at.1 == pos && *head != Head::Unknown {
                return *head;
            }
        }
        // Reading on in the same file needs only a seek, unless the
        // follower went on into a later file or the file was replaced.
        let reuse = self.head.as_ref().is_some_and(|(f, _, _)| f.path() == file && !f.replaced());
        if !reuse {
            match Follower::open_at(file, pos) {
                Ok(f) => self.head = Some((f, (file.to_path_buf(), pos), Head::Unknown)),
                Err(_) => {
                    self.head = None;
                    return Head::Unknown;
                }
            }
        }
        let Some((f, at, head)) = self.head.as_mut() else { return Head::Unknown };
        f.seek(pos);
        *at = (file.to_path_buf(), pos);
        *head = Head::Unknown;
        for _ in 0..64 {
            match f.step() {
                Step::Event(e, _) if primary_time(e.header.type_code) && e.header.timestamp != 0 => {
                    *head = Head::At(e.header.timestamp);
                    break;
                }
                Step::Event(..) | Step::Rotated => {}
                Step::End => {
                    *head = Head::Nothing;
                    break;
                }
                _ => break,
            }
        }
        *head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_names_are_found_in_the_relay_directory() {
        let dir = Path::new("/var/lib/mysql");
        let files = relay_files("./relay-bin.000007\n/var/lib/mysql/relay-bin.000008\n\nrelay-bin.000009\n", dir);
        assert_eq!(
            files,
            vec![dir.join("relay-bin.000007"), dir.join("relay-bin.000008"), dir.join("relay-bin.000009")]
        );
    }

    #[test]
    fn bytes_beyond_the_applier_across_files() {
        let f = |n: &str, s: u64| (PathBuf::from(format!("/d/relay-bin.{n}")), s);
        let files = vec![f("000007", 1000), f("000008", 500), f("000009", 200)];
        let at = |n: &str| PathBuf::from(format!("/elsewhere/relay-bin.{n}"));
        assert_eq!(bytes_ahead(&files, &at("000007"), 400), Some((600 + 500 + 200, 3)));
        assert_eq!(bytes_ahead(&files, &at("000009"), 200), Some((0, 1)), "at the end: nothing ahead");
        assert_eq!(bytes_ahead(&files, &at("000009"), 300), Some((0, 1)), "a position past the size is not negative");
        assert_eq!(bytes_ahead(&files, &at("000006"), 4), None, "a file the index does not list");
    }
}
