//! Where rows are stored: one file per host per window of minutes (ten by
//! default), under Hive-style partitions that engines prune by path:
//!
//! ```text
//! PREFIX/dt=2026-11-30/hour=04/host=db-a/db-a-20261130T0410-10m.parquet
//! ```
//!
//! A window's file is named by its host and start, so shipping it again
//! replaces it rather than adding a copy.

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

/// The object key (or relative path) of `host`'s window starting at
/// `start` of `minutes` minutes, under `prefix` (none: the store's root).
pub fn key(prefix: &str, host: &str, start: i64, minutes: u32) -> String {
    let minutes = window_minutes(minutes);
    let t = chrono::DateTime::from_timestamp(start, 0).unwrap_or_default();
    let host = segment(host);
    let prefix = prefix.trim_matches('/');
    format!(
        "{prefix}{}dt={}/hour={}/host={host}/{host}-{}-{minutes}m.parquet",
        if prefix.is_empty() { "" } else { "/" },
        t.format("%Y-%m-%d"),
        t.format("%H"),
        t.format("%Y%m%dT%H%M"),
    )
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
        assert_eq!(segment("../etc/x y"), "%2E.%2Fetc%2Fx%20y");
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
