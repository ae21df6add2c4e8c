//! A fleet's stored digests: one row per statement class per host per
//! minute, in Parquet files an object store keeps and engines (ClickHouse,
//! DuckDB, Trino) read as they are.
//!
//! * [`Row`]: a class's statements of one minute on one host, with the
//!   host's labels;
//! * [`rows`]: rows to Arrow record batches and back, in the stored
//!   schema ([`rows::schema`]);
//! * [`file`]: record batches to a Parquet file's bytes and back;
//! * [`layout`]: where a host's window of rows is stored;
//! * [`merge`]: stored rows merged into one digest, hosts a dimension;
//! * [`compare`]: what changed between two windows, with intervals;
//! * [`window`]: when a followed log's window is complete.
//!
//! A row keeps the count, and for every attribute the statements logged,
//! how many logged it with its sum, minimum and maximum; the statement
//! time's distribution as the digest's own histogram buckets (16 per power
//! of two), which merge exactly across minutes and hosts; the flags; the
//! fingerprint with its rules' version; and a sample statement, redacted
//! unless asked otherwise.

pub mod compare;
pub mod file;
pub mod layout;
pub mod merge;
pub mod rows;
pub mod window;

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};

use crate::attr::A;
use crate::class::{Class, Hist};

/// A class's statements of one minute on one host.
#[derive(Clone, Debug)]
pub struct Row {
    /// The minute's start, Unix seconds.
    pub minute: i64,
    pub host: String,
    /// The host's labels (environment, cluster, role…), by name.
    pub labels: Vec<(String, String)>,
    pub class: Class,
}

/// What statement text a row keeps as its class's sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Samples {
    None,
    /// Literals replaced by `?`, comments dropped ([`pileup_sql::redact`]).
    Redacted,
    Full,
}

/// A sample statement's length at most, in bytes.
pub const SAMPLE_MAX: usize = 1024;

/// The rows of a digest's minutes ([`crate::aggregate::Minutes::by_minute`], or a
/// [`window::Window`]'s), for `host` with `labels`, by minute then class.
pub fn rows_of(
    by_minute: BTreeMap<i64, HashMap<Box<[u8]>, Class>>,
    host: &str,
    labels: &[(String, String)],
) -> Vec<Row> {
    let mut rows = vec![];
    for (minute, classes) in by_minute {
        let mut classes: Vec<Class> = classes.into_values().collect();
        classes.sort_by(|a, b| a.fingerprint.cmp(&b.fingerprint));
        rows.extend(classes.into_iter().map(|class| Row {
            minute,
            host: host.to_string(),
            labels: labels.to_vec(),
            class,
        }));
    }
    rows
}

/// Rows of the same minute, host and class merged into one (a window's
/// part files hold minutes its first file holds too), by minute, host and
/// fingerprint.
pub fn fold_rows(rows: impl IntoIterator<Item = Row>) -> Vec<Row> {
    let mut by: BTreeMap<(i64, String, Box<[u8]>), Row> = BTreeMap::new();
    for r in rows {
        let k = (r.minute, r.host.clone(), r.class.fingerprint.clone());
        match by.get_mut(&k) {
            Some(m) => m.class.merge(&r.class),
            None => {
                by.insert(k, r);
            }
        }
    }
    by.into_values().collect()
}

/// The statement-time distributions of rows of one hour, kept per host
/// and class: each (host, class)'s distributions merged into its first
/// row of the hour (the earliest minute), the other rows' left empty
/// (their counts, sums and extremes stay). A compacted hour keeps this:
/// percentiles over whole hours are what the minutes' were, and the
/// histogram columns take about 3.5 bytes a row instead of about 94 (the
/// benchmark's fleet: 66 buckets a minute, 16,000 statements a class-minute).
pub fn hourly_histograms(rows: &mut [Row]) {
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&i| rows[i].minute);
    // Per (host, class): the row that keeps the distribution, and the
    // distributions merged so far.
    type HostClass = (String, Box<[u8]>);
    let mut kept: HashMap<HostClass, (usize, Hist)> = HashMap::new();
    for i in order {
        let r = &mut rows[i];
        let Some(h) = r.class.take_hist(A::QueryTime) else { continue };
        match kept.entry((r.host.clone(), r.class.fingerprint.clone())) {
            Entry::Occupied(mut e) => e.get_mut().1.merge(&h),
            Entry::Vacant(e) => {
                e.insert((i, h));
            }
        }
    }
    for (i, h) in kept.into_values() {
        rows[i].class.set_hist(A::QueryTime, h);
    }
}

/// Every row's class merged with the other rows of its fingerprint (of any
/// minute and host): the classes a digest of all their statements finds.
pub fn merge_by_class(rows: impl IntoIterator<Item = Row>) -> Vec<Class> {
    let mut by: HashMap<Box<[u8]>, Class> = HashMap::new();
    for r in rows {
        match by.get_mut(&r.class.fingerprint) {
            Some(c) => c.merge(&r.class),
            None => {
                by.insert(r.class.fingerprint.clone(), r.class);
            }
        }
    }
    let mut classes: Vec<Class> = by.into_values().collect();
    crate::rank::sort(&mut classes, crate::rank::Rank::Time);
    classes
}

#[cfg(test)]
mod tests;
