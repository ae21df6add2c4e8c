//! Where rows are stored: one file per host per window of minutes (ten by
//! default), under Hive-style partitions that engines prune by path:
//!
//! ```text
//! PREFIX/dt=2026-11-30/hour=04/host=db-a/db-a-20261130T0410-10m.parquet
//! ```
//!
//! A window's file is named by its host and start, so shipping it again
//! replaces it rather than adding a copy; a run that joins a window late
//! (performance_schema) names its file by its own start as well.

use std::collections::BTreeMap;

use super::Row;

/// A window's length in minutes: `minutes` if it divides the hour, else the
/// longest that does and is shorter (windows are aligned on the hour).
pub fn window_minutes(minutes: u32) -> u32 {
    (1..=minutes.clamp(1, 60)).rev().find(|m| 60 % m == 0).unwrap_or(1)
}

/// Rows by the start (Unix seconds) of their window of
/// [`window_minutes`]`(minutes)` minutes.
pub fn windows(rows: Vec<Row>, minutes: u32) -> BTreeMap<i64, Vec<Row>> {
    let w = i64::from(window_minutes(minutes)) * 60;
    let mut by: BTreeMap<i64, Vec<Row>> = BTreeMap::new();
    for r in rows {
        by.entry(r.minute - r.minute.rem_euclid(w)).or_default().push(r);
    }
    by
}

/// A host's name as one path segment: bytes other than letters, digits and
/// `-_.` as `%XX` (as Hive escapes partition values), so that no name makes
/// another directory or a hidden file.
pub fn segment(name: &str) -> String {
    if name.is_empty() {
        // Hive's name for a partition without a value.
        return "__HIVE_DEFAULT_PARTITION__".into();
    }
    let mut s = String::with_capacity(name.len());
    for (i, b) in name.bytes().enumerate() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (b == b'.' && i > 0) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// A path segment's host name: [`segment`] undone.
pub fn unsegment(seg: &str) -> String {
    if seg == "__HIVE_DEFAULT_PARTITION__" {
        return String::new();
    }
    let b = seg.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%' && i + 3 <= b.len())
            .then(|| std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()))
            .flatten();
        match hex {
            Some(x) => {
                out.push(x);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The key prefix of an hour's partition (`start`: the hour's start, Unix
/// seconds) under `prefix`: every host's files of that hour are under it.
pub fn hour_prefix(prefix: &str, start: i64) -> String {
    let t = chrono::DateTime::from_timestamp(start, 0).unwrap_or_default();
    let prefix = prefix.trim_matches('/');
    format!("{prefix}{}dt={}/hour={}/", if prefix.is_empty() { "" } else { "/" }, t.format("%Y-%m-%d"), t.format("%H"))
}

/// The host a stored file's key names (its `host=` segment), when the key
/// is one of a digest's files.
pub fn host_of_key(key: &str) -> Option<String> {
    if !key.ends_with(".parquet") {
        return None;
    }
    key.split('/').find_map(|s| s.strip_prefix("host=")).map(unsegment)
}

/// The key of a compacted hour starting at `hour` (Unix seconds): the
/// windows of every host of the hour in one file, which names them in its
/// metadata ([`super::file::SOURCES`]); `part` 0 is the first compaction's,
/// 1, 2 … those of windows that came after it (`compact-…-2.parquet`).
pub fn compact_key(prefix: &str, hour: i64, part: u32) -> String {
    let t = chrono::DateTime::from_timestamp(hour, 0).unwrap_or_default();
    let part = if part == 0 { String::new() } else { format!("-{}", part + 1) };
    format!("{}compact-{}{part}.parquet", hour_prefix(prefix, hour), t.format("%Y%m%dT%H00"))
}

/// Whether a key is a compacted hour's file (in the hour's partition
/// itself: a window is in its host's, whatever the host's name).
pub fn is_compact(key: &str) -> bool {
    let mut segments = key.rsplit('/');
    let (name, dir) = (segments.next().unwrap_or(key), segments.next().unwrap_or(""));
    dir.starts_with("hour=") && name.starts_with("compact-") && name.ends_with(".parquet")
}

/// A key's directory, with its last `/`.
fn dir_of(key: &str) -> &str {
    &key[..key.rfind('/').map_or(0, |i| i + 1)]
}

/// A key of a window as a compacted file names it: relative to the
/// compacted file's own directory (the hour's partition).
pub fn relative<'a>(compact: &str, window: &'a str) -> &'a str {
    window.strip_prefix(dir_of(compact)).unwrap_or(window)
}

/// A window's key from its name in a compacted file ([`relative`]).
pub fn beside(compact: &str, name: &str) -> String {
    format!("{}{name}", dir_of(compact))
}

/// The object key (or relative path) of `host`'s window starting at
/// `start` of `minutes` minutes, under `prefix` (none: the store's root).
pub fn key(prefix: &str, host: &str, start: i64, minutes: u32) -> String {
    part_key(prefix, host, start, minutes, 0)
}

/// [`key`] of a window's part: 0 is the window's file, 1, 2 … the rows
/// that came after it was shipped (`…-10m-2.parquet`, `…-10m-3.parquet`).
pub fn part_key(prefix: &str, host: &str, start: i64, minutes: u32, part: u32) -> String {
    piece_key(prefix, host, start, minutes, None, part)
}

/// [`part_key`] of a window a run joined at `from` (Unix seconds): its
/// rows from then on, beside what an earlier run shipped for the window
/// (`…T0420-from042530-10m.parquet`: not one of the window's parts).
pub fn piece_key(prefix: &str, host: &str, start: i64, minutes: u32, from: Option<i64>, part: u32) -> String {
    let minutes = window_minutes(minutes);
    let part = if part == 0 { String::new() } else { format!("-{}", part + 1) };
    let from = from
        .and_then(|f| chrono::DateTime::from_timestamp(f, 0))
        .map_or(String::new(), |f| format!("from{}-", f.format("%H%M%S")));
    let t = chrono::DateTime::from_timestamp(start, 0).unwrap_or_default();
    let host = segment(host);
    let prefix = prefix.trim_matches('/');
    format!(
        "{prefix}{}dt={}/hour={}/host={host}/{host}-{}-{from}{minutes}m{part}.parquet",
        if prefix.is_empty() { "" } else { "/" },
        t.format("%Y-%m-%d"),
        t.format("%H"),
        t.format("%Y%m%dT%H%M"),
    )
}

/// The prefix of the keys of a window's later parts (parts 1, 2 …: what
/// came after the window's file of the same run was shipped). A window's
/// file supersedes the parts an earlier run shipped for it: it holds their
/// rows.
pub fn parts_prefix(prefix: &str, host: &str, start: i64, minutes: u32) -> String {
    let k = key(prefix, host, start, minutes);
    format!("{}-", k.strip_suffix(".parquet").unwrap_or(&k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_hive_partitions_and_host_names_stay_one_segment() {
        assert_eq!(
            key("digests/", "db-a", 1_796_012_400, 10),
            "digests/dt=2026-11-30/hour=04/host=db-a/db-a-20261130T0420-10m.parquet"
        );
        assert_eq!(
            key("", "db.b", 1_796_012_400, 60),
            "dt=2026-11-30/hour=04/host=db.b/db.b-20261130T0420-60m.parquet"
        );
        assert_eq!(
            part_key("", "db-a", 1_796_012_400, 10, 1),
            "dt=2026-11-30/hour=04/host=db-a/db-a-20261130T0420-10m-2.parquet"
        );
        let parts = parts_prefix("", "db-a", 1_796_012_400, 10);
        assert_eq!(parts, "dt=2026-11-30/hour=04/host=db-a/db-a-20261130T0420-10m-");
        assert!(part_key("", "db-a", 1_796_012_400, 10, 2).starts_with(&parts));
        assert!(!key("", "db-a", 1_796_012_400, 10).starts_with(&parts));
        assert!(!part_key("", "db-a", 1_796_013_000, 10, 1).starts_with(&parts));
        assert_eq!(segment("../etc/x y"), "%2E.%2Fetc%2Fx%20y");
        for name in ["../etc/x y", "db-a", "", "100%", "é"] {
            assert_eq!(unsegment(&segment(name)), name);
        }
        assert_eq!(hour_prefix("p/", 1_796_012_400), "p/dt=2026-11-30/hour=04/");
        assert_eq!(host_of_key(&key("p", "a b", 1_796_012_400, 10)).as_deref(), Some("a b"));
        assert_eq!(host_of_key("p/dt=2026-11-30/hour=04/host=x/notes.txt"), None);
        let c = compact_key("p", 1_796_011_200, 0);
        assert_eq!(c, "p/dt=2026-11-30/hour=04/compact-20261130T0400.parquet");
        assert_eq!(compact_key("", 1_796_011_200, 1), "dt=2026-11-30/hour=04/compact-20261130T0400-2.parquet");
        let w = key("p", "compact-x", 1_796_011_200, 10);
        assert!(is_compact(&c) && !is_compact(&w) && !is_compact(&key("p", "db-a", 1_796_011_200, 10)));
        assert_eq!(host_of_key(&c), None);
        assert_eq!(relative(&c, &w), "host=compact-x/compact-x-20261130T0400-10m.parquet");
        assert_eq!(beside(&c, relative(&c, &w)), w);
        assert_eq!(segment(""), "__HIVE_DEFAULT_PARTITION__");
        assert_eq!((window_minutes(10), window_minutes(7), window_minutes(0), window_minutes(90)), (10, 6, 1, 60));
    }

    #[test]
    fn rows_fall_in_windows_aligned_on_the_hour() {
        let row = |minute| Row {
            minute,
            host: "h".into(),
            labels: vec![],
            class: crate::class::Class::new(b"select ?".to_vec().into()),
        };
        let t = 1_796_011_200; // 04:00
        let w = windows(vec![row(t), row(t + 540), row(t + 600), row(t + 3599)], 10);
        let got: Vec<(i64, usize)> = w.iter().map(|(s, r)| (*s - t, r.len())).collect();
        assert_eq!(got, vec![(0, 2), (600, 1), (3000, 1)]);
    }
}
