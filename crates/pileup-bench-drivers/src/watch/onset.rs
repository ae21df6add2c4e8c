//! The onset part: stalls provoked on a fresh server each, and seconds
//! from each stall's onset to the first stack each tool takes.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use mysql::prelude::Queryable;
use pileup_bench_drivers::median;
use pileup_sandbox::throttle::{Limit, Throttle};
use pileup_sandbox::{Options, Sandbox};

use crate::evidence::{kept_before, verdict_after, wait_first_stack, Onset};
use crate::storms::class_onset;
use crate::watcher::{cpu_secs, mysqld_named, start_watcher, Running};

/// The stalls the onset part provokes, each holding up 30 connections.
pub(crate) const STALLS: &[(&str, &str)] = &[
    ("convoy", "hot-row convoy: one transaction holds a row, 30 connections update it"),
    ("ftwrl", "global read lock: FLUSH TABLES WITH READ LOCK held, 30 connections insert"),
    ("mdl", "metadata lock: ALTER TABLE waits for an open transaction, 30 connections read the table behind it"),
    (
        "slow-disk",
        "slow disk: 30 connections run 5,000 point selects a second on 4 × 40,000 rows through an 8 MB buffer pool, and the volume drops to 40 reads a second",
    ),
    (
        "table-open",
        "table-open storm: 400 tables and table_open_cache=64; after two clients read a cached few, 48 connections read them all in turn",
    ),
    ("connection", "connection storm: beside two steady clients, 96 clients connect over TCP, run SELECT 1 and disconnect, over and over"),
    (
        "flushing",
        "flushing storm: a 4 MB redo log and a page cleaner told the disk does 100 pages a second, 4 connections writing 2 transactions a second, then 32 more writing unthrottled; the onset is when the checkpoint age, read every 50 ms, first passes 7/8 of its maximum (where InnoDB starts flushing at full speed)",
    ),
];

/// A slow disk under a steady load: 30 connections run point selects on
/// data far larger than the buffer pool while the watcher learns the load,
/// then the datadir's device drops to 40 reads a second (the onset), until
/// the watcher has its stacks and verdict.
fn slow_disk_onset(pileup: &str, kind: &str, stall: &str, root: &Path, round: usize) -> Result<Onset> {
    let sb = Sandbox::start(Options {
        mariadbd: Some(mysqld_named(root)?),
        cnf: vec![("innodb_buffer_pool_size".into(), "8M".into())],
        ..Options::default()
    })?;
    let test = "oltp_point_select";
    let mut sbargs = pileup_bench_drivers::sysbench_prepared_sized(&sb, test, 4, 40_000)?;
    // Held below what the machine's cores serve, so the steady load is not
    // itself a pile-up of running threads that a default trigger captures.
    sbargs.push("--rate=5000".into());
    let load = pileup_bench_drivers::Load::start(test, &sbargs, 30)?;
    let dir = root.join(format!("{stall}-{}-{round}", kind.replace([' ', ','], "-")));
    let w = Running(start_watcher(kind, pileup, &sb, &dir)?);
    let (cpu0, run0) = (cpu_secs(&w.0), Instant::now());
    std::thread::sleep(Duration::from_secs(8));
    // The onset is the moment the volume slows: the stall is the server's
    // answer to it, however long its queues take to build.
    let onset = std::time::SystemTime::now();
    let watching = (cpu_secs(&w.0) - cpu0) / run0.elapsed().as_secs_f64() * 100.0;
    let cpu1 = cpu_secs(&w.0);
    let throttle = Throttle::new(&sb, Limit::ReadIops(40))?;
    let first_stack = wait_first_stack(&dir, kind, onset);
    let verdict = (kind.starts_with("pileup") && first_stack.is_some())
        .then(|| verdict_after(&dir, onset, Duration::from_secs(15)))
        .flatten();
    drop(throttle);
    drop(load);
    let before = kept_before(&dir, onset);
    let stall_cpu = cpu_secs(&w.0) - cpu1;
    drop(w);
    Ok(Onset { first_stack, verdict, before, cpu: watching, stall_cpu: Some(stall_cpu) })
}

/// Provoke `stall` on a fresh sandbox watched by `kind`; seconds from its
/// start to the watcher's first stack.
fn stall_onset(pileup: &str, kind: &str, stall: &str, root: &Path, round: usize) -> Result<Onset> {
    if stall == "slow-disk" {
        return slow_disk_onset(pileup, kind, stall, root, round);
    }
    if ["table-open", "connection", "flushing"].contains(&stall) {
        return class_onset(pileup, kind, stall, root, round);
    }
    let sb = Sandbox::start(Options { mariadbd: Some(mysqld_named(root)?), ..Options::default() })?;
    sb.sql("CREATE DATABASE w; CREATE TABLE w.hot (id INT PRIMARY KEY, v INT) ENGINE=InnoDB; INSERT INTO w.hot VALUES (1, 0)")?;
    let dir = root.join(format!("{stall}-{}-{round}", kind.replace([' ', ','], "-")));
    let w = Running(start_watcher(kind, pileup, &sb, &dir)?);
    let (cpu0, run0) = (cpu_secs(&w.0), Instant::now());
    std::thread::sleep(Duration::from_secs(3));
    let mut holder = sb.connect()?;
    let mut ddl = None;
    let waiter_sql = match stall {
        "convoy" => {
            holder.query_drop("BEGIN")?;
            holder.query_drop("UPDATE w.hot SET v = v + 1 WHERE id = 1")?;
            "UPDATE w.hot SET v = v + 1 WHERE id = 1"
        }
        "ftwrl" => {
            holder.query_drop("FLUSH TABLES WITH READ LOCK")?;
            "UPDATE w.hot SET v = v + 1 WHERE id = 1"
        }
        _ => {
            holder.query_drop("BEGIN")?;
            holder.query_drop("SELECT * FROM w.hot")?;
            let spec = sb.conn_spec();
            ddl = Some(std::thread::spawn(move || {
                if let Ok(mut c) = spec.connect() {
                    let _ = c.query_drop("SET SESSION lock_wait_timeout = 40");
                    let _ = c.query_drop("ALTER TABLE w.hot ADD COLUMN x INT");
                }
            }));
            // Readers queue only once the ALTER waits.
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(10) {
                let n: Option<i64> = holder.query_first(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'ALTER TABLE w.hot%' AND STATE LIKE 'Waiting for table metadata lock'",
                )?;
                if n.unwrap_or(0) > 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            "SELECT * FROM w.hot"
        }
    };
    let onset = std::time::SystemTime::now();
    let watching = (cpu_secs(&w.0) - cpu0) / run0.elapsed().as_secs_f64() * 100.0;
    let cpu1 = cpu_secs(&w.0);
    let waiters: Vec<_> = (0..30)
        .map(|_| {
            let spec = sb.conn_spec();
            std::thread::spawn(move || {
                if let Ok(mut c) = spec.connect() {
                    let _ = c.query_drop("SET SESSION innodb_lock_wait_timeout = 40, lock_wait_timeout = 40");
                    let _ = c.query_drop(waiter_sql);
                }
            })
        })
        .collect();
    let first_stack = wait_first_stack(&dir, kind, onset);
    // Held until pileup keeps its capture (a pile-up that lasts 2 s), for its verdict.
    let verdict = (kind.starts_with("pileup") && first_stack.is_some())
        .then(|| verdict_after(&dir, onset, Duration::from_secs(10)))
        .flatten();
    holder.query_drop(if stall == "ftwrl" { "UNLOCK TABLES" } else { "ROLLBACK" })?;
    for w in waiters.into_iter().chain(ddl) {
        let _ = w.join();
    }
    let before = kept_before(&dir, onset);
    let stall_cpu = cpu_secs(&w.0) - cpu1;
    drop(w);
    Ok(Onset { first_stack, verdict, before, cpu: watching, stall_cpu: Some(stall_cpu) })
}

/// The onset part: each stall (or those `only` names) under each tool,
/// `rounds` times.
pub(crate) fn onset(pileup: &str, root: &Path, rounds: usize, only: Option<&str>) -> Result<String> {
    let mut md = String::new();
    md.push_str("\n### Stall onset to first captured stack (default triggers, server binary named mysqld so pt-stalk finds it)\n\nNegative: the first stack came before the stall's onset (a capture begun as the load that caused it built up).\n\n| stall | tool | seconds from onset to the first stack taken | watcher's CPU watching (% of one core, median) | watcher's CPU-seconds from the stall on, capture included (median) | pileup's verdict |\n|---|---|---|---|---|---|\n");
    let stalls: Vec<&(&str, &str)> =
        STALLS.iter().filter(|(s, _)| only.is_none_or(|o| o.split(',').any(|x| x == *s))).collect();
    for (stall, what) in &stalls {
        eprintln!("{what}");
        for k in ["pileup 1s", "pt-stalk gdb"] {
            let mut v = vec![];
            let mut cpu = vec![];
            let mut stall_cpu = vec![];
            let mut verdicts: Vec<String> = vec![];
            for round in 0..rounds {
                let o = stall_onset(pileup, k, stall, root, round)?;
                cpu.push(o.cpu);
                stall_cpu.extend(o.stall_cpu);
                match o.first_stack {
                    Some(s) => v.push(s),
                    None => eprintln!("{stall} {k}: no stack within 35 s"),
                }
                if o.before > 0 {
                    verdicts.push(format!(
                        "{} before the onset",
                        if o.before == 1 { "1 capture".to_string() } else { format!("{} captures", o.before) }
                    ));
                }
                verdicts.extend(o.verdict);
            }
            eprintln!(
                "{stall} {k}: first stack after {} s; {}",
                v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", "),
                verdicts.join("; ")
            );
            let shown = if v.is_empty() {
                "none within 35 s".into()
            } else {
                format!(
                    "{:.2} (runs: {})",
                    median(&v.clone()),
                    v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", ")
                )
            };
            // Each verdict with the rounds that gave it.
            let mut said: Vec<(String, usize)> = vec![];
            for x in verdicts {
                match said.iter_mut().find(|(y, _)| *y == x) {
                    Some((_, n)) => *n += 1,
                    None => said.push((x, 1)),
                }
            }
            let said = if k.starts_with("pileup") {
                said.iter().map(|(x, n)| format!("{x} ({n} of {rounds})")).collect::<Vec<_>>().join("; ")
            } else {
                "—".into()
            };
            let sc = if stall_cpu.is_empty() { "—".to_string() } else { format!("{:.2}", median(&stall_cpu)) };
            md.push_str(&format!("| {stall} | {k} | {shown} | {:.2} | {sc} | {said} |\n", median(&cpu)));
        }
    }
    md.push_str(&format!(
        "\nStalls: {}.\n",
        stalls.iter().map(|(s, w)| format!("{s}, {w}")).collect::<Vec<_>>().join("; ")
    ));
    Ok(md)
}
