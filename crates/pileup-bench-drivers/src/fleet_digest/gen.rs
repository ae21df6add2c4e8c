//! A fleet's per-minute digests, made from a real server's slow logs: a
//! base log (sysbench and a planted lookup that uses its index) and a
//! regressed log (the index dropped) cut into ten-second slices; each
//! host-minute is the sum of three to nine slices drawn at random (so its
//! load and its figures vary as a real host's do from minute to minute),
//! each host's classes renamed onto its own tables, shipped as the hosts
//! would ship them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use pileup_digest::class::Class;
use pileup_digest::fleet::{self, layout, Row, Samples};

/// Ten seconds' classes of a real log.
pub type Minute = HashMap<Box<[u8]>, Class>;

/// A slow log's ten-second slices: the log with its times stretched six
/// times (its `# Time:` lines dropped, each `SET timestamp=N` moved to
/// `t0 + 6 (N - t0)`), digested by minute.
pub fn minutes_of(log: &Path) -> Result<Vec<Minute>> {
    let stretched = stretch(log)?;
    let o = pileup_digest::Options { by_minute: true, ..Default::default() };
    let d = pileup_digest::digest(&[pileup_digest::Input::File(stretched.clone())], &o, &mut pileup_digest::Quiet)
        .with_context(|| format!("digesting {}", stretched.display()))?;
    let m = d.minutes.context("minutes kept")?;
    // The first and last slices are partial: left out when there are more.
    let mut v: Vec<Minute> = m.by_minute.into_values().collect();
    if v.len() > 2 {
        v.pop();
        v.remove(0);
    }
    anyhow::ensure!(!v.is_empty(), "{} holds no timed statement", log.display());
    Ok(v)
}

/// `log` with its statement times stretched six times, as `LOG.stretched`.
fn stretch(log: &Path) -> Result<PathBuf> {
    let text = std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
    let mut t0 = None;
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line.starts_with("# Time: ") {
            continue;
        }
        let ts = line
            .strip_prefix("SET ")
            .and_then(|l| l.find("timestamp=").map(|i| &l[i + "timestamp=".len()..]))
            .and_then(|r| r.strip_suffix(';'))
            .and_then(|d| d.parse::<i64>().ok());
        match ts {
            Some(t) => {
                let t0 = *t0.get_or_insert(t);
                out.push_str(&format!("SET timestamp={};\n", t0 + 6 * (t - t0)));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    let to = log.with_extension("stretched");
    std::fs::write(&to, out)?;
    Ok(to)
}

/// A well-mixed 64-bit hash (splitmix64's finaliser): the generator's
/// draws are functions of (host, minute, draw), so a run is reproducible
/// without a random-number generator's state.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
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
        let slices = if minute >= last_hour && h < f.regressed_hosts { regressed } else { normal };
        let seed = mix((h as u64) << 32 ^ minute as u64);
        let mut classes: Minute = HashMap::new();
        for draw in 0..3 + seed % 7 {
            let t = &slices[(mix(seed ^ draw) % slices.len() as u64) as usize];
            for c in t.values() {
                let c = renamed(c, h);
                match classes.get_mut(&c.fingerprint) {
                    Some(m) => m.merge(&c),
                    None => {
                        classes.insert(c.fingerprint.clone(), c);
                    }
                }
            }
        }
        // Their first and last statements' times moved into this minute.
        for c in classes.values_mut() {
            c.first = c.first.map(|t| minute + t.rem_euclid(60));
            c.last = c.last.map(|t| minute + t.rem_euclid(60)).max(c.first);
        }
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
