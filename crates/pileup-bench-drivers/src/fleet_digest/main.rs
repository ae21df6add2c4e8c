//! A fleet's statement digests at scale: `pileup digest --from` against
//! chDB (ClickHouse's engine) on the same files, side by side in one run.
//!
//! A MariaDB sandbox logs every statement while sysbench oltp_read_only
//! runs beside a planted lookup on an indexed column; then the index is
//! dropped and a second log is written (the regression). Those real logs,
//! cut into ten-second slices, make `--hosts` hosts over `--hours` hours:
//! each host-minute the sum of 3 to 9 slices drawn at random, each host's
//! classes renamed onto its shard's tables, the last hour of a tenth of
//! the hosts from the regressed log. Every host's 10-minute windows are
//! written as `pileup digest --ship` writes them and put to a VersityGW
//! store. Then, `--rounds` times, each round starting with the next tool:
//! `pileup digest --from` (text, the top 10), the same with
//! `--profile-only`, chDB's `top_classes` query and chDB's four queries that give what pileup's report gives
//! (deploy/clickhouse/digests.sql), for the last hour and for the whole
//! day; wall and CPU seconds of each, and the store's CPU meanwhile.
//! Also: the bytes stored per host-day, and whether `--compare-to` ranks
//! the planted regression first.
//!
//! Usage: see [`USAGE`].

mod gen;

const USAGE: &str = "Usage: fleet-digest-bench --pileup PATH --chdb-python PATH [--hosts 200] [--hours 24] [--seconds 180] [--rounds 5] [--out FILE] [--keep DIR]";

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use mysql::prelude::Queryable;
use pileup_bench_drivers::{arg, median};

const KEY: &str = "benchkey";
const SECRET: &str = "bench-secret-123";

/// VersityGW on a directory, killed when dropped.
struct Store {
    child: std::process::Child,
    port: u16,
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Store {
    fn start(root: &Path) -> Result<Store> {
        std::fs::create_dir_all(root.join("bench"))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let gopath = Command::new("go").args(["env", "GOPATH"]).output().context("go (make deps installs it)")?;
        let gw = PathBuf::from(String::from_utf8_lossy(&gopath.stdout).trim()).join("bin/versitygw");
        let child = Command::new(&gw)
            .args(["--port", &format!("127.0.0.1:{port}"), "posix"])
            .arg(root)
            .env("ROOT_ACCESS_KEY", KEY)
            .env("ROOT_SECRET_KEY", SECRET)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("{} (make deps installs it)", gw.display()))?;
        let t0 = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if t0.elapsed() > Duration::from_secs(20) {
                bail!("versitygw did not listen");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(Store { child, port })
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The store's CPU seconds so far.
    fn cpu(&self) -> f64 {
        pileup_bench_drivers::stat_cpu(&format!("/proc/{}/stat", self.child.id()), 2)
    }

    fn env(&self, cmd: &mut Command) {
        cmd.env("AWS_ACCESS_KEY_ID", KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .env("AWS_ENDPOINT_URL", self.endpoint())
            .env("AWS_REGION", "us-east-1")
            .env_remove("AWS_PROFILE");
    }
}

/// The two real logs: sysbench with the planted lookup using its index,
/// then without it.
fn logs(dir: &Path, seconds: u32) -> Result<(PathBuf, PathBuf)> {
    let (normal, regressed) = (dir.join("normal.log"), dir.join("regressed.log"));
    let sb = pileup_sandbox::Sandbox::start(Default::default())?;
    let base = pileup_bench_drivers::sysbench_prepared_sized(&sb, "oltp_read_only", 2, 10_000)?;
    sb.sql(
        "CREATE TABLE sbtest.planted (id INT PRIMARY KEY, b INT, c CHAR(100), KEY (b)); \
         INSERT INTO sbtest.planted SELECT seq, seq % 5000, REPEAT('x', 100) FROM sbtest.seq_1_to_20000",
    )?;
    for (phase, (log, secs)) in [(&normal, seconds), (&regressed, seconds / 2)].into_iter().enumerate() {
        sb.sql(&format!(
            "SET GLOBAL long_query_time = 0; SET GLOBAL slow_query_log_file = '{}'; SET GLOBAL slow_query_log = ON",
            log.display()
        ))?;
        let mut load = Command::new("sysbench")
            .arg("oltp_read_only")
            .args(&base)
            .args(["--threads=2", "--rate=200", &format!("--time={secs}"), "run"])
            .stdout(Stdio::null())
            .spawn()?;
        let mut c = sb.connect()?;
        let t0 = Instant::now();
        let mut i = 0u32;
        while t0.elapsed() < Duration::from_secs(u64::from(secs)) {
            let _: Vec<String> = c.query(format!("SELECT c FROM sbtest.planted WHERE b = {}", i % 5000))?;
            i += 1;
            std::thread::sleep(Duration::from_millis(20));
        }
        load.wait()?;
        sb.sql("SET GLOBAL slow_query_log = OFF")?;
        if phase == 0 {
            sb.sql("ALTER TABLE sbtest.planted DROP INDEX b")?;
        }
    }
    Ok((normal, regressed))
}

/// Put every file of the fleet, 8 at a time: the bytes stored.
fn ship(store: &Store, f: &gen::Fleet, normal: &[gen::Minute], regressed: &[gen::Minute]) -> Result<u64> {
    let url = pileup_store::StoreUrl::parse("s3://bench/fleet")?;
    let aws = aws(store);
    let (tx, rx) = std::sync::mpsc::sync_channel::<(String, Vec<u8>)>(16);
    let rx = std::sync::Mutex::new(rx);
    std::thread::scope(|s| -> Result<u64> {
        let workers: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| -> Result<u64> {
                    let remote = pileup_store::Remote::open(&url, &aws)?;
                    let mut bytes = 0;
                    loop {
                        let next = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        let Ok((key, data)) = next else { return Ok(bytes) };
                        bytes += data.len() as u64;
                        remote.put(&url.key(&key), data)?;
                    }
                })
            })
            .collect();
        let made = gen::generate(f, 10, normal, regressed, |k, b| {
            tx.send((k, b)).map_err(|_| anyhow::anyhow!("an upload failed"))
        });
        drop(tx);
        let mut total = 0;
        for w in workers {
            total += w.join().map_err(|_| anyhow::anyhow!("an upload thread panicked"))??;
        }
        made?;
        Ok(total)
    })
}

/// One timed run: wall and CPU seconds of the tool, the store's CPU
/// seconds meanwhile.
#[derive(Clone, Copy)]
struct Run {
    wall: f64,
    cpu: f64,
    store_cpu: f64,
}

/// `pileup digest --from` (with `extra` flags) over `[since, until)`: its
/// report's top 10.
fn pileup_run(pileup: &str, extra: &[&str], store: &Store, (since, until): (i64, i64), dir: &Path) -> Result<Run> {
    let report = dir.join("time.out");
    let s0 = store.cpu();
    let t0 = Instant::now();
    let mut cmd = Command::new("/usr/bin/time");
    cmd.arg("-o").arg(&report).args(["-f", "%U %S", pileup, "digest", "--from", "s3://bench/fleet"]);
    cmd.args(["--since", &utc(since), "--until", &utc(until), "--limit", "10", "-o", "/dev/null"]).args(extra);
    store.env(&mut cmd);
    let st = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status()?;
    let wall = t0.elapsed().as_secs_f64();
    if !st.success() {
        bail!("pileup digest --from failed ({st})");
    }
    let text = std::fs::read_to_string(&report)?;
    let f: Vec<f64> = text.lines().last().unwrap_or("").split_whitespace().filter_map(|x| x.parse().ok()).collect();
    let [user, sys] = f[..] else { bail!("unexpected GNU time output {text:?}") };
    Ok(Run { wall, cpu: user + sys, store_cpu: store.cpu() - s0 })
}

/// A ranking's classes and their statement time.
type Top = Vec<(String, f64)>;

/// A ranking as an error names it: each class with its time.
fn listed(t: &Top) -> String {
    t.iter().map(|(fp, time)| format!("{fp} ({time} s)")).collect::<Vec<_>>().join(", ")
}

/// Whether two rankings agree: the same times in order, each class at the
/// time the other gives it (classes of equal time may come in any order).
fn same_top(a: &Top, b: &Top) -> bool {
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-5 * x.abs().max(1e-3);
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| close(x.1, y.1))
        && a.iter().all(|(fp, t)| b.iter().find(|(g, _)| g == fp).is_none_or(|(_, u)| close(*t, *u)))
}

/// The report's questions in deploy/clickhouse/digests.sql: the top
/// classes, each one's hosts, each host's time, each class's p99.
const REPORT_QUERIES: &str = "top_classes,class_hosts,host_top,p99";

/// chDB's `queries` (names, comma-separated, top_classes first) over
/// `[since, until)`, warm (bench/chdb-time.py): the run and the ranking.
fn chdb_run(python: &str, store: &Store, queries: &str, since: i64, until: i64, hours: &str) -> Result<(Run, Top)> {
    let source = format!("s3('{}/bench/fleet/{hours}/**.parquet', '{KEY}', '{SECRET}', 'Parquet')", store.endpoint());
    let s0 = store.cpu();
    let out = Command::new(python)
        .arg("bench/chdb-time.py")
        .arg("deploy/clickhouse/digests.sql")
        .arg(queries)
        .arg(format!("SOURCE={source}"))
        .arg(format!("SINCE={}", utc(since).replace('T', " ").trim_end_matches('Z')))
        .arg(format!("UNTIL={}", utc(until).replace('T', " ").trim_end_matches('Z')))
        .output()?;
    if !out.status.success() {
        bail!("chDB: {}", String::from_utf8_lossy(&out.stderr));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let rows = v["rows"].as_array().into_iter().flatten();
    let fps = rows.map(|r| (r["fingerprint"].as_str().unwrap_or("").to_string(), r["time_s"].as_f64().unwrap_or(0.0)));
    // The store's CPU: the warm-up's and the timed run's, halved.
    let store_cpu = (store.cpu() - s0) / 2.0;
    Ok((
        Run { wall: v["wall"].as_f64().unwrap_or(0.0), cpu: v["cpu"].as_f64().unwrap_or(0.0), store_cpu },
        fps.collect(),
    ))
}

/// `2026-11-30T04:00:00Z`
fn utc(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0).unwrap_or_default().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// pileup's top 10 by time over `[since, until)` (its whole report's,
/// checked equal to the profile alone's), and the first class
/// `--compare-to` ranks against the hour before.
fn pileup_answers(pileup: &str, store: &Store, since: i64, until: i64) -> Result<(Top, String)> {
    let json = |extra: &[&str]| -> Result<serde_json::Value> {
        let mut cmd = Command::new(pileup);
        cmd.args([
            "digest",
            "--from",
            "s3://bench/fleet",
            "--since",
            &utc(since),
            "--until",
            &utc(until),
            "-f",
            "json",
        ]);
        store.env(&mut cmd);
        let out = cmd.args(extra).stderr(Stdio::inherit()).output()?;
        serde_json::from_slice(&out.stdout).context("pileup digest --from --format json")
    };
    let top = |v: &serde_json::Value| -> Top {
        let top = v["classes"].as_array().into_iter().flatten().take(10);
        top.map(|c| {
            let t = c["attributes"]["query_time"]["sum"].as_f64().unwrap_or(0.0);
            (c["fingerprint"].as_str().unwrap_or("").to_string(), t)
        })
        .collect()
    };
    let v = json(&["--compare-to", &utc(since - (until - since))])?;
    let brief = top(&json(&["--profile-only"])?);
    if !same_top(&brief, &top(&v)) {
        bail!("pileup's profile alone differs from its whole report: {} against {}", listed(&brief), listed(&top(&v)));
    }
    let first = v["changes"]["classes"][0]["fingerprint"].as_str().unwrap_or("").to_string();
    Ok((top(&v), first))
}

fn main() -> Result<()> {
    let args = pileup_bench_drivers::args(USAGE)?;
    let pileup = arg(&args, "--pileup").context("--pileup PATH")?;
    let python = arg(&args, "--chdb-python").context("--chdb-python PATH")?;
    let num = |k: &str, d: u64| -> Result<u64> {
        arg(&args, k).map(|v| v.parse().with_context(|| format!("{k} {v:?}"))).transpose().map(|v| v.unwrap_or(d))
    };
    let (hosts, hours, seconds, rounds) =
        (num("--hosts", 200)? as usize, num("--hours", 24)? as i64, num("--seconds", 180)? as u32, num("--rounds", 5)?);
    let keep = arg(&args, "--keep").map(PathBuf::from);
    let dir = match &keep {
        Some(k) => k.clone(),
        None => std::env::temp_dir().join(format!("pileup-fleet-bench-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir)?;
    eprintln!(
        "real logs: sysbench oltp_read_only and a planted lookup, {seconds} s, then {} s without its index",
        seconds / 2
    );
    let (normal_log, regressed_log) = logs(&dir, seconds)?;
    let (normal, regressed) = (gen::minutes_of(&normal_log)?, gen::minutes_of(&regressed_log)?);
    let store = Store::start(&dir.join("s3"))?;
    let now = chrono::Utc::now().timestamp();
    // The day before today (UTC): whole hours, all in the past.
    let start = (now / 86_400 - 1) * 86_400;
    let f = gen::Fleet { hosts, start, hours, regressed_hosts: (hosts / 10).max(1) };
    let t0 = Instant::now();
    eprintln!("shipping {hosts} hosts × {hours} h of 10-minute windows to VersityGW");
    let bytes = ship(&store, &f, &normal, &regressed)?;
    let files = hosts as i64 * hours * 6;
    eprintln!("  {files} files, {:.1} MB, in {:.0} s", bytes as f64 / 1e6, t0.elapsed().as_secs_f64());
    let end = start + hours * 3600;
    let last_hour = end - 3600;
    let (top, first) = pileup_answers(&pileup, &store, last_hour, end)?;
    let questions = [
        ("one hour", last_hour, end, format!("dt={}/hour={}", day(last_hour), hh(last_hour))),
        ("the day", start, end, format!("dt={}", day(start))),
    ];
    let mut md = format!(
        "\n{hosts} hosts × {hours} h: {files} files of 10-minute windows, {:.1} MB in the store; per host-day {:.1} KiB ({:.0} rows a minute per host, each host-minute the sum of 3 to 9 of {} ten-second slices of the real log, or of {} of the regressed one).\n",
        bytes as f64 / 1e6,
        bytes as f64 / hosts as f64 * 24.0 / hours as f64 / 1024.0,
        normal.iter().map(|m| m.len()).sum::<usize>() as f64 / normal.len() as f64,
        normal.len(),
        regressed.len()
    );
    md.push_str(&format!("\n`--compare-to` (the last hour against the one before) ranks first: `{first}`.\n"));
    md.push_str(
        "\nThe question: the top 10 classes by statement time. pileup digest --from lists the hours' files, fetches and decodes them and writes its whole report (each class's attributes, percentiles and hosts; each host's top classes; the top 10 in detail); with --profile-only it reads only the columns of the profile (each class's count, statement time, rows examined, hosts) and writes the profile and the hosts. chDB runs deploy/clickhouse/digests.sql on the same hours' files, warm (each query once untimed, then timed, in one process): top_classes alone (six columns), and the four queries that give what pileup's report gives (top_classes, class_hosts, host_top, p99), their times summed. The last column compares the same answers: top_classes with pileup's profile alone, the four queries with its whole report. Medians of the rounds, each round starting with the next tool; the store's CPU is VersityGW's meanwhile.\n",
    );
    let (hour_cpu, day_cpu) = timed(&mut md, &pileup, &python, &store, &dir, rounds, &questions, &top)?;
    let (pmm, pmm_rows) = pmm_bytes(&python, &store, &dir)?;
    let compacted = compacted_bytes(&pileup, &store, start, end)?;
    md.push_str("\nThe same questions after `pileup digest --compact` (one file an hour for the whole fleet):\n");
    let compacted_questions: Vec<(String, i64, i64, String)> =
        questions.iter().map(|(l, a, b, p)| (format!("{l}, compacted"), *a, *b, p.clone())).collect();
    let compacted_questions: Vec<(&str, i64, i64, String)> =
        compacted_questions.iter().map(|(l, a, b, p)| (l.as_str(), *a, *b, p.clone())).collect();
    let (hour_cpu_c, day_cpu_c) = timed(&mut md, &pileup, &python, &store, &dir, rounds, &compacted_questions, &top)?;
    let host_day = |b: u64| b as f64 / hosts as f64 * 24.0 / hours as f64 / 1024.0;
    let per_row = |b: u64| b as f64 / pmm_rows.max(1) as f64;
    md.push_str(&format!(
        "\nStored per host-day ({:.0} rows: classes × 1,440 minutes): pileup's 10-minute files {:.1} KiB ({:.1} bytes a row), compacted {:.1} KiB ({:.1} bytes a row); PMM's per-minute buckets for the same {pmm_rows} rows (its metrics table built in chDB, MergeTree, merged) {:.1} KiB ({:.1} bytes a row): pileup ÷ PMM {:.2} as 10-minute files, {:.2} compacted.\n",
        pmm_rows as f64 / hosts as f64 * 24.0 / hours as f64,
        host_day(bytes),
        per_row(bytes),
        host_day(compacted),
        per_row(compacted),
        host_day(pmm),
        per_row(pmm),
        bytes as f64 / pmm as f64,
        compacted as f64 / pmm as f64
    ));
    md.push_str(&format!(
        "\n10,000 hosts, projected from these per-host figures (linear in hosts): {:.1} GB a day as 10-minute files, {:.1} GB compacted; pileup's one-hour question {:.0} CPU-s and the day {:.0} CPU-s on 10-minute files, {:.0} and {:.0} CPU-s compacted.\n",
        host_day(bytes) * 1024.0 * 10_000.0 / 1e9,
        host_day(compacted) * 1024.0 * 10_000.0 / 1e9,
        hour_cpu / hosts as f64 * 10_000.0,
        day_cpu / hosts as f64 * 10_000.0,
        hour_cpu_c / hosts as f64 * 10_000.0,
        day_cpu_c / hosts as f64 * 10_000.0
    ));
    drop(store);
    if keep.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    match arg(&args, "--out") {
        Some(o) => pileup_bench_drivers::write(o, md)?,
        None => print!("{md}"),
    }
    Ok(())
}

/// PMM's bytes on disk for the same rows (bench/pmm-bytes.py in chDB):
/// (bytes, rows).
fn pmm_bytes(python: &str, store: &Store, dir: &Path) -> Result<(u64, u64)> {
    let source = format!("s3('{}/bench/fleet/**.parquet', '{KEY}', '{SECRET}', 'Parquet')", store.endpoint());
    let out = Command::new(python).arg("bench/pmm-bytes.py").arg(&source).arg(dir.join("pmm")).output()?;
    if !out.status.success() {
        bail!("bench/pmm-bytes.py: {}", String::from_utf8_lossy(&out.stderr));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    Ok((v["bytes"].as_u64().unwrap_or(0), v["rows"].as_u64().unwrap_or(0)))
}

/// `pileup digest --from --compact` over the day, and the bytes stored
/// after it.
fn compacted_bytes(pileup: &str, store: &Store, since: i64, until: i64) -> Result<u64> {
    let mut cmd = Command::new(pileup);
    cmd.args(["digest", "--from", "s3://bench/fleet", "--compact", "--since", &utc(since), "--until", &utc(until)]);
    store.env(&mut cmd);
    let st = cmd.stdout(Stdio::null()).status()?;
    if !st.success() {
        bail!("pileup digest --compact failed ({st})");
    }
    let url = pileup_store::StoreUrl::parse("s3://bench/fleet")?;
    let remote = pileup_store::Remote::open(&url, &aws(store))?;
    Ok(remote.list_keys("fleet/")?.iter().map(|(_, n)| n).sum())
}

fn aws(store: &Store) -> pileup_store::AwsSettings {
    pileup_store::AwsSettings {
        access_key_id: KEY.into(),
        secret_access_key: SECRET.into(),
        session_token: None,
        region: "us-east-1".into(),
        endpoint: Some(store.endpoint()),
        source: "the benchmark".into(),
    }
}

/// The questions timed, `rounds` times each, pileup and chDB alternating:
/// the table's rows in `md`; pileup's median CPU seconds for the hour and
/// the day.
#[allow(clippy::too_many_arguments)]
fn timed(
    md: &mut String,
    pileup: &str,
    python: &str,
    store: &Store,
    dir: &Path,
    rounds: u64,
    questions: &[(&str, i64, i64, String)],
    top: &Top,
) -> Result<(f64, f64)> {
    md.push_str(
        "\n| question | tool | wall s | CPU s | store CPU s | pileup's CPU s ÷ this, same answer |\n|---|---|---|---|---|---|\n",
    );
    let (mut hour_cpu, mut day_cpu) = (0.0, 0.0);
    // Each tool, and the tool whose answer is the same (pileup's row of it).
    let tools: [(&str, Tool, usize); 4] = [
        ("pileup digest --from", Tool::Pileup(&[]), 0),
        ("pileup digest --from --profile-only", Tool::Pileup(&["--profile-only"]), 1),
        ("chDB, top_classes", Tool::Chdb("top_classes"), 1),
        ("chDB, the report's 4 queries", Tool::Chdb(REPORT_QUERIES), 0),
    ];
    for (label, since, until, parts) in questions {
        let mut runs: Vec<Vec<Run>> = vec![vec![]; tools.len()];
        for r in 0..rounds as usize {
            // Each round starts with the next tool.
            for t in (0..tools.len()).map(|i| (i + r) % tools.len()) {
                let run = match tools[t].1 {
                    Tool::Pileup(extra) => pileup_run(pileup, extra, store, (*since, *until), dir)?,
                    Tool::Chdb(queries) => {
                        let (run, fps) = chdb_run(python, store, queries, *since, *until, parts)?;
                        if label.starts_with("one hour") && !same_top(&fps, top) {
                            bail!("chDB's top classes differ from pileup's: {} against {}", listed(&fps), listed(top));
                        }
                        run
                    }
                };
                runs[t].push(run);
            }
            let cpus: Vec<String> = tools.iter().zip(&runs).map(|(t, v)| format!("{} {:.2}", t.0, v[r].cpu)).collect();
            eprintln!("  {label}, round {}: CPU-s {}", r + 1, cpus.join(", "));
        }
        let med = |v: &[Run], f: fn(&Run) -> f64| median(&v.iter().map(f).collect::<Vec<f64>>());
        let ours = med(&runs[0], |r| r.cpu);
        if label.starts_with("one hour") {
            hour_cpu = ours;
        } else {
            day_cpu = ours;
        }
        for ((tool, _, same), v) in tools.iter().zip(&runs) {
            md.push_str(&format!(
                "| {label} | {tool} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
                med(v, |r| r.wall),
                med(v, |r| r.cpu),
                med(v, |r| r.store_cpu),
                med(&runs[*same], |r| r.cpu) / med(v, |r| r.cpu)
            ));
        }
    }
    Ok((hour_cpu, day_cpu))
}

/// A tool timed: pileup with these flags, or chDB with these queries.
#[derive(Clone, Copy)]
enum Tool {
    Pileup(&'static [&'static str]),
    Chdb(&'static str),
}

fn day(t: i64) -> String {
    utc(t)[..10].to_string()
}

fn hh(t: i64) -> String {
    utc(t)[11..13].to_string()
}
