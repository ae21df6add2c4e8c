//! A fleet's per-minute digests, made from a real server's slow logs: the
//! minutes of a base log (sysbench and a planted lookup that uses its
//! index) and of a regressed log (the index dropped), each host's classes
//! renamed onto its own tables, shipped as the hosts would ship them.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::{Context, Result};
use pileup_digest::class::Class;
use pileup_digest::fleet::{self, layout, Row, Samples};

/// One minute's classes of a real log.
pub type Minute = HashMap<Box<[u8]>, Class>;

/// The minutes of a slow log, each as a template.
pub fn minutes_of(log: &Path) -> Result<Vec<Minute>> {
    let o = pileup_digest::Options { by_minute: true, ..Default::default() };
    let d = pileup_digest::digest(&[pileup_digest::Input::File(log.to_path_buf())], &o, &mut pileup_digest::Quiet)
        .with_context(|| format!("digesting {}", log.display()))?;
    let m = d.minutes.context("minutes kept")?;
    // The first and last minutes are partial: left out when there are more.
    let mut v: Vec<Minute> = m.by_minute.into_values().collect();
    if v.len() > 2 {
        v.pop();
        v.remove(0);
    }
    anyhow::ensure!(!v.is_empty(), "{} holds no timed statement", log.display());
    Ok(v)
}

/// The fleet to make.
pub struct Fleet {
    pub hosts: usize,
    /// The day's first minute (Unix seconds, on an hour).
    pub start: i64,
    pub hours: i64,
    /// Hosts whose last hour runs the regressed template.
    pub regressed_hosts: usize,
}

/// Host `h`'s name.
pub fn host(h: usize) -> String {
    format!("db-{h:04}")
}

/// `c` renamed onto host `h`'s tables: each host's schema has tables of
/// its own shard (`sbtest1` → `s7_sbtest1`), so classes vary across hosts
/// the way a sharded fleet's do.
fn renamed(c: &Class, h: usize) -> Class {
    let mut c = c.clone();
    let fp = String::from_utf8_lossy(&c.fingerprint).replace("sbtest", &format!("s{}_sbtest", h % 25));
    c.fingerprint = fp.into_bytes().into_boxed_slice();
    c
}

/// Host `h`'s rows of the window starting at `start` (minutes of
/// `window` length), from the templates.
pub fn window_rows(f: &Fleet, h: usize, start: i64, window: i64, normal: &[Minute], regressed: &[Minute]) -> Vec<Row> {
    let name = host(h);
    let labels = vec![("env".to_string(), "bench".to_string()), ("cluster".to_string(), format!("c{}", h % 8))];
    let last_hour = f.start + (f.hours - 1) * 3600;
    let mut by: BTreeMap<i64, Minute> = BTreeMap::new();
    for minute in (start..start + window * 60).step_by(60) {
        let k = (minute / 60) as usize + h;
        let t = if minute >= last_hour && h < f.regressed_hosts {
            &regressed[k % regressed.len()]
        } else {
            &normal[k % normal.len()]
        };
        let classes = t.values().map(|c| renamed(c, h)).map(|c| (c.fingerprint.clone(), c)).collect();
        by.insert(minute, classes);
    }
    fleet::rows_of(by, &name, &labels)
}

/// Every host's windows of the day as Parquet files: (key, bytes), made
/// and handed to `put` one at a time.
pub fn generate(
    f: &Fleet,
    window: i64,
    normal: &[Minute],
    regressed: &[Minute],
    mut put: impl FnMut(String, Vec<u8>) -> Result<()>,
) -> Result<()> {
    for h in 0..f.hosts {
        for w in 0..(f.hours * 60 / window) {
            let start = f.start + w * window * 60;
            let rows = window_rows(f, h, start, window, normal, regressed);
            let bytes = fleet::file::write(&rows, Samples::Redacted)?;
            put(layout::key("", &host(h), start, window as u32), bytes)?;
        }
    }
    Ok(())
}
