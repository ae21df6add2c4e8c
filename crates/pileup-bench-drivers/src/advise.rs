//! How often the plan advisor is right, over repeated runs: `pileup digest
//! --advise` run `--runs` times in a row on each of four slow logs written
//! by a real MariaDB, each holding one class with a known answer:
//! - `hint`: `SELECT COUNT(pad) FROM h FORCE INDEX (b) WHERE b > ?` on
//!   100,000 rows, half the table through the index row by row: the
//!   answer is to remove the hint;
//! - `dive`: `SELECT id FROM dive WHERE a IN (…999 values…) AND b > ?`
//!   with indexes on (a), (b) and (a, b), most of whose time is the
//!   optimizer's index dives into (a) and (a, b): the answer is `FORCE
//!   INDEX` on the index it picks anyway (`b`);
//! - `pk`: primary-key lookups of 0.05 ms: nothing to gain;
//! - `range`: a range on the primary key, already the best plan: nothing
//!   to gain;
//! - `index`: `SELECT id, pad FROM ix WHERE a = ? AND b BETWEEN ? AND ?`
//!   on 100,000 rows with an index on (a) alone, run through
//!   `--advise-indexes --sample 50` (a copy of half the rows in a sandbox):
//!   the answer is the index (a, b);
//! - `indexed`: the same statement on a table that has (a, b): the only
//!   candidate left is a covering one, which saves a few lookups of a
//!   primary key, below the floor: nothing to gain.
//!
//! Reported per log: runs that gave the right answer (advice where there
//! is one, none where there is none), wrong advice, the advised speed-up
//! and its interval (medians over runs), rounds, and the advisor's wall
//! time per run.

const USAGE: &str = "Usage: advise-bench --pileup PATH [--runs 20] [--budget 10s] [--out FILE]";

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use mysql::prelude::Queryable;
use pileup_bench_drivers::{arg, median};
use pileup_sandbox::{Options, Sandbox};

/// One log: its name, the advice expected (a change's start), and what
/// fills it.
struct Shape {
    name: &'static str,
    expect: Option<&'static str>,
    /// Run through `--advise-indexes` rather than `--advise`.
    index: bool,
}

const SHAPES: [Shape; 6] = [
    Shape { name: "hint", expect: Some("without FORCE INDEX"), index: false },
    Shape { name: "dive", expect: Some("FROM dive FORCE INDEX (`b`)"), index: false },
    Shape { name: "pk", expect: None, index: false },
    Shape { name: "range", expect: None, index: false },
    Shape { name: "index", expect: Some("ALTER TABLE `adv`.`ix` ADD INDEX `ix_a_b` (`a`, `b`)"), index: true },
    Shape { name: "indexed", expect: None, index: true },
];

/// The tables the shapes read.
fn plant(c: &mut mysql::Conn) -> Result<()> {
    for q in [
        "SET SESSION max_statement_time = 0",
        "CREATE DATABASE adv",
        "USE adv",
        "CREATE TABLE h (id INT PRIMARY KEY, b INT, pad CHAR(100), KEY (b))",
        "INSERT INTO h SELECT seq, seq % 200, REPEAT('x', 100) FROM seq_1_to_100000",
        "CREATE TABLE dive (id INT PRIMARY KEY AUTO_INCREMENT, a INT, b INT, c CHAR(20), KEY (a), KEY (b), KEY ab (a, b))",
        "INSERT INTO dive (a, b, c) SELECT seq % 1000, seq % 10007, 'x' FROM seq_1_to_200000",
        "CREATE TABLE ix (id INT PRIMARY KEY, a INT, b INT, pad CHAR(60), KEY (a))",
        "INSERT INTO ix SELECT seq, seq % 50, (seq * 7919) % 10000, REPEAT('p', 60) FROM seq_1_to_100000",
        "CREATE TABLE ixed (id INT PRIMARY KEY, a INT, b INT, pad CHAR(60), KEY ab (a, b))",
        "INSERT INTO ixed SELECT * FROM ix",
        "ANALYZE TABLE h, dive, ix, ixed",
    ] {
        c.query_drop(q).with_context(|| q.to_string())?;
    }
    Ok(())
}

/// Write the shape's statements into the slow log `log`.
fn fill(c: &mut mysql::Conn, shape: &str, log: &Path) -> Result<()> {
    c.query_drop(format!("SET GLOBAL slow_query_log_file = '{}'", log.display()))?;
    let in_list: Vec<String> = (1..=999).map(|i| i.to_string()).collect();
    for i in 0..40u32 {
        let q = match shape {
            "hint" => "SELECT COUNT(pad) FROM h FORCE INDEX (b) WHERE b > 101".to_string(),
            "dive" => format!("SELECT id FROM dive WHERE a IN ({}) AND b > {}", in_list.join(","), 10_000 + i % 3),
            "pk" => format!("SELECT pad FROM h WHERE id = {}", i * 2477 % 100_000 + 1),
            "index" | "indexed" => format!(
                "SELECT id, pad FROM {} WHERE a = {} AND b BETWEEN {} AND {}",
                if shape == "index" { "ix" } else { "ixed" },
                i % 50,
                i * 200,
                i * 200 + 50
            ),
            _ => format!("SELECT pad FROM h WHERE id BETWEEN {} AND {}", i * 1000 + 1, i * 1000 + 100),
        };
        c.query_drop(&q)?;
        // Spread over seconds: the log has a rate for savings per hour.
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok(())
}

/// One run of the advisor: the advice's change (if any), its speed-up and
/// interval, the rounds, and the run's wall time.
struct Run {
    change: Option<String>,
    ratio: Option<f64>,
    interval: Option<(f64, f64)>,
    rounds: u64,
    wall_s: f64,
}

fn advise(pileup: &str, sb: &Sandbox, log: &Path, budget: &str, index: bool) -> Result<Run> {
    let t0 = Instant::now();
    let how: &[&str] = if index { &["--advise-indexes", "--sample", "50"] } else { &["--advise"] };
    let out = Command::new(pileup)
        .arg("digest")
        .args(how)
        .args(["--advise-classes", "1", "--advise-budget", budget, "-f", "json", "-S"])
        .arg(&sb.endpoint.socket)
        .args(["-u", "root"])
        .arg(log)
        .output()?;
    let wall_s = t0.elapsed().as_secs_f64();
    anyhow::ensure!(out.status.success(), "pileup digest: {}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let interval = |v: &serde_json::Value| Some((v["ratio_interval"][0].as_f64()?, v["ratio_interval"][1].as_f64()?));
    if index {
        // Every advised index of the run (one per class at most).
        let trials: Vec<&serde_json::Value> = j["index_advice"]["classes"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["trials"].as_array().into_iter().flatten())
            .collect();
        let best = trials.iter().find(|t| t["advised"] == true);
        let rounds = trials.iter().filter_map(|t| t["timing"]["rounds"].as_u64()).max().unwrap_or(0);
        return Ok(Run {
            change: best.and_then(|b| b["alter"].as_str().map(String::from)),
            ratio: best.and_then(|b| b["timing"]["ratio"].as_f64()),
            interval: best.and_then(|b| interval(&b["timing"])),
            rounds,
            wall_s,
        });
    }
    let a = &j["advice"][0];
    let best = a["best"].as_u64().map(|i| &a["variants"][i as usize]);
    Ok(Run {
        change: best.and_then(|b| b["change"].as_str().map(String::from)),
        ratio: best.and_then(|b| b["ratio"].as_f64()),
        interval: best.and_then(interval),
        rounds: a["rounds"].as_u64().unwrap_or(0),
        wall_s,
    })
}

fn main() -> Result<()> {
    let args = pileup_bench_drivers::args(USAGE)?;
    let pileup = arg(&args, "--pileup").context("--pileup PATH is required")?;
    let runs: usize = arg(&args, "--runs").map(|s| s.parse()).transpose()?.unwrap_or(20);
    let budget = arg(&args, "--budget").unwrap_or_else(|| "10s".into());
    let out = arg(&args, "--out");
    let dir = std::env::temp_dir().join(format!("advise-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let sb = Sandbox::start(Options {
        cnf: vec![("slow_query_log".into(), "ON".into()), ("long_query_time".into(), "0".into())],
        ..Default::default()
    })?;
    let mut c = sb.connect()?;
    plant(&mut c)?;
    let mut md = String::from(
        "\n| log | right | wrong advice | advised speed-up (median) | its 95% interval (median bounds) | rounds (median) | wall per run (median, max) |\n|---|---|---|---|---|---|---|\n",
    );
    for shape in &SHAPES {
        let log = dir.join(format!("{}.log", shape.name));
        fill(&mut c, shape.name, &log)?;
        // The log as the application left it.
        c.query_drop(format!("SET GLOBAL slow_query_log_file = '{}'", dir.join("after.log").display()))?;
        let mut results = vec![];
        for r in 0..runs {
            let run = advise(&pileup, &sb, &log, &budget, shape.index)?;
            eprintln!(
                "{} run {}: {} in {:.1} s",
                shape.name,
                r + 1,
                run.change.as_deref().unwrap_or("no advice"),
                run.wall_s
            );
            results.push(run);
        }
        let right = results
            .iter()
            .filter(|r| match (shape.expect, &r.change) {
                (Some(e), Some(c)) => c.starts_with(e),
                (None, None) => true,
                _ => false,
            })
            .count();
        let wrong = results
            .iter()
            .filter(|r| {
                r.change.is_some() && shape.expect.is_none_or(|e| !r.change.as_deref().unwrap_or("").starts_with(e))
            })
            .count();
        let ratios: Vec<f64> = results.iter().filter_map(|r| r.ratio).collect();
        let lows: Vec<f64> = results.iter().filter_map(|r| r.interval.map(|i| i.0)).collect();
        let highs: Vec<f64> = results.iter().filter_map(|r| r.interval.map(|i| i.1)).collect();
        let rounds: Vec<f64> = results.iter().map(|r| r.rounds as f64).collect();
        let walls: Vec<f64> = results.iter().map(|r| r.wall_s).collect();
        let x = |v: &[f64]| if v.is_empty() { "–".to_string() } else { format!("{:.2}x", median(v)) };
        md += &format!(
            "| {} ({}) | {right} of {runs} | {wrong} | {} | {} – {} | {:.0} | {:.1} s, {:.1} s |\n",
            shape.name,
            shape.expect.unwrap_or("no advice"),
            x(&ratios),
            x(&lows),
            x(&highs),
            median(&rounds),
            median(&walls),
            walls.iter().copied().fold(0.0, f64::max)
        );
    }
    c.query_drop("SET GLOBAL slow_query_log = OFF")?;
    let _ = std::fs::remove_dir_all(&dir);
    println!("{md}");
    if let Some(o) = out {
        pileup_bench_drivers::write(o, md)?;
    }
    Ok(())
}
