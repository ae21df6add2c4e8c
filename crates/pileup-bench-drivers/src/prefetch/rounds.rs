//! The rounds: timed catch-ups in every format and mode, then untimed
//! ones under `pileup lag`.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result};
use pileup_bench_drivers::median;

use crate::bench::Bench;
use crate::config::Config;
use crate::measure::Sample;

/// Where the applier threads' time went, from `pileup lag --json`: share
/// (0..1) per category name, and as "ps_data_file" the share
/// performance_schema measured inside InnoDB data-file reads (the call, so
/// including the wait for a CPU after it).
fn lag_shares(json: &str) -> Result<Vec<(String, f64)>> {
    let v: serde_json::Value = serde_json::from_str(json).context("pileup lag --json output")?;
    let t = &v["tally"];
    let n = t["samples"].as_f64().unwrap_or(0.0).max(1.0);
    let mut out: Vec<(String, f64)> = t["by_category"]
        .as_object()
        .map(|m| m.iter().map(|(k, c)| (k.clone(), c.as_f64().unwrap_or(0.0) / n)).collect())
        .unwrap_or_default();
    let wall = v["seconds"].as_f64().unwrap_or(0.0) * v["applier_threads"].as_f64().unwrap_or(1.0).max(1.0);
    let file: f64 = v["waits"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter(|x| x["event"] == "wait/io/file/innodb/innodb_data_file")
                .filter_map(|x| x["seconds"].as_f64())
                .sum()
        })
        .unwrap_or(0.0);
    if wall > 0.0 {
        out.push(("ps_data_file".into(), file / wall));
    }
    // Share of the period the applier stood still (stalls of 200 ms or more).
    let secs = v["seconds"].as_f64().unwrap_or(0.0);
    if secs > 0.0 {
        out.push(("stalled".into(), v["stalls"]["seconds"].as_f64().unwrap_or(0.0) / secs));
    }
    Ok(out)
}

/// (format, mode) → the timed catch-ups' samples.
pub(crate) type Samples = HashMap<(String, &'static str), Vec<Sample>>;
/// One list of (category, share) per lag round.
type Shares = Vec<(String, f64)>;
/// (format, mode) → the lag rounds' shares.
pub(crate) type Lagged = HashMap<(String, &'static str), Vec<Shares>>;

/// The timed rounds: every format, every mode in a rotated order.
pub(crate) fn timed_rounds(b: &mut Bench, cfg: &Config) -> Result<Samples> {
    let mut samples = Samples::new();
    let trx = cfg.trx as f64;
    for r in 0..cfg.rounds as usize {
        for f in &cfg.formats {
            for i in 0..cfg.modes.len() {
                let m = cfg.modes[(i + r) % cfg.modes.len()];
                b.backlog(f)?;
                b.label = format!("{}-{f}", r + 1);
                let s = b.catch_up(m, None)?;
                eprintln!(
                    "round {} {f} {}: {:.2} s, {:.0} trx/s, applier CPU {:.2} s, replica CPU {:.2} s, prefetch CPU {:.2} s, pool reads/trx {:.2}, waits for a free page/trx {:.2}, history left {:.0}, purged in {:.1} s, an applier thread waited {:.2} s for a CPU, machine busy {:.2} cores",
                    r + 1,
                    m.name,
                    s.secs,
                    trx / s.secs,
                    s.applier_cpu,
                    s.replica_cpu,
                    s.prefetch_cpu,
                    s.pool_reads / trx,
                    s.wait_free / trx,
                    s.history_left,
                    s.purge_after,
                    s.applier_runq,
                    s.machine_busy / s.secs
                );
                if !s.prefetch_report.is_empty() {
                    eprintln!("  prefetch counters: {}", s.prefetch_report);
                }
                samples.entry((f.clone(), m.name)).or_default().push(s);
            }
        }
    }
    Ok(samples)
}

/// Untimed rounds under `pileup lag`: where the applier's time goes
/// without help and with the prefetcher.
pub(crate) fn lag_rounds(b: &mut Bench, cfg: &Config, samples: &Samples) -> Result<Lagged> {
    let mut lagged = Lagged::new();
    for _ in 0..cfg.lag_rounds {
        for f in &cfg.formats {
            for m in cfg.modes.iter().filter(|m| !m.parallel) {
                let secs = median(
                    &samples
                        .get(&(f.clone(), m.name))
                        .map(|v| v.iter().map(|s| s.secs).collect::<Vec<f64>>())
                        .unwrap_or_default(),
                );
                b.backlog(f)?;
                b.label = format!("lag-{f}");
                let s = b.catch_up(m, Some(Duration::from_secs_f64((secs * 0.6).max(1.0))))?;
                let shares = lag_shares(&s.lag_json)?;
                eprintln!("lag {f} {}: {:.2} s, {shares:?}", m.name, s.secs);
                lagged.entry((f.clone(), m.name)).or_default().push(shares);
            }
        }
    }
    Ok(lagged)
}
