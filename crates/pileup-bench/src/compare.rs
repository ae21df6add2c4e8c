//! Two results of one experiment side by side: server versions, settings
//! or a change before and after. Curves are matched by label and points
//! by thread count; each pair is the ratio of medians, marked when the two
//! rounds' spreads overlap (a difference within noise).

use std::io::Write;

use serde::Serialize;

use crate::report::{rate, ExperimentReport};

/// One point of one curve in both results.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Pair {
    pub series: String,
    pub threads: u32,
    pub a: f64,
    pub b: f64,
    /// b / a.
    pub ratio: f64,
    pub within_noise: bool,
}

/// Both results, point by point.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Comparison {
    pub experiment: String,
    pub unit: String,
    /// What differs between the two: systems' versions and settings.
    pub differences: Vec<String>,
    pub pairs: Vec<Pair>,
    /// Curves in only one of the two.
    pub unmatched: Vec<String>,
}

/// Compare `b` against `a`.
pub fn compare(a: &ExperimentReport, b: &ExperimentReport) -> Result<Comparison, String> {
    if a.experiment != b.experiment {
        return Err(format!(
            "the two results are of different experiments ({} and {}): compare results of one experiment",
            a.experiment, b.experiment
        ));
    }
    let mut differences = vec![];
    for sa in &a.systems {
        match b.systems.iter().find(|s| s.name == sa.name) {
            Some(sb) => {
                if sa.version != sb.version {
                    differences.push(format!("{}: version {} → {}", sa.name, sa.version, sb.version));
                }
                for (k, va) in &sa.settings {
                    match sb.settings.get(k) {
                        Some(vb) if vb != va => differences.push(format!("{}: {k} {va} → {vb}", sa.name)),
                        None => differences.push(format!("{}: {k} {va} → (not recorded)", sa.name)),
                        _ => {}
                    }
                }
            }
            None => differences.push(format!("{} only in the first", sa.name)),
        }
    }
    if a.machine != b.machine {
        differences.push(format!(
            "machine: {} cores, {} GiB, Linux {} → {} cores, {} GiB, Linux {}",
            a.machine.cores,
            a.machine.memory_gib,
            a.machine.kernel,
            b.machine.cores,
            b.machine.memory_gib,
            b.machine.kernel
        ));
    }
    let mut pairs = vec![];
    let mut unmatched = vec![];
    for sa in &a.series {
        let Some(sb) = b.series.iter().find(|s| s.label == sa.label) else {
            unmatched.push(format!("{} (only in the first)", sa.label));
            continue;
        };
        for pa in &sa.points {
            if let Some(pb) = sb.points.iter().find(|p| p.threads == pa.threads) {
                pairs.push(Pair {
                    series: sa.label.clone(),
                    threads: pa.threads,
                    a: pa.median,
                    b: pb.median,
                    ratio: pb.median / pa.median,
                    within_noise: pa.min <= pb.max && pb.min <= pa.max,
                });
            }
        }
    }
    for sb in &b.series {
        if !a.series.iter().any(|s| s.label == sb.label) {
            unmatched.push(format!("{} (only in the second)", sb.label));
        }
    }
    Ok(Comparison { experiment: a.experiment.clone(), unit: a.unit.clone(), differences, pairs, unmatched })
}

/// The comparison as text.
pub fn text(c: &Comparison, w: &mut dyn Write) -> std::io::Result<()> {
    writeln!(w, "pileup bench compare: {} ({}), second against first", c.experiment, c.unit)?;
    if c.differences.is_empty() {
        writeln!(w, "same versions, settings and machine")?;
    }
    for d in &c.differences {
        writeln!(w, "  {d}")?;
    }
    let mut last = "";
    for p in &c.pairs {
        if p.series != last {
            writeln!(w, "\n{}\n  threads  {:>10}  {:>10}  ratio", p.series, "first", "second")?;
            last = &p.series;
        }
        let noise = if p.within_noise { "  (within noise)" } else { "" };
        writeln!(w, "  {:>7}  {:>10}  {:>10}  {:.2}×{noise}", p.threads, rate(p.a), rate(p.b), p.ratio)?;
    }
    for u in &c.unmatched {
        writeln!(w, "not compared: {u}")?;
    }
    Ok(())
}

/// `pileup bench compare`'s result: its text and its JSON.
impl pileup_output::Report for Comparison {
    fn tool(&self) -> &'static str {
        "bench compare"
    }
    fn text(&self, _o: &pileup_output::Options, w: &mut dyn Write) -> std::io::Result<()> {
        text(self, w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Point, Series, System};
    use crate::target::Machine;

    fn result(version: &str, flush: &str, medians: &[(u32, f64, f64)]) -> ExperimentReport {
        ExperimentReport {
            experiment: "durability".into(),
            question: String::new(),
            unit: "commits/s".into(),
            started_unix: 0.0,
            machine: Machine { cores: 2, memory_gib: 24.0, kernel: "6.1".into(), cpu: "x".into() },
            driver: String::new(),
            systems: vec![System {
                name: "MariaDB".into(),
                version: version.into(),
                settings: [("innodb_flush_log_at_trx_commit".to_string(), flush.to_string())].into(),
            }],
            series: vec![Series {
                label: "MariaDB, redo log flushed at every commit".into(),
                system: "MariaDB".into(),
                settings: Default::default(),
                points: medians
                    .iter()
                    .map(|&(threads, median, spread)| Point {
                        threads,
                        rounds: vec![median],
                        median,
                        min: median - spread,
                        max: median + spread,
                        p50_ms: Some(1.0),
                        p99_ms: Some(1.0),
                        errors: 0,
                        driver_cores: 0.1,
                        server_cores: None,
                        cpu_bound: false,
                        counter_per_s: None,
                    })
                    .collect(),
                knee_threads: None,
                shape: None,
            }],
            profiles: vec![],
            findings: vec![],
            stopped: None,
            window_s: 10.0,
            warmup_s: 2.0,
            rounds: 3,
        }
    }

    #[test]
    fn points_pair_by_threads_with_their_ratio_and_noise() {
        let a = result("10.11.19", "1", &[(1, 1000.0, 50.0), (10, 4000.0, 100.0)]);
        let b = result("11.4.3", "2", &[(1, 1020.0, 50.0), (10, 8000.0, 100.0), (50, 9000.0, 10.0)]);
        let c = compare(&a, &b).unwrap();
        assert_eq!(
            c.differences,
            vec![
                "MariaDB: version 10.11.19 → 11.4.3".to_string(),
                "MariaDB: innodb_flush_log_at_trx_commit 1 → 2".to_string()
            ]
        );
        assert_eq!(c.pairs.len(), 2, "50 threads is only in the second");
        assert!(c.pairs[0].within_noise && (c.pairs[0].ratio - 1.02).abs() < 1e-9);
        assert!(!c.pairs[1].within_noise && c.pairs[1].ratio == 2.0);
        let mut text = vec![];
        super::text(&c, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("       10       4.00k       8.00k  2.00×\n"), "{text}");
        assert!(text.contains("1.02×  (within noise)"), "{text}");
    }

    #[test]
    fn different_experiments_are_refused() {
        let a = result("10.11.19", "1", &[(1, 1.0, 0.0)]);
        let mut b = a.clone();
        b.experiment = "hot-row".into();
        assert!(compare(&a, &b).unwrap_err().starts_with("the two results are of different experiments"));
    }
}
